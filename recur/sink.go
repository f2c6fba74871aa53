package recur

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"time"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// Deliver is the engine's Sink: the occurrences in batch arm their
// schedules' next occurrences, in one commitlog append that also records
// them fired, before the batch goes on to the next sink. A failure of
// either is Deliver's (the engine hands the batch over again; an
// occurrence handed over again arms nothing twice: it is no longer the
// armed one). An occurrence of a deleted or paused schedule, or a missed
// one of a Skip schedule, is dropped (not passed on).
func (s *Scheduler) Deliver(ctx context.Context, topic string, batch []engine.Delivery) error {
	select {
	case <-s.attached:
	case <-ctx.Done():
		return ctx.Err()
	}
	var occ []int
	for i := range batch {
		if message.HeaderValue(batch[i].Message.Headers, ScheduleHeader) != "" {
			occ = append(occ, i)
		}
	}
	if len(occ) == 0 {
		return s.next.Deliver(ctx, topic, batch)
	}
	// What this node stored of the schedules is in the catalog first.
	if err := s.eng.WaitRouted(ctx); err != nil {
		return err
	}
	unlock := s.lockAll(batch, occ)
	drop, err := s.fire(ctx, batch, occ)
	unlock()
	if err != nil {
		return err
	}
	if drop == nil {
		return s.next.Deliver(ctx, topic, batch)
	}
	kept := make([]engine.Delivery, 0, len(batch))
	for i, d := range batch {
		if !drop[i] {
			kept = append(kept, d)
		}
	}
	if len(kept) == 0 {
		return nil
	}
	return s.next.Deliver(ctx, topic, kept)
}

// lockAll takes the locks of the schedules of the occurrences occ of
// batch, in order (no two callers wait on each other), and returns their
// release.
func (s *Scheduler) lockAll(batch []engine.Delivery, occ []int) func() {
	idx := make([]uint64, 0, len(occ))
	for _, i := range occ {
		name := message.HeaderValue(batch[i].Message.Headers, ScheduleHeader)
		idx = append(idx, s.lockIndex(name))
	}
	slices.Sort(idx)
	idx = slices.Compact(idx)
	for _, i := range idx {
		s.locks[i].Lock()
	}
	return func() {
		for _, i := range idx {
			s.locks[i].Unlock()
		}
	}
}

// fire arms the next occurrence of each armed occurrence in occ and
// returns which of batch to drop (nil: none).
func (s *Scheduler) fire(ctx context.Context, batch []engine.Delivery, occ []int) ([]bool, error) {
	var drop []bool
	dropIt := func(i int) {
		if drop == nil {
			drop = make([]bool, len(batch))
		}
		drop[i] = true
	}
	now := s.eng.Now()
	var reqs []engine.Request
	var ctls []message.Control
	defs := map[string]*Def{} // several occurrences of one schedule in a batch
	for _, i := range occ {
		m := batch[i].Message
		name := message.HeaderValue(m.Headers, ScheduleHeader)
		at, err := time.Parse(time.RFC3339Nano, message.HeaderValue(m.Headers, OccurrenceHeader))
		if err != nil {
			continue // not one of ours: deliver it as it is
		}
		atMs := at.UnixMilli()
		d := defs[name]
		if d == nil {
			if d, err = s.load(name); err != nil {
				dropIt(i) // deleted: no further occurrence is delivered
				continue
			}
			defs[name] = d
		}
		if message.HeaderValue(m.Headers, BackfillHeader) != "" {
			continue // asked for: delivered as it is
		}
		if d.Paused {
			dropIt(i)
			continue
		}
		if message.HeaderValue(m.Headers, HeldHeader) != "" {
			deliver, changed, more, err := s.heldFire(ctx, d, batch[i].ID, m, at, now)
			if err != nil {
				return nil, err
			}
			if !deliver {
				dropIt(i)
			}
			if changed {
				reqs = append(reqs, more...)
				ctls = append(ctls, d.control())
			}
			continue
		}
		if atMs != d.ArmedMs {
			// Fired before (handed over again after a crash), or a
			// retry of one delivered, or one the user rescheduled:
			// delivered if it was the first time, nothing to arm.
			if !d.overlapAgain(batch[i].ID, m) {
				dropIt(i)
			}
			continue
		}
		sp, err := d.spec()
		if err != nil {
			continue
		}
		after := at
		missed := d.deliverAt(at).Before(s.opened)
		switch {
		case !missed:
			d.Missed = 0
		case d.misfire() == Skip:
			dropIt(i)
			after = now
		case d.misfire() == FireOnce:
			after = now
		default: // FireAll
			d.Missed++
			if d.Missed >= MaxMissed {
				after = now
			}
		}
		if drop == nil || !drop[i] {
			deliver, held, err := s.overlapFire(ctx, d, batch[i].ID, at, now)
			if err != nil {
				return nil, err
			}
			reqs = append(reqs, held...)
			if deliver {
				d.Fired++
			} else {
				dropIt(i)
			}
		}
		d.FiredMs = atMs
		reqs = append(reqs, d.armNext(sp, s.calendar(d), after)...)
		ctls = append(ctls, d.control())
	}
	if len(ctls) > 0 {
		// Of several records of one schedule in the batch, the last (in
		// commitlog order) wins.
		if err := s.eng.Write(ctx, reqs, ctls, firingKey(ctls)); err != nil {
			return nil, err
		}
	}
	return drop, nil
}

// Delivered forwards to the next sink's engine.DeliveryChecker; a sink
// that is not one may hold anything.
func (s *Scheduler) Delivered(ctx context.Context, id message.ID) (bool, error) {
	if c, ok := s.next.(engine.DeliveryChecker); ok {
		return c.Delivered(ctx, id)
	}
	return true, nil
}

// firingKey names the write of one firing of the occurrences whose
// schedules' records are ctls: each record holds its schedule's FiredMs,
// the time of the occurrence fired, which grows with every firing, so
// the same firing handed over again writes the same bytes and another
// firing other ones.
func firingKey(ctls []message.Control) string {
	h := sha256.New()
	for _, c := range ctls {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(c.Name)))
		h.Write(n[:])
		h.Write(c.Name)
		binary.BigEndian.PutUint32(n[:], uint32(len(c.Value)))
		h.Write(n[:])
		h.Write(c.Value)
	}
	return "recur:" + hex.EncodeToString(h.Sum(nil))
}
