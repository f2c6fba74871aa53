package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/sink/natsjs"
)

func openNode(t *testing.T, url, id string, partitions int, sink engine.Sink) (*Node, error) {
	t.Helper()
	n, err := Open(ctxT(t), Options{IdempotencyWindow: 10 * time.Minute, URL: url, NodeID: id, Advertise: "http://127.0.0.1:1", Partitions: partitions,
		LeaseTTL: 2 * time.Second, Replicas: 1, DataDir: t.TempDir(), Sink: sink, Logger: quiet, Engine: EngineOptions{SegmentDuration: 10 * time.Second}})
	if err == nil {
		t.Cleanup(func() { n.Close() })
	}
	return n, err
}

// intakeMsgs counts the messages in the intake streams.
func intakeMsgs(t *testing.T, js jetstream.JetStream, partitions int) uint64 {
	t.Helper()
	var total uint64
	for p := range partitions {
		st, err := js.Stream(ctxT(t), inStream(p))
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		total += info.State.Msgs
	}
	return total
}

func TestPartitionCountIsFixed(t *testing.T) {
	ns := startNATS(t)
	sink := engine.SinkFunc(func(context.Context, string, []engine.Delivery) error { return nil })
	a, err := openNode(t, ns.ClientURL(), "a", 4, sink)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openNode(t, ns.ClientURL(), "b", 8, sink); err == nil || !strings.Contains(err.Error(), "has 4 partitions") {
		t.Fatalf("node with --partitions 8 in a 4-partition cluster: err = %v, want one naming 4 partitions", err)
	}
	b, err := openNode(t, ns.ClientURL(), "c", 0, sink)
	if err != nil || b.Partitions() != 4 || a.Partitions() != 4 {
		t.Fatalf("node without a count: %v partitions, err %v; want the cluster's 4", b.Partitions(), err)
	}
}

