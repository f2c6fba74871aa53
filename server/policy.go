package server

// The topic policy RPCs, GetPolicy and SetPolicy, on one node and in
// cluster mode.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hourglassmq/hourglass/engine"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/internal/units"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
)

// GetPolicy serves the GetPolicy RPC.
func (s api) GetPolicy(ctx context.Context, m *hourglassv1.GetPolicyRequest) (*hourglassv1.GetPolicyResponse, error) {
	if err := checkTopic("", m.Topic); err != nil {
		return nil, err
	}
	if c := s.opts.Cluster; c != nil {
		set, eff, err := c.TopicPolicy(ctx, m.Topic)
		if err != nil {
			return nil, serverError(err)
		}
		return &hourglassv1.GetPolicyResponse{Policy: toProtoPolicy(set), Effective: effectivePolicy(eff)}, nil
	}
	p := s.q.Policy(m.Topic)
	return &hourglassv1.GetPolicyResponse{Policy: toProtoPolicy(p), Effective: s.effective(m.Topic), Freezes: protoFreezes(p.Freezes)}, nil
}

// effective is topic's policy over the server's defaults, every field set.
func (s *Server) effective(topic string) *hourglassv1.Policy {
	return effectivePolicy(s.q.Effective(topic))
}

// effectivePolicy shows a policy whose defaults are filled in: every
// field set.
func effectivePolicy(e queue.Policy) *hourglassv1.Policy {
	p := toProtoPolicy(e)
	p.MaxAttempts, p.Paused, p.MaxDispatchRate, p.LeaseMs = ptr(int32(e.MaxAttempts)), ptr(e.Paused), ptr(e.Rate), ptr(e.Lease.Milliseconds())
	p.FlowConcurrency, p.FlowRate, p.FlowBurst = ptr(int32(e.Flow.Concurrency)), ptr(e.Flow.Rate), ptr(int32(e.Flow.Burst))
	p.FlowOrdered, p.FlowFair, p.Freeze = ptr(e.Flow.Ordered), ptr(e.Flow.Fair), ptr(e.Frozen())
	p.ExpiryDrop, p.ExpiryUnacked = ptr(e.Expiry.Drop), ptr(e.Expiry.Unacked)
	if p.Backoff == nil {
		p.Backoff = &hourglassv1.Backoff{Multiplier: 1}
	}
	return p
}

func ptr[T any](v T) *T { return &v }

// SetPolicy serves the SetPolicy RPC: the topic's policy with the request's
// fields changed, durable as a control record before it answers.
func (s api) SetPolicy(ctx context.Context, m *hourglassv1.SetPolicyRequest) (*hourglassv1.SetPolicyResponse, error) {
	if err := checkTopic("", m.Topic); err != nil {
		return nil, err
	}
	if c := s.opts.Cluster; c != nil {
		set, _, err := c.TopicPolicy(ctx, m.Topic)
		if err != nil {
			return nil, serverError(err)
		}
		if m.Policy.GetFreeze() {
			return nil, status.Error(codes.FailedPrecondition,
				"policy freeze: this server runs in cluster mode (serve --cluster), whose JetStream consumers keep no frozen pauses; a plain pause (paused) holds delivery, or freeze a topic on a single node (docs/CLUSTER.md)")
		}
		p, err := s.changePolicy(set, m, nil)
		if err != nil {
			return nil, err
		}
		if err := clusterFlow(p.Flow); err != nil {
			return nil, err
		}
		if err := clusterExpiry(p.Expiry); err != nil {
			return nil, err
		}
		// Answered from what the node made, not a read of the consumer
		// after it: a pause or resume may reach a read a moment later.
		set, eff, err := c.SetTopicPolicy(ctx, m.Topic, p)
		if err != nil {
			return nil, serverError(err)
		}
		return &hourglassv1.SetPolicyResponse{Policy: toProtoPolicy(set), Effective: effectivePolicy(eff)}, nil
	}
	eng, err := s.localEngine("SetPolicy")
	if err != nil {
		return nil, err
	}
	// One SetPolicy of a topic at a time: a freeze's interval is read,
	// changed and written whole.
	unlock := s.lockPolicy(m.Topic)
	defer unlock()
	p, err := s.changePolicy(s.q.Policy(m.Topic), m, eng)
	if err != nil {
		return nil, err
	}
	if err := eng.Control(ctx, message.Control{Kind: message.ControlPolicy, Name: []byte(m.Topic), Value: queue.EncodePolicy(p)}); err != nil {
		return nil, serverError(err)
	}
	p = s.q.Policy(m.Topic)
	return &hourglassv1.SetPolicyResponse{Policy: toProtoPolicy(p), Effective: s.effective(m.Topic), Freezes: protoFreezes(p.Freezes)}, nil
}

