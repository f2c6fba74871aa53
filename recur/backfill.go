package recur

import (
	"context"
	"fmt"
	"time"

	"github.com/hourglassmq/hourglass/calendar"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// MaxBackfill bounds the occurrences one Backfill delivers.
const MaxBackfill = 10000

// backfillBatch is how many occurrences one write of Backfill stores.
const backfillBatch = 1000

// Backfilled is what Backfill did.
type Backfilled struct {
	// Stored counts the occurrences stored, each a message due at once.
	Stored int
	// Existing counts the occurrences that had their message already (a
	// live occurrence, or an earlier backfill's), not stored again.
	Existing int
}

// Backfill delivers now the occurrences of the schedule name from from
// up to (not including) to, which must not be after now: one message per
// occurrence, keyed OccurrenceKey as the live occurrence was, none for an
// occurrence whose key names a message that is not cancelled (a live
// one, or one an earlier Backfill stored; the catalog keeps a key while
// its message's bucket exists, and for the idempotency window after its
// delivery time: engine.Engine.LookupKept). Occurrences follow the schedule's spec, bounds and calendar as
// they are now; an @every schedule's lie on the grid of its armed (or
// last) occurrence. They carry BackfillHeader, and are delivered even
// while the schedule is paused; the overlap policy does not apply.
func (s *Scheduler) Backfill(ctx context.Context, name string, from, to time.Time) (Backfilled, error) {
	var out Backfilled
	now := s.eng.Now()
	switch {
	case !from.Before(to):
		return out, fmt.Errorf("%w: backfill from %s to %s: from must be before to", ErrInvalid, from.UTC().Format(time.RFC3339Nano), to.UTC().Format(time.RFC3339Nano))
	case to.After(now):
		return out, fmt.Errorf("%w: backfill to %s is after now (%s): backfill covers past occurrences; the live ones come by themselves",
			ErrInvalid, to.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339))
	}
	mu := s.lock(name)
	mu.Lock()
	defer mu.Unlock()
	if err := s.eng.WaitRouted(ctx); err != nil {
		return out, err
	}
	d, err := s.load(name)
	if err != nil {
		return out, err
	}
	ts, err := s.occurrencesIn(d, from, to)
	if err != nil {
		return out, err
	}
	var reqs []engine.Request
	flush := func() error {
		if len(reqs) == 0 {
			return nil
		}
		if err := s.eng.Write(ctx, reqs, nil, ""); err != nil {
			return err
		}
		out.Stored += len(reqs)
		reqs = reqs[:0]
		// A Backfill that follows finds these keys.
		return s.eng.WaitRouted(ctx)
	}
	for _, t := range ts {
		has, err := s.hasMessage(ctx, d, t)
		if err != nil {
			return out, err
		}
		if has {
			out.Existing++
			continue
		}
		r := d.occurrence(t)
		r.At = now
		r.Headers = append(r.Headers, message.Header{Key: []byte(BackfillHeader), Value: []byte("true")})
		if reqs = append(reqs, r); len(reqs) == backfillBatch {
			if err := flush(); err != nil {
				return out, err
			}
		}
	}
	return out, flush()
}

// occurrencesIn lists d's occurrences from from up to (not including) to.
func (s *Scheduler) occurrencesIn(d *Def, from, to time.Time) ([]time.Time, error) {
	sp, err := d.spec()
	if err != nil {
		return nil, err
	}
	cal := s.calendar(d)
	var ts []time.Time
	add := func(t time.Time) error {
		if len(ts) == MaxBackfill {
			return fmt.Errorf("%w: more than %d occurrences from %s to %s: backfill a shorter range at a time", ErrInvalid, MaxBackfill,
				from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
		}
		ts = append(ts, t)
		return nil
	}
	if e := sp.Every(); e > 0 {
		// The grid of the armed occurrence (or the last one fired, or the
		// first one after creation), back into the range.
		anchor := time.UnixMilli(d.ArmedMs)
		switch {
		case d.ArmedMs == 0 && d.FiredMs != 0:
			anchor = time.UnixMilli(d.FiredMs)
		case d.ArmedMs == 0:
			anchor = sp.Next(time.UnixMilli(d.CreatedMs))
		}
		n := anchor.Sub(from) / e
		if anchor.Sub(from)%e > 0 {
			n++
		}
		for t := anchor.Add(-n * e); t.Before(to); t = t.Add(e) {
			k, ok := d.keep(t, cal)
			if !ok || len(ts) > 0 && !k.After(ts[len(ts)-1]) {
				continue
			}
			if err := add(k); err != nil {
				return nil, err
			}
		}
		return ts, nil
	}
	for t := from.Add(-time.Nanosecond); ; {
		nt, ok := d.next(sp, cal, t)
		if !ok || !nt.Before(to) {
			return ts, nil
		}
		if err := add(nt); err != nil {
			return nil, err
		}
		t = nt
	}
}

// keep returns the occurrence t of an @every spec as d's bounds and
// calendar keep it, or false if they leave it out.
func (d *Def) keep(t time.Time, cal *calendar.Calendar) (time.Time, bool) {
	ms := t.UnixMilli()
	if d.StartMs > 0 && ms < d.StartMs || d.EndMs > 0 && ms > d.EndMs {
		return time.Time{}, false
	}
	if cal == nil || cal.Working(t) {
		return t, true
	}
	if d.CalendarPolicy != CalendarShift {
		return time.Time{}, false
	}
	w, err := cal.Next(t)
	return w, err == nil && (d.EndMs == 0 || w.UnixMilli() <= d.EndMs)
}

// hasMessage reports whether d's occurrence at t has a message that is
// not cancelled.
func (s *Scheduler) hasMessage(ctx context.Context, d *Def, t time.Time) (bool, error) {
	id, ok, err := s.eng.LookupKept(ctx, d.Topic, OccurrenceKey(d.Name, t.UnixMilli()))
	if err != nil || !ok {
		return false, err
	}
	// Not found: its bucket is gone, every message of it done (most
	// likely delivered).
	f, err := s.eng.Get(ctx, id)
	return err == nil && f.State != engine.StateCancelled, err
}
