package recur

import (
	"context"
	"time"

	"github.com/hourglassmq/hourglass/catalog"
	"github.com/hourglassmq/hourglass/engine"
)

// RepairEvery is how often Run looks for schedules whose armed
// occurrence is gone (a user cancelled it), and RepairAfter how far past
// its time an armed occurrence must be before Run looks at it.
const (
	RepairEvery = time.Minute
	RepairAfter = time.Minute
)

// Run arms the next occurrence of every schedule that has none armed:
// one whose armed occurrence was cancelled by a user (the firing path
// arms the next only of occurrences it delivers). It looks every
// RepairEvery until ctx ends.
func (s *Scheduler) Run(ctx context.Context) {
	select {
	case <-s.attached:
	case <-ctx.Done():
		return
	}
	t := time.NewTicker(RepairEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.Repair(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("recur: looking for schedules without an armed occurrence failed", "err", err)
		}
	}
}

// Repair makes one pass of Run.
func (s *Scheduler) Repair(ctx context.Context) error {
	var after []byte
	for {
		var names []string
		next, err := s.eng.ScanSettings(catalog.Schedules, after, 512, func(k, v []byte) {
			d, err := DecodeDef(string(k), v)
			if err == nil && s.orphaned(ctx, d) {
				names = append(names, d.Name)
			}
		})
		if err != nil {
			return err
		}
		for _, name := range names {
			if err := s.rearm(ctx, name); err != nil {
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
	if time.UnixMilli(d.ArmedMs).After(s.eng.Now().Add(-RepairAfter)) {
		return false
	}
	id, ok, err := s.eng.Lookup(ctx, d.Topic, OccurrenceKey(d.Name, d.ArmedMs))
	if err != nil {
		return false
	}
	if !ok {
		return true
	}
	f, err := s.eng.Get(ctx, id)
	return err == nil && (f.State == engine.StateCancelled || f.State == engine.StateNotFound)
}

// rearm arms the next occurrence from now of the schedule name, if it
// still has none.
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
	}
	reqs := d.armNext(sp, after)
	s.log.Info("recur: the armed occurrence is gone (cancelled); the next one is armed", "schedule", name, "next", armedTime(d))
	return s.store(ctx, d, reqs)
}