// changePolicy is p with the request's fields changed and its defaults
// fields cleared, checked. A freeze begins or ends on eng's clock and
// commitlog position (nil in cluster mode, which refuses freezes).
func (s *Server) changePolicy(p queue.Policy, m *hourglassv1.SetPolicyRequest, eng *engine.Engine) (queue.Policy, error) {
	if np := m.Policy; np != nil {
		if np.MaxAttempts != nil {
			p.MaxAttempts = int(*np.MaxAttempts)
		}
		if np.Paused != nil {
			p.Paused = *np.Paused
		}
		if np.MaxDispatchRate != nil {
			p.Rate = *np.MaxDispatchRate
		}
		if np.LeaseMs != nil {
			p.Lease = time.Duration(*np.LeaseMs) * time.Millisecond
		}
		if np.FlowConcurrency != nil {
			p.Flow.Concurrency = int(*np.FlowConcurrency)
		}
		if np.FlowRate != nil {
			p.Flow.Rate = *np.FlowRate
		}
		if np.FlowBurst != nil {
			p.Flow.Burst = int(*np.FlowBurst)
		}
		if np.FlowOrdered != nil {
			p.Flow.Ordered = *np.FlowOrdered
		}
		if np.FlowFair != nil {
			p.Flow.Fair = *np.FlowFair
		}
		if np.ExpiryDrop != nil {
			p.Expiry.Drop = *np.ExpiryDrop
		}
		if np.ExpiryUnacked != nil {
			p.Expiry.Unacked = *np.ExpiryUnacked
		}
		if b := np.Backoff; b != nil {
			if b.InitialMs > s.opts.MaxDelay.Milliseconds() || b.MaxMs > s.opts.MaxDelay.Milliseconds() {
				return p, invalid("backoff: delays up to %d ms (%s, the server's --max-delay)", s.opts.MaxDelay.Milliseconds(), units.FormatDuration(s.opts.MaxDelay))
			}
			p.Backoff = queue.Backoff{Initial: time.Duration(b.InitialMs) * time.Millisecond, Max: time.Duration(b.MaxMs) * time.Millisecond,
				Multiplier: b.Multiplier, Jitter: b.Jitter}
		}
	}
	for _, f := range m.Defaults {
		switch f {
		case "max_attempts":
			p.MaxAttempts = 0
		case "backoff":
			p.Backoff = queue.Backoff{}
		case "paused":
			p.Paused = false
		case "max_dispatch_rate":
			p.Rate = 0
		case "lease_ms":
			p.Lease = 0
		case "flow_concurrency":
			p.Flow.Concurrency = 0
		case "flow_rate":
			p.Flow.Rate = 0
		case "flow_burst":
			p.Flow.Burst = 0
		case "flow_ordered":
			p.Flow.Ordered = false
		case "flow_fair":
			p.Flow.Fair = false
		case "expiry_drop":
			p.Expiry.Drop = false
		case "expiry_unacked":
			p.Expiry.Unacked = false
		default:
			return p, invalid("defaults %q: not a policy field; the fields are max_attempts, backoff, paused, max_dispatch_rate, lease_ms, flow_concurrency, flow_rate, flow_burst, flow_ordered, flow_fair, expiry_drop and expiry_unacked", f)
		}
	}
	if eng != nil {
		now := eng.Now().UnixMilli()
		switch fz := m.Policy.GetFreeze(); {
		case fz && m.Policy.Paused != nil && !*m.Policy.Paused:
			return p, invalid("policy: freeze with paused false; a frozen pause is a pause (leave paused unset or true)")
		case fz:
			f, err := p.Freezes.Begin(now, eng.Position(), s.opts.MaxDelay)
			if err != nil {
				return p, invalid("policy freeze: %v", err)
			}
			p.Paused, p.Freezes = true, f
		case m.Policy != nil && m.Policy.Freeze != nil || !p.Paused:
			// freeze false, or resumed: the clock runs again.
			p.Freezes = p.Freezes.End(now)
		}
	}
	if err := p.Validate(queue.DefaultMaxLease); err != nil {
		return p, invalid("policy: %v", err)
	}
	return p, nil
}

