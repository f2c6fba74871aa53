package cluster

import (
	"context"
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
	n, err := Open(ctxT(t), Options{URL: url, NodeID: id, Advertise: "http://127.0.0.1:1", Partitions: partitions,
		LeaseTTL: 2 * time.Second, Replicas: 1, DataDir: t.TempDir(), Sink: sink, Logger: quiet, SegmentDuration: 10 * time.Second})
	if err == nil {
		t.Cleanup(func() { n.Close() })
	}
	return n, err
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

	var reqs []engine.Request
	for i := range 20 {
		reqs = append(reqs, engine.Request{Topic: "orders", Body: []byte{byte(i)}, Delay: 300 * time.Millisecond})
	}
	reqs = append(reqs, engine.Request{Topic: "orders", Body: []byte("keyed"), Delay: 300 * time.Millisecond, IdempotencyKey: "k1"},
		engine.Request{Topic: "orders", Body: []byte("cancel me"), Delay: time.Hour})
	ids, err := n.ScheduleBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, id := range ids {
		p, _ := SplitID(id)
		seen[p] = true
	}
	if len(seen) != 4 {
		t.Fatalf("22 messages went to partitions %v; want all 4", seen)
	}
	// The retry of the keyed message answers the first ID.
	again, err := n.ScheduleBatch(ctx, []engine.Request{{Topic: "orders", Body: []byte("keyed"), Delay: time.Minute, IdempotencyKey: "k1"}})
	if err != nil || again[0] != ids[20] {
		t.Fatalf("retry with key k1: %v, %v; want the first ID %v", again, err, ids[20])
	}
	far := ids[21]
	if res, err := n.Cancel(ctx, far, false); err != nil || res != engine.Cancelled {
		t.Fatalf("cancel %v: %v, %v; want cancelled", far, res, err)
	}
	if res, _ := n.Cancel(ctx, far, false); res != engine.AlreadyDone {
		t.Fatalf("second cancel: %v, want already done", res)
	}
	p, seq := SplitID(far)
	if res, _ := n.Cancel(ctx, MakeID(p, seq+1000, far.DeliverAt), false); res != engine.Unknown {
		t.Fatalf("cancel of a sequence never issued: %v, want unknown", res)
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
