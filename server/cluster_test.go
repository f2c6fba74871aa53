package server

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
)

// fakeReceiver is a cluster node's Receiver a test fills: Receive hands
// out what put gave it, and settles are recorded. Its receipts are
// "r<n>"; any other is not leased.
type fakeReceiver struct {
	msgs chan queue.Message
	n    int // messages put; only put's caller uses it

	mu      sync.Mutex
	leases  []time.Duration     // guarded by mu: the lease of each Receive
	acked   []string            // guarded by mu
	nacked  []queue.NackOptions // guarded by mu
	settled map[string]bool     // guarded by mu
}

func newFakeReceiver() *fakeReceiver {
	return &fakeReceiver{msgs: make(chan queue.Message, 100), settled: map[string]bool{}}
}

// put makes n messages of topic receivable.
func (f *fakeReceiver) put(topic string, n int) {
	for range n {
		f.n++
		id := message.ID{DeliverAt: time.Now().UnixMilli(), Seq: uint64(f.n)}
		now := time.Now()
		f.msgs <- queue.Message{ID: id, Topic: topic, Body: []byte{byte(f.n)}, DeliverAt: id.DeliverAt,
			ReceivedAt: now, LeaseUntil: now.Add(30 * time.Second), Receipt: fmt.Sprintf("r%d", f.n)}
	}
}

func (f *fakeReceiver) Receive(ctx context.Context, topic string, n int, wait, lease time.Duration) ([]queue.Message, error) {
	f.mu.Lock()
	f.leases = append(f.leases, lease)
	f.mu.Unlock()
	var out []queue.Message
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case m := <-f.msgs:
		out = append(out, m)
	case <-timer.C:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	for len(out) < n {
		select {
		case m := <-f.msgs:
			out = append(out, m)
		default:
			return out, nil
		}
	}
	return out, nil
}

func (f *fakeReceiver) settle(receipt string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(receipt) < 2 || receipt[0] != 'r' || f.settled[receipt] {
		return fmt.Errorf("fake: %w", queue.ErrNotLeased)
	}
	f.settled[receipt] = true
	return nil
}

func (f *fakeReceiver) AckReceipt(_ context.Context, _, receipt string) error {
	if err := f.settle(receipt); err != nil {
		return err
	}
	f.mu.Lock()
	f.acked = append(f.acked, receipt)
	f.mu.Unlock()
	return nil
}

func (f *fakeReceiver) AckBatch(ctx context.Context, topic string, receipts []string) ([]error, error) {
	res := make([]error, len(receipts))
	for i, r := range receipts {
		res[i] = f.AckReceipt(ctx, topic, r)
	}
	return res, nil
}

func (f *fakeReceiver) NackReceipt(_ context.Context, _, receipt string, o queue.NackOptions) error {
	if err := f.settle(receipt); err != nil {
		return err
	}
	f.mu.Lock()
	f.nacked = append(f.nacked, o)
	f.mu.Unlock()
	return nil
}

// TestClusterReceive: in cluster mode Receive, Ack, AckBatch, Nack and
// the Consume stream of any topic go to the cluster node, with the
// request's lease and the Nack's options; an Ack or Nack by id is refused
// (a receipt is needed). The queue's management RPCs: TestClusterQueueManage.
func TestClusterReceive(t *testing.T) {
	fc := newFakeCluster(true, nil)
	s := serveTest(t, Options{Cluster: fc, ExternalSink: "nats"}, nil)
	c := s.grpcClient(t)
	ctx := testCtx(t)

	fc.put("orders", 3)
	res, err := c.Receive(ctx, &hourglassv1.ReceiveRequest{Topic: "orders", MaxMessages: 3, WaitMs: 1000, LeaseMs: 30_000})
	if err != nil || len(res.Messages) != 3 {
		t.Fatalf("Receive = %v, %v; want 3 messages", res, err)
	}
	if _, err := c.Ack(ctx, &hourglassv1.AckRequest{Topic: "orders", Receipt: res.Messages[0].Receipt}); err != nil {
		t.Errorf("Ack: %v", err)
	}
	_, err = c.Ack(ctx, &hourglassv1.AckRequest{Topic: "orders", Receipt: res.Messages[0].Receipt})
	wantStatus(t, "second Ack", err, codes.FailedPrecondition, "not leased")
	_, err = c.Ack(ctx, &hourglassv1.AckRequest{Topic: "orders", Id: res.Messages[1].Id})
	wantStatus(t, "Ack by id", err, codes.FailedPrecondition, "cluster mode", "receipt")
	_, err = c.Nack(ctx, &hourglassv1.NackRequest{Topic: "orders", Id: res.Messages[1].Id})
	wantStatus(t, "Nack by id", err, codes.FailedPrecondition, "cluster mode", "receipt")
	if _, err := c.Nack(ctx, &hourglassv1.NackRequest{Topic: "orders", Receipt: res.Messages[1].Receipt, DelayMs: 1500, Reason: "busy"}); err != nil {
		t.Errorf("Nack: %v", err)
	}
	ab, err := c.AckBatch(ctx, &hourglassv1.AckBatchRequest{Topic: "orders", Receipts: []string{res.Messages[2].Receipt, "bogus"}})
	if err != nil || len(ab.Results) != 2 || !ab.Results[0].Acked || ab.Results[1].Acked {
		t.Errorf("AckBatch = %v, %v; want acked, refused", ab, err)
	}

	// The Consume stream: pushes while it has credits, settles through the node.
	fc.put("jobs", 2)
	st := consumeOpen(t, ctx, c, &hourglassv1.ConsumeOpen{Topic: "jobs", Credits: 5})
	got := recvMessages(t, st, 2)
	if err := st.Send(&hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Settle{Settle: &hourglassv1.ConsumeSettle{
		Ref: 7, Acks: []*hourglassv1.SeqRange{{First: got[0].Seq, Count: 1}}, Nacks: []*hourglassv1.ConsumeNack{{Seq: got[1].Seq, DeadLetter: true, Reason: "poison"}},
	}}}); err != nil {
		t.Fatal(err)
	}
	set, err := st.Recv()
	if err != nil || set.GetSettled().GetRef() != 7 || len(set.GetSettled().Failed) != 0 {
		t.Fatalf("settled %v, %v", set, err)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}

	fc.mu.Lock()
	defer fc.mu.Unlock()
	if len(fc.acked) != 3 || len(fc.nacked) != 2 {
		t.Fatalf("the node saw acks %v and nacks %v; want 3 and 2", fc.acked, fc.nacked)
	}
	if o := fc.nacked[0]; o.Delay != 1500*time.Millisecond || o.Reason != "busy" {
		t.Errorf("Nack reached the node as %+v", o)
	}
	if o := fc.nacked[1]; !o.DeadLetter || o.Reason != "poison" {
		t.Errorf("the Consume nack reached the node as %+v", o)
	}
	if fc.leases[0] != 30*time.Second || fc.leases[len(fc.leases)-1] != 0 {
		t.Errorf("leases asked of the node: %v; want 30s first, 0 for the stream", fc.leases)
	}
}
