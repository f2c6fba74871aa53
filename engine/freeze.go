package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

// FrozenAt is where a message frozen on its own waits (UTC ms,
// 9999-12-31T00:00:00Z): in the last day the schedule segments can
// name, far beyond any delay Schedule accepts, so that it never fires
// while frozen. The message itself keeps the delay it had left (the header
// message.FrozenHeader); no other state knows it is frozen.
const FrozenAt int64 = 253402214400000

// FreezeResult is what Freeze or Thaw did.
type FreezeResult int

// Freeze and Thaw results.
const (
	// FreezeUnknown: no such message is pending here; nothing changed.
	FreezeUnknown FreezeResult = iota
	// Frozen: Freeze parked it with its remaining delay; it is never
	// delivered until Thaw.
	Frozen
	// Thawed: Thaw made it due its remaining delay from now.
	Thawed
	// FreezeTooLate: it was delivered or is being delivered; nothing
	// changed.
	FreezeTooLate
	// FreezeCancelled: it was cancelled (or moved on under a later ID);
	// nothing changed.
	FreezeCancelled
	// AlreadyFrozen: Freeze of a message frozen before; nothing changed.
	AlreadyFrozen
	// NotFrozen: Thaw of a pending message that is not frozen; nothing
	// changed.
	NotFrozen
)

// String returns the result's name.
func (r FreezeResult) String() string {
	return [...]string{"unknown", "frozen", "thawed", "already-delivered", "already-cancelled", "already-frozen", "not-frozen"}[r]
}

// errFrozenState is a change's refusal for a message already frozen
// (Freeze) or not frozen (Thaw): the message's state then says the answer.
var errFrozenState = errors.New("engine: frozen state")

// Freeze stops the clock of the pending message id: like Reschedule, one
// commitlog record cancels id and puts a replacement at FrozenAt (its own
// ID, the first ID as origin, the same topic, body and attempt), carrying
// the delay id had left (none if it is overdue) in the header
// message.FrozenHeader. It is never delivered while frozen; Thaw makes it
// due that delay from the thaw. Its answer is truthful like Cancel's (I7):
// Frozen only if id will never fire. It returns the replacement's ID and
// the remaining delay.
func (e *Engine) Freeze(ctx context.Context, id message.ID) (FreezeResult, message.ID, time.Duration, error) {
	nowMs := ceilMs(e.opts.Now())
	var left int64
	res, nid, err := e.replace(ctx, id, func(m *message.Message) error {
		if _, frozen := message.FrozenRemaining(m.Headers); frozen {
			return errFrozenState
		}
		if len(m.Headers) >= message.MaxStoredHeaders {
			return fmt.Errorf("%w: the message holds %d headers, the most a stored message holds; a frozen one keeps its remaining delay in one more", ErrInvalid, len(m.Headers))
		}
		left = max(0, m.DeliverAt-nowMs)
		m.Headers = append(slices.Clip(m.Headers), message.Header{Key: []byte(message.FrozenHeader), Value: strconv.AppendInt(nil, left, 10)})
		m.DeliverAt = FrozenAt
		return nil
	})
	if errors.Is(err, errFrozenState) {
		r, err := e.frozenRefusal(ctx, id, AlreadyFrozen)
		return r, message.ID{}, 0, err
	}
	if res == Rescheduled {
		return Frozen, nid, time.Duration(left) * time.Millisecond, err
	}
	return freezeResultOf(res), nid, 0, err
}

// Thaw starts the clock of the message id that Freeze froze again: like
// Reschedule, one commitlog record cancels id and schedules a replacement
// (its own ID, the first ID as origin) without the header
// message.FrozenHeader, due the delay it had left when frozen from now.
// Thawed only if the frozen entry will never be thawed again; NotFrozen
// for a pending message that is not frozen. It returns the replacement's
// ID, whose time is when it is due.
func (e *Engine) Thaw(ctx context.Context, id message.ID) (FreezeResult, message.ID, error) {
	nowMs := ceilMs(e.opts.Now())
	res, nid, err := e.replace(ctx, id, func(m *message.Message) error {
		left, frozen := message.FrozenRemaining(m.Headers)
		if !frozen {
			return errFrozenState
		}
		m.Headers = unfrozen(m.Headers)
		m.DeliverAt = nowMs + left
		return nil
	})
	if errors.Is(err, errFrozenState) {
		r, err := e.frozenRefusal(ctx, id, NotFrozen)
		return r, message.ID{}, err
	}
	if res == Rescheduled {
		return Thawed, nid, err
	}
	return freezeResultOf(res), nid, err
}

// unfrozen returns hs without message.FrozenHeader (a new slice: hs may
// alias a stored entry).
func unfrozen(hs []message.Header) []message.Header {
	return slices.DeleteFunc(slices.Clone(hs), func(h message.Header) bool { return string(h.Key) == message.FrozenHeader })
}

// frozenRefusal answers a Freeze or Thaw whose change refused id (already
// frozen, or not frozen) from what became of id: asPending if it is still
// pending.
func (e *Engine) frozenRefusal(ctx context.Context, id message.ID, asPending FreezeResult) (FreezeResult, error) {
	f, err := e.Get(ctx, id)
	if err != nil {
		return FreezeUnknown, err
	}
	switch f.State {
	case StatePending:
		return asPending, nil
	case StateDelivering, StateDelivered, StateDeadLettered:
		return FreezeTooLate, nil
	case StateCancelled, StateRescheduled:
		return FreezeCancelled, nil
	}
	return FreezeUnknown, nil
}

func freezeResultOf(r RescheduleResult) FreezeResult {
	switch r {
	case RescheduleTooLate:
		return FreezeTooLate
	case RescheduleCancelled:
		return FreezeCancelled
	}
	return FreezeUnknown
}