// TestScheduleDeliverCancel: a one-node cluster on an in-process
// nats-server delivers what it was given, at its time, once; a cancelled
// message is not delivered; a retried key gets the first ID.
func TestScheduleDeliverCancel(t *testing.T) {
	ns := startNATS(t)
	ctx := ctxT(t)
	sink, err := natsjs.Open(ctx, natsjs.Options{URL: ns.ClientURL(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	n, err := openNode(t, ns.ClientURL(), "a", 4, sink)
	if err != nil {
		t.Fatal(err)
	}
	<-n.Ready()
	waitFor(t, 10*time.Second, "node never owned its 4 partitions", func() bool { return len(n.Owned()) == 4 })

	// 20 single unkeyed Schedules, concurrently: round robin over the
	// partitions, gathered into fewer intake messages.
	ids := make([]message.ID, 20)
	errs := make(chan error, 20)
	for i := range 20 {
		go func() {
			got, err := n.ScheduleBatch(ctx, []engine.Request{{Topic: "orders", Body: []byte{byte(i)}, Delay: 300 * time.Millisecond}})
			if err == nil {
				ids[i] = got[0]
			}
			errs <- err
		}()
	}
	for range 20 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// How many intake messages they took depends on how they met in the
	// group commit; consecutive intake messages go to the next partition.
	seen := map[int]bool{}
	msgs := map[[2]uint64]bool{}
	for _, id := range ids {
		p, seq, _ := SplitID(id)
		seen[p] = true
		msgs[[2]uint64{uint64(p), seq}] = true
	}
	if len(seen) != min(len(msgs), 4) {
		t.Fatalf("20 single Schedules in %d intake messages went to partitions %v; want %d partitions (round robin)", len(msgs), seen, min(len(msgs), 4))
	}
	// A batch is one intake message: one partition, one sequence, indexes
	// 0..n-1; with a key on every message its partition is the first key's.
	batch := []engine.Request{
		{Topic: "orders", Body: []byte("keyed"), Delay: 300 * time.Millisecond, IdempotencyKey: "k1"},
		{Topic: "orders", Body: []byte("cancel me"), Delay: time.Hour, IdempotencyKey: "k2"},
	}
	bids, err := n.ScheduleBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	p0, s0, i0 := SplitID(bids[0])
	p1, s1, i1 := SplitID(bids[1])
	if p0 != KeyPartition("orders", "k1", 4) || p1 != p0 || s1 != s0 || i0 != 0 || i1 != 1 {
		t.Fatalf("batch IDs split into (%d,%d,%d) and (%d,%d,%d); want partition %d, one sequence, indexes 0 and 1",
			p0, s0, i0, p1, s1, i1, KeyPartition("orders", "k1", 4))
	}
	ids = append(ids, bids...)
	// The same batch again (other delays) answers the first IDs and times.
	batch[0].Delay, batch[1].Delay = time.Minute, 2*time.Hour
	again, err := n.ScheduleBatch(ctx, batch)
	if err != nil || len(again) != 2 || again[0] != ids[20] || again[1] != ids[21] {
		t.Fatalf("retry of the keyed batch: %v, %v; want the first IDs %v", again, err, ids[20:])
	}
	// The same keys in another batch of another size are not that batch.
	if alone, err := n.ScheduleBatch(ctx, batch[:1]); err != nil || alone[0] == ids[20] {
		t.Fatalf("k1 alone after the batch: %v, %v; want a new ID, not the batch's %v", alone, err, ids[20])
	}
	far := ids[21]
	if res, err := n.Cancel(ctx, far, false); err != nil || res != engine.Cancelled {
		t.Fatalf("cancel %v: %v, %v; want cancelled", far, res, err)
	}
	if res, _ := n.Cancel(ctx, far, false); res != engine.AlreadyCancelled {
		t.Fatalf("second cancel: %v, want already cancelled", res)
	}
	p, seq, idx := SplitID(far)
	if res, _ := n.Cancel(ctx, MakeID(p, seq+1000, idx, far.DeliverAt), false); res != engine.Unknown {
		t.Fatalf("cancel of a sequence never issued: %v, want unknown", res)
	}
	if res, _ := n.Cancel(ctx, MakeID(p, seq, idx+1, far.DeliverAt), false); res != engine.Unknown {
		t.Fatalf("cancel of an index past its batch: %v, want unknown", res)
	}
	if res, _ := n.Cancel(ctx, message.ID{DeliverAt: far.DeliverAt + 1, Seq: far.Seq}, false); res != engine.Unknown {
		t.Fatalf("cancel with another deliverAt: %v, want unknown", res)
	}

	// The delivery stream gets the 21 due messages, once each, on time.
	js := jsConnect(t, ns.ClientURL())
	c, err := js.OrderedConsumer(ctx, natsjs.DefaultStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[message.ID]bool{}
	for _, id := range ids[:21] {
		want[id] = true
	}
	for len(want) > 0 {
		m, err := c.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("%d messages not delivered: %v", len(want), err)
		}
		id, err := message.ParseID(m.Headers().Get("Hourglass-Id"))
		if err != nil || !want[id] {
			t.Fatalf("delivered %q (%v): not expected, or twice", m.Headers().Get("Hourglass-Id"), err)
		}
		if m.Headers().Get(idHeader) != "" {
			t.Fatal("the local cluster-ID header leaked into the delivery")
		}
		md, _ := m.Metadata()
		if md.Timestamp.Before(id.Time()) {
			t.Fatalf("%v delivered %v early", id, id.Time().Sub(md.Timestamp))
		}
		delete(want, id)
	}
	// A batch that cannot be stored whole is not stored at all.
	before := intakeMsgs(t, js, 4)
	big := []engine.Request{{Topic: "t", Body: make([]byte, 600<<10)}, {Topic: "t", Body: make([]byte, 600<<10)}}
	if _, err := n.ScheduleBatch(ctx, big); !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "max_payload") {
		t.Fatalf("batch of 1.2 MB: %v; want ErrInvalid naming max_payload", err)
	}
	if _, err := n.ScheduleBatch(ctx, make([]engine.Request, MaxBatch+1)); !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "at most 1024") {
		t.Fatalf("batch of %d: %v; want ErrInvalid naming the limit", MaxBatch+1, err)
	}
	if after := intakeMsgs(t, js, 4); after != before {
		t.Fatalf("refused batches stored %d intake messages", after-before)
	}
	// Each delivery has its done record.
	st, err := js.Stream(ctx, doneStream(p))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil || info.State.Msgs == 0 {
		t.Fatalf("done stream of partition %d: %v messages, err %v", p, info.State.Msgs, err)
	}
}
