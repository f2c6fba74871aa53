package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// When is a new delivery time for Reschedule: In, At or Now. The zero
// When is no time, and Reschedule refuses it.
type When struct {
	delay time.Duration
	at    time.Time
	now   bool
	set   bool
}

// In is the time d after the server's clock when the request arrives,
// rounded up to whole milliseconds (never early); d is 0 or more.
func In(d time.Duration) When { return When{delay: d, set: true} }

// At is the absolute time t; a time in the past is due at once.
func At(t time.Time) When { return When{at: t, set: true} }

// Now is at once: the message is delivered as soon as it is rescheduled
// ("promote").
func Now() When { return When{now: true, set: true} }

func (w When) String() string {
	switch {
	case !w.set:
		return "no time"
	case w.now:
		return "now"
	case !w.at.IsZero():
		return "at " + w.at.Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("in %v", w.delay)
}

// Errors of Reschedule, when the server changed nothing.
var (
	// ErrAlreadyDelivered: the message was delivered, or is being
	// delivered, or was dead-lettered: too late to move it.
	ErrAlreadyDelivered = errors.New("client: message already delivered")
	// ErrAlreadyCancelled: the message was cancelled, or rescheduled
	// before (Get tells the ID that replaced it).
	ErrAlreadyCancelled = errors.New("client: message already cancelled or rescheduled")
	// ErrNotPending: no such message is pending on the server.
	ErrNotPending = errors.New("client: no such message pending")
)

// Reschedule moves the pending message ref names (its ID, or its Key) to
// the time when, atomically: the old time will never fire, and the
// message is delivered at the new time under the ID Reschedule returns
// (its ID.Time is the new time; its OriginID stays the first message's).
// If the server changed nothing the error says why: ErrAlreadyDelivered,
// ErrAlreadyCancelled or ErrNotPending (errors.Is tells).
func (c *Client) Reschedule(ctx context.Context, ref Ref, when When) (ID, error) {
	id, topic, key := ref.ref()
	req := &hourglassv1.RescheduleRequest{Id: id, Topic: topic, Key: key}
	switch {
	case !when.set:
		return ID{}, fmt.Errorf("%w: Reschedule without a time: give client.In, client.At or client.Now", ErrInvalidMessage)
	case when.now:
		req.When = &hourglassv1.RescheduleRequest_Now{Now: true}
	case !when.at.IsZero():
		req.When = &hourglassv1.RescheduleRequest_DeliverAt{DeliverAt: timestamppb.New(when.at)}
	case when.delay < 0:
		return ID{}, fmt.Errorf("%w: Reschedule in %v: a delay is 0 or more", ErrInvalidMessage, when.delay)
	default:
		req.When = &hourglassv1.RescheduleRequest_DelayMs{DelayMs: int64((when.delay + time.Millisecond - 1) / time.Millisecond)}
	}
	res, err := c.svc.Reschedule(ctx, req)
	if err != nil {
		return ID{}, wrap("Reschedule", err)
	}
	switch res.Result {
	case hourglassv1.RescheduleResult_RESCHEDULE_RESULT_RESCHEDULED:
		return idOf("Reschedule", res.Id)
	case hourglassv1.RescheduleResult_RESCHEDULE_RESULT_ALREADY_DELIVERED:
		return ID{}, ErrAlreadyDelivered
	case hourglassv1.RescheduleResult_RESCHEDULE_RESULT_ALREADY_CANCELLED:
		return ID{}, ErrAlreadyCancelled
	case hourglassv1.RescheduleResult_RESCHEDULE_RESULT_UNKNOWN:
		return ID{}, ErrNotPending
	}
	return ID{}, fmt.Errorf("client: Reschedule: the server answered %v, which this client does not know", res.Result)
}
