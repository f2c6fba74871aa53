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

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/client"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
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
	t.Run("worker_results", func(t *testing.T) { t.Parallel(); testClientWorker(t, p) })
}

// testClientWorker runs a Worker of two topics with middleware against
// the binary: a Retry comes back no sooner than asked, a plain error
// comes back as the next attempt, a panic under Recover is nacked too, and
// every message ends acked.
func testClientWorker(t *testing.T, p *proc) {
	c := newClient(t, p)
	ctx := ctxT(t)
	var mu sync.Mutex
	seen := map[string][]client.Delivery{}
	var outcomes []client.Outcome
	all, total := make(chan struct{}), 0 // closed at the sixth delivery
	w := client.NewWorker(c, client.WorkerOptions{Concurrency: 2, OnError: func(err error) { t.Errorf("OnError: %v", err) }})
	w.Use(client.Recover(), client.Hooks{End: func(_ context.Context, _ client.Delivery, err error, _ time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		outcomes = append(outcomes, client.OutcomeOf(err))
	}}.Middleware())
	handler := func(_ context.Context, d client.Delivery) error {
		mu.Lock()
		seen[string(d.Body)] = append(seen[string(d.Body)], d)
		if total++; total == 6 {
			close(all)
		}
		mu.Unlock()
		switch {
		case d.Attempt > 0:
			return nil
		case string(d.Body) == "retry":
			return client.Retry(300 * time.Millisecond)
		case string(d.Body) == "panic":
			panic("handler bug")
		}
		return errors.New("fail once")
	}
	w.HandleFunc("c-worker-a", handler)
	w.HandleFunc("c-worker-b", handler)
	for topic, body := range map[string]string{"c-worker-a": "retry", "c-worker-b": "fail"} {
		if _, err := c.Schedule(ctx, client.Message{Topic: topic, Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Schedule(ctx, client.Message{Topic: "c-worker-b", Body: []byte("panic")}); err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	select {
	case <-all:
	case <-ctx.Done():
		t.Fatal("not every message came twice before the deadline")
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if r := seen["retry"]; r[1].Attempt != 1 || r[1].DeliverAt.Sub(r[0].ReceivedAt) < 300*time.Millisecond {
		t.Errorf("retry came back as attempt %d due %v after the first; want attempt 1, 300ms or more", r[1].Attempt, r[1].DeliverAt.Sub(r[0].ReceivedAt))
	}
	for _, b := range []string{"fail", "panic"} {
		if r := seen[b]; r[1].Attempt != 1 || r[1].OriginID != r[0].ID {
			t.Errorf("%s came back as attempt %d of %s; want attempt 1 of %s", b, r[1].Attempt, r[1].OriginID, r[0].ID)
		}
	}
	count := map[client.Outcome]int{}
	for _, o := range outcomes {
		count[o]++
	}
	// The hooks run inside Recover: a panic passes them by.
	if count[client.OutcomeAck] != 3 || count[client.OutcomeRetry] != 1 || count[client.OutcomeNack] != 1 || len(outcomes) != 5 {
		t.Errorf("outcomes %v; want 3 acks, 1 retry, 1 nack", count)
	}
	for _, topic := range []string{"c-worker-a", "c-worker-b"} {
		if ds, err := c.Receive(ctx, topic, client.ReceiveOptions{Wait: 300 * time.Millisecond}); err != nil || len(ds) != 0 {
			t.Errorf("%s after the worker: %d messages, %v; want none (all acked)", topic, len(ds), err)
		}
	}
}

func testClientAckBatch(t *testing.T, p *proc) {
	c := newClient(t, p)
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

func newClient(t testing.TB, p *proc, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(p.url, append([]client.Option{client.WithToken("sesame")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testClientRoundTrip(t *testing.T, p *proc) {
	c := newClient(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sent := map[client.ID]string{}
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
	got := map[client.ID]client.Delivery{}
	cctx, stop := context.WithCancel(ctx)
	err := c.Consume(cctx, "c-round", func(_ context.Context, d client.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		got[d.ID] = d
		if len(got) == len(sent) {
			stop()
		}
		return nil
	}, client.ConsumeOptions{Concurrency: 2})
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
	c := newClient(t, p, cc.option())
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
	ids := map[client.ID]bool{}
	for i, r := range append(results, good) {
		select {
		case <-r.Done():
		default:
			t.Fatalf("result %d not done after Flush", i)
		}
		id, err := r.Wait(ctx)
		if err != nil || id.IsZero() || ids[id] {
			t.Fatalf("message %d: id %q err %v (distinct IDs expected)", i, id, err)
		}
		ids[id] = true
	}
	if _, err := bad.Wait(ctx); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "topic") {
		t.Errorf("bad topic: %v, want InvalidArgument naming the topic", err)
	}
	cc.mu.Lock()
	batches, streams := cc.n["batch"], cc.n[hourglassv1.HourglassService_ScheduleStream_FullMethodName]
	cc.mu.Unlock()
	t.Logf("%d messages in %d batch requests on %d ScheduleStreams", n+2, batches, streams)
	if batches < n/100 || batches >= n/2 || streams != 1 {
		t.Errorf("%d batch requests on %d streams for %d messages with MaxBatch 100; want between %d and %d on 1 stream", batches, streams, n+2, n/100, n/2)
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
	c := newClient(t, p)
	ctx := ctxT(t)
	id, err := c.Schedule(ctx, client.Message{Topic: "c-cancel", Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.Cancel(ctx, id); err != nil || r != client.Cancelled {
		t.Errorf("Cancel(pending) = %q, %v; want cancelled", r, err)
	}
	if r, err := c.Cancel(ctx, id); err != nil || r != client.AlreadyCancelled {
		t.Errorf("Cancel(cancelled) = %q, %v; want already-cancelled", r, err)
	}
	never, err := client.ParseID(fmt.Sprintf("%016x%016x", time.Now().Add(24*time.Hour).UnixMilli(), uint64(1)<<62))
	if err != nil {
		t.Fatal(err)
	}
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
	c := newClient(t, p)
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
	}, client.ConsumeOptions{RetryDelay: func(f int) time.Duration {
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
	anon, err := client.New(p.url)
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	_, err = anon.Schedule(ctx, client.Message{Topic: "c-err"})
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "client: Schedule") {
		t.Errorf("without token: %v, want Unauthenticated", err)
	}
	_, err = newClient(t, p).Schedule(ctx, client.Message{Topic: "c-err", Level: 99})
	if st, ok := status.FromError(errors.Unwrap(err)); !ok || st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "delay_level 99") {
		t.Errorf("level 99: %v, want a status error with InvalidArgument naming delay_level", err)
	}
	_, err = newClient(t, p).Schedule(ctx, client.Message{Topic: "c-err", Level: 1, Delay: time.Second})
	if !errors.Is(err, client.ErrInvalidMessage) {
		t.Errorf("two times: %v, want ErrInvalidMessage", err)
	}
	err = newClient(t, p).Consume(ctx, "bad topic", func(context.Context, client.Delivery) error { return nil }, client.ConsumeOptions{})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("Consume(bad topic): %v, want InvalidArgument", err)
	}
}

// countCalls counts calls by method as they leave the client, and the
// requests sent on streams by kind ("batch", "message", "settle", "credit").
type countCalls struct {
	mu sync.Mutex
	n  map[string]int
}

func (cc *countCalls) add(k string) {
	cc.mu.Lock()
	cc.n[k]++
	cc.mu.Unlock()
}

func (cc *countCalls) option() client.Option {
	return client.WithDialOptions(
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, conn *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			cc.add(method)
			return invoker(ctx, method, req, reply, conn, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, conn *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cc.add(method)
			s, err := streamer(ctx, desc, conn, method, opts...)
			return &countStream{ClientStream: s, cc: cc}, err
		}))
}

type countStream struct {
	grpc.ClientStream
	cc *countCalls
}

func (s *countStream) SendMsg(m any) error {
	switch r := m.(type) {
	case *hourglassv1.ScheduleStreamRequest:
		if r.GetBatch() != nil {
			s.cc.add("batch")
		} else {
			s.cc.add("message")
		}
	case *hourglassv1.ConsumeRequest:
		switch {
		case r.GetSettle() != nil:
			s.cc.add("settle")
		case r.GetCredit() != nil:
			s.cc.add("credit")
		}
	}
	return s.ClientStream.SendMsg(m)
}

// testClientConsumeBatchesAcks: Consume acks what its handlers finished
// together, in settle requests of many acks on its stream, and every
// message ends acked.
func testClientConsumeBatchesAcks(t *testing.T, p *proc) {
	cc := &countCalls{n: map[string]int{}}
	c := newClient(t, p, cc.option())
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
	}, client.ConsumeOptions{Concurrency: 8, Prefetch: 100,
		OnError: func(err error) { t.Errorf("consume: %v", err) }})
	if err != nil || got.Load() != n {
		t.Fatalf("Consume: %v after %d of %d", err, got.Load(), n)
	}
	cc.mu.Lock()
	settles, unary := cc.n["settle"], cc.n[hourglassv1.HourglassService_Ack_FullMethodName]+cc.n[hourglassv1.HourglassService_AckBatch_FullMethodName]
	cc.mu.Unlock()
	if settles == 0 || settles >= n/2 || unary != 0 {
		t.Errorf("%d settle requests and %d unary acks for %d messages: acks were not batched on the stream", settles, unary, n)
	}
	if ds, err := c.Receive(ctx, "c-consume-acks", client.ReceiveOptions{MaxMessages: 10, Wait: 300 * time.Millisecond}); err != nil || len(ds) != 0 {
		t.Errorf("after Consume: %d messages back, %v; want none (all acked)", len(ds), err)
	}
}
