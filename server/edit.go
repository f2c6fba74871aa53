package server

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hourglassmq/hourglass/engine"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/internal/units"
	"github.com/hourglassmq/hourglass/message"
)

// Edit serves the Edit RPC: the message the request names (engine.Current
// of it) gets the new body and/or headers, as the engine's Edit decides.
func (s api) Edit(ctx context.Context, m *hourglassv1.EditRequest) (*hourglassv1.EditResponse, error) {
	ed := engine.Edit{SetHeaders: m.SetHeaders}
	if m.Body != nil {
		if len(m.Body) > s.opts.MaxBody {
			return nil, invalid("body is %d bytes; at most %d (%s, the server's --max-body)", len(m.Body), s.opts.MaxBody, units.FormatSize(int64(s.opts.MaxBody)))
		}
		ed.Body, ed.SetBody = m.Body, true
	}
	switch {
	case !m.SetHeaders && len(m.Headers) > 0:
		return nil, invalid("headers are given without set_headers: set set_headers to replace the headers with them")
	case len(m.Headers) > message.MaxHeaders:
		return nil, invalid("%d headers; at most %d", len(m.Headers), message.MaxHeaders)
	case !ed.SetBody && !m.SetHeaders:
		return nil, invalid("nothing to edit: give a body, or set_headers (with the new headers, or none to remove them), or both")
	}
	hs, err := checkHeaders("", m.Headers)
	if err != nil {
		return nil, err
	}
	ed.Headers = hs
	if s.opts.Cluster != nil {
		return nil, status.Error(codes.FailedPrecondition, "Edit is not served in cluster mode: a partition's messages are held in JetStream, which has no atomic replace of a pending message; Cancel it and Schedule it again, or run Edit on a single server")
	}
	id, found, err := s.target(ctx, "Edit", m.Id, m.Topic, m.Key)
	if err != nil {
		return nil, err
	}
	out := &hourglassv1.EditResponse{Result: hourglassv1.EditResult_EDIT_RESULT_UNKNOWN}
	if !found {
		return out, nil
	}
	res, nid, err := s.eng.(engineCore).Edit(ctx, id, ed)
	if err != nil {
		return nil, scheduleError(err)
	}
	switch res {
	case engine.Edited:
		out.Result, out.Id, out.DeliverAt = hourglassv1.EditResult_EDIT_RESULT_EDITED, nid.String(), timestamppb.New(nid.Time())
	case engine.EditTooLate:
		out.Result = hourglassv1.EditResult_EDIT_RESULT_ALREADY_DELIVERED
	case engine.EditCancelled:
		out.Result = hourglassv1.EditResult_EDIT_RESULT_ALREADY_CANCELLED
	case engine.EditUnknown:
		if s.retiredDelivered(ctx, id) {
			out.Result = hourglassv1.EditResult_EDIT_RESULT_ALREADY_DELIVERED
		}
	}
	return out, nil
}

// Edit edits what carries the message id now (engine.Current), as Cancel.
func (e engineCore) Edit(ctx context.Context, id message.ID, ed engine.Edit) (engine.EditResult, message.ID, error) {
	for range currentTries {
		f, err := e.Current(ctx, id)
		if err != nil {
			return engine.EditUnknown, message.ID{}, err
		}
		res, nid, err := e.Engine.Edit(ctx, f.ID, ed)
		if err != nil || res != engine.EditCancelled || !e.movedSince(ctx, f.ID) {
			return res, nid, err
		}
		// Edited or rescheduled between Current and Edit: edit what
		// carries it now.
	}
	return engine.EditCancelled, message.ID{}, fmt.Errorf("engine: edit of %s: it kept moving on to new IDs; try again", id)
}
