package queue

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Policy is how a topic's messages are handed out and retried. The zero
// value of each field means the queue's default (Options).
type Policy struct {
	// MaxAttempts is how many times a message is handed out before it
	// goes to the dead-letter topic; 0 means Options.MaxAttempts.
	MaxAttempts int
	// Backoff is the delay before a retry after a Nack without a delay or
	// an expired lease; the zero Backoff means none (receivable again at
	// once).
	Backoff Backoff
	// Paused topics hand out nothing: due messages wait, leases run on,
	// Acks and Nacks work.
	Paused bool
	// Rate bounds the messages handed out per second (a token bucket with
	// a burst of one second's worth, at least 1); 0 means no bound.
	Rate float64
	// Lease is the lease of a Receive that asks for none; 0 means
	// Options.DefaultLease.
	Lease time.Duration
	// Flow bounds and orders the messages of each flow key (the header
	// message.FlowKeyHeader); the zero Flow applies none.
	Flow Flow
	// Freezes are the topic's frozen pauses (freeze.go): while the last
	// lasts the topic is paused and its clock stopped; each makes the
	// messages stored before it due later by its length. nil: none.
	Freezes *Freezes
	// Expiry is what becomes of the topic's messages past their expiry
	// (message.ExpireAtHeader); the zero Expiry dead-letters those not
	// received by then.
	Expiry Expiry
}

// Expiry is a topic's expiry policy. Whatever it says, no message is
// handed to a consumer from its expiry on.
type Expiry struct {
	// Drop: an expired message is acked away, counted in
	// TopicStats.ExpiryDropped, instead of moved to the dead-letter topic
	// with ReasonExpired.
	Drop bool
	// Unacked: a message expires if it is not acked by its expiry, not
	// only if it is not received by then. A lease that ends after the
	// message's expiry ends it as expired (not handed out again, whatever
	// attempts remain, no retry scheduled); an Ack from its expiry on is
	// refused with ErrExpired and ends it as expired, as does a Nack
	// (which answers nil). Without it an Ack after the expiry of a
	// message received before it succeeds.
	Unacked bool
}

// Frozen reports whether p is a frozen pause now.
func (p Policy) Frozen() bool { return p.Freezes.Frozen() }

// Flow is a topic's per-key policy. A message without a flow key is not
// bound by it (it is served with the keys in turn under Fair).
type Flow struct {
	// Concurrency: at most this many messages of one key leased at once;
	// the others wait, due. 0 means no bound.
	Concurrency int
	// Rate: at most this many messages of one key handed out per second,
	// a token bucket of Burst; 0 means no bound.
	Rate float64
	// Burst is Rate's bucket; 0 means one second's worth (at least 1).
	Burst int
	// Ordered: one message of a key at a time, in the order they came
	// due (the topic's queue log); the next only once the one before is
	// acked or dead-lettered. A Nack (or an expired lease under a
	// backoff) keeps the message at the key's head, its retry waiting out
	// the delay in place, so the key is held until it is settled.
	Ordered bool
	// Fair serves the keys with due messages in turn, one message each,
	// so that a key with a large backlog delays another by at most one
	// message per key with due messages; without it keys are served in
	// the order their messages came due, each as far as its bounds allow.
	Fair bool
}

// On reports whether f asks for per-key handling.
func (f Flow) On() bool { return f != (Flow{}) }

// limit is how many messages of one key may be leased at once; 0: any.
func (f Flow) limit() int {
	if f.Ordered {
		return 1
	}
	return f.Concurrency
}

// burst is the bucket of f's rate.
func (f Flow) burst() int {
	if f.Burst > 0 {
		return f.Burst
	}
	return max(1, int(math.Ceil(f.Rate)))
}

// Backoff is a retry delay: Initial × Multiplier^(attempt-1), at most Max,
// less up to Jitter of it at random.
type Backoff struct {
	Initial, Max time.Duration
	Multiplier   float64 // 1 (or 0) keeps the delay fixed
	Jitter       float64 // 0 to 1
}

