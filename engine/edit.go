package engine

import (
	"context"
	"fmt"

	"github.com/hourglassmq/hourglass/message"
)

// Edit says what an Edit replaces: the body, the message's own headers,
// or both. A field not set keeps what the message has.
type Edit struct {
	// Body is the new body when SetBody is set (nil: an empty body).
	Body    []byte
	SetBody bool
	// Headers are the new headers when SetHeaders is set (none: no
	// headers of its own). The headers the server set on the message
	// (message.Reserved: its idempotency key, a recurring occurrence) are
	// kept, and Headers may not hold one.
	Headers    []message.Header
	SetHeaders bool
}

// EditResult is what Edit did.
type EditResult int

// Edit results.
const (
	// EditUnknown: no such message is pending here; nothing changed.
	EditUnknown EditResult = iota
	// Edited: its next delivery carries the new content.
	Edited
	// EditTooLate: it was delivered or is being delivered; nothing
	// changed.
	EditTooLate
	// EditCancelled: it was cancelled (or moved on under a later ID);
	// nothing changed.
	EditCancelled
)

// String returns the result's name.
func (r EditResult) String() string {
	return [...]string{"unknown", "edited", "already-delivered", "already-cancelled"}[r]
}

// Edit replaces the body and/or headers of the pending message id,
// atomically: like Reschedule, one commitlog record cancels id and
// schedules its replacement, with the new content, at the same time (or
// now, if that has passed), under its own ID and with the first ID as its
// origin, so that Current, the idempotency key and the first ID name it.
// Its answer is truthful like Cancel's (I7): Edited only if the old
// content will never be delivered; EditTooLate if it was delivered or is
// being delivered. It returns the replacement's ID.
func (e *Engine) Edit(ctx context.Context, id message.ID, ed Edit) (EditResult, message.ID, error) {
	if !ed.SetBody && !ed.SetHeaders {
		return EditUnknown, message.ID{}, fmt.Errorf("%w: an edit changes the body, the headers or both; it names neither", ErrInvalid)
	}
	for _, h := range ed.Headers {
		if message.Reserved(string(h.Key)) {
			return EditUnknown, message.ID{}, fmt.Errorf("%w: header %q: names beginning with %q are the server's", ErrInvalid, h.Key, message.ReservedPrefix)
		}
	}
	nowMs := ceilMs(e.opts.Now())
	res, nid, err := e.replace(ctx, id, func(m *message.Message) error {
		if ed.SetBody {
			m.Body = ed.Body
			if m.Body == nil {
				m.Body = []byte{}
			}
		}
		if ed.SetHeaders {
			var hs []message.Header
			for _, h := range m.Headers {
				if message.Reserved(string(h.Key)) {
					hs = append(hs, h)
				}
			}
			if len(hs)+len(ed.Headers) > message.MaxHeaders {
				return fmt.Errorf("%w: %d headers and %d the server keeps (its idempotency key, an occurrence); at most %d in all",
					ErrInvalid, len(ed.Headers), len(hs), message.MaxHeaders)
			}
			m.Headers = append(append([]message.Header(nil), ed.Headers...), hs...)
		}
		// An overdue message (not fired yet) goes to the bucket of now,
		// as a Reschedule to its time would.
		m.DeliverAt = max(m.DeliverAt, nowMs)
		return nil
	})
	switch res {
	case Rescheduled:
		return Edited, nid, err
	case RescheduleTooLate:
		return EditTooLate, nid, err
	case RescheduleCancelled:
		return EditCancelled, nid, err
	}
	return EditUnknown, nid, err
}
