package client

import (
	"context"
	"iter"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// State is what became of a scheduled message, as Get tells it.
type State string

// States Get answers.
const (
	StatePending      State = "pending"       // in its schedule segment: it will be delivered at its time
	StateDelivering   State = "delivering"    // handed to the sink, not confirmed yet
	StateDelivered    State = "delivered"     // the sink (not the built-in queue) confirmed it
	StateDue          State = "due"           // in the built-in queue, waiting to be received
	StateLeased       State = "leased"        // received from the built-in queue, lease running
	StateAcked        State = "acked"         // acked in the built-in queue (or no longer held there)
	StateCancelled    State = "cancelled"     // it will never be delivered
	StateDeadLettered State = "dead-lettered" // refused for good; see Found.DeadLetterTopic
	StateNotFound     State = "not-found"     // no such message (or its segment was deleted once all done)
	StateRescheduled  State = "rescheduled"   // cluster mode: it will never be delivered at this time; see Found.RescheduledTo
)

func stateOf(s hourglassv1.MessageState) State {
	switch s {
	case hourglassv1.MessageState_MESSAGE_STATE_PENDING:
		return StatePending
	case hourglassv1.MessageState_MESSAGE_STATE_DELIVERING:
		return StateDelivering
	case hourglassv1.MessageState_MESSAGE_STATE_DELIVERED:
		return StateDelivered
	case hourglassv1.MessageState_MESSAGE_STATE_DUE:
		return StateDue
	case hourglassv1.MessageState_MESSAGE_STATE_LEASED:
		return StateLeased
	case hourglassv1.MessageState_MESSAGE_STATE_ACKED:
		return StateAcked
	case hourglassv1.MessageState_MESSAGE_STATE_CANCELLED:
		return StateCancelled
	case hourglassv1.MessageState_MESSAGE_STATE_DEAD_LETTERED:
		return StateDeadLettered
	case hourglassv1.MessageState_MESSAGE_STATE_RESCHEDULED:
		return StateRescheduled
	}
	return StateNotFound
}

// Scheduled is a message as the server stores it.
type Scheduled struct {
	ID        ID
	Topic     string
	Headers   map[string]string
	Body      []byte
	DeliverAt time.Time
	// Attempt is the attempt it was scheduled with (0 for a first one);
	// in a List of the queue's states, the queue's failed attempts.
	Attempt uint32
	// OriginID names the first attempt of a retry or reschedule; the
	// zero ID otherwise.
	OriginID ID
	// LeaseUntil is when the lease of a message listed as StateLeased
	// ends; zero otherwise.
	LeaseUntil time.Time
	// DeadLetter says why a message of a dead-letter topic died; nil for
	// any other message.
	DeadLetter *DeadLetterInfo
	// DueAt is when it is due with its topic's frozen pauses counted
	// (Policy.Freeze), when they make it due after DeliverAt; zero
	// otherwise. Frozen: such a pause lasts, and DueAt counts it up to now
	// (as if resumed now).
	DueAt  time.Time
	Frozen bool
	// FrozenRemaining is the delay a message frozen on its own
	// (FreezeMessage) has left, which it keeps until ThawMessage; Frozen
	// is then set and DueAt is as if it were thawed now. Zero otherwise.
	FrozenRemaining time.Duration
}

func scheduledOf(m *hourglassv1.Message) Scheduled {
	s := Scheduled{Topic: m.Topic, Body: m.Body, Attempt: m.Attempt, DeadLetter: deadLetterOf(m.DeadLetter)}
	// The server's IDs always parse.
	s.ID, _ = ParseID(m.Id)
	if m.OriginId != "" {
		s.OriginID, _ = ParseID(m.OriginId)
	}
	if m.DeliverAt != nil {
		s.DeliverAt = m.DeliverAt.AsTime()
	}
	if m.LeaseExpiresAt != nil {
		s.LeaseUntil = m.LeaseExpiresAt.AsTime()
	}
	if m.DueAt != nil {
		s.DueAt, s.Frozen = m.DueAt.AsTime(), m.Frozen
	}
	s.FrozenRemaining = time.Duration(m.GetFrozenRemainingMs()) * time.Millisecond
	s.Headers = headersOf(m.Headers)
	return s
}

// Found is what Get answers.
type Found struct {
	State State
	// Message is the message; zero when State is StateNotFound.
	Message Scheduled
	// QueueAttempt and LeaseUntil: the built-in queue's failed attempts
	// (StateDue, StateLeased) and when the lease ends (StateLeased).
	QueueAttempt uint32
	LeaseUntil   time.Time
	// DeadLetterTopic holds a message the queue dead-lettered.
	DeadLetterTopic string
	// FlowWait says why a due message waits for its flow key (the
	// topic's flow policy holds it back); "" when it does not.
	FlowWait string
	// RescheduledTo is the ID that carries the message now, when it is
	// not the one asked for: after a Reschedule, a retry (a Nack with a
	// delay, or the topic's backoff) or a redrive. Message and State are
	// that one's. (In cluster mode, the replacement of a StateRescheduled
	// message.)
	RescheduledTo ID
}

// Get looks up the message ref names (its ID, or its Key) and says what
// became of it. It only reads: nothing is received, leased or changed.
func (c *Client) Get(ctx context.Context, ref Ref) (Found, error) {
	id, topic, key := ref.ref()
	res, err := c.svc.Get(ctx, &hourglassv1.GetRequest{Id: id, Topic: topic, Key: key})
	if err != nil {
		return Found{}, wrap("Get", err)
	}
	f := Found{State: stateOf(res.State), QueueAttempt: res.QueueAttempt, DeadLetterTopic: res.DeadLetterTopic, FlowWait: res.FlowWait}
	if res.RescheduledTo != "" {
		if f.RescheduledTo, err = idOf("Get", res.RescheduledTo); err != nil {
			return Found{}, err
		}
	}
	if res.Message != nil {
		f.Message = scheduledOf(res.Message)
	}
	if res.LeaseExpiresAt != nil {
		f.LeaseUntil = res.LeaseExpiresAt.AsTime()
	}
	return f, nil
}

// ListOptions select what List returns.
type ListOptions struct {
	// State is which messages: StatePending (or empty) for those not yet
	// due, in delivery order; StateDue, StateLeased or StateDeadLettered
	// (the topic's dead letters, in "<topic>.dlq") for those of the
	// built-in queue, in the order it holds them.
	State State
	// From (inclusive) and To (exclusive) bound the delivery time of
	// pending messages; zero means no bound. The queue's states take
	// neither.
	From, To time.Time
	// PageSize is how many messages one call fetches, 1 to 1000; 0 means
	// the server's default (100).
	PageSize int
}

// ListPage returns one page of the messages of topic in o.State (by
// default the pending ones, in delivery order), starting after the page
// token (empty for the first page), and the token of the next page (empty
// when there is no more).
func (c *Client) ListPage(ctx context.Context, topic string, o ListOptions, token string) ([]Scheduled, string, error) {
	st, err := protoState("List", o.State, StatePending, StateDue, StateLeased, StateDeadLettered)
	if err != nil {
		return nil, "", err
	}
	req := &hourglassv1.ListRequest{Topic: topic, State: st, PageToken: token, PageSize: int32(o.PageSize)}
	if !o.From.IsZero() {
		req.From = timestamppb.New(o.From)
	}
	if !o.To.IsZero() {
		req.To = timestamppb.New(o.To)
	}
	res, err := c.svc.List(ctx, req)
	if err != nil {
		return nil, "", wrap("List", err)
	}
	out := make([]Scheduled, len(res.Messages))
	for i, m := range res.Messages {
		out[i] = scheduledOf(m)
	}
	return out, res.NextPageToken, nil
}

// List yields every message of topic in o.State (by default every
// pending one, in delivery order), fetching a page at a time; it stops at
// the first error, which it yields. Pending messages scheduled during the
// listing appear if they sort after the last page fetched.
func (c *Client) List(ctx context.Context, topic string, o ListOptions) iter.Seq2[Scheduled, error] {
	return pages(func(token string) ([]Scheduled, string, error) { return c.ListPage(ctx, topic, o, token) })
}

// pages yields what page returns for each page token, starting with "" and
// following the next token it returns until that is "". It stops at the
// first error, which it yields.
func pages[T any](page func(token string) ([]T, string, error)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		token := ""
		for {
			items, next, err := page(token)
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, it := range items {
				if !yield(it, nil) {
					return
				}
			}
			if next == "" {
				return
			}
			token = next
		}
	}
}
