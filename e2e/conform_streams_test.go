package e2e

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/hourglassmq/hourglass/client"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// The streaming RPCs of the conformance suite (conform_test.go), through
// the Go client over gRPC: ScheduleStream (a Producer), Consume, and
// AckBatch; ReceiveStream through connect.

// cfClient is the Go client of tg's next node (no token: the targets run
// without one).
func cfClient(t *testing.T, tg *conformTarget) *client.Client {
	t.Helper()
	i := tg.next.Add(1)
	c, err := client.New(tg.nodes[int(i)%len(tg.nodes)].url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// caseStreams: messages sent on a ScheduleStream come to a Consume stream
// in order, each acked by returning nil; then more through a
// ReceiveStream, acked with one AckBatch.
func caseStreams(t *testing.T, tg *conformTarget, topic string) {
	ctx := ctxT(t)
	pr := client.NewProducer(cfClient(t, tg), client.ProducerOptions{})
	var results []*client.Result
	for i := range 5 {
		results = append(results, pr.Send(ctx, client.Message{Topic: topic, Body: []byte(itoa(i)), Delay: time.Duration(i) * 100 * time.Millisecond}))
	}
	var want []string
	for _, r := range results {
		id, err := r.Wait(ctx)
		if err != nil {
			t.Fatalf("ScheduleStream: %v", err)
		}
		want = append(want, id.String())
	}
	if err := pr.Close(); err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		got []string
	)
	cctx, stop := context.WithCancel(ctx)
	err := cfClient(t, tg).Consume(cctx, topic, func(_ context.Context, d client.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		if got = append(got, d.ID.String()); len(got) == len(want) {
			stop()
		}
		return nil
	}, client.ConsumeOptions{})
	if cctx.Err() == nil {
		t.Fatalf("Consume ended before every message came: %v", err)
	}
	mu.Lock()
	if !slices.Equal(got, want) {
		t.Errorf("consumed %v; want the stream's IDs in order %v", got, want)
	}
	mu.Unlock()

	for i := range 3 {
		cfAt(t, tg, topic, "r"+itoa(i), 0)
	}
	st, err := tg.c().ReceiveStream(ctx, connect.NewRequest(&hourglassv1.ReceiveStreamRequest{Topic: topic, MaxMessages: 3}))
	if err != nil {
		t.Fatal(err)
	}
	var receipts []string
	for len(receipts) < 3 && st.Receive() {
		for _, m := range st.Msg().Messages {
			receipts = append(receipts, m.Receipt)
		}
	}
	st.Close()
	if len(receipts) != 3 {
		t.Fatalf("ReceiveStream: %d of 3 messages, %v", len(receipts), st.Err())
	}
	ab, err := tg.c().AckBatch(ctx, connect.NewRequest(&hourglassv1.AckBatchRequest{Topic: topic, Receipts: receipts}))
	if err != nil || len(ab.Msg.Results) != 3 {
		t.Fatalf("AckBatch = %v, %v", ab, err)
	}
	for i, r := range ab.Msg.Results {
		if !r.Acked {
			t.Errorf("AckBatch result %d: %v", i, r)
		}
	}
	cfNone(t, tg.c(), topic, 300*time.Millisecond)
}
