package recur

import (
	"context"
	"fmt"
	"time"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// Overlap says what an occurrence does when its time comes while the
// previous occurrence delivered is not settled (still pending, on its
// way, waiting in the queue, leased, or waiting for a retry).
type Overlap string

// Overlap policies.
const (
	// Allow (the default): it is delivered all the same.
	Allow Overlap = "allow"
	// SkipOverlap: it is not delivered.
	SkipOverlap Overlap = "skip"
	// BufferOne: it is held, and delivered once the previous one is
	// settled; of the occurrences that come while one is held, none is
	// delivered.
	BufferOne Overlap = "buffer-one"
)

// Settler is a sink that holds what it is handed until a consumer settles
// it (the built-in queue). The overlap policies ask it about the previous
// occurrence; a sink that is not one settles what it takes.
type Settler interface {
	// Settled reports whether the message id, handed to the sink for
	// topic, is settled: acked, dead-lettered, retried under another ID,
	// or no longer held.
	Settled(ctx context.Context, topic string, id message.ID) (bool, error)
}

func (d *Def) overlap() Overlap {
	if d.Overlap == "" {
		return Allow
	}
	return d.Overlap
}

func checkOverlap(o Overlap) error {
	switch o {
	case "", Allow, SkipOverlap, BufferOne:
		return nil
	}
	return fmt.Errorf("%w: overlap policy %q: want %s, %s or %s", ErrInvalid, o, Allow, SkipOverlap, BufferOne)
}

// current is a Store that follows a message to its latest incarnation
// (a local engine does; a cluster partition, which refuses overlap
// policies, does not).
type current interface {
	Current(ctx context.Context, id message.ID) (engine.Found, error)
}

// settled reports whether the last occurrence d passed on (none: it is)
// is settled: its latest incarnation (a retry by a Nack with a delay) is
// cancelled or dead-lettered, or the engine delivered it (its bucket may
// be gone since) and the sink settled it.
func (s *Scheduler) settled(ctx context.Context, d *Def) (bool, error) {
	if d.LastID == "" {
		return true, nil
	}
	id, err := message.ParseID(d.LastID)
	if err != nil {
		return true, nil // not one of ours
	}
	var f engine.Found
	if c, ok := s.eng.(current); ok {
		f, err = c.Current(ctx, id)
	} else {
		f, err = s.eng.Get(ctx, id)
	}
	if err != nil {
		return false, err
	}
	switch f.State {
	case engine.StatePending, engine.StateDelivering:
		return false, nil
	case engine.StateDelivered, engine.StateNotFound:
		if st, ok := s.next.(Settler); ok {
			return st.Settled(ctx, d.Topic, f.ID)
		}
	}
	return true, nil
}

// overlapFire decides, by d's overlap policy, what becomes of its armed
// occurrence at at, the message id, due now, and returns whether it is
// delivered, and the message to arm if it is held (BufferOne).
func (s *Scheduler) overlapFire(ctx context.Context, d *Def, id message.ID, at, now time.Time) (bool, []engine.Request, error) {
	if d.overlap() == Allow {
		return true, nil, nil
	}
	ok, err := s.settled(ctx, d)
	if err != nil {
		return false, nil, err
	}
	switch {
	case ok && d.BufferedMs == 0:
		d.LastMs, d.LastID = at.UnixMilli(), id.String()
		return true, nil, nil
	case d.overlap() == BufferOne && d.BufferedMs == 0:
		d.BufferedMs = at.UnixMilli()
		return false, d.heldCheck(at, now), nil
	}
	d.Skipped++
	return false, nil, nil
}

// overlapAgain decides what becomes of an occurrence of d at atMs that is
// not the armed one: one handed over again after a crash or a failed
// delivery (passed on only if it was the first time), or a retry of a
// delivered one (origin set: always passed on).
func (d *Def) overlapAgain(id message.ID, m *message.Message) bool {
	return d.overlap() == Allow || !m.Origin.IsZero() || id.String() == d.LastID
}

// heldFire decides what becomes of m (the message id), a copy of d's
// occurrence at at that looks again whether the held occurrence may go:
// only the current copy (CheckMs) acts; it passes the occurrence on once
// the previous one is settled, or arms the next copy. It returns whether
// m is delivered, whether d changed, and what to arm.
func (s *Scheduler) heldFire(ctx context.Context, d *Def, id message.ID, m *message.Message, at, now time.Time) (deliver, changed bool, reqs []engine.Request, err error) {
	atMs := at.UnixMilli()
	switch {
	case id.String() == d.LastID:
		return true, false, nil, nil // passed on before, handed over again
	case atMs != d.BufferedMs || m.DeliverAt != d.CheckMs:
		return false, false, nil, nil // an earlier copy
	}
	ok, err := s.settled(ctx, d)
	if err != nil {
		return false, false, nil, err
	}
	if !ok {
		return false, true, d.heldCheck(at, now), nil
	}
	d.LastMs, d.LastID, d.BufferedMs = atMs, id.String(), 0
	d.Fired++
	return true, true, nil, nil
}

// heldCheck sets d to look again at its held occurrence at at after a
// while (a quarter of how long it has been held, 1 s to 30 s), and returns
// the copy that will.
func (d *Def) heldCheck(at, now time.Time) []engine.Request {
	wait := min(max(now.Sub(at)/4, time.Second), 30*time.Second)
	check := now.Add(wait).Truncate(time.Millisecond)
	if ms := check.UnixMilli(); ms <= d.CheckMs {
		check = time.UnixMilli(d.CheckMs + 1) // each copy has its own time
	}
	d.CheckMs = check.UnixMilli()
	r := d.occurrence(at)
	r.At = check
	r.Headers = append(r.Headers, message.Header{Key: []byte(HeldHeader), Value: []byte("true")})
	return []engine.Request{r}
}

// heldLost reports whether d holds an occurrence whose looking-again copy
// is overdue (cancelled by a user, or its record lost): Repair arms
// another.
func (s *Scheduler) heldLost(d *Def) bool {
	return d.BufferedMs != 0 && !d.Paused && time.UnixMilli(d.CheckMs).Before(s.eng.Now().Add(-RepairAfter))
}

// recheck arms another looking-again copy of the occurrence the schedule
// name holds, if its copy is still overdue.
func (s *Scheduler) recheck(ctx context.Context, name string) error {
	mu := s.lock(name)
	mu.Lock()
	defer mu.Unlock()
	d, err := s.load(name)
	if err != nil || !s.heldLost(d) {
		return nil
	}
	reqs := d.heldCheck(time.UnixMilli(d.BufferedMs), s.eng.Now())
	s.log.Info("recur: the held occurrence's check is gone; another is armed", "schedule", name, "held", time.UnixMilli(d.BufferedMs).UTC())
	return s.store(ctx, d, reqs)
}