// IsZero reports whether b asks for no delay.
func (b Backoff) IsZero() bool { return b.Initial <= 0 }

// Delay returns the delay before attempt (counting from 1, the first
// retry); rnd returns a number in [0, 1).
func (b Backoff) Delay(attempt uint32, rnd func() float64) time.Duration {
	if b.IsZero() {
		return 0
	}
	m := max(b.Multiplier, 1)
	d := float64(b.Initial) * math.Pow(m, float64(max(attempt, 1)-1))
	if b.Max > 0 {
		d = min(d, float64(b.Max))
	}
	d = min(d, float64(math.MaxInt64/2))
	if j := min(max(b.Jitter, 0), 1); j > 0 {
		d -= d * j * rnd()
	}
	return max(time.Duration(d), time.Millisecond)
}

// Validate says what is wrong with p, if anything.
func (p Policy) Validate(maxLease time.Duration) error {
	switch {
	case p.MaxAttempts < 0 || p.MaxAttempts > 1000:
		return fmt.Errorf("%w: max attempts %d; from 1 to 1000 (0: the default)", ErrInvalid, p.MaxAttempts)
	case p.Backoff.Initial < 0 || p.Backoff.Max < 0:
		return fmt.Errorf("%w: backoff %v to %v: negative", ErrInvalid, p.Backoff.Initial, p.Backoff.Max)
	case p.Backoff.Multiplier != 0 && (p.Backoff.Multiplier < 1 || p.Backoff.Multiplier > 10):
		return fmt.Errorf("%w: backoff multiplier %g; from 1 to 10", ErrInvalid, p.Backoff.Multiplier)
	case p.Backoff.Jitter < 0 || p.Backoff.Jitter > 1:
		return fmt.Errorf("%w: backoff jitter %g; from 0 to 1", ErrInvalid, p.Backoff.Jitter)
	case p.Rate < 0 || math.IsNaN(p.Rate) || math.IsInf(p.Rate, 0):
		return fmt.Errorf("%w: max dispatch rate %g; 0 (no limit) or more", ErrInvalid, p.Rate)
	case p.Lease < 0 || (maxLease > 0 && p.Lease > maxLease):
		return fmt.Errorf("%w: lease %v; from 1ms to %v (0: the default)", ErrInvalid, p.Lease, maxLease)
	case p.Flow.Concurrency < 0 || p.Flow.Concurrency > MaxFlowConcurrency:
		return fmt.Errorf("%w: flow concurrency %d; from 1 to %d (0: no bound)", ErrInvalid, p.Flow.Concurrency, MaxFlowConcurrency)
	case p.Flow.Rate < 0 || math.IsNaN(p.Flow.Rate) || math.IsInf(p.Flow.Rate, 0):
		return fmt.Errorf("%w: flow rate %g; 0 (no bound) or more messages per second", ErrInvalid, p.Flow.Rate)
	case p.Flow.Burst < 0 || p.Flow.Burst > MaxFlowBurst:
		return fmt.Errorf("%w: flow burst %d; from 1 to %d (0: one second of the flow rate)", ErrInvalid, p.Flow.Burst, MaxFlowBurst)
	case p.Flow.Burst > 0 && p.Flow.Rate == 0:
		return fmt.Errorf("%w: flow burst %d without a flow rate; set the rate too", ErrInvalid, p.Flow.Burst)
	case p.Freezes.Frozen() && !p.Paused:
		return fmt.Errorf("%w: a frozen pause is a pause: paused must be set", ErrInvalid)
	case p.Freezes != nil && p.Flow.On():
		return fmt.Errorf("%w: a topic with a flow policy cannot be frozen (nor keep frozen pauses): its keys' queues hold due messages; use a plain pause, or clear the flow policy first", ErrInvalid)
	case p.Flow.Ordered && p.Flow.Concurrency > 1:
		return fmt.Errorf("%w: flow ordered with flow concurrency %d: an ordered key has one message leased at a time; leave concurrency 0", ErrInvalid, p.Flow.Concurrency)
	}
	return nil
}

