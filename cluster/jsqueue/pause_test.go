package jsqueue

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/internal/natscluster"
	"github.com/hourglassmq/hourglass/queue"
	"github.com/hourglassmq/hourglass/sink/natsjs"
)

// TestPauseClustered: on a 3-server JetStream cluster (R3 consumers) a
// Receive sent on another node right after SetPolicy answered a pause gets
// nothing. JetStream answers a pause before the consumer's leader applied
// it; without waitPaused about one such Receive in three got a message.
// The other node has read the topic's consumer unpaused and does not read
// it again (Refresh an hour), so each of its Receives pulls.
func TestPauseClustered(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 nats-server processes (built from go.mod's nats-server and cached)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nc, err := natscluster.Start(ctx, natscluster.Options{Dir: t.TempDir(), Size: 3, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Stop()
	sk, err := natsjs.Open(ctx, natsjs.Options{URL: nc.URL(0), Replicas: 3, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer sk.Close()
	e := &env{t: t, sink: sk}
	on := func(i int, o Options) *Queue {
		conn, err := nats.Connect(nc.URL(i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Close)
		js, err := jetstream.New(conn)
		if err != nil {
			t.Fatal(err)
		}
		o.JS, o.Stream, o.Prefix, o.Logger = js, natsjs.DefaultStream, natsjs.DefaultPrefix, quiet
		q, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	a := on(0, Options{Lease: time.Minute})
	b := on(2, Options{Lease: time.Minute, Refresh: time.Hour})
	const trials = 30
	var bodies []string
	for i := range trials {
		bodies = append(bodies, fmt.Sprint("m", i))
	}
	answered(t, b, "jobs") // b reads the consumer, unpaused
	e.deliver("jobs", bodies...)
	for i := range trials {
		if _, _, err := a.SetPolicy(ctx, "jobs", queue.Policy{Paused: true}); err != nil {
			t.Fatalf("trial %d: pause: %v", i, err)
		}
		got, err := b.Receive(ctx, "jobs", 1, 0, 0)
		if err != nil {
			t.Fatalf("trial %d: Receive: %v", i, err)
		}
		if len(got) > 0 {
			t.Fatalf("trial %d: a Receive on another node sent after the pause was answered got %s", i, got[0].Body)
		}
		if _, _, err := a.SetPolicy(ctx, "jobs", queue.Policy{}); err != nil {
			t.Fatalf("trial %d: resume: %v", i, err)
		}
	}
	// Resumed, they come.
	if got := receive(t, b, "jobs", 1, 5*time.Second); len(got) != 1 {
		t.Errorf("after the last resume: %d messages", len(got))
	}
}

// answered makes Receives of topic that do not wait until one is
// answered, with nothing. On a fresh cluster the first pulls of a
// consumer just created can find no server listening (the new leader's
// interest has not yet reached the other servers over the routes):
// Receive says Unavailable, retry, and this test does. Any other error,
// a message, or 100 Unavailable answers in a row fail the test.
func answered(t *testing.T, q *Queue, topic string) {
	t.Helper()
	for i := 0; ; i++ {
		got, err := q.Receive(ctxT(t), topic, 10, 0, 0)
		if err == nil && len(got) == 0 {
			return
		}
		if err == nil || status.Code(err) != codes.Unavailable || i == 100 {
			t.Fatalf("Receive %s (attempt %d) = %d messages, %v; want none", topic, i+1, len(got), err)
		}
		time.Sleep(repull) // polls a real cluster's readiness; no time is measured
	}
}
