package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// Errors of FreezeMessage and ThawMessage, besides those of Reschedule,
// when the server changed nothing.
var (
	// ErrAlreadyFrozen: FreezeMessage of a message frozen before.
	ErrAlreadyFrozen = errors.New("client: message already frozen")
	// ErrNotFrozen: ThawMessage of a pending message that is not frozen.
	ErrNotFrozen = errors.New("client: message not frozen")
)

// FreezeMessage stops the clock of the pending message ref names (its ID,
// any ID it had, or its Key), atomically: it is never delivered until
// ThawMessage, which makes it due the delay it had left (returned here; 0
// for a message that was due and not yet delivered) from the thaw. It
// goes on under the ID returned (its OriginID stays the first message's;
// the first ID and the key go on naming it; Get shows it Frozen with its
// FrozenRemaining); Cancel cancels it. If the server changed nothing the
// error says why: ErrAlreadyFrozen, ErrAlreadyDelivered,
// ErrAlreadyCancelled or ErrNotPending (errors.Is tells). A cluster
// refuses it (FailedPrecondition).
func (c *Client) FreezeMessage(ctx context.Context, ref Ref) (ID, time.Duration, error) {
	id, topic, key := ref.ref()
	res, err := c.svc.FreezeMessage(ctx, &hourglassv1.FreezeMessageRequest{Id: id, Topic: topic, Key: key})
	if err != nil {
		return ID{}, 0, wrap("FreezeMessage", err)
	}
	if res.Result == hourglassv1.FreezeResult_FREEZE_RESULT_FROZEN {
		nid, err := idOf("FreezeMessage", res.Id)
		return nid, time.Duration(res.RemainingMs) * time.Millisecond, err
	}
	return ID{}, 0, freezeRefusal("FreezeMessage", res.Result)
}

// ThawMessage starts the clock of the frozen message ref names again: it
// is due the delay it had left when frozen from now, under the ID
// returned (whose Time is when). If the server changed nothing the error
// says why: ErrNotFrozen, ErrAlreadyDelivered, ErrAlreadyCancelled or
// ErrNotPending. A cluster refuses it (FailedPrecondition).
func (c *Client) ThawMessage(ctx context.Context, ref Ref) (ID, error) {
	id, topic, key := ref.ref()
	res, err := c.svc.ThawMessage(ctx, &hourglassv1.ThawMessageRequest{Id: id, Topic: topic, Key: key})
	if err != nil {
		return ID{}, wrap("ThawMessage", err)
	}
	if res.Result == hourglassv1.FreezeResult_FREEZE_RESULT_THAWED {
		return idOf("ThawMessage", res.Id)
	}
	return ID{}, freezeRefusal("ThawMessage", res.Result)
}

// freezeRefusal is the error of a FreezeMessage or ThawMessage answered r,
// which changed nothing.
func freezeRefusal(rpc string, r hourglassv1.FreezeResult) error {
	switch r {
	case hourglassv1.FreezeResult_FREEZE_RESULT_ALREADY_FROZEN:
		return ErrAlreadyFrozen
	case hourglassv1.FreezeResult_FREEZE_RESULT_NOT_FROZEN:
		return ErrNotFrozen
	case hourglassv1.FreezeResult_FREEZE_RESULT_ALREADY_DELIVERED:
		return ErrAlreadyDelivered
	case hourglassv1.FreezeResult_FREEZE_RESULT_ALREADY_CANCELLED:
		return ErrAlreadyCancelled
	case hourglassv1.FreezeResult_FREEZE_RESULT_UNKNOWN:
		return ErrNotPending
	}
	return fmt.Errorf("client: %s: the server answered %v, which this client does not know", rpc, r)
}
