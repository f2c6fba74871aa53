package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/hourglassmq/hourglass"
	"github.com/hourglassmq/hourglass/client"
	"github.com/hourglassmq/hourglass/commitlog"
)

// exampleServer runs an Hourglass node in this process on a loopback
// port, for the examples, and returns its address and how to stop it.
// A real program connects to a running `hourglass serve`.
func exampleServer() (addr string, stop func()) {
	dir, err := os.MkdirTemp("", "hourglass-client-example-")
	if err != nil {
		log.Fatal(err)
	}
	cfg := hourglass.DefaultConfig()
	cfg.DataDir, cfg.Fsync, cfg.MaxAttempts, cfg.Logger = dir, commitlog.SyncNone, 3, slog.New(slog.DiscardHandler)
	node, err := hourglass.Open(context.Background(), cfg)
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go node.Serve(ln)
	<-node.Ready()
	return ln.Addr().String(), func() { node.Close(); os.RemoveAll(dir) }
}

// Schedule a message half a second ahead, with headers and an
// idempotency key; the ID tells when it is due.
func ExampleClient_Schedule() {
	addr, stop := exampleServer()
	defer stop()
	c, err := client.New(addr) // or "https://host:port", client.WithToken(token)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	id, err := c.Schedule(ctx, client.Message{
		Topic:          "orders",
		Body:           []byte(`{"order":42}`),
		Headers:        map[string]string{"content-type": "application/json"},
		Delay:          500 * time.Millisecond, // or At: time.Date(...), or Level: 3
		IdempotencyKey: "order-42-timeout",     // a retried Schedule stores nothing twice
	})
	if err != nil {
		log.Fatal(err)
	}
	due := time.Until(id.Time()) // the ID carries its delivery time
	fmt.Println("due within a second:", due > 0 && due <= time.Second)
	// Output: due within a second: true
}

// Cancel an order's timeout when the order is paid, by ID or by the key
// it was scheduled with.
func ExampleClient_Cancel() {
	addr, stop := exampleServer()
	defer stop()
	c, _ := client.New(addr)
	defer c.Close()
	ctx := context.Background()
	id, _ := c.Schedule(ctx, client.Message{Topic: "orders", Delay: 30 * time.Minute, IdempotencyKey: "order-42"})
	res, err := c.Cancel(ctx, id) // or c.Cancel(ctx, client.Key{Topic: "orders", Key: "order-42"})
	fmt.Println(res, err)
	res, err = c.Cancel(ctx, id)
	fmt.Println(res, err)
	// Output:
	// cancelled <nil>
	// already-cancelled <nil>
}

// Move a pending message: later, to an absolute time, or to now. The
// message gets a new ID; the old one never fires.
func ExampleClient_Reschedule() {
	c, _ := client.New("127.0.0.1:7420")
	defer c.Close()
	ctx := context.Background()
	id, _ := c.Schedule(ctx, client.Message{Topic: "orders", Delay: 30 * time.Minute})
	newID, err := c.Reschedule(ctx, id, client.In(time.Hour)) // or client.At(t), client.Now()
	switch {
	case errors.Is(err, client.ErrAlreadyDelivered):
		fmt.Println("too late: it was delivered")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println("now due at", newID.Time())
	}
}

// Look a message up by ID without touching it.
func ExampleClient_Get() {
	addr, stop := exampleServer()
	defer stop()
	c, _ := client.New(addr)
	defer c.Close()
	ctx := context.Background()
	id, _ := c.Schedule(ctx, client.Message{Topic: "orders", Body: []byte("later"), Delay: time.Hour})
	f, err := c.Get(ctx, id)
	fmt.Println(f.State, string(f.Message.Body), err)
	// Output: pending later <nil>
}

