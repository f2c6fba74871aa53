package enginebench

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/hourglassmq/hourglass/engine"
)

// Every wait below ends on its condition, on ctx (the run's --timeout), or
// on its own bound: none polls without a deadline.

// pollEvery is how often a wait re-checks a condition that has no channel
// (the engine's routing lag) or updates a progress bar.
const pollEvery = 5 * time.Millisecond

// waitReady waits until e has loaded its due buckets.
func waitReady(ctx context.Context, e *engine.Engine) error {
	select {
	case <-e.Ready():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the engine to be ready: %w", context.Cause(ctx))
	}
}

// waitRouted waits until reput has routed everything scheduled on e so
// far into the schedule segments (and the loaded buckets' wheel).
//
// The engine's Stats().ReputLag alone cannot tell: under the interval and
// none fsync policies the commitlog shows readers its records only after
// its next flush, so the lag reads 0 while the last records are still
// invisible to reput. So waitRouted schedules a marker due at once and
// waits for the sink to receive it: reput routes in commitlog order, so
// everything scheduled before the marker is routed by then. It then also
// waits for the lag to read 0.
func waitRouted(ctx context.Context, e *engine.Engine, tr *tracker) error {
	body := make([]byte, idxBodySize)
	binary.LittleEndian.PutUint64(body, markerIndex)
	if _, err := e.ScheduleBatch(ctx, []engine.Request{{Topic: topic, Body: body}}); err != nil {
		return fmt.Errorf("scheduling the routing marker: %w", err)
	}
	select {
	case <-tr.marker:
	case <-ctx.Done():
		return fmt.Errorf("waiting for the engine to route what was scheduled (the marker scheduled after it is not delivered): %w", context.Cause(ctx))
	}
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for e.Stats().ReputLag != 0 {
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the engine to route what was scheduled (%d bytes to go): %w", e.Stats().ReputLag, context.Cause(ctx))
		}
	}
	return nil
}

// Why waitDelivered stopped.
const (
	endComplete    = "complete"    // everything scheduled was delivered
	endTimeout     = "timeout"     // --timeout ran out
	endInterrupted = "interrupted" // the caller's context was cancelled
	endNoProgress  = "no-progress" // nothing arrived for --grace after the last due time
)

// waitDelivered waits until want messages are delivered, ctx is done, or
// lastDue has passed and no delivery arrived for grace. It returns why it
// stopped.
func waitDelivered(ctx context.Context, tr *tracker, want int64, lastDue time.Time, grace time.Duration, b *Bar) string {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	quietSince := time.Now()
	seen := tr.counts.Distinct()
	for {
		got := tr.counts.Distinct()
		b.Set(got)
		if got >= want {
			return endComplete
		}
		now := time.Now()
		if got != seen {
			seen, quietSince = got, now
		}
		if now.After(lastDue) && now.Sub(later(quietSince, lastDue)) >= grace {
			return endNoProgress
		}
		select {
		case <-tr.notify:
		case <-t.C:
		case <-ctx.Done():
			return ctxEnd(ctx)
		}
	}
}

// ctxEnd names why ctx is done.
func ctxEnd(ctx context.Context) string {
	if context.Cause(ctx) == errTimeout {
		return endTimeout
	}
	return endInterrupted
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// closeEngine closes e, giving up (and leaving it) after engineCloseLimit.
func closeEngine(e *engine.Engine) error {
	done := make(chan error, 1)
	go func() { done <- e.Close() }()
	t := time.NewTimer(engineCloseLimit)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("closing the engine: %w", err)
		}
		return nil
	case <-t.C:
		return fmt.Errorf("closing the engine: Close did not return within %v; %s", engineCloseLimit, dumpStacks())
	}
}

// liveHeap collects garbage and returns the bytes of live heap objects.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC() // a second cycle frees what the first one's finalizers released
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// dumpStacks writes every goroutine's stack to a file in the temporary
// directory, for whoever debugs a stuck engine, and says where.
func dumpStacks() string {
	buf := make([]byte, 32<<20)
	buf = buf[:runtime.Stack(buf, true)]
	f, err := os.CreateTemp("", "hourglass-bench-stacks-*.txt")
	if err != nil {
		return "writing the goroutine stacks failed: " + err.Error()
	}
	defer f.Close()
	if _, err := f.Write(buf); err != nil {
		return "writing the goroutine stacks failed: " + err.Error()
	}
	return "goroutine stacks written to " + f.Name()
}
