// Package deliverycheck counts what became of a run's messages: which the
// system acknowledged to a producer, which reached a consumer, how often
// and whether before their time. It is the one definition of lost,
// duplicate and early that the benchmarks (bench/internal/measure, and
// internal/enginebench and internal/serverbench, the drivers of
// cmd/hourglass-bench) and the crash harness's verdict
// (internal/crashtest: which messages were lost, delivered and early, and
// which deliveries repeat a copy already delivered) report against:
//
//   - lost: acknowledged to a producer and never delivered;
//   - duplicate: a delivery beyond a message's first;
//   - early: delivered before its deliverAt by more than a slack (the
//     bound of the clocks' disagreement, 0 on one clock).
//
// A Counter numbers a run's messages 0 to n-1 (each message carries its
// number, in its body for the benchmarks) and is safe for concurrent use:
// producers mark messages acknowledged while consumers record deliveries.
// It allocates 4 bytes per message up front and nothing per call.
package deliverycheck

import (
	"sync/atomic"
	"time"
)

// Early reports whether a delivery received at received, of a message due
// at deliverAt, came before its time by more than slack.
func Early(deliverAt, received time.Time, slack time.Duration) bool {
	return received.Before(deliverAt.Add(-slack))
}

// Bits of a message's state.
const (
	ackedBit  = 1 << 31 // the system answered the producer OK
	countMask = ackedBit - 1
)

// Counter counts one run's messages, numbered 0 to n-1.
type Counter struct {
	slack    time.Duration
	state    []atomic.Uint32 // per message: ackedBit | deliveries
	early    atomic.Int64    // deliveries before deliverAt - slack
	unknown  atomic.Int64    // deliveries of numbers outside 0..n-1
	distinct atomic.Int64    // messages delivered at least once
	total    atomic.Int64    // deliveries of the run's messages, repeats included
}

// New returns a Counter of n messages; a delivery counts as early only if
// it came more than slack before its deliverAt.
func New(n int, slack time.Duration) *Counter {
	return &Counter{slack: slack, state: make([]atomic.Uint32, n)}
}

// Len is the number of messages counted.
func (c *Counter) Len() int { return len(c.state) }

// Acked records that the system answered a producer OK for messages
// [lo, hi); numbers outside the run are ignored.
func (c *Counter) Acked(lo, hi int) {
	for i := max(lo, 0); i < min(hi, len(c.state)); i++ {
		c.state[i].Or(ackedBit)
	}
}

// Unacked takes back Acked for [lo, hi): the request failed after all (a
// batch is all or nothing), so none of them can be lost.
func (c *Counter) Unacked(lo, hi int) {
	for i := max(lo, 0); i < min(hi, len(c.state)); i++ {
		c.state[i].And(^uint32(ackedBit))
	}
}

// Delivered records a delivery of message i, due at deliverAt and received
// at received, and reports whether it was the message's first. A number
// outside the run counts as unknown (first is false).
func (c *Counter) Delivered(i uint64, deliverAt, received time.Time) (first bool) {
	first, _ = c.Record(i, deliverAt, received)
	return first
}

// Record is Delivered that also reports whether the delivery was early. A
// zero deliverAt is no promise of time: never early.
func (c *Counter) Record(i uint64, deliverAt, received time.Time) (first, early bool) {
	if i >= uint64(len(c.state)) {
		c.unknown.Add(1)
		return false, false
	}
	if early = !deliverAt.IsZero() && Early(deliverAt, received, c.slack); early {
		c.early.Add(1)
	}
	c.total.Add(1)
	if c.state[i].Add(1)&countMask != 1 {
		return false, early
	}
	c.distinct.Add(1)
	return true, early
}

// Lost reports whether message i was acknowledged and, so far, never
// delivered.
func (c *Counter) Lost(i int) bool {
	return i >= 0 && i < len(c.state) && c.state[i].Load() == ackedBit
}

// Unknown records a delivery that names no message of the run (a body that
// does not decode).
func (c *Counter) Unknown() { c.unknown.Add(1) }

// Distinct is how many messages were delivered at least once so far.
func (c *Counter) Distinct() int64 { return c.distinct.Load() }

// Tally is what a Counter counted.
type Tally struct {
	Messages int64 `json:"messages"`
	// Acked: messages the system answered OK.
	Acked int64 `json:"acked"`
	// Delivered: messages delivered at least once.
	Delivered int64 `json:"delivered"`
	// Deliveries: every delivery of the run's messages, repeats included.
	Deliveries int64 `json:"deliveries"`
	// Lost: acked and never delivered.
	Lost int64 `json:"lost"`
	// Duplicates: deliveries beyond a message's first.
	Duplicates int64 `json:"duplicates"`
	// Early: deliveries before deliverAt by more than the slack.
	Early int64 `json:"early"`
	// Unknown: deliveries naming no message of the run.
	Unknown int64 `json:"unknown"`
	// UnackedDelivered: delivered though never acked (its request failed,
	// in a crash say, and was not retried with success).
	UnackedDelivered int64 `json:"unacked_delivered"`
}

// Tally counts what was recorded so far.
func (c *Counter) Tally() Tally {
	t := Tally{Messages: int64(len(c.state)), Early: c.early.Load(), Unknown: c.unknown.Load(), Deliveries: c.total.Load()}
	for i := range c.state {
		s := c.state[i].Load()
		n := int64(s & countMask)
		acked := s&ackedBit != 0
		switch {
		case acked && n == 0:
			t.Lost++
		case !acked && n > 0:
			t.UnackedDelivered++
		}
		if acked {
			t.Acked++
		}
		if n > 0 {
			t.Delivered++
			t.Duplicates += n - 1
		}
	}
	return t
}
