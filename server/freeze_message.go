package server

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hourglassmq/hourglass/engine"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
)

// errFreezeCluster refuses FreezeMessage and ThawMessage in cluster mode.
func errFreezeCluster(rpc string) error {
	return status.Errorf(codes.FailedPrecondition, "%s is not served in cluster mode: a partition's messages are held in JetStream, which has no atomic replace of a pending message; Cancel it and Schedule it again later, or run %s on a single server", rpc, rpc)
}

// FreezeMessage serves the FreezeMessage RPC: the message the request
// names (engine.Current of it) is held with the delay it has left, as the
// engine's Freeze decides.
func (s api) FreezeMessage(ctx context.Context, m *hourglassv1.FreezeMessageRequest) (*hourglassv1.FreezeMessageResponse, error) {
	if s.opts.Cluster != nil {
		return nil, errFreezeCluster("FreezeMessage")
	}
	id, found, err := s.target(ctx, "FreezeMessage", m.Id, m.Topic, m.Key)
	if err != nil {
		return nil, err
	}
	out := &hourglassv1.FreezeMessageResponse{Result: hourglassv1.FreezeResult_FREEZE_RESULT_UNKNOWN}
	if !found {
		return out, nil
	}
	res, nid, left, err := s.eng.(engineCore).Freeze(ctx, id)
	if err != nil {
		return nil, scheduleError(err)
	}
	out.Result = s.freezeResult(ctx, res, id)
	if res == engine.Frozen {
		out.Id, out.RemainingMs = nid.String(), left.Milliseconds()
	}
	return out, nil
}

// ThawMessage serves the ThawMessage RPC: the frozen message the request
// names is due the delay it had left from now.
func (s api) ThawMessage(ctx context.Context, m *hourglassv1.ThawMessageRequest) (*hourglassv1.ThawMessageResponse, error) {
	if s.opts.Cluster != nil {
		return nil, errFreezeCluster("ThawMessage")
	}
	id, found, err := s.target(ctx, "ThawMessage", m.Id, m.Topic, m.Key)
	if err != nil {
		return nil, err
	}
	out := &hourglassv1.ThawMessageResponse{Result: hourglassv1.FreezeResult_FREEZE_RESULT_UNKNOWN}
	if !found {
		return out, nil
	}
	res, nid, err := s.eng.(engineCore).Thaw(ctx, id)
	if err != nil {
		return nil, scheduleError(err)
	}
	out.Result = s.freezeResult(ctx, res, id)
	if res == engine.Thawed {
		out.Id, out.DeliverAt = nid.String(), timestamppb.New(nid.Time())
	}
	return out, nil
}

// freezeResult is the API's answer for the engine's res about id.
func (s api) freezeResult(ctx context.Context, res engine.FreezeResult, id message.ID) hourglassv1.FreezeResult {
	switch res {
	case engine.Frozen:
		return hourglassv1.FreezeResult_FREEZE_RESULT_FROZEN
	case engine.Thawed:
		return hourglassv1.FreezeResult_FREEZE_RESULT_THAWED
	case engine.FreezeTooLate:
		return hourglassv1.FreezeResult_FREEZE_RESULT_ALREADY_DELIVERED
	case engine.FreezeCancelled:
		return hourglassv1.FreezeResult_FREEZE_RESULT_ALREADY_CANCELLED
	case engine.AlreadyFrozen:
		return hourglassv1.FreezeResult_FREEZE_RESULT_ALREADY_FROZEN
	case engine.NotFrozen:
		return hourglassv1.FreezeResult_FREEZE_RESULT_NOT_FROZEN
	}
	if s.retiredDelivered(ctx, id) {
		return hourglassv1.FreezeResult_FREEZE_RESULT_ALREADY_DELIVERED
	}
	return hourglassv1.FreezeResult_FREEZE_RESULT_UNKNOWN
}

// Freeze freezes what carries the message id now (engine.Current), as
// Cancel.
func (e engineCore) Freeze(ctx context.Context, id message.ID) (engine.FreezeResult, message.ID, time.Duration, error) {
	for range currentTries {
		f, err := e.Current(ctx, id)
		if err != nil {
			return engine.FreezeUnknown, message.ID{}, 0, err
		}
		res, nid, left, err := e.Engine.Freeze(ctx, f.ID)
		if err != nil || res != engine.FreezeCancelled || !e.movedSince(ctx, f.ID) {
			return res, nid, left, err
		}
		// Moved on between Current and Freeze: freeze what carries it now.
	}
	return engine.FreezeCancelled, message.ID{}, 0, fmt.Errorf("engine: freeze of %s: it kept moving on to new IDs; try again", id)
}

// Thaw thaws what carries the message id now (engine.Current), as Cancel.
func (e engineCore) Thaw(ctx context.Context, id message.ID) (engine.FreezeResult, message.ID, error) {
	for range currentTries {
		f, err := e.Current(ctx, id)
		if err != nil {
			return engine.FreezeUnknown, message.ID{}, err
		}
		res, nid, err := e.Engine.Thaw(ctx, f.ID)
		if err != nil || res != engine.FreezeCancelled || !e.movedSince(ctx, f.ID) {
			return res, nid, err
		}
	}
	return engine.FreezeCancelled, message.ID{}, fmt.Errorf("engine: thaw of %s: it kept moving on to new IDs; try again", id)
}

// messageFrozen sets pm's frozen, frozen_remaining_ms and due_at (as if
// thawed at now) for a message frozen on its own, and reports whether it
// is.
func messageFrozen(pm *hourglassv1.Message, hs []message.Header, now time.Time) bool {
	left, ok := message.FrozenRemaining(hs)
	if !ok || pm == nil {
		return false
	}
	pm.Frozen, pm.FrozenRemainingMs = true, &left
	pm.DueAt = timestamppb.New(now.Add(time.Duration(left) * time.Millisecond))
	return true
}