// toProtoPolicy shows a queue policy: fields left at their default unset.
func toProtoPolicy(p queue.Policy) *hourglassv1.Policy {
	out := &hourglassv1.Policy{}
	if p.MaxAttempts != 0 {
		out.MaxAttempts = ptr(int32(p.MaxAttempts))
	}
	if p.Paused {
		out.Paused = ptr(true)
	}
	if p.Rate != 0 {
		out.MaxDispatchRate = ptr(p.Rate)
	}
	if p.Lease != 0 {
		out.LeaseMs = ptr(p.Lease.Milliseconds())
	}
	if f := p.Flow; f.Concurrency != 0 {
		out.FlowConcurrency = ptr(int32(f.Concurrency))
	}
	if f := p.Flow; f.Rate != 0 {
		out.FlowRate = ptr(f.Rate)
	}
	if f := p.Flow; f.Burst != 0 {
		out.FlowBurst = ptr(int32(f.Burst))
	}
	if p.Flow.Ordered {
		out.FlowOrdered = ptr(true)
	}
	if p.Flow.Fair {
		out.FlowFair = ptr(true)
	}
	if p.Frozen() {
		out.Freeze = ptr(true)
	}
	if p.Expiry.Drop {
		out.ExpiryDrop = ptr(true)
	}
	if p.Expiry.Unacked {
		out.ExpiryUnacked = ptr(true)
	}
	if !p.Backoff.IsZero() {
		out.Backoff = &hourglassv1.Backoff{InitialMs: p.Backoff.Initial.Milliseconds(), MaxMs: p.Backoff.Max.Milliseconds(),
			Multiplier: max(p.Backoff.Multiplier, 1), Jitter: p.Backoff.Jitter}
	}
	return out
}

// clusterFlow refuses, in cluster mode, a policy with flow fields: the
// cluster's consumers are JetStream's, which bound a consumer's messages
// in flight, not a key's, and keep no per-key order across partitions
// (docs/CLUSTER.md). It names the first field set.
func clusterFlow(f queue.Flow) error {
	var field string
	switch {
	case f.Concurrency != 0:
		field = "flow_concurrency"
	case f.Rate != 0:
		field = "flow_rate"
	case f.Burst != 0:
		field = "flow_burst"
	case f.Ordered:
		field = "flow_ordered"
	case f.Fair:
		field = "flow_fair"
	default:
		return nil
	}
	return status.Error(codes.FailedPrecondition, fmt.Sprintf(
		"policy %s: this server runs in cluster mode (serve --cluster), whose JetStream consumers do not bound, order or share out messages per flow key; flow policies are served by a single node (docs/CLUSTER.md)", field))
}

// clusterExpiry refuses, in cluster mode, an expiry policy other than
// the default: the cluster's consumers dead-letter a message a Receive
// reaches past its expiry, and keep no expiry with a delivery to act on
// when its lease ends or an Ack comes (docs/CLUSTER.md).
func clusterExpiry(e queue.Expiry) error {
	field := "expiry_drop"
	switch {
	case e.Unacked:
		field = "expiry_unacked"
	case !e.Drop:
		return nil
	}
	return status.Error(codes.FailedPrecondition, fmt.Sprintf(
		"policy %s: this server runs in cluster mode (serve --cluster), whose JetStream consumers dead-letter a message a Receive reaches past its expiry and keep no expiry with a delivery; expiry policies are served by a single node (docs/CLUSTER.md)", field))
}

// protoFreezes shows a topic's frozen pauses.
func protoFreezes(f *queue.Freezes) []*hourglassv1.FrozenPause {
	var out []*hourglassv1.FrozenPause
	for _, z := range f.List() {
		fp := &hourglassv1.FrozenPause{BeganAt: timestamppb.New(time.UnixMilli(z.At))}
		if z.Until != 0 {
			fp.EndedAt = timestamppb.New(time.UnixMilli(z.Until))
		}
		out = append(out, fp)
	}
	return out
}

// lockPolicy serialises the SetPolicy calls of topic on this node and
// returns the unlock.
func (s *Server) lockPolicy(topic string) func() {
	v, _ := s.changes.policies.LoadOrStore(topic, &sync.Mutex{})
	mu := v.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}
