package hourglass_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/hourglassmq/hourglass"
	"github.com/hourglassmq/hourglass/client"
)

// A Go program embeds a node, serves it, schedules a message through the
// Go client and receives it when due.
func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "hourglass-example-")
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.DiscardHandler)

	cfg := hourglass.DefaultConfig()
	cfg.DataDir, cfg.Logger = dir, quiet
	node, err := hourglass.Open(context.Background(), cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go node.Serve(ln)
	<-node.Ready()

	c, _ := client.New(ln.Addr().String())
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.Schedule(ctx, client.Message{Topic: "orders", Body: []byte("cancel order 42"), Delay: 100 * time.Millisecond})
	ds, _ := c.Receive(ctx, "orders", client.ReceiveOptions{Wait: 5 * time.Second})
	for _, d := range ds {
		fmt.Printf("received %q, not early: %v\n", d.Body, !d.ReceivedAt.Before(d.DeliverAt))
		c.Ack(ctx, d)
	}
	// Output: received "cancel order 42", not early: true
}