// Bounds of a Flow's fields.
const (
	MaxFlowConcurrency = 10_000
	MaxFlowBurst       = 1_000_000
)

// policies holds the topics' policies and their rate limiters.
type policies struct {
	mu  sync.RWMutex
	set map[string]Policy
	lim map[string]*rate.Limiter
}

// SetPolicy makes p topic's policy from now on (the zero Policy: the
// defaults). The queue keeps policies in memory only: whoever owns them
// durably (the node, from the commitlog) sets them again at every start,
// before consumers arrive. Receives waiting on a topic that is resumed
// are woken.
func (q *Queue) SetPolicy(name string, p Policy) error {
	if err := p.Validate(q.opts.maxLease); err != nil {
		return err
	}
	q.pol.mu.Lock()
	if q.pol.set == nil {
		q.pol.set, q.pol.lim = map[string]Policy{}, map[string]*rate.Limiter{}
	}
	if p == (Policy{}) {
		delete(q.pol.set, name)
	} else {
		q.pol.set[name] = p
	}
	delete(q.pol.lim, name)
	if p.Rate > 0 {
		q.pol.lim[name] = rate.NewLimiter(rate.Limit(p.Rate), max(1, int(math.Ceil(p.Rate))))
	}
	q.pol.mu.Unlock()
	q.mu.Lock()
	s := q.mu.topics[name]
	var t *topic
	if s != nil {
		t = s.t
	}
	q.mu.Unlock()
	if t != nil {
		t.mu.Lock()
		t.wake()
		t.mu.Unlock()
	}
	return nil
}

// Policy returns topic's policy as set (zero fields: the defaults).
func (q *Queue) Policy(topic string) Policy {
	q.pol.mu.RLock()
	defer q.pol.mu.RUnlock()
	return q.pol.set[topic]
}

// Effective returns topic's policy with the defaults filled in.
func (q *Queue) Effective(topic string) Policy {
	p := q.Policy(topic)
	if p.MaxAttempts == 0 {
		p.MaxAttempts = q.opts.MaxAttempts
	}
	if p.Lease == 0 {
		p.Lease = q.opts.DefaultLease
	}
	return p
}

// maxAttempts is topic's MaxAttempts.
func (q *Queue) maxAttempts(topic string) int {
	if p := q.Policy(topic); p.MaxAttempts > 0 {
		return p.MaxAttempts
	}
	return q.opts.MaxAttempts
}

// allow returns how many of want messages topic may hand out now (its
// policy: paused, rate), and when it returns 0 for a rate, the wait until
// one more is allowed; and topic's flow policy and freezes. It takes nothing: the caller, holding the topic's
// lock (so that no other Receive of the topic runs meanwhile), takes what
// it handed out with took.
func (q *Queue) allow(topic string, want int, now time.Time) (int, time.Duration, Flow, *Freezes) {
	q.pol.mu.RLock()
	p, lim := q.pol.set[topic], q.pol.lim[topic]
	q.pol.mu.RUnlock()
	if p.Paused {
		return 0, 0, p.Flow, p.Freezes
	}
	if lim == nil {
		return want, 0, p.Flow, p.Freezes
	}
	if n := min(want, int(lim.TokensAt(now))); n > 0 {
		return n, 0, p.Flow, p.Freezes
	}
	r := lim.ReserveN(now, 1)
	d := r.DelayFrom(now)
	r.CancelAt(now)
	return 0, max(d, time.Millisecond), p.Flow, p.Freezes
}

// took takes n messages handed out from topic's rate limiter.
func (q *Queue) took(topic string, n int, now time.Time) {
	if n <= 0 {
		return
	}
	q.pol.mu.RLock()
	lim := q.pol.lim[topic]
	q.pol.mu.RUnlock()
	if lim != nil {
		lim.AllowN(now, n)
	}
}

// backoffDelay is the retry delay topic's policy gives attempt.
func (q *Queue) backoffDelay(topic string, attempt uint32) time.Duration {
	return q.Policy(topic).Backoff.Delay(attempt, rand.Float64)
}
