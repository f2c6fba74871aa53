package cluster

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// stallProbe counts what the stall hooks saw.
type stallProbe struct {
	mu      sync.Mutex
	pauses  int // idle pauses, checked or not
	checks  int // stall checks made
	stalled int // checks that found the reader stalled
}

func (s *stallProbe) hooks(stallOnce bool) *testHooks {
	var fired atomic.Bool
	h := &testHooks{
		feedIdle: 50 * time.Millisecond,
		idle: func(int) {
			s.mu.Lock()
			s.pauses++
			s.mu.Unlock()
		},
		stallChecked: func(_ int, stalled bool) {
			s.mu.Lock()
			s.checks++
			if stalled {
				s.stalled++
			}
			s.mu.Unlock()
		},
	}
	if stallOnce {
		// The first reader to get a message goes silent; the readers made
		// after it work.
		h.stallFeed = func(int, uint64) bool { return fired.CompareAndSwap(false, true) }
	}
	return h
}

func (s *stallProbe) counts() (pauses, checks, stalled int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pauses, s.checks, s.stalled
}

func openStallNode(t *testing.T, url string, partitions int, perSecond float64, sink engine.Sink, h *testHooks) *Node {
	t.Helper()
	n, err := Open(ctxT(t), Options{IdempotencyWindow: 10 * time.Minute, URL: url, NodeID: "a", Advertise: "http://127.0.0.1:1", Partitions: partitions,
		LeaseTTL: 2 * time.Second, Replicas: 1, DataDir: t.TempDir(), Sink: sink, Logger: quiet,
		Engine: EngineOptions{SegmentDuration: 10 * time.Second}, StallChecksPerSecond: perSecond, hooks: h})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	waitFor(t, 10*time.Second, "the node never owned its partitions", func() bool { return len(n.Owned()) == partitions })
	return n
}

func scheduleNow(t *testing.T, n *Node, count int) []message.ID {
	t.Helper()
	reqs := make([]engine.Request, count)
	for i := range reqs {
		reqs[i] = engine.Request{Topic: "t", Body: fmt.Appendf(nil, "m%d", i), Delay: 10 * time.Millisecond}
	}
	ids, err := n.ScheduleBatch(ctxT(t), reqs)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestStalledReaderIsMadeAgain: an intake reader that goes silent
// without an error (as an ordered consumer did after a NATS node was
// killed) is found by the stall check and made again, so its messages
// are delivered, once each. With the checks off the same stall keeps
// them from being delivered, which shows the stall is real and the check
// is what ends it.
func TestStalledReaderIsMadeAgain(t *testing.T) {
	t.Run("checked", func(t *testing.T) {
		ns := startNATS(t)
		rec := newRecorder()
		var probe stallProbe
		n := openStallNode(t, ns.ClientURL(), 1, 0, rec, probe.hooks(true))
		ids := scheduleNow(t, n, 20)
		waitFor(t, 20*time.Second, "the messages behind the stalled reader were never delivered", func() bool { return rec.all(ids) })
		for _, id := range ids {
			if c := rec.count(id); c != 1 {
				t.Errorf("%v delivered %d times", id, c)
			}
		}
		if _, _, stalled := probe.counts(); stalled == 0 {
			t.Error("delivered without a stall check finding the reader stalled: the hook did not stall it")
		}
	})
	t.Run("unchecked", func(t *testing.T) {
		ns := startNATS(t)
		rec := newRecorder()
		var probe stallProbe
		n := openStallNode(t, ns.ClientURL(), 1, -1, rec, probe.hooks(true))
		ids := scheduleNow(t, n, 20)
		// 20 idle pauses of 50 ms, long after the messages were due.
		waitFor(t, 20*time.Second, "the reader never paused 20 times", func() bool { p, _, _ := probe.counts(); return p >= 20 })
		for _, id := range ids {
			if c := rec.count(id); c != 0 {
				t.Fatalf("%v delivered %d times with the reader stalled and no stall checks: the stall hook does not stall", id, c)
			}
		}
		if _, checks, _ := probe.counts(); checks != 0 {
			t.Errorf("%d stall checks with StallChecksPerSecond -1", checks)
		}
	})
}

// TestStallChecksBudget: idle readers of many partitions ask the stream
// no more often than the node's budget allows. At 0.001 checks a second
// (a burst of 1) a test this short gets exactly one check, however many
// idle pauses its 4 partitions make.
func TestStallChecksBudget(t *testing.T) {
	ns := startNATS(t)
	var probe stallProbe
	openStallNode(t, ns.ClientURL(), 4, 0.001, newRecorder(), probe.hooks(false))
	waitFor(t, 20*time.Second, "the readers never paused 40 times", func() bool { p, _, _ := probe.counts(); return p >= 40 })
	if _, checks, stalled := probe.counts(); checks != 1 || stalled != 0 {
		t.Errorf("%d stall checks (%d found a stall) in 40 idle pauses; want 1 (the burst) and none stalled", checks, stalled)
	}
}
