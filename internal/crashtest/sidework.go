package crashtest

// The side workloads beside the main one, each on topics of its own with
// a checker of its own: flow-keyed topics (flowwork.go) and expiring
// messages (expirywork.go).

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// startSide starts, with wg, the side workloads' producers and consumers
// of a cycle, calling through prod's and cons's streams client until ctx
// ends.
func (w *workload) startSide(ctx context.Context, wg *sync.WaitGroup, prod, cons lanes, cycle int) {
	seed := func(n uint64) *rand.Rand { return rand.New(rand.NewPCG(w.cfg.Seed, uint64(cycle)<<16|n)) }
	if f := w.flow; f != nil {
		wg.Go(func() { f.produce(ctx, prod.streams, seed(0x2000)) })
		for i := range 2 {
			wg.Go(func() { f.consume(ctx, cons.streams, seed(0x2100|uint64(i))) })
		}
	}
	if e := w.expiry; e != nil {
		wg.Go(func() { e.produce(ctx, prod.streams, seed(0x3000)) })
		for i := range 2 {
			wg.Go(func() { e.consume(ctx, cons.streams, seed(0x3100|uint64(i)), false) })
		}
	}
}

// sideStopped records that the server was stopped now.
func (w *workload) sideStopped() {
	if w.flow != nil {
		w.flow.stopped(time.Now())
	}
}

// drainSide starts, with wg, the side workloads' drain consumers until ctx
// ends, and returns last moved to the latest time a side message is due
// or expires.
func (w *workload) drainSide(ctx context.Context, wg *sync.WaitGroup, cons lanes, last time.Time) time.Time {
	seed := func(n uint64) *rand.Rand { return rand.New(rand.NewPCG(w.cfg.Seed, n)) }
	if f := w.flow; f != nil {
		for i := range 2 {
			wg.Go(func() { f.consume(ctx, cons.streams, seed(0xd2100|uint64(i))) })
		}
		last = laterOf(last, f.lastDueAt())
	}
	if e := w.expiry; e != nil {
		for i := range 2 {
			wg.Go(func() { e.consume(ctx, cons.streams, seed(0xd3100|uint64(i)), true) })
		}
		// A lease taken just before the last expiry ends after it.
		last = laterOf(last, e.lastExpiry().Add(expiryLease))
	}
	return last
}

// expiryWhole reports whether the expiry history can be judged whole: no
// damage or cut may have taken a policy record, a message or an ack, and
// every answer waited for its fsync.
func (w *workload) expiryWhole() bool {
	return !w.cfg.Damage && !w.cfg.CorruptTail && w.cfg.Fsync == "always"
}

// sideOwed is how many side messages answered OK are still owed an end.
func (w *workload) sideOwed(skew time.Duration) int {
	n := 0
	if w.flow != nil {
		n += w.flow.owed()
	}
	if w.expiry != nil {
		n += len(expiryCheck(w.expiry.snapshot(), skew+time.Millisecond, w.expiryWhole(), false).lost)
	}
	return n
}

// sideVerdict judges the side workloads' histories, reporting what was
// judged through progress.
func (w *workload) sideVerdict(skew time.Duration, progress func(string, ...any)) []Violation {
	var out []Violation
	if f := w.flow; f != nil {
		f.mu.Lock()
		fev := f.snapshot()
		f.mu.Unlock()
		out = append(out, flowCheck(fev, false).violations...)
		progress("flow topics: %d scheduled, %d deliveries, %d settles, %d stops judged", len(fev.Schedules), len(fev.Deliveries), len(fev.Settles), len(fev.Stops))
	}
	if e := w.expiry; e != nil {
		eev := e.snapshot()
		whole := w.expiryWhole()
		out = append(out, expiryCheck(eev, skew+time.Millisecond, whole, true).violations...)
		progress("expiry topics: %d scheduled, %d deliveries, %d acks judged (policies: %v, liveness judged: %v)",
			len(eev.Schedules), len(eev.Deliveries), len(eev.Settles), eev.Policies, whole && eev.Policies)
	}
	return out
}
