package main

import (
	"context"
	"log/slog"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// serve's --memory-limit (512MiB by default) is the Go runtime's soft
// memory limit while the live heap is small. With the GC percent at 400
// alone, the heap may grow to five times what is live, and freed pages go
// back to the OS slowly: scheduling 2,000,000 keyed messages over 30 days
// left the server at 2,182 MiB of anonymous memory, 616-690 MiB with the
// limit (docs/DESIGN.md "Memory"). Not lower: at 256MiB the limit bound
// during a hot second of 200,000 deliveries (the process peaks near 300
// MB) and made it about a tenth slower.

// memoryLimitEvery is how often the limit follows the live heap.
const memoryLimitEvery = 5 * time.Second

// memoryLimit is the soft memory limit for a live heap of live bytes: base,
// or twice the live heap once that is more than half of base. A limit
// below what the program needs would make the collector run without pause
// (the runtime then spends up to half the CPU on it); twice the live heap
// is GC percent 100 at worst, the Go default.
func memoryLimit(base, live uint64) int64 {
	l := max(base, 2*live)
	if l > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(l)
}

// followMemoryLimit sets the runtime's soft memory limit to
// memoryLimit(base, live heap) now and every memoryLimitEvery until ctx
// ends, logging when it rises above base. base 0 leaves the runtime's limit
// alone.
func followMemoryLimit(ctx context.Context, base uint64, log *slog.Logger) {
	if base == 0 {
		return
	}
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	set := int64(-1)
	apply := func() {
		metrics.Read(sample)
		var live uint64
		if sample[0].Value.Kind() == metrics.KindUint64 {
			live = sample[0].Value.Uint64()
		}
		l := memoryLimit(base, live)
		// Move it only by a tenth or more, or back to base.
		if set >= 0 && l != int64(base) && math.Abs(float64(l-set)) < float64(set)/10 {
			return
		}
		if l != set {
			debug.SetMemoryLimit(l)
			if l > int64(base) && set == int64(base) {
				log.Info("memory limit follows the live heap, above --memory-limit", "live_bytes", live, "limit_bytes", l, "memory_limit", int64(base))
			}
			set = l
		}
	}
	apply()
	go func() {
		t := time.NewTicker(memoryLimitEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				apply()
			}
		}
	}()
}