// Schedule many messages asynchronously: the producer batches them on
// one stream and each Send gets its own result.
func ExampleNewProducer() {
	addr, stop := exampleServer()
	defer stop()
	c, _ := client.New(addr)
	defer c.Close()
	p := client.NewProducer(c, client.ProducerOptions{MaxBatch: 100, Linger: 5 * time.Millisecond})
	ctx := context.Background()
	var results []*client.Result
	for i := range 250 {
		results = append(results, p.Send(ctx, client.Message{Topic: "emails", Body: fmt.Appendf(nil, "mail %d", i), Delay: time.Minute}))
	}
	scheduled := 0
	for _, r := range results {
		if _, err := r.Wait(ctx); err == nil {
			scheduled++
		}
	}
	p.Close()
	fmt.Println(scheduled, "scheduled")
	// Output: 250 scheduled
}

// A worker consumes topics with handlers and middleware. Returning nil
// acks a message; Retry and DeadLetter say what else to do; any other
// error nacks it with the error as the reason.
func ExampleWorker() {
	addr, stop := exampleServer()
	defer stop()
	c, _ := client.New(addr)
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background()) // in a program: signal.NotifyContext
	defer cancel()

	w := client.NewWorker(c, client.WorkerOptions{Concurrency: 4, ShutdownTimeout: 30 * time.Second})
	w.Use(client.Recover(), client.Logging(slog.New(slog.DiscardHandler)))
	w.HandleFunc("orders", func(ctx context.Context, d client.Delivery) error {
		if d.Attempt == 0 {
			fmt.Printf("%s: not yet\n", d.Body)
			return client.Retry(100 * time.Millisecond) // comes back as attempt 1
		}
		fmt.Printf("%s: done at attempt %d\n", d.Body, d.Attempt)
		cancel() // stop the example: Run returns once the ack is answered
		return nil
	})
	c.Schedule(ctx, client.Message{Topic: "orders", Body: []byte("order 42"), Delay: 100 * time.Millisecond})
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// order 42: not yet
	// order 42: done at attempt 1
}

// A handler that knows a message can never succeed sends it to the
// dead-letter topic at once; another handler may consume "<topic>.dlq".
func ExampleDeadLetter() {
	c, _ := client.New("127.0.0.1:7420")
	defer c.Close()
	w := client.NewWorker(c, client.WorkerOptions{})
	w.HandleFunc("orders", func(ctx context.Context, d client.Delivery) error {
		var order struct{ ID int }
		if err := parse(d.Body, &order); err != nil {
			return client.DeadLetter("unparsable order: " + err.Error())
		}
		return nil
	})
	w.HandleFunc("orders.dlq", func(ctx context.Context, d client.Delivery) error {
		log.Printf("dead letter %s: %+v", d.ID, d.DeadLetter)
		return nil
	})
	w.Run(context.Background())
}

func parse([]byte, any) error { return nil }

// Metrics and tracing hook in as middleware: Start may put a span in the
// handler's ctx, End sees the outcome and how long the handler ran.
func ExampleHooks() {
	handled := map[client.Outcome]int{}
	w := client.NewWorker(nil, client.WorkerOptions{})
	w.Use(client.Hooks{
		End: func(ctx context.Context, d client.Delivery, result error, took time.Duration) {
			handled[client.OutcomeOf(result)]++ // a Prometheus counter, say (End runs concurrently)
		},
	}.Middleware())
}

// Consume is the short form of a Worker of one topic, for a loop that
// stops when its ctx ends; a handler's error is retried after 1s, 2s,
// 4s ... unless ConsumeOptions.RetryDelay says otherwise.
func ExampleClient_Consume() {
	addr, stop := exampleServer()
	defer stop()
	c, _ := client.New(addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.Schedule(ctx, client.Message{Topic: "reminders", Body: []byte("call Ada"), At: time.Now().Add(200 * time.Millisecond)})
	err := c.Consume(ctx, "reminders", func(_ context.Context, d client.Delivery) error {
		fmt.Printf("%s (not early: %v)\n", d.Body, !d.ReceivedAt.Before(d.DeliverAt))
		cancel()
		return nil
	}, client.ConsumeOptions{Concurrency: 2})
	fmt.Println(err)
	// Output:
	// call Ada (not early: true)
	// <nil>
}

func ExampleParseID() {
	id, err := client.ParseID("0000018d3a2b1c000000000000000007")
	fmt.Println(id.Time().Format(time.RFC3339Nano), err)
	// Output: 2024-01-24T06:32:00.256Z <nil>
}
