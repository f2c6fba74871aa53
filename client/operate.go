package client

// Operating what is scheduled: dead letters (Redrive, Purge), topics
// (Topics, DeleteTopic), delivery policies (GetPolicy, SetPolicy, Pause,
// Resume), and Nack with a reason.

import (
	"context"
	"fmt"
	"slices"
	"time"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// NackOptions say how NackWith gives a message back.
type NackOptions struct {
	// Delay before it is delivered again (rounded down to whole
	// milliseconds); 0 leaves it to the topic's retry backoff on the
	// server (by default: at once).
	Delay time.Duration
	// Reason is why (the error the consumer met), at most 1000 bytes:
	// kept with the message and shown with it if it is dead-lettered.
	Reason string
	// DeadLetter sends it to "<topic>.dlq" now, whatever attempts remain;
	// Delay is then ignored.
	DeadLetter bool
	// Release gives it back unhandled: receivable again at once, its
	// attempt not counted, no backoff (a consumer that stops). The other
	// fields must be unset with it.
	Release bool
}

// NackWith gives d back as o says: after a delay, with a reason, or to
// the dead-letter topic at once. It fails with codes.FailedPrecondition
// if d's lease has ended.
func (c *Client) NackWith(ctx context.Context, d Delivery, o NackOptions) error {
	if o.Delay < 0 {
		return fmt.Errorf("%w: Nack delay %v is negative; use 0 for the topic's backoff", ErrInvalidMessage, o.Delay)
	}
	return c.nack(ctx, d, o.Delay, o.Reason, o.DeadLetter, o.Release)
}

// deadLetterOf is what a message says of why it was dead-lettered, or
// nil for one that was not.
func deadLetterOf(dl *hourglassv1.DeadLetter) *DeadLetterInfo {
	if dl == nil {
		return nil
	}
	out := &DeadLetterInfo{OriginTopic: dl.OriginTopic, Reason: dl.Reason, LastError: dl.LastError, Attempts: int(dl.Attempts)}
	if dl.At != nil {
		out.At = dl.At.AsTime()
	}
	return out
}

// protoState is the MessageState List and Purge ask for; the zero State
// is StatePending.
func protoState(op string, s State, allowed ...State) (hourglassv1.MessageState, error) {
	if s == "" {
		s = StatePending
	}
	if !slices.Contains(allowed, s) {
		return 0, fmt.Errorf("%w: %s of state %q: want one of %q", ErrInvalidMessage, op, s, allowed)
	}
	switch s {
	case StateDue:
		return hourglassv1.MessageState_MESSAGE_STATE_DUE, nil
	case StateLeased:
		return hourglassv1.MessageState_MESSAGE_STATE_LEASED, nil
	case StateDeadLettered:
		return hourglassv1.MessageState_MESSAGE_STATE_DEAD_LETTERED, nil
	}
	return hourglassv1.MessageState_MESSAGE_STATE_PENDING, nil
}

// RedriveOptions select what Redrive moves and how fast; the zero value
// moves every dead letter back to the topic it died on, at the server's
// default rate.
type RedriveOptions struct {
	// To is where to send them; empty means each one's origin topic.
	To string
	// Reason, if set, moves only dead letters of that reason
	// ("max-attempts", "nacked", "sink").
	Reason string
	// IDs, if set, moves only these messages (their IDs in the dead-letter
	// topic).
	IDs []ID
	// Rate is at most how many messages per second, 1 to 100000; 0 means
	// the server's default (1000).
	Rate int
	// Max is at most how many messages this call moves, up to 1000000; 0
	// means all that wait now. RedriveResult.More says whether more
	// matched.
	Max int
}

// RedriveResult is what one Redrive call did.
type RedriveResult struct {
	// Redriven is how many messages it moved back.
	Redriven int64
	// Skipped is how many the filters (Reason, IDs) left in the
	// dead-letter topic, of those the call looked at: all of them, unless
	// More.
	Skipped int64
	// More is true when the call stopped at Max with more to move: call
	// it again to go on.
	More bool
}

// Redrive moves the dead letters of deadLetterTopic ("<topic>.dlq") back
// as new first attempts that keep their OriginID, and removes them from
// the dead-letter topic. A Redrive cut short (an error, ctx ending, a
// crash of the server) may be called again: a message it moved before is
// not moved twice.
func (c *Client) Redrive(ctx context.Context, deadLetterTopic string, o RedriveOptions) (RedriveResult, error) {
	if !fitsInt32(o.Rate) || !fitsInt32(o.Max) {
		return RedriveResult{}, fmt.Errorf("%w: Redrive Rate %d, Max %d: the Rate is 1 to 100000, the Max up to 1000000", ErrInvalidMessage, o.Rate, o.Max)
	}
	req := &hourglassv1.RedriveRequest{DeadLetterTopic: deadLetterTopic, ToTopic: o.To, Reason: o.Reason,
		RatePerSecond: int32(o.Rate), MaxMessages: int32(o.Max)}
	for _, id := range o.IDs {
		req.Ids = append(req.Ids, id.String())
	}
	res, err := c.svc.Redrive(ctx, req)
	if err != nil {
		return RedriveResult{}, wrap("Redrive", err)
	}
	return RedriveResult{Redriven: res.Redriven, Skipped: res.Skipped, More: res.More}, nil
}

// Purge removes the messages of topic in one state and returns how many:
// StatePending ones are cancelled, StateDue ones and StateDeadLettered
// ones (those of "<topic>.dlq") are removed from the queue. Leased
// messages are left to their consumers.
func (c *Client) Purge(ctx context.Context, topic string, state State) (int64, error) {
	st, err := protoState("Purge", state, StatePending, StateDue, StateDeadLettered)
	if err != nil {
		return 0, err
	}
	res, err := c.svc.Purge(ctx, &hourglassv1.PurgeRequest{Topic: topic, State: st})
	if err != nil {
		return 0, wrap("Purge", err)
	}
	return res.Purged, nil
}

// Deleted is what DeleteTopic removed.
type Deleted struct {
	// Cancelled pending messages, and Removed messages of the queue.
	Cancelled, Removed int64
}

// DeleteTopic cancels topic's pending messages, removes its messages
// from the queue (leased ones too: their acks then fail), its queue files
// and its policy. Its dead letters are a topic of their own,
// "<topic>.dlq", which DeleteTopic leaves.
func (c *Client) DeleteTopic(ctx context.Context, topic string) (Deleted, error) {
	res, err := c.svc.DeleteTopic(ctx, &hourglassv1.DeleteTopicRequest{Topic: topic})
	if err != nil {
		return Deleted{}, wrap("DeleteTopic", err)
	}
	return Deleted{Cancelled: res.Cancelled, Removed: res.Removed}, nil
}

// TopicInfo is one topic's counts and policy, as Topics tells them.
type TopicInfo struct {
	Topic string
	// Due messages wait in the queue to be received; Leased ones were
	// received and are not yet settled; DeadLettered ones wait in
	// "<topic>.dlq".
	Due, Leased, DeadLettered int64
	// OldestDueAge is how long the oldest due message has waited; 0 if
	// none.
	OldestDueAge time.Duration
	// Policy is what the topic set; its nil fields take the server's
	// defaults.
	Policy Policy
	// Under a flow policy: FlowHeld due messages wait because their flow
	// key's bound holds them back, in FlowKeysHeld keys; FlowBacklogs are
	// the largest backlogs by key (at most 20), largest first.
	FlowHeld, FlowKeysHeld int64
	FlowBacklogs           []FlowBacklog
}

// FlowBacklog is what one flow key of a topic holds in the queue.
type FlowBacklog struct {
	Key         string
	Due, Leased int64
	// HeldBy says what holds the key's due messages back: "concurrency",
	// "rate" or "ordered"; "" when a consumer may take one now.
	HeldBy string
}

// Topics lists the topics the server knows (those of the queue, and
// those with a policy), sorted by name. Pending messages are not counted
// per topic: List pages through them.
func (c *Client) Topics(ctx context.Context) ([]TopicInfo, error) {
	res, err := c.svc.Topics(ctx, &hourglassv1.TopicsRequest{})
	if err != nil {
		return nil, wrap("Topics", err)
	}
	out := make([]TopicInfo, len(res.Topics))
	for i, t := range res.Topics {
		out[i] = TopicInfo{Topic: t.Topic, Due: t.Due, Leased: t.Leased, DeadLettered: t.DeadLettered,
			OldestDueAge: time.Duration(t.OldestDueAgeSeconds * float64(time.Second)), Policy: policyOf(t.Policy),
			FlowHeld: t.FlowHeld, FlowKeysHeld: t.FlowKeysHeld}
		for _, b := range t.FlowBacklogs {
			out[i].FlowBacklogs = append(out[i].FlowBacklogs, FlowBacklog{Key: b.FlowKey, Due: b.Due, Leased: b.Leased, HeldBy: b.HeldBy})
		}
	}
	return out, nil
}

// Policy is how a topic's messages are delivered. Each field is
// optional: nil means unset (the server's default applies, or, in
// SetPolicy, the current value stays). Set one with new, as in
// Policy{MaxAttempts: new(5), Paused: new(true)}.
type Policy struct {
	// MaxAttempts is how many deliveries a message gets before it goes to
	// "<topic>.dlq", 1 to 1000 (0 in SetPolicy: the server's default).
	MaxAttempts *int
	// Backoff is the delay before a retry after a Nack without a delay or
	// an expired lease.
	Backoff *Backoff
	// Paused topics hand out nothing: pending messages keep their times,
	// due ones wait, until resumed.
	Paused *bool
	// MaxDispatchRate bounds the messages handed out per second (a token
	// bucket with a burst of one second's worth); 0 means no bound.
	MaxDispatchRate *float64
	// Lease is the lease of a Receive that gives none, 1ms to 12h
	// (whole milliseconds).
	Lease *time.Duration
	// Per flow key (Message.FlowKey): FlowConcurrency bounds a key's
	// messages leased at once (1 to 10000; 0: no bound); FlowRate its
	// messages handed out per second, a token bucket of FlowBurst (0: one
	// second's worth); FlowOrdered hands a key's messages out one at a
	// time in the order they came due, the next once the one before is
	// acked or dead-lettered; FlowFair serves the keys with due messages
	// in turn. Refused in cluster mode (FailedPrecondition).
	FlowConcurrency *int
	FlowRate        *float64
	FlowBurst       *int
	FlowOrdered     *bool
	FlowFair        *bool
	// Freeze makes a pause a frozen one: the topic's clock stops too, and
	// on resume every message stored before the pause and not yet due
	// then is due as much later as the pause lasted. Setting it pauses;
	// resuming (Paused false, or Freeze false) ends it. Answered true
	// while a frozen pause lasts. Refused in cluster mode and with flow
	// policies.
	Freeze *bool
	// ExpiryDrop drops a message past its expiry (Message.ExpireAt, TTL)
	// instead of dead-lettering it with reason "expired"; ExpiryUnacked
	// expires a message not acked by its expiry, not only one not
	// received by then: its lease ending after the expiry ends it as
	// expired, and an Ack from its expiry on fails with
	// codes.FailedPrecondition (ending it too). Refused in cluster mode.
	ExpiryDrop    *bool
	ExpiryUnacked *bool
}

// FrozenPause is one frozen pause of a topic; EndedAt is zero while it
// lasts.
type FrozenPause struct {
	BeganAt, EndedAt time.Time
}

func frozenPausesOf(fs []*hourglassv1.FrozenPause) []FrozenPause {
	var out []FrozenPause
	for _, f := range fs {
		fp := FrozenPause{BeganAt: f.BeganAt.AsTime()}
		if f.EndedAt != nil {
			fp.EndedAt = f.EndedAt.AsTime()
		}
		out = append(out, fp)
	}
	return out
}

// Backoff is a retry delay: Initial × Multiplier^(retry-1), at most Max,
// less up to Jitter of it at random. The zero Backoff means none: a
// message is receivable again at once.
type Backoff struct {
	// Initial and Max are whole milliseconds, up to the server's
	// --max-delay; Max 0 means no cap.
	Initial, Max time.Duration
	// Multiplier is 1 (a fixed delay) to 10; 0 means 1.
	Multiplier float64
	// Jitter is 0 to 1.
	Jitter float64
}

// PolicyField names a field of Policy for SetPolicy to set back to the
// server's default.
type PolicyField string

// The fields of Policy, as SetPolicy names them.
const (
	FieldMaxAttempts     PolicyField = "max_attempts"
	FieldBackoff         PolicyField = "backoff"
	FieldPaused          PolicyField = "paused"
	FieldMaxDispatchRate PolicyField = "max_dispatch_rate"
	FieldLease           PolicyField = "lease_ms"
	FieldFlowConcurrency PolicyField = "flow_concurrency"
	FieldFlowRate        PolicyField = "flow_rate"
	FieldFlowBurst       PolicyField = "flow_burst"
	FieldFlowOrdered     PolicyField = "flow_ordered"
	FieldFlowFair        PolicyField = "flow_fair"
	FieldExpiryDrop      PolicyField = "expiry_drop"
	FieldExpiryUnacked   PolicyField = "expiry_unacked"
)

// PolicyFields are all the fields of Policy.
var PolicyFields = []PolicyField{FieldMaxAttempts, FieldBackoff, FieldPaused, FieldMaxDispatchRate, FieldLease,
	FieldFlowConcurrency, FieldFlowRate, FieldFlowBurst, FieldFlowOrdered, FieldFlowFair, FieldExpiryDrop, FieldExpiryUnacked}

// Policies is a topic's policy as GetPolicy and SetPolicy answer it.
type Policies struct {
	// Set is what the topic set (nil fields: the server's defaults).
	Set Policy
	// Effective is what applies: Set over the server's defaults, every
	// field set.
	Effective Policy
	// Freezes are the topic's frozen pauses that may still make a message
	// due later, oldest first.
	Freezes []FrozenPause
}

func policyOf(p *hourglassv1.Policy) Policy {
	var out Policy
	if p == nil {
		return out
	}
	if p.MaxAttempts != nil {
		out.MaxAttempts = new(int(*p.MaxAttempts))
	}
	if p.Paused != nil {
		out.Paused = new(*p.Paused)
	}
	if p.MaxDispatchRate != nil {
		out.MaxDispatchRate = new(*p.MaxDispatchRate)
	}
	if p.LeaseMs != nil {
		out.Lease = new(time.Duration(*p.LeaseMs) * time.Millisecond)
	}
	if p.FlowConcurrency != nil {
		out.FlowConcurrency = new(int(*p.FlowConcurrency))
	}
	if p.FlowRate != nil {
		out.FlowRate = new(*p.FlowRate)
	}
	if p.FlowBurst != nil {
		out.FlowBurst = new(int(*p.FlowBurst))
	}
	if p.FlowOrdered != nil {
		out.FlowOrdered = new(*p.FlowOrdered)
	}
	if p.FlowFair != nil {
		out.FlowFair = new(*p.FlowFair)
	}
	if p.Freeze != nil {
		out.Freeze = new(*p.Freeze)
	}
	if p.ExpiryDrop != nil {
		out.ExpiryDrop = new(*p.ExpiryDrop)
	}
	if p.ExpiryUnacked != nil {
		out.ExpiryUnacked = new(*p.ExpiryUnacked)
	}
	if b := p.Backoff; b != nil {
		out.Backoff = &Backoff{Initial: time.Duration(b.InitialMs) * time.Millisecond, Max: time.Duration(b.MaxMs) * time.Millisecond,
			Multiplier: b.Multiplier, Jitter: b.Jitter}
	}
	return out
}

// proto returns p's protobuf form, or an error for a field this package
// can tell is wrong (a negative or sub-millisecond duration).
func (p Policy) proto() (*hourglassv1.Policy, error) {
	out := &hourglassv1.Policy{}
	if p.MaxAttempts != nil {
		if !fitsInt32(*p.MaxAttempts) {
			return nil, fmt.Errorf("%w: Policy.MaxAttempts %d: from 1 to 1000", ErrInvalidMessage, *p.MaxAttempts)
		}
		out.MaxAttempts = new(int32(*p.MaxAttempts))
	}
	if p.Paused != nil {
		out.Paused = new(*p.Paused)
	}
	if p.MaxDispatchRate != nil {
		out.MaxDispatchRate = new(*p.MaxDispatchRate)
	}
	if p.Lease != nil {
		if *p.Lease < time.Millisecond {
			return nil, fmt.Errorf("%w: Policy.Lease %v: from 1ms to 12h", ErrInvalidMessage, *p.Lease)
		}
		out.LeaseMs = new(p.Lease.Milliseconds())
	}
	if p.FlowConcurrency != nil {
		if !fitsInt32(*p.FlowConcurrency) {
			return nil, fmt.Errorf("%w: Policy.FlowConcurrency %d: from 1 to 10000", ErrInvalidMessage, *p.FlowConcurrency)
		}
		out.FlowConcurrency = new(int32(*p.FlowConcurrency))
	}
	if p.FlowRate != nil {
		out.FlowRate = new(*p.FlowRate)
	}
	if p.FlowBurst != nil {
		if !fitsInt32(*p.FlowBurst) {
			return nil, fmt.Errorf("%w: Policy.FlowBurst %d: from 1 to 1000000", ErrInvalidMessage, *p.FlowBurst)
		}
		out.FlowBurst = new(int32(*p.FlowBurst))
	}
	if p.FlowOrdered != nil {
		out.FlowOrdered = new(*p.FlowOrdered)
	}
	if p.FlowFair != nil {
		out.FlowFair = new(*p.FlowFair)
	}
	if p.Freeze != nil {
		out.Freeze = new(*p.Freeze)
	}
	if p.ExpiryDrop != nil {
		out.ExpiryDrop = new(*p.ExpiryDrop)
	}
	if p.ExpiryUnacked != nil {
		out.ExpiryUnacked = new(*p.ExpiryUnacked)
	}
	if b := p.Backoff; b != nil {
		if b.Initial < 0 || b.Max < 0 {
			return nil, fmt.Errorf("%w: Policy.Backoff %v to %v: delays are 0 or more", ErrInvalidMessage, b.Initial, b.Max)
		}
		out.Backoff = &hourglassv1.Backoff{InitialMs: b.Initial.Milliseconds(), MaxMs: b.Max.Milliseconds(), Multiplier: b.Multiplier, Jitter: b.Jitter}
	}
	return out, nil
}

// fitsInt32 reports whether n survives the API's int32 fields.
func fitsInt32(n int) bool { return int(int32(n)) == n }

// GetPolicy returns topic's delivery policy: what it set, and what
// applies.
func (c *Client) GetPolicy(ctx context.Context, topic string) (Policies, error) {
	res, err := c.svc.GetPolicy(ctx, &hourglassv1.GetPolicyRequest{Topic: topic})
	if err != nil {
		return Policies{}, wrap("GetPolicy", err)
	}
	return Policies{Set: policyOf(res.Policy), Effective: policyOf(res.Effective), Freezes: frozenPausesOf(res.Freezes)}, nil
}

// SetPolicy changes topic's delivery policy at run time, durably: the
// fields p sets take their new values, the fields named in defaults go
// back to the server's defaults, and the others keep theirs. It answers
// the policy that now holds. The server refuses a value out of range
// with codes.InvalidArgument and a message that says what is allowed.
func (c *Client) SetPolicy(ctx context.Context, topic string, p Policy, defaults ...PolicyField) (Policies, error) {
	pp, err := p.proto()
	if err != nil {
		return Policies{}, err
	}
	req := &hourglassv1.SetPolicyRequest{Topic: topic, Policy: pp}
	for _, f := range defaults {
		req.Defaults = append(req.Defaults, string(f))
	}
	res, err := c.svc.SetPolicy(ctx, req)
	if err != nil {
		return Policies{}, wrap("SetPolicy", err)
	}
	return Policies{Set: policyOf(res.Policy), Effective: policyOf(res.Effective), Freezes: frozenPausesOf(res.Freezes)}, nil
}

// Pause stops topic from handing out messages: pending ones keep their
// times, due ones wait, leases run on and acks work, until Resume. It
// lasts across restarts of the server.
func (c *Client) Pause(ctx context.Context, topic string) (Policies, error) {
	return c.SetPolicy(ctx, topic, Policy{Paused: new(true)})
}

// Freeze pauses topic with its clock stopped: as Pause, and on Resume
// every message stored before it and not yet due then is due as much
// later as it lasted. It costs the same whatever the topic holds.
func (c *Client) Freeze(ctx context.Context, topic string) (Policies, error) {
	return c.SetPolicy(ctx, topic, Policy{Freeze: new(true)})
}

// Resume lets a paused topic hand out its messages again (ending a
// frozen pause).
func (c *Client) Resume(ctx context.Context, topic string) (Policies, error) {
	return c.SetPolicy(ctx, topic, Policy{}, FieldPaused)
}
