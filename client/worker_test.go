package client

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

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/queue"
	"github.com/hourglassmq/hourglass/server"
)

// runWorker runs w until the test ends or stop is called; stop cancels
// Run's ctx and returns what Run returned.
func runWorker(t *testing.T, w *Worker) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = recv(t, "Worker.Run to return", done)
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// deliveries collects what handlers were given, by topic.
type deliveries struct {
	mu sync.Mutex
	m  map[string][]Delivery
}

func (ds *deliveries) add(d Delivery) int {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if ds.m == nil {
		ds.m = map[string][]Delivery{}
	}
	ds.m[d.Topic] = append(ds.m[d.Topic], d)
	return len(ds.m[d.Topic])
}

func (ds *deliveries) of(topic string) []Delivery {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	return append([]Delivery(nil), ds.m[topic]...)
}

// TestWorkerSettlesByResult runs one worker over several topics of a real
// server whose queue dead-letters after 3 attempts, and checks what each
// kind of result does: nil acks; Retry(d) brings the message back as a
// new attempt no sooner than d; a plain error brings it back at once (the
// server's backoff is none by default); a message retried past its
// attempts reaches "<topic>.dlq", which the same worker consumes.
func TestWorkerSettlesByResult(t *testing.T) {
	rs := startServerQueue(t, server.Options{}, queue.Options{MaxAttempts: 3})
	c := newClient(t, rs.addr)
	ctx := context.Background()
	var got deliveries
	w := NewWorker(c, WorkerOptions{Concurrency: 2, OnError: func(err error) { t.Errorf("OnError: %v", err) }})
	w.HandleFunc("w-ok", func(_ context.Context, d Delivery) error { got.add(d); return nil })
	w.HandleFunc("w-retry", func(_ context.Context, d Delivery) error {
		if got.add(d) == 1 {
			return fmt.Errorf("busy: %w", Retry(300*time.Millisecond))
		}
		return nil
	})
	w.HandleFunc("w-fail", func(_ context.Context, d Delivery) error {
		if got.add(d) == 1 {
			return errors.New("boom")
		}
		return nil
	})
	w.HandleFunc("w-max", func(_ context.Context, d Delivery) error { got.add(d); return Retry(50 * time.Millisecond) })
	w.HandleFunc("w-max.dlq", func(_ context.Context, d Delivery) error { got.add(d); return nil })
	ids := map[string]ID{}
	for _, topic := range []string{"w-ok", "w-retry", "w-fail", "w-max"} {
		id, err := c.Schedule(ctx, Message{Topic: topic, Body: []byte(topic)})
		if err != nil {
			t.Fatal(err)
		}
		ids[topic] = id
	}
	stop := runWorker(t, w)
	waitFor(t, "every topic's deliveries", func() bool {
		return len(got.of("w-ok")) >= 1 && len(got.of("w-retry")) >= 2 && len(got.of("w-fail")) >= 2 && len(got.of("w-max.dlq")) >= 1
	})
	waitFor(t, "the last ack", func() bool { return topicStats(t, c, "w-max.dlq").Acked == 1 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	if ds := got.of("w-ok"); len(ds) != 1 || ds[0].ID != ids["w-ok"] || topicStats(t, c, "w-ok").Acked != 1 {
		t.Errorf("w-ok: deliveries %+v, want one, acked", ds)
	}
	if ds := got.of("w-retry"); len(ds) != 2 {
		t.Errorf("w-retry: %d deliveries, want 2", len(ds))
	} else if first, again := ds[0], ds[1]; again.Attempt != 1 || again.OriginID != ids["w-retry"] || again.ID == first.ID ||
		again.DeliverAt.Sub(first.ReceivedAt) < 300*time.Millisecond {
		t.Errorf("w-retry: retry %s (origin %s) attempt %d due %v after the first delivery; want a new ID of origin %s, attempt 1, due 300ms or more later",
			again.ID, again.OriginID, again.Attempt, again.DeliverAt.Sub(first.ReceivedAt), ids["w-retry"])
	}
	if ds := got.of("w-fail"); len(ds) != 2 || ds[1].Attempt != 1 || ds[1].OriginID != ids["w-fail"] {
		t.Errorf("w-fail: deliveries %+v, want the same message again as attempt 1", ds)
	}
	if ds := got.of("w-max"); len(ds) != 3 || ds[2].Attempt != 2 {
		t.Errorf("w-max: %d deliveries, want 3 (attempts 0, 1, 2) before the dead-letter topic", len(ds))
	}
	dl := got.of("w-max.dlq")
	if len(dl) != 1 || string(dl[0].Body) != "w-max" {
		t.Fatalf("w-max.dlq: deliveries %+v, want the message of w-max", dl)
	}
	t.Run("dead_letter_info", func(t *testing.T) {
		info := dl[0].DeadLetter
		if info == nil {
			t.Fatal("the dead letter has no DeadLetter: the server fills Message.dead_letter of every dead letter")
		}
		if info.OriginTopic != "w-max" || info.Reason != "max-attempts" || info.Attempts != 3 || !strings.Contains(info.LastError, "retry after 50ms") {
			t.Errorf("dead letter %+v; want origin w-max, reason max-attempts, 3 attempts, the last nack's reason", info)
		}
	})
}

// TestWorkerDeadLetter: DeadLetter(reason) sends the message to
// "<topic>.dlq" at its first attempt, whatever attempts remain.
func TestWorkerDeadLetter(t *testing.T) {
	rs := startServer(t, server.Options{})
	c := newClient(t, rs.addr)
	var got deliveries
	w := NewWorker(c, WorkerOptions{OnError: func(err error) { t.Errorf("OnError: %v", err) }})
	w.HandleFunc("w-dead", func(_ context.Context, d Delivery) error { got.add(d); return DeadLetter("cannot parse") })
	w.HandleFunc("w-dead.dlq", func(_ context.Context, d Delivery) error { got.add(d); return nil })
	if _, err := c.Schedule(context.Background(), Message{Topic: "w-dead", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	stop := runWorker(t, w)
	waitFor(t, "the dead letter, or the message again", func() bool {
		return len(got.of("w-dead.dlq")) > 0 || len(got.of("w-dead")) > 1
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if len(got.of("w-dead.dlq")) == 0 {
		t.Fatalf("the message came again in w-dead (%d deliveries), not in w-dead.dlq: a nack with dead_letter must dead-letter it", len(got.of("w-dead")))
	}
	if ds := got.of("w-dead"); len(ds) != 1 {
		t.Errorf("w-dead delivered %d times; want once", len(ds))
	}
	d := got.of("w-dead.dlq")[0]
	if info := d.DeadLetter; info == nil || (info.Reason != "nacked" || info.LastError != "cannot parse" || info.OriginTopic != "w-dead") {
		t.Errorf("dead letter %+v; want reason nacked, last error \"cannot parse\", origin w-dead", info)
	}
}

// TestWorkerConcurrency: each topic runs at most its own number of
// handlers at once (Topics overrides the worker's default), and reaches
// it when messages wait.
func TestWorkerConcurrency(t *testing.T) {
	rs := startServer(t, server.Options{})
	c := newClient(t, rs.addr)
	limits := map[string]int{"w-c2": 2, "w-c3": 3}
	const n = 12
	gate := make(chan struct{})
	var mu sync.Mutex
	running, most, handled := map[string]int{}, map[string]int{}, map[string]int{}
	w := NewWorker(c, WorkerOptions{Concurrency: 2, Topics: map[string]TopicOptions{"w-c3": {Concurrency: 3}},
		OnError: func(err error) { t.Errorf("OnError: %v", err) }})
	for topic := range limits {
		w.HandleFunc(topic, func(ctx context.Context, d Delivery) error {
			mu.Lock()
			running[d.Topic]++
			most[d.Topic] = max(most[d.Topic], running[d.Topic])
			mu.Unlock()
			<-gate
			mu.Lock()
			running[d.Topic]--
			handled[d.Topic]++
			mu.Unlock()
			return nil
		})
		for i := range n {
			if _, err := c.Schedule(context.Background(), Message{Topic: topic, Body: fmt.Append(nil, i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	stop := runWorker(t, w)
	waitFor(t, "every topic at its limit", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return running["w-c2"] == 2 && running["w-c3"] == 3
	})
	close(gate)
	waitFor(t, "every message handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return handled["w-c2"] == n && handled["w-c3"] == n
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for topic, limit := range limits {
		if most[topic] != limit {
			t.Errorf("%s: %d handlers at once at most; want %d", topic, most[topic], limit)
		}
	}
}

// TestWorkerShutdown: once Run's ctx ends, the messages no handler took
// are given back at once, and a running handler keeps a live ctx and its
// result settles its message (finishes); or, past ShutdownTimeout, its
// ctx is cancelled, its message given back and Run returns without it
// (releases).
func TestWorkerShutdown(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
	}{
		{"finishes", testTimeout},
		{"releases_after_timeout", 200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := startServer(t, server.Options{})
			c := newClient(t, rs.addr)
			const topic, n = "w-stop", 3
			started, proceed := make(chan struct{}), make(chan struct{})
			var calls atomic.Int32
			returned := make(chan error, 1) // the held handler's ctx.Err() when it returns
			w := NewWorker(c, WorkerOptions{Lease: time.Minute, ShutdownTimeout: tc.timeout})
			w.HandleFunc(topic, func(ctx context.Context, d Delivery) error {
				if calls.Add(1) > 1 {
					t.Errorf("a second handler call (%s) after the first was held", d.ID)
					return nil
				}
				close(started)
				<-proceed
				if tc.timeout < testTimeout {
					<-ctx.Done() // cancelled at the timeout
				}
				returned <- ctx.Err()
				return nil
			})
			for i := range n {
				if _, err := c.Schedule(context.Background(), Message{Topic: topic, Body: fmt.Append(nil, i)}); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			recv(t, "the first handler call", started)
			waitFor(t, "all messages leased to the worker", func() bool { return topicStats(t, c, topic).Leased == n })
			cancel()
			// The two waiting messages come back at once, however long the
			// handler runs; a Receive gets them.
			var back []Delivery
			for len(back) < n-1 {
				ds, err := c.Receive(context.Background(), topic, ReceiveOptions{MaxMessages: n, Wait: testTimeout, Lease: time.Minute})
				if err != nil || len(ds) == 0 {
					t.Fatalf("Receive of the released messages: %d, %v", len(ds), err)
				}
				back = append(back, ds...)
			}
			if tc.timeout == testTimeout {
				close(proceed)
				if err := recv(t, "Run to return", done); err != nil {
					t.Fatal(err)
				}
				if err := recv(t, "the handler to return", returned); err != nil {
					t.Errorf("the handler's ctx ended (%v) before ShutdownTimeout", err)
				}
				if st := topicStats(t, c, topic); st.Acked != 1 {
					t.Errorf("%d acked; want the finished handler's message", st.Acked)
				}
				return
			}
			// Run returns while the handler still runs, and its message is
			// given back.
			if err := recv(t, "Run to return at ShutdownTimeout", done); err != nil {
				t.Fatal(err)
			}
			ds, err := c.Receive(context.Background(), topic, ReceiveOptions{Wait: testTimeout})
			if err != nil || len(ds) != 1 {
				t.Fatalf("Receive of the held handler's message: %v, %v; want it given back", ds, err)
			}
			close(proceed)
			if err := recv(t, "the held handler to return", returned); err == nil {
				t.Error("the held handler's ctx was not cancelled at ShutdownTimeout")
			}
			if st := topicStats(t, c, topic); st.Acked != 0 {
				t.Errorf("%d acked; the late handler's result must be dropped", st.Acked)
			}
		})
	}
}

// TestWorkerExtendsLease: a handler that runs for several leases keeps
// its message (extended on its Consume stream); it is handled once and
// acked.
func TestWorkerExtendsLease(t *testing.T) {
	rs := startServer(t, server.Options{})
	var extends atomic.Int32
	extended := make(chan struct{}) // closed at the third extension
	count := grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || method != hourglassv1.HourglassService_Consume_FullMethodName {
			return cs, err
		}
		return countExtends{cs, func() {
			if extends.Add(1) == 3 {
				close(extended)
			}
		}}, nil
	})
	c := newClient(t, rs.addr, WithDialOptions(count))
	const lease = 300 * time.Millisecond
	var calls atomic.Int32
	w := NewWorker(c, WorkerOptions{Concurrency: 2, Lease: lease, OnError: func(err error) { t.Errorf("OnError: %v", err) }})
	w.HandleFunc("w-long", func(ctx context.Context, d Delivery) error {
		calls.Add(1)
		select {
		case <-extended: // three leases and more have passed
		case <-time.After(testTimeout):
			t.Error("no three extensions")
		}
		return nil
	})
	if _, err := c.Schedule(context.Background(), Message{Topic: "w-long"}); err != nil {
		t.Fatal(err)
	}
	stop := runWorker(t, w)
	waitFor(t, "the handler to return", func() bool {
		st := topicStats(t, c, "w-long")
		return st.Acked+st.Nacked > 0
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("handled %d times; want once (the extended lease keeps it)", n)
	}
	if st := topicStats(t, c, "w-long"); st.Acked != 1 || st.Expired != 0 || st.Redelivered != 0 {
		t.Errorf("stats %v; want acked once, no lease expired", st)
	}
}

// TestWorkerRun: the mistakes Run and Handle refuse, and a topic that
// fails for good stops the whole worker with its error.
func TestWorkerRun(t *testing.T) {
	rs := startServer(t, server.Options{})
	c := newClient(t, rs.addr)
	if err := NewWorker(c, WorkerOptions{}).Run(context.Background()); err == nil || !strings.Contains(err.Error(), "Handle") {
		t.Errorf("Run without handlers: %v; want an error naming Handle", err)
	}
	w := NewWorker(c, WorkerOptions{})
	w.HandleFunc("w-good", func(context.Context, Delivery) error { return nil })
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a second handler of one topic: no panic")
			}
		}()
		w.HandleFunc("w-good", func(context.Context, Delivery) error { return nil })
	}()
	w.HandleFunc("bad topic", func(context.Context, Delivery) error { return nil })
	errc := make(chan error, 1)
	go func() { errc <- w.Run(context.Background()) }()
	wantCode(t, "Run with a bad topic", recv(t, "Run to fail", errc), codes.InvalidArgument)
	if err := w.Run(context.Background()); !errors.Is(err, ErrWorkerStarted) {
		t.Errorf("second Run: %v; want ErrWorkerStarted", err)
	}
}

// countExtends calls extended for each answer of the server that
// extended every lease an extend named.
type countExtends struct {
	grpc.ClientStream
	extended func()
}

func (c countExtends) RecvMsg(m any) error {
	err := c.ClientStream.RecvMsg(m)
	if res, ok := m.(*hourglassv1.ConsumeResponse); ok && err == nil {
		if ext := res.GetExtended(); ext != nil && len(ext.Failed) == 0 {
			c.extended()
		}
	}
	return err
}
