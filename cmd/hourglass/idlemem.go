package main

import (
	"context"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// An idle server gives back to the OS what a burst left behind. With the
// GC percent at 400 and the soft limit at --memory-limit, the runtime
// keeps a burst's freed heap for minutes: 10,000 topics used once left
// the process at 273 MB once they had closed, of a live heap near 10 MB.
// So every idleReleaseEvery, a process that ran no collection since the
// last look (nothing allocates much: it is idle) and holds more than
// idleReleaseMin (or a quarter of its live heap, if larger) of heap that
// is not live returns it with debug.FreeOSMemory: one collection, then every free
// page. Under load the collector runs between two looks and nothing is
// forced.
const (
	idleReleaseEvery = 5 * time.Second
	idleReleaseMin   = 16 << 20
)

// releaseIdleMemory runs idleRelease every idleReleaseEvery until ctx ends.
func releaseIdleMemory(ctx context.Context, log *slog.Logger) {
	r := newIdleRelease()
	go func() {
		t := time.NewTicker(idleReleaseEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if freed, ok := r.check(); ok {
					log.Debug("returned an idle burst's memory to the OS", "bytes", freed)
				}
			}
		}
	}()
}

// idleRelease is the state of releaseIdleMemory: the collections counted
// at the last look. One goroutine uses it.
type idleRelease struct {
	samples []metrics.Sample
	cycles  uint64
}

// The runtime metrics idleRelease reads.
var idleMetrics = []string{
	"/gc/cycles/total:gc-cycles",
	"/gc/heap/live:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/stacks:bytes",
}

func newIdleRelease() *idleRelease {
	r := &idleRelease{samples: make([]metrics.Sample, len(idleMetrics))}
	for i, name := range idleMetrics {
		r.samples[i].Name = name
	}
	r.cycles = r.read()[0]
	return r
}

func (r *idleRelease) read() []uint64 {
	metrics.Read(r.samples)
	out := make([]uint64, len(r.samples))
	for i, s := range r.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			out[i] = s.Value.Uint64()
		}
	}
	return out
}

// check releases the heap that is not live if the process looks idle and
// holds enough of it; it returns how much that was.
func (r *idleRelease) check() (uint64, bool) {
	v := r.read()
	cycles, live := v[0], v[1]
	held := v[2] + v[3] + v[4] + v[5]
	idle := cycles == r.cycles
	r.cycles = cycles
	if !shouldRelease(idle, held, live) {
		return 0, false
	}
	debug.FreeOSMemory()
	r.cycles = r.read()[0] // its own collection does not count as activity
	return held - live, true
}

// shouldRelease is the rule of check: idle, with more than idleReleaseMin
// and more than a quarter of the live heap held beyond the live heap.
func shouldRelease(idle bool, held, live uint64) bool {
	return idle && held > live && held-live > max(idleReleaseMin, live/4)
}
