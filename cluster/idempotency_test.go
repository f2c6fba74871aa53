package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// openWindowNode opens a node of a 4-partition cluster with the given
// idempotency window.
func openWindowNode(t *testing.T, url, id string, window time.Duration) (*Node, error) {
	t.Helper()
	n, err := Open(ctxT(t), Options{URL: url, NodeID: id, Advertise: "http://127.0.0.1:1", Partitions: 4,
		LeaseTTL: 2 * time.Second, Replicas: 1, DataDir: t.TempDir(), Sink: newRecordSink(), Logger: quiet,
		Engine: EngineOptions{SegmentDuration: 10 * time.Second}, IdempotencyWindow: window})
	if err == nil {
		t.Cleanup(func() { n.Close() })
	}
	return n, err
}

// storedAt is when the intake stream stored the intake message of id.
func storedAt(t *testing.T, n *Node, id message.ID) time.Time {
	t.Helper()
	p, seq, _ := SplitID(id)
	raw, err := n.inStreams[p].GetMsg(ctxT(t), seq)
	if err != nil {
		t.Fatal(err)
	}
	return raw.Time
}

// TestIdempotencyWindow: with a 6 s window, a keyed Schedule retried on
// the same node, and on another node after the first one closed and the
// second took its partitions over, answers the first ID (after a
// Reschedule, the replacement's); a keyed batch retried answers its IDs;
// once the window, measured from when the first was stored, has passed,
// the key makes a new message. With keys off (a zero window, as in
// hourglass.Config) a retry is a new message; a window below 100 ms or a
// negative one is refused.
func TestIdempotencyWindow(t *testing.T) {
	const window = 6 * time.Second
	ns := startNATS(t)
	ctx := ctxT(t)
	a, err := openWindowNode(t, ns.ClientURL(), "a", window)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a never owned its 4 partitions", func() bool { return len(a.Owned()) == 4 })
	at := time.Now().Add(time.Hour)
	single := []engine.Request{{Topic: "t", IdempotencyKey: "k", At: at, Body: []byte("first")}}
	batch := []engine.Request{{Topic: "t", IdempotencyKey: "b1", At: at}, {Topic: "t", IdempotencyKey: "b2", At: at}}
	first, err := a.ScheduleBatch(ctx, single)
	if err != nil {
		t.Fatal(err)
	}
	firstBatch, err := a.ScheduleBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	stored := storedAt(t, a, first[0])
	retry := func(n *Node, reqs []engine.Request) []message.ID {
		t.Helper()
		ids, err := n.ScheduleBatch(ctx, reqs)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	if ids := retry(a, single); ids[0] != first[0] {
		t.Errorf("a retry on the same node = %v; want the first ID %v", ids[0], first[0])
	}
	res, nid, err := a.Reschedule(ctx, first[0], at.Add(time.Minute), false)
	if res != engine.Rescheduled || err != nil {
		t.Fatalf("Reschedule = %v, %v", res, err)
	}
	if ids := retry(a, single); ids[0] != nid {
		t.Errorf("a retry after the reschedule = %v; want the replacement %v", ids[0], nid)
	}

	// Another node takes over: the window holds there too.
	a.Close()
	b, err := openWindowNode(t, ns.ClientURL(), "b", window)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "b never owned the 4 partitions", func() bool { return len(b.Owned()) == 4 })
	if since := time.Since(stored); since > window-time.Second {
		t.Fatalf("the takeover took until %v after the first Schedule; the window is %v", since, window)
	}
	if ids := retry(b, single); ids[0] != nid {
		t.Errorf("a retry on the new owner = %v; want the replacement %v", ids[0], nid)
	}
	if ids := retry(b, batch); ids[0] != firstBatch[0] || ids[1] != firstBatch[1] {
		t.Errorf("a batch retried on the new owner = %v; want %v", ids, firstBatch)
	}

	// After the window: a new message, stored at least the window after
	// the first (JetStream's clock; retries did not extend it).
	var fresh message.ID
	waitFor(t, window+10*time.Second, "the key never made a new message", func() bool {
		ids := retry(b, single)
		if ids[0] != nid && ids[0] != first[0] {
			fresh = ids[0]
			return true
		}
		return false
	})
	if gap := storedAt(t, b, fresh).Sub(stored); gap < window {
		t.Errorf("a new message for the key %v after the first; want at least the window, %v", gap, window)
	}
	if ids := retry(b, single); ids[0] != fresh {
		t.Errorf("a retry of the new message = %v; want %v", ids[0], fresh)
	}

	t.Run("off", func(t *testing.T) {
		ns := startNATS(t)
		c, err := openWindowNode(t, ns.ClientURL(), "c", 0)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "c never owned its partitions", func() bool { return len(c.Owned()) == 4 })
		x, err1 := c.ScheduleBatch(ctx, single)
		y, err2 := c.ScheduleBatch(ctx, single)
		if err1 != nil || err2 != nil || x[0] == y[0] {
			t.Errorf("keys off: %v, %v, %v, %v; want two messages", x, y, err1, err2)
		}
		if _, err := openWindowNode(t, ns.ClientURL(), "d", 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "100ms") {
			t.Errorf("a 50 ms window: %v; want refused naming 100ms", err)
		}
		if _, err := openWindowNode(t, ns.ClientURL(), "e", -time.Second); err == nil || !strings.Contains(err.Error(), "0 (keys off)") {
			t.Errorf("a negative window: %v; want refused naming 0 (keys off)", err)
		}
	})
}
