package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPublishDoneGivesUp: a done-record publish that is never answered (a
// stream leader that took it and died) fails after the node's done timeout,
// not after the lease TTL, so that the engine retries it soon.
func TestPublishDoneGivesUp(t *testing.T) {
	ns := startNATS(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// A subscriber that takes the records and never acknowledges them.
	sub, err := nc.SubscribeSync(doneSubject(3))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Flush()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{js: js, opts: Options{LeaseTTL: time.Hour}, doneTimeout: 100 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- n.publishDone(ctx, 3, make([]byte, DoneRecordSize)) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("publishDone = %v, want its attempt's deadline", err)
		}
	case <-ctx.Done():
		t.Fatal("publishDone waited past a minute for a PubAck that never comes (the lease TTL is an hour)")
	}
	if _, err := sub.NextMsg(time.Second); err != nil {
		t.Errorf("the records never reached the subject: %v", err)
	}
}
