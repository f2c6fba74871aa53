package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Handler handles due messages. Its result settles the message: nil acks
// it; Retry(after) nacks it to be delivered again after that delay;
// DeadLetter(reason) sends it to "<topic>.dlq" at once; any other error
// nacks it with the error's text as the reason, and the topic's retry
// backoff on the server decides when it comes back. Handle is called
// from many goroutines at once, up to the topic's concurrency.
type Handler interface {
	Handle(ctx context.Context, d Delivery) error
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, d Delivery) error

// Handle calls f(ctx, d).
func (f HandlerFunc) Handle(ctx context.Context, d Delivery) error { return f(ctx, d) }

// Middleware wraps a Handler in another, which may act before and after
// it, change its ctx or its result: logging, metrics, tracing, panic
// recovery (Logging, Hooks, Recover).
type Middleware func(Handler) Handler

// WorkerOptions shape NewWorker; the zero value works.
type WorkerOptions struct {
	// Concurrency is how many handler calls run at once per topic,
	// unless Topics says otherwise; default 1.
	Concurrency int
	// Prefetch is how many messages of a topic the server may hand the
	// worker before it has settled them, 1 to 10000, unless Topics says
	// otherwise. Unset, it starts at 2 * Concurrency, at least 100, and
	// grows while the handlers keep up, as ConsumeOptions.Prefetch.
	Prefetch int
	// MaxBatch is the most messages the server pushes at once, 1 to 1000,
	// unless Topics says otherwise; default the most credits a stream may
	// have (at most 1000).
	MaxBatch int
	// Lease of each message, unless Topics says otherwise; 0 means the
	// server's --default-lease. While a handler runs, its message's lease
	// is extended by as much again two thirds into each lease, so a
	// handler may run longer than its lease; a message whose lease ran out
	// while it waited for a free handler is not handled (the server
	// delivers it again).
	Lease time.Duration
	// Topics holds the options of single topics; a zero field takes the
	// default above.
	Topics map[string]TopicOptions
	// ShutdownTimeout is how long running handlers may go on once Run's
	// ctx has ended, their ctx still live; default 30s. Messages no handler
	// has started are given back at once. When the timeout passes, the
	// handlers' ctx is cancelled, the messages they hold are given back
	// (nacked without delay), and Run returns without waiting for them;
	// what they return after that is dropped.
	ShutdownTimeout time.Duration
	// OnError, if set, is told of failed acks, nacks and lease extensions
	// and of streams that broke; they do not stop the worker. It is called
	// from the worker's goroutines, possibly at once.
	OnError func(error)
}

// TopicOptions are the options of one topic of a Worker.
type TopicOptions struct {
	Concurrency int
	Prefetch    int
	MaxBatch    int
	Lease       time.Duration
}

// DefaultShutdownTimeout is WorkerOptions.ShutdownTimeout's default.
const DefaultShutdownTimeout = 30 * time.Second

// Worker consumes topics of the built-in queue with Handlers: each topic
// on its own Consume stream of the Client's connection, with its own
// bounded concurrency; acks and nacks go back on the streams in batches.
// Register handlers and middleware, then Run it. Its methods may be
// called from any goroutine.
type Worker struct {
	c *Client
	o WorkerOptions

	mu       sync.Mutex
	mws      []Middleware       // guarded by mu
	handlers map[string]Handler // guarded by mu
	order    []string           // guarded by mu: topics in Handle order
	started  bool               // guarded by mu
}

// NewWorker returns a worker that consumes through c.
func NewWorker(c *Client, o WorkerOptions) *Worker {
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	return &Worker{c: c, o: o, handlers: map[string]Handler{}}
}

// Use adds middleware around every handler of the worker, the first
// outermost: Use(a, b) runs a, which runs b, which runs the handler. It
// panics once Run has been called.
func (w *Worker) Use(mws ...Middleware) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		panic("client: Worker.Use after Run")
	}
	w.mws = append(w.mws, mws...)
}

// Handle consumes topic with h. It panics if topic already has a handler
// or once Run has been called.
func (w *Worker) Handle(topic string, h Handler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		panic("client: Worker.Handle after Run")
	}
	if _, dup := w.handlers[topic]; dup {
		panic(fmt.Sprintf("client: Worker.Handle: topic %q already has a handler", topic))
	}
	w.handlers[topic] = h
	w.order = append(w.order, topic)
}

// HandleFunc consumes topic with f.
func (w *Worker) HandleFunc(topic string, f func(ctx context.Context, d Delivery) error) {
	w.Handle(topic, HandlerFunc(f))
}

// ErrWorkerStarted is the error of a second Run of a Worker.
var ErrWorkerStarted = errors.New("client: worker already started")

// Run consumes every topic with a handler until ctx ends, then shuts down
// as WorkerOptions.ShutdownTimeout says, and returns nil. If a topic
// fails with an error that retrying cannot fix (a bad topic name, a wrong
// token: status.Code tells), the other topics are shut down the same way
// and Run returns that error. A Worker runs once.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return ErrWorkerStarted
	}
	w.started = true
	topics := slices.Clone(w.order)
	mws := slices.Clone(w.mws)
	handlers := make(map[string]Handler, len(topics))
	for t, h := range w.handlers {
		for i := len(mws) - 1; i >= 0; i-- {
			h = mws[i](h)
		}
		handlers[t] = h
	}
	w.mu.Unlock()
	if len(topics) == 0 {
		return errors.New("client: Worker.Run: no topic to consume: call Handle first")
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	errs := make([]error, len(topics))
	var wg sync.WaitGroup
	for i, topic := range topics {
		cfg := w.config(topic, handlers[topic])
		wg.Go(func() {
			if errs[i] = newConsumeState(w.c, cfg).run(ctx); errs[i] != nil {
				stop() // the others shut down too
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// config is the loop of one topic.
func (w *Worker) config(topic string, h Handler) loopConfig {
	o := w.o.Topics[topic]
	cfg := loopConfig{
		topic: topic, handler: h, onError: w.o.OnError, extend: true, graceful: true, grace: w.o.ShutdownTimeout,
		concurrency: firstPositive(o.Concurrency, w.o.Concurrency, 1),
		lease:       firstPositive(o.Lease, w.o.Lease),
	}
	cfg.prefetch = firstPositive(o.Prefetch, w.o.Prefetch)
	cfg.maxPrefetch = cfg.prefetch
	if cfg.prefetch == 0 {
		cfg.prefetch = max(defaultPrefetch, 2*cfg.concurrency)
		cfg.maxPrefetch = max(defaultMaxPrefetch, cfg.prefetch)
	}
	cfg.maxBatch = firstPositive(o.MaxBatch, w.o.MaxBatch, min(cfg.maxPrefetch, maxPush))
	return cfg
}

// firstPositive is the first of vs that is more than 0, or 0.
func firstPositive[T int | time.Duration](vs ...T) T {
	for _, v := range vs {
		if v > 0 {
			return v
		}
	}
	return 0
}
