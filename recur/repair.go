package recur

import (
	"context"
	"time"

	"github.com/hourglassmq/hourglass/engine"
)

// RepairEvery is how often Run looks for schedules whose armed
// occurrence is gone, and RepairAfter how far past its time an armed
// occurrence must be before Run looks at it (before that, it may just
// be firing).
const (
	RepairEvery = time.Minute
	RepairAfter = 10 * time.Second
)

// Run arms the next occurrence of every schedule that has none armed
// that will fire: one whose armed occurrence a user cancelled (the firing
// path arms the next only of occurrences it delivers), or one whose
// arming record `hourglass repair` reported lost (its armed occurrence
// was delivered, and what it armed next is gone). It looks once the
// engine is ready, RepairAfter later, then every RepairEvery, until ctx
// ends.
func (s *Scheduler) Run(ctx context.Context) {
	select {
	case <-s.attached:
	case <-ctx.Done():
		return
	}
	select {
	case <-s.eng.Ready():
	case <-ctx.Done():
		return
	}
	wait := time.NewTimer(RepairAfter)
	defer wait.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wait.C:
		}
		if err := s.Repair(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("recur: looking for schedules without an armed occurrence failed", "err", err)
		}
		wait.Reset(RepairEvery)
	}
}

// Repair makes one pass of Run.
func (s *Scheduler) Repair(ctx context.Context) error {
	var after []byte
	for {
		var defs []*Def
		next, err := s.eng.Scan(after, 512, func(k, v []byte) {
			if d, err := DecodeDef(string(k), v); err == nil {
				defs = append(defs, d)
			}
		})
		if err != nil {
			return err
		}
		for _, d := range defs {
			if s.heldLost(d) {
				if err := s.recheck(ctx, d.Name); err != nil {
					return err
				}
			}
			if !s.orphaned(ctx, d) {
				continue
			}
			if err := s.rearm(ctx, d.Name); err != nil {
				return err
			}
		}
		if next == nil {
			return nil
		}
		after = next
	}
}

// orphaned reports whether d should have an armed occurrence and has
// none pending.
func (s *Scheduler) orphaned(ctx context.Context, d *Def) bool {
	if d.Paused || d.Ended {
		return false
	}
	if d.ArmedMs == 0 {
		return true
	}
	if d.deliverAt(time.UnixMilli(d.ArmedMs)).After(s.eng.Now().Add(-RepairAfter)) {
		return false
	}
	id, ok, err := s.eng.Lookup(ctx, d.Topic, OccurrenceKey(d.Name, d.ArmedMs))
	if err != nil {
		return false
	}
	if !ok {
		return true
	}
	// Pending or being handed over: it will fire and arm the next.
	// Anything else (cancelled, delivered without arming the next: its
	// arming record was lost) leaves the schedule without one.
	f, err := s.eng.Get(ctx, id)
	return err == nil && f.State != engine.StatePending && f.State != engine.StateDelivering
}

// rearm arms the next occurrence from now of the schedule name, if it
// still has none; for an @every spec, the next on the grid of its armed
// occurrence.
func (s *Scheduler) rearm(ctx context.Context, name string) error {
	mu := s.lock(name)
	mu.Lock()
	defer mu.Unlock()
	d, err := s.load(name)
	if err != nil || !s.orphaned(ctx, d) {
		return nil
	}
	sp, err := d.spec()
	if err != nil {
		return nil
	}
	after := s.eng.Now()
	if a := time.UnixMilli(d.ArmedMs); a.After(after) {
		after = a
	} else if e := sp.Every(); e > 0 && d.ArmedMs != 0 {
		// An @every schedule stays on its grid: the next is the first of
		// the armed time plus a whole number of intervals after now.
		after = a.Add(after.Sub(a) / e * e)
	}
	reqs := d.armNext(sp, s.calendar(d), after)
	s.log.Info("recur: the armed occurrence is gone (cancelled); the next one is armed", "schedule", name, "next", armedTime(d))
	return s.store(ctx, d, reqs)
}
