package serverbench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/internal/enginebench"
)

// spreadOrder places a backlog's messages over its due range: message i
// is due at DueFrom + Spread × k(i)/N, with k(i) = i × mult mod N, a
// permutation of [0, N). The due times are evenly spaced and arrive in an
// order that jumps across the whole range, as a backlog built by many
// producers does: consecutive messages land in different hourly segments.
// drain computes the same k from a received body's index.
type spreadOrder struct {
	n, mult uint64
	from    time.Time
	spread  time.Duration
}

func newSpreadOrder(n int, from time.Time, spread time.Duration) spreadOrder {
	o := spreadOrder{n: uint64(n), from: from, spread: spread}
	// A multiplier near N/φ that shares no factor with N.
	o.mult = uint64(float64(n)*0.6180339887) % o.n
	for gcd(o.mult, o.n) != 1 {
		o.mult = (o.mult + 1) % o.n
	}
	return o
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// k is message i's place in due order (i < n, so the product fits: n is
// at most MaxMessages, under 2^27).
func (o spreadOrder) k(i uint64) uint64 { return i * o.mult % o.n }

// offset is how long after from the message in place k is due.
func (o spreadOrder) offset(k uint64) time.Duration {
	return time.Duration(float64(o.spread) * float64(k) / float64(o.n))
}

// due is message i's deliverAt.
func (o spreadOrder) due(i uint64) time.Time { return o.from.Add(o.offset(o.k(i))) }

// within is how many messages are due before from + w: those in places
// [0, within).
func (o spreadOrder) within(w time.Duration) uint64 {
	lo, hi := uint64(0), o.n
	for lo < hi {
		mid := lo + (hi-lo)/2
		if o.offset(mid) < w {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// runBacklog schedules N messages due over [DueFrom, DueFrom + Spread)
// in spreadOrder and leaves them pending: the schedule rate of a backlog
// far larger than memory. With Keys each carries its index as its
// idempotency key.
func runBacklog(ctx context.Context, p *peers, cfg Config, r *Report, skew time.Duration) error {
	start := time.Now()
	if cfg.DueFrom.IsZero() {
		cfg.DueFrom = start.Add(skew).Add(DefaultDueAfter).Truncate(time.Millisecond)
	}
	o := newSpreadOrder(cfg.Messages, cfg.DueFrom, cfg.Spread)
	r.DueFrom = cfg.DueFrom.UTC().Format(time.RFC3339Nano)
	r.Spread = cfg.Spread.String()
	r.DueFromSeconds = round3(cfg.DueFrom.Sub(start.Add(skew)).Seconds())
	r.DueToSeconds = round3(r.DueFromSeconds + cfg.Spread.Seconds())
	err := schedule(ctx, p.scheds, cfg, r, false, func(i int, m *hourglassv1.ScheduleRequest) {
		m.When = &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(o.due(uint64(i)))}
		if cfg.Keys {
			m.IdempotencyKey = strconv.Itoa(i)
		}
	}, nil)
	r.Note = fmt.Sprintf("the %d messages stay pending on topic %s, due from %s over %v; "+
		"receive the first part with: hourglass-bench server --scenario drain --topic %s --messages %d --due-from %s --spread %v --window 1h",
		r.Scheduled, cfg.Topic, r.DueFrom, cfg.Spread, cfg.Topic, cfg.Messages, r.DueFrom, cfg.Spread)
	return err
}

// runDrain receives the messages of a backlog run (the same --messages,
// --due-from and --spread) that are due within Window of its start,
// from Consumers, and reports their lateness, what was lost (due in the
// window, not received) and what came twice or early. Messages of the
// backlog due after the window that arrive before the run ends are acked
// and not counted.
func runDrain(ctx context.Context, p *peers, cfg Config, r *Report, skew, rtt time.Duration) error {
	o := newSpreadOrder(cfg.Messages, cfg.DueFrom, cfg.Spread)
	want := o.within(cfg.Window)
	r.DueFrom, r.Spread, r.Expected = cfg.DueFrom.UTC().Format(time.RFC3339Nano), cfg.Spread.String(), int64(want)
	t0 := time.Now()
	r.DueFromSeconds = round3(cfg.DueFrom.Sub(t0.Add(skew)).Seconds())
	r.DueToSeconds = round3(r.DueFromSeconds + min(cfg.Window, cfg.Spread).Seconds())
	lastDue := cfg.DueFrom.Add(-skew).Add(min(cfg.Window, cfg.Spread)) // client clock

	t := newTally(int(want), rtt/2, func(i uint64) (k uint64, count, known bool) {
		if i >= o.n {
			return 0, false, false
		}
		k = o.k(i)
		return k, k < want, true
	})
	t.counts.Acked(0, int(want)) // scheduled by the backlog run
	cs := startConsumers(ctx, p, cfg, t, skew)
	b := enginebench.NewBar(cfg.Progress, int(want), "receiving")
	cs.wait(ctx, r, int64(want), lastDue, cfg.Grace, b)
	b.Done()
	err := cs.finish(r)
	if r.DueFromSeconds < 0 {
		r.Note = fmt.Sprintf("the drain started %.3f s after the first message was due: the lateness of what was due before includes that wait", -r.DueFromSeconds)
	}
	return err
}

// report puts what the consumers saw into r: counts, lateness and the
// delivery rate from first to last receive.
func (t *tally) report(r *Report, samples []sample) {
	var all []float64
	var first, last time.Time
	for _, s := range samples {
		all = append(all, s.late...)
		if !s.first.IsZero() && (first.IsZero() || s.first.Before(first)) {
			first = s.first
		}
		if s.last.After(last) {
			last = s.last
		}
	}
	c := t.counts.Tally()
	r.Delivered, r.Duplicates, r.Early, r.Lost = c.Delivered, c.Duplicates, c.Early, c.Lost
	r.Anomalies = t.anomalies.Load() + c.Unknown
	r.Errors += t.errs.Load()
	if d := last.Sub(first); d > 0 {
		r.FirePerSec = round1(float64(r.Delivered) / d.Seconds())
	}
	slices.Sort(all)
	r.SetLateness(all)
}
