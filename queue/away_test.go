package queue

import (
	"context"
	"encoding/binary"
	"runtime"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestConsumerAway delivers 200,000 messages with no consumer, checks that
// the heap did not grow with them (the backlog is on disk), then receives
// them all in order and acks them, and checks the heap again.
func TestConsumerAway(t *testing.T) {
	const n, batchSize, bodySize = 200_000, 1000, 256
	const limit = 100 // bytes of heap per message in the backlog
	if testing.Short() {
		t.Skip("writes 60 MB; skipped with -short")
	}
	q := openQ(t, t.TempDir(), func(o *Options) {
		o.SegmentSize = DefaultSegmentSize
		o.AckSegmentSize = DefaultAckSegmentSize
		o.Fsync = commitlog.SyncNone // the test is about memory, not fsyncs
	})
	defer q.Close()
	ctx := context.Background()
	deliver(t, q, "away", "first") // the topic's fixed costs are not the backlog's
	recvAck(t, q, "away", 1)
	before := heapInUse()

	batch := make([]engine.Delivery, batchSize)
	msgs := make([]message.Message, batchSize)
	bodies := make([]byte, batchSize*bodySize)
	for i := 0; i < n; i += batchSize {
		for j := range batchSize {
			body := bodies[j*bodySize : (j+1)*bodySize]
			binary.BigEndian.PutUint64(body, uint64(i+j))
			msgs[j] = message.Message{DeliverAt: int64(i + j), Topic: []byte("away"), Body: body}
			batch[j] = engine.Delivery{ID: message.ID{DeliverAt: int64(i + j), Seq: uint64(i + j)}, Message: &msgs[j]}
		}
		if err := q.Deliver(ctx, "away", batch); err != nil {
			t.Fatal(err)
		}
	}
	after := heapInUse()
	growth := int64(after) - int64(before)
	t.Logf("heap %d -> %d bytes after delivering %d messages: %.1f bytes/message", before, after, n, float64(growth)/n)
	if growth > limit*n {
		t.Fatalf("heap grew %d bytes for a backlog of %d messages: more than %d bytes each", growth, n, limit)
	}
	if st := q.Stats()["away"]; st.Backlog != n {
		t.Fatalf("backlog %d, want %d", st.Backlog, n)
	}

	next := uint64(0)
	for next < n {
		ms, err := q.Receive(ctx, "away", 1000, 0, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 {
			t.Fatalf("nothing to receive after %d of %d", next, n)
		}
		for _, m := range ms {
			if got := binary.BigEndian.Uint64(m.Body); got != next || len(m.Body) != bodySize {
				t.Fatalf("received message %d (%d bytes), want %d", got, len(m.Body), next)
			}
			next++
			if err := q.Ack(ctx, "away", m.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	end := heapInUse()
	t.Logf("heap %d bytes after receiving and acking them all", end)
	if growth := int64(end) - int64(before); growth > limit*n/10 {
		t.Fatalf("heap grew %d bytes after everything was acked", growth)
	}
	if st := q.Stats()["away"]; st.Backlog != 0 || st.Leased != 0 || st.Acked != n+1 {
		t.Fatalf("stats: %+v", st)
	}
}

func recvAck(t testing.TB, q *Queue, topic string, n int) {
	t.Helper()
	for _, m := range recv(t, q, topic, n, time.Hour) {
		if err := q.Ack(context.Background(), topic, m.ID); err != nil {
			t.Fatal(err)
		}
	}
}
