package enginebench

import (
	"context"
	"encoding/binary"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglassmq/hourglass/deliverycheck"
	"github.com/hourglassmq/hourglass/engine"
)

// tracker is the benchmark's sink: it only counts. The engine calls
// Deliver from one goroutine per topic, so several may run at once; the
// counts are deliverycheck's (lost, duplicates, early: the definitions every
// benchmark and the crash harness share), the rest is guarded by mu or
// atomic. It allocates nothing per message.
type tracker struct {
	counts *deliverycheck.Counter

	mu      sync.Mutex
	lat     []float64 // lateness in ms of every delivery, if keepLat; guarded by mu
	keepLat bool
	first   int64 // UnixNano of the first delivery; guarded by mu
	last    int64 // UnixNano of the last delivery; guarded by mu

	markerSeen bool          // guarded by mu
	marker     chan struct{} // closed when the routing marker is delivered

	busyNs atomic.Int64  // time spent in Deliver, to show the sink is not the bottleneck
	notify chan struct{} // signalled, without blocking, after each batch
}

// markerIndex is the index in the body of the routing marker: a message
// scheduled after all others and due at once, whose delivery proves that
// everything scheduled before it is routed (reput routes in commitlog
// order). It is not one of the run's messages and is not counted.
const markerIndex = ^uint64(0)

// newTracker tracks n messages; keepLat keeps every lateness for the
// percentiles (8 bytes per delivery, allocated up front).
func newTracker(n int, keepLat bool) *tracker {
	t := &tracker{counts: deliverycheck.New(n, 0), keepLat: keepLat, notify: make(chan struct{}, 1), marker: make(chan struct{})}
	if keepLat {
		t.lat = make([]float64, 0, n)
	}
	return t
}

// Deliver implements engine.Sink.
func (t *tracker) Deliver(_ context.Context, _ string, batch []engine.Delivery) error {
	nowT := time.Now()
	now := nowT.UnixNano()
	var counted bool
	t.mu.Lock()
	for i := range batch {
		d := &batch[i]
		if d.Message == nil || len(d.Message.Body) < idxBodySize {
			t.counts.Unknown()
			counted = true
			continue
		}
		idx := binary.LittleEndian.Uint64(d.Message.Body)
		if idx == markerIndex {
			if !t.markerSeen {
				t.markerSeen = true
				close(t.marker)
			}
			continue
		}
		due := time.UnixMilli(d.ID.DeliverAt)
		t.counts.Delivered(idx, due, nowT)
		counted = true
		if t.keepLat {
			t.lat = append(t.lat, float64(nowT.Sub(due))/float64(time.Millisecond))
		}
	}
	if counted {
		if t.first == 0 {
			t.first = now
		}
		t.last = now
	}
	t.mu.Unlock()
	t.busyNs.Add(time.Now().UnixNano() - now)
	select {
	case t.notify <- struct{}{}:
	default:
	}
	return nil
}

// markScheduled marks messages [lo, hi) as scheduled, or, if on is false,
// as not scheduled (their ScheduleBatch failed, so none of them can have
// been delivered).
func (t *tracker) markScheduled(lo, hi int, on bool) {
	if on {
		t.counts.Acked(lo, hi)
	} else {
		t.counts.Unacked(lo, hi)
	}
}

// tally is what the tracker saw: deliverycheck's counts and the times of
// the first and last delivery.
type tally struct {
	deliverycheck.Tally
	first, last time.Time
}

// tally counts what the tracker saw so far.
func (t *tracker) tally() tally {
	r := tally{Tally: t.counts.Tally()}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.first != 0 {
		r.first, r.last = time.Unix(0, t.first), time.Unix(0, t.last)
	}
	return r
}

// latencies returns the lateness of every delivery so far, sorted.
// It sorts the tracker's own slice in place (no copy of up to 80 MB):
// call it once the engine is closed.
func (t *tracker) latencies() []float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	slices.Sort(t.lat)
	return t.lat
}

// percentile returns the p-th quantile (0 < p <= 1) of sorted xs by the
// nearest-rank method, or 0 for no data.
func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
