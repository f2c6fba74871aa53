package engine

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

func keyed(topic, key, body string, delay time.Duration) Request {
	return Request{Topic: topic, IdempotencyKey: key, Body: []byte(body), Delay: delay}
}

// TestIdempotencyKey: a retried Schedule with the same topic and key gets
// the first message's ID and no second message, within a batch, across a
// restart, and until the window ends.
func TestIdempotencyKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		sink := &recSink{}
		window := func(o *Options) { o.IdempotencyWindow = time.Hour }
		e := openEngine(t, dir, sink, window)
		ctx := context.Background()
		a, err := e.Schedule(ctx, keyed("orders", "k1", "first", 30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		again, err := e.Schedule(ctx, keyed("orders", "k1", "retry", 30*time.Second))
		if err != nil || again != a {
			t.Fatalf("retry with the same key: %v, %v; want %v", again, err, a)
		}
		other, _ := e.Schedule(ctx, keyed("payments", "k1", "other topic", 30*time.Second))
		if other == a {
			t.Fatal("the same key on another topic returned the first topic's message")
		}
		// In one batch: a new key twice, an old key, no key.
		ids, err := e.ScheduleBatch(ctx, []Request{keyed("orders", "k2", "b0", time.Minute), keyed("orders", "k2", "b1", time.Minute),
			keyed("orders", "k1", "b2", time.Minute), keyed("orders", "", "b3", time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if ids[0] != ids[1] || ids[2] != a || ids[3] == ids[0] {
			t.Fatalf("batch IDs %v: want [x x %v y]", ids, a)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		// A restart: the key is read back from the commitlog.
		e = openEngine(t, dir, sink, window)
		if got, err := e.Schedule(ctx, keyed("orders", "k1", "after restart", 30*time.Second)); err != nil || got != a {
			t.Fatalf("retry after a restart: %v, %v; want %v", got, err, a)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		bodies := map[string]int{}
		for _, g := range sink.snapshot() {
			bodies[g.body]++
		}
		for _, b := range []string{"first", "other topic", "b0", "b3"} {
			if bodies[b] != 1 {
				t.Errorf("%q delivered %d times, want once", b, bodies[b])
			}
		}
		for _, b := range []string{"retry", "b1", "b2", "after restart"} {
			if bodies[b] != 0 {
				t.Errorf("%q, a retry, was delivered", b)
			}
		}
		// After the window the key is free again.
		time.Sleep(time.Hour)
		if later, _ := e.Schedule(ctx, keyed("orders", "k1", "later", 0)); later == a {
			t.Error("the key still answered with the first message after the window")
		}
		e.Close()
	})
}

func TestIdempotencyKeyLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := openEngine(t, t.TempDir(), &recSink{}, func(o *Options) { o.IdempotencyWindow = time.Minute })
		defer e.Close()
		_, err := e.Schedule(context.Background(), keyed("t", strings.Repeat("k", MaxIdempotencyKey+1), "x", 0))
		if err == nil || !strings.Contains(err.Error(), "idempotency key") {
			t.Fatalf("oversized key: %v", err)
		}
		hs := make([]message.Header, message.MaxHeaders)
		for i := range hs {
			hs[i] = message.Header{Key: []byte{'h', byte('a' + i%26), byte('a' + i/26)}}
		}
		_, err = e.Schedule(context.Background(), Request{Topic: "t", IdempotencyKey: "k", Headers: hs})
		if err == nil || !strings.Contains(err.Error(), "idempotency key") {
			t.Fatalf("a full set of headers and a key: %v", err)
		}
	})
}
