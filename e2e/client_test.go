package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/hourglassmq/hourglass/client"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// TestClient runs package client against the real binary, one topic per
// case.
func TestClient(t *testing.T) {
	p := start(t, t.TempDir(), nil, "--auth-token", "sesame")
	t.Run("schedule_consume_round_trip", func(t *testing.T) { t.Parallel(); testClientRoundTrip(t, p) })
	t.Run("producer_batches", func(t *testing.T) { t.Parallel(); testClientProducer(t, p) })
	t.Run("cancel_answers", func(t *testing.T) { t.Parallel(); testClientCancel(t, p) })
	t.Run("consumer_nack_retry", func(t *testing.T) { t.Parallel(); testClientNack(t, p) })
	t.Run("errors_keep_codes", func(t *testing.T) { t.Parallel(); testClientErrors(t, p) })
	t.Run("ack_batch", func(t *testing.T) { t.Parallel(); testClientAckBatch(t, p) })
	t.Run("consume_acks_in_batches", func(t *testing.T) { t.Parallel(); testClientConsumeBatchesAcks(t, p) })
}

func testClientAckBatch(t *testing.T, p *proc) {
	c := newClient(p)
	ctx := ctxT(t)
	for i := range 5 {
		if _, err := c.Schedule(ctx, client.Message{Topic: "c-ackb", Body: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	var ds []client.Delivery
	for len(ds) < 5 {
		got, err := c.Receive(ctx, "c-ackb", client.ReceiveOptions{MaxMessages: 10, Wait: 5 * time.Second, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, got...)
	}
	res, err := c.AckBatch(ctx, append(ds[:4:4], ds[0]))
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range res {
		if (e == nil) != (i < 4) {
			t.Errorf("result %d: %v", i, e)
		}
	}
	// The one not acked comes back once its lease is given up.
	if err := c.Nack(ctx, ds[4], 0); err != nil {
		t.Fatal(err)
	}
	got, err := c.Receive(ctx, "c-ackb", client.ReceiveOptions{MaxMessages: 10, Wait: time.Second})
	if err != nil || len(got) != 1 || got[0].ID != ds[4].ID {
		t.Fatalf("after AckBatch of 4 and a nack: %d messages, %v; want only %s", len(got), err, ds[4].ID)
	}
}

func newClient(p *proc, opts ...client.Option) *client.Client {
	return client.New(p.url, append([]client.Option{client.WithToken("sesame")}, opts...)...)
}

func testClientRoundTrip(t *testing.T, p *proc) {
	c := newClient(p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sent := map[string]string{}
	for i, m := range []client.Message{
		{Topic: "c-round", Body: []byte("delay"), Delay: 300 * time.Millisecond, Headers: map[string]string{"k": "v"}},
		{Topic: "c-round", Body: []byte("at"), At: time.Now().Add(200 * time.Millisecond)},
		{Topic: "c-round", Body: []byte("level"), Level: 1},
		{Topic: "c-round", Body: []byte("now")},
	} {
		id, err := c.Schedule(ctx, m)
		if err != nil {
			t.Fatalf("Schedule #%d: %v", i, err)
		}
		sent[id] = string(m.Body)
	}
	var mu sync.Mutex
	got := map[string]client.Delivery{}
	cctx, stop := context.WithCancel(ctx)
	err := c.Consume(cctx, "c-round", func(_ context.Context, d client.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		got[d.ID] = d
		if len(got) == len(sent) {
			stop()
		}
		return nil
	}, client.ConsumeOptions{Concurrency: 2, Wait: 5 * time.Second})
	if err != nil {
		t.Fatalf("Consume: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("%d of %d messages consumed before the deadline", len(got), len(sent))
	}
	for id, body := range sent {
		d, ok := got[id]
		if !ok || string(d.Body) != body || d.Attempt != 0 || d.ReceivedAt.Before(d.DeliverAt) {
			t.Errorf("%s (%s): got %+v", id, body, d)
		}
		if body == "delay" && d.Headers["k"] != "v" {
			t.Errorf("headers %v, want k=v", d.Headers)
		}
	}
	// All acked: nothing comes back.
	if ds, err := c.Receive(ctx, "c-round", client.ReceiveOptions{MaxMessages: 10, Wait: 300 * time.Millisecond}); err != nil || len(ds) != 0 {
		t.Errorf("after Consume: %d messages, %v; want none", len(ds), err)
	}
}

func testClientProducer(t *testing.T, p *proc) {
	cc := &countCalls{n: map[string]int{}}
	c := newClient(p, client.WithConnectOptions(connect.WithInterceptors(cc)))
	ctx := ctxT(t)
	const n = 1000
	prod := client.NewProducer(c, client.ProducerOptions{MaxBatch: 100, MaxPending: 250})
	results := make([]*client.Result, n)
	for i := range results {
		results[i] = prod.Send(ctx, client.Message{Topic: "c-batch", Body: []byte(fmt.Sprint(i)), Delay: time.Hour})
	}
	// One bad message among good ones: it alone fails.
	bad := prod.Send(ctx, client.Message{Topic: "no spaces"})
	good := prod.Send(ctx, client.Message{Topic: "c-batch", Delay: time.Hour})
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for i, r := range append(results, good) {
		select {
		case <-r.Done():
		default:
			t.Fatalf("result %d not done after Flush", i)
		}
		id, err := r.Wait(ctx)
		if err != nil || len(id) != 32 || ids[id] {
			t.Fatalf("message %d: id %q err %v (distinct IDs expected)", i, id, err)
		}
		ids[id] = true
	}
	if _, err := bad.Wait(ctx); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "topic") {
		t.Errorf("bad topic: %v, want InvalidArgument naming the topic", err)
	}
	cc.mu.Lock()
	batches := int64(cc.n[hourglassv1connect.HourglassServiceScheduleBatchProcedure])
	cc.mu.Unlock()
	t.Logf("%d messages in %d ScheduleBatch calls", n+2, batches)
	if batches < n/100 || batches >= n/2 {
		t.Errorf("%d ScheduleBatch calls for %d messages with MaxBatch 100; want between %d and %d", batches, n+2, n/100, n/2)
	}
	if err := prod.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := prod.Send(ctx, client.Message{Topic: "c-batch"}).Wait(ctx); !errors.Is(err, client.ErrProducerClosed) {
		t.Errorf("Send after Close: %v, want ErrProducerClosed", err)
	}
	// Leave nothing pending for an hour.
	for id := range ids {
		if _, err := c.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}

func testClientCancel(t *testing.T, p *proc) {
	c := newClient(p)
	ctx := ctxT(t)
	id, err := c.Schedule(ctx, client.Message{Topic: "c-cancel", Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.Cancel(ctx, id); err != nil || r != client.Cancelled {
		t.Errorf("Cancel(pending) = %q, %v; want cancelled", r, err)
	}
	if r, err := c.Cancel(ctx, id); err != nil || r == client.Unknown {
		t.Errorf("Cancel(cancelled) = %q, %v; want cancelled or already-delivered", r, err)
	}
	never := fmt.Sprintf("%016x%016x", time.Now().Add(24*time.Hour).UnixMilli(), uint64(1)<<62)
	if r, err := c.Cancel(ctx, never); err != nil || r != client.Unknown {
		t.Errorf("Cancel(never issued) = %q, %v; want unknown", r, err)
	}
	id, err = c.Schedule(ctx, client.Message{Topic: "c-cancel"})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := c.Receive(ctx, "c-cancel", client.ReceiveOptions{Wait: 10 * time.Second})
	if err != nil || len(ds) != 1 || ds[0].ID != id {
		t.Fatalf("Receive: %v, %v; want %s", ds, err, id)
	}
	if r, err := c.Cancel(ctx, id); err != nil || r == client.Cancelled {
		t.Errorf("Cancel(delivered) = %q, %v; want already-delivered or unknown", r, err)
	}
	if err := c.Ack(ctx, ds[0]); err != nil {
		t.Error(err)
	}
}

func testClientNack(t *testing.T, p *proc) {
	c := newClient(p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id, err := c.Schedule(ctx, client.Message{Topic: "c-nack", Body: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	var seen []client.Delivery
	var failures []int
	cctx, stop := context.WithCancel(ctx)
	err = c.Consume(cctx, "c-nack", func(_ context.Context, d client.Delivery) error {
		seen = append(seen, d) // Concurrency 1: one call at a time
		if d.Attempt == 0 {
			return errors.New("fail the first attempt")
		}
		stop()
		return nil
	}, client.ConsumeOptions{Wait: 5 * time.Second, RetryDelay: func(f int) time.Duration {
		failures = append(failures, f)
		return 200 * time.Millisecond
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 {
		t.Fatalf("handler saw %d deliveries, want 2: %+v", len(seen), seen)
	}
	first, second := seen[0], seen[1]
	if first.ID != id || first.Attempt != 0 || second.Attempt != 1 || second.OriginID != id || string(second.Body) != "x" {
		t.Errorf("deliveries: first %s attempt %d; second %s attempt %d origin %s; want %s attempt 0 then attempt 1 of it",
			first.ID, first.Attempt, second.ID, second.Attempt, second.OriginID, id)
	}
	if d := second.DeliverAt.Sub(first.ReceivedAt); d < 200*time.Millisecond {
		t.Errorf("retry due %v after the first delivery; its RetryDelay was 200ms", d)
	}
	if len(failures) != 1 || failures[0] != 1 {
		t.Errorf("RetryDelay called with %v, want [1]", failures)
	}
	if ds, err := c.Receive(ctx, "c-nack", client.ReceiveOptions{Wait: 300 * time.Millisecond}); err != nil || len(ds) != 0 {
		t.Errorf("after the retry was acked: %d messages, %v", len(ds), err)
	}
}

func testClientErrors(t *testing.T, p *proc) {
	ctx := ctxT(t)
	_, err := client.New(p.url).Schedule(ctx, client.Message{Topic: "c-err"})
	if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "client: Schedule") {
		t.Errorf("without token: %v, want Unauthenticated", err)
	}
	var ce *connect.Error
	_, err = newClient(p).Schedule(ctx, client.Message{Topic: "c-err", Level: 99})
	if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument {
		t.Errorf("level 99: %v, want a *connect.Error with InvalidArgument", err)
	}
	_, err = newClient(p).Schedule(ctx, client.Message{Topic: "c-err", Level: 1, Delay: time.Second})
	if !errors.Is(err, client.ErrInvalidMessage) {
		t.Errorf("two times: %v, want ErrInvalidMessage", err)
	}
	err = newClient(p).Consume(ctx, "bad topic", func(context.Context, client.Delivery) error { return nil }, client.ConsumeOptions{})
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("Consume(bad topic): %v, want InvalidArgument", err)
	}
}

// countCalls counts unary calls by procedure as they leave the client.
type countCalls struct {
	mu sync.Mutex
	n  map[string]int
}

func (cc *countCalls) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		cc.mu.Lock()
		cc.n[req.Spec().Procedure]++
		cc.mu.Unlock()
		return next(ctx, req)
	}
}
func (cc *countCalls) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}
func (cc *countCalls) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// testClientConsumeBatchesAcks: Consume acks what its handlers finished
// together, in AckBatch calls, and every message ends acked.
func testClientConsumeBatchesAcks(t *testing.T, p *proc) {
	cc := &countCalls{n: map[string]int{}}
	c := newClient(p, client.WithConnectOptions(connect.WithInterceptors(cc)))
	ctx := ctxT(t)
	const n = 300
	prod := client.NewProducer(c, client.ProducerOptions{})
	for i := range n {
		prod.Send(ctx, client.Message{Topic: "c-consume-acks", Body: []byte(fmt.Sprint(i))})
	}
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	prod.Close()
	var got atomic.Int64
	cctx, stop := context.WithCancel(ctx)
	err := c.Consume(cctx, "c-consume-acks", func(context.Context, client.Delivery) error {
		if got.Add(1) == n {
			stop()
		}
		return nil
	}, client.ConsumeOptions{Concurrency: 8, MaxMessages: 100, Wait: 5 * time.Second,
		OnError: func(err error) { t.Errorf("consume: %v", err) }})
	if err != nil || got.Load() != n {
		t.Fatalf("Consume: %v after %d of %d", err, got.Load(), n)
	}
	cc.mu.Lock()
	acks, batches := cc.n[hourglassv1connect.HourglassServiceAckProcedure], cc.n[hourglassv1connect.HourglassServiceAckBatchProcedure]
	cc.mu.Unlock()
	if batches == 0 || acks+batches >= n {
		t.Errorf("%d Ack and %d AckBatch calls for %d messages: acks were not batched", acks, batches, n)
	}
	if ds, err := c.Receive(ctx, "c-consume-acks", client.ReceiveOptions{MaxMessages: 10, Wait: 300 * time.Millisecond}); err != nil || len(ds) != 0 {
		t.Errorf("after Consume: %d messages back, %v; want none (all acked)", len(ds), err)
	}
}
