package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/hourglassmq/hourglass/client"
)

// Find out why messages died, and move the ones that ran out of attempts
// back to their topic once the cause is fixed.
func ExampleClient_Redrive() {
	addr, stop := exampleServer()
	defer stop()
	c, _ := client.New(addr)
	defer c.Close()
	ctx := context.Background()
	c.Schedule(ctx, client.Message{Topic: "orders", Body: []byte("order 42")})
	ds, _ := c.Receive(ctx, "orders", client.ReceiveOptions{Wait: 10 * time.Second})
	c.NackWith(ctx, ds[0], client.NackOptions{Reason: "payment service down", DeadLetter: true})

	for m, err := range c.List(ctx, "orders", client.ListOptions{State: client.StateDeadLettered}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %s (%s)\n", m.Body, m.DeadLetter.Reason, m.DeadLetter.LastError)
	}
	res, err := c.Redrive(ctx, "orders.dlq", client.RedriveOptions{Rate: 100})
	fmt.Println(res.Redriven, "redriven", err)
	ds, _ = c.Receive(ctx, "orders", client.ReceiveOptions{Wait: 10 * time.Second})
	fmt.Printf("%s again, attempt %d\n", ds[0].Body, ds[0].Attempt)
	// Output:
	// order 42: nacked (payment service down)
	// 1 redriven <nil>
	// order 42 again, attempt 0
}

// Change how a topic delivers at run time: fewer attempts, a backoff
// between retries, and a pause while a downstream service is down.
func ExampleClient_SetPolicy() {
	addr, stop := exampleServer()
	defer stop()
	c, _ := client.New(addr)
	defer c.Close()
	ctx := context.Background()
	p, err := c.SetPolicy(ctx, "orders", client.Policy{
		MaxAttempts: new(5),
		Backoff:     &client.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("max attempts", *p.Effective.MaxAttempts, "backoff from", p.Effective.Backoff.Initial)
	p, _ = c.Pause(ctx, "orders") // due messages wait; c.Resume(ctx, "orders") lets them go
	fmt.Println("paused:", *p.Effective.Paused)
	p, _ = c.SetPolicy(ctx, "orders", client.Policy{}, client.FieldMaxAttempts) // back to the server's default
	fmt.Println("max attempts", *p.Effective.MaxAttempts, "set:", p.Set.MaxAttempts != nil)
	// Output:
	// max attempts 5 backoff from 1s
	// paused: true
	// max attempts 3 set: false
}

// What each topic holds: due, leased, dead letters, and how long the
// oldest due message has waited.
func ExampleClient_Topics() {
	addr, stop := exampleServer()
	defer stop()
	c, _ := client.New(addr)
	defer c.Close()
	ctx := context.Background()
	c.ScheduleBatch(ctx, []client.Message{{Topic: "orders", Body: []byte("a")}, {Topic: "orders", Body: []byte("b")}})
	var ds []client.Delivery
	for len(ds) < 2 { // lease both, then give one back
		more, _ := c.Receive(ctx, "orders", client.ReceiveOptions{MaxMessages: 2 - len(ds), Wait: 10 * time.Second})
		ds = append(ds, more...)
	}
	c.Nack(ctx, ds[0], 0)
	topics, err := c.Topics(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range topics {
		fmt.Printf("%s: %d due, %d leased, %d dead letters\n", t.Topic, t.Due, t.Leased, t.DeadLettered)
	}
	// Output: orders: 1 due, 1 leased, 0 dead letters
}
