package enginebench

import (
	"context"
	"encoding/binary"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglassmq/hourglass/engine"
)

// Bits of tracker.state.
const (
	scheduledBit = 0x80 // the message's ScheduleBatch was called (and had not failed)
	countMask    = 0x7f // deliveries of the message, saturating at 127
)

// tracker is the benchmark's sink: it only counts. The engine calls
// Deliver from one goroutine per topic, so several may run at once; all it
// updates is guarded by mu or atomic. It allocates nothing per message.
type tracker struct {
	mu         sync.Mutex
	state      []uint8   // per message index: scheduledBit | deliveries; guarded by mu
	lat        []float64 // lateness in ms of every delivery, if keepLat; guarded by mu
	keepLat    bool
	early      int64 // deliveries before their deliverAt; guarded by mu
	foreign    int64 // deliveries whose body names no message of this run; guarded by mu
	deliveries int64 // all deliveries, duplicates included; guarded by mu
	first      int64 // UnixNano of the first delivery; guarded by mu
	last       int64 // UnixNano of the last delivery; guarded by mu

	markerSeen bool          // guarded by mu
	marker     chan struct{} // closed when the routing marker is delivered

	distinct atomic.Int64  // messages delivered at least once
	busyNs   atomic.Int64  // time spent in Deliver, to show the sink is not the bottleneck
	notify   chan struct{} // signalled, without blocking, after each batch
}

// markerIndex is the index in the body of the routing marker: a message
// scheduled after all others and due at once, whose delivery proves that
// everything scheduled before it is routed (reput routes in commitlog
// order). It is not one of the run's messages and is not counted.
const markerIndex = ^uint64(0)

// newTracker tracks n messages; keepLat keeps every lateness for the
// percentiles (8 bytes per delivery, allocated up front).
func newTracker(n int, keepLat bool) *tracker {
	t := &tracker{state: make([]uint8, n), keepLat: keepLat, notify: make(chan struct{}, 1), marker: make(chan struct{})}
	if keepLat {
		t.lat = make([]float64, 0, n)
	}
	return t
}

// Deliver implements engine.Sink.
func (t *tracker) Deliver(_ context.Context, _ string, batch []engine.Delivery) error {
	now := time.Now().UnixNano()
	var fresh int64
	t.mu.Lock()
	counted := t.deliveries
	for i := range batch {
		d := &batch[i]
		idx := markerIndex - 1 // foreign unless the body says otherwise
		if d.Message != nil && len(d.Message.Body) >= idxBodySize {
			idx = binary.LittleEndian.Uint64(d.Message.Body)
		}
		if idx == markerIndex {
			if !t.markerSeen {
				t.markerSeen = true
				close(t.marker)
			}
			continue
		}
		lateMs := float64(now-d.ID.DeliverAt*int64(time.Millisecond)) / float64(time.Millisecond)
		if lateMs < 0 {
			t.early++
		}
		if t.keepLat {
			t.lat = append(t.lat, lateMs)
		}
		t.deliveries++
		if idx >= uint64(len(t.state)) {
			t.foreign++
			continue
		}
		s := t.state[idx]
		if s&countMask == 0 {
			fresh++
		}
		if s&countMask < countMask {
			t.state[idx] = s + 1
		}
	}
	if t.deliveries > counted {
		if t.first == 0 {
			t.first = now
		}
		t.last = now
	}
	t.mu.Unlock()
	t.distinct.Add(fresh)
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
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := lo; i < hi; i++ {
		if on {
			t.state[i] |= scheduledBit
		} else {
			t.state[i] &^= scheduledBit
		}
	}
}

// tally is what the tracker saw.
type tally struct {
	scheduled   int64 // messages scheduled
	distinct    int64 // messages delivered at least once
	duplicates  int64 // messages delivered more than once
	lost        int64 // messages scheduled and never delivered
	unscheduled int64 // messages delivered that were never scheduled (cannot happen)
	foreign     int64 // deliveries naming no message of the run (cannot happen)
	deliveries  int64 // every delivery, duplicates included
	early       int64 // deliveries before their deliverAt
	first, last time.Time
}

// tally counts what the tracker saw so far.
func (t *tracker) tally() tally {
	t.mu.Lock()
	defer t.mu.Unlock()
	var r tally
	for _, s := range t.state {
		n := s & countMask
		switch {
		case s&scheduledBit != 0 && n == 0:
			r.lost++
		case s&scheduledBit == 0 && n > 0:
			r.unscheduled++
		}
		if s&scheduledBit != 0 {
			r.scheduled++
		}
		if n > 0 {
			r.distinct++
		}
		if n > 1 {
			r.duplicates++
		}
	}
	r.foreign, r.deliveries, r.early = t.foreign, t.deliveries, t.early
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
