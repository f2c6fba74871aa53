package queue

import (
	"context"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// TestReceiveSkipsExpired: a message a Receive reaches past its expiry is
// never handed out: it is dead-lettered with reason expired (and counted),
// while one not yet expired is received; the dead letter itself is
// received from the dead-letter topic, not dead-lettered again.
func TestReceiveSkipsExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQ(t, t.TempDir(), nil)
		defer q.Close()
		ctx := context.Background()
		now := time.Now().UnixMilli()
		msg := func(body string, expireIn time.Duration) engine.Delivery {
			m := &message.Message{DeliverAt: now, Topic: []byte("t"), Body: []byte(body),
				Headers: []message.Header{{Key: []byte(message.ExpireAtHeader), Value: []byte(strconv.FormatInt(now+expireIn.Milliseconds(), 10))}}}
			return engine.Delivery{ID: message.ID{DeliverAt: now, Seq: nextSeq.Add(1)}, Message: m}
		}
		if err := q.Deliver(ctx, "t", []engine.Delivery{msg("stale", time.Second), msg("fresh", time.Hour)}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // past the first one's expiry, not the second's
		ms, err := q.Receive(ctx, "t", 10, 0, 0)
		if err != nil || len(ms) != 1 || string(ms[0].Body) != "fresh" {
			t.Fatalf("Receive = %q, %v; want only fresh", bodies(ms), err)
		}
		synctest.Wait() // the dead-lettering worker is done
		ds, err := q.Receive(ctx, "t"+DLQSuffix, 10, 0, 0)
		if err != nil || len(ds) != 1 || string(ds[0].Body) != "stale" {
			t.Fatalf("Receive of the dead letters = %q, %v; want stale", bodies(ds), err)
		}
		if r := message.HeaderValue(ds[0].Headers, DeadLetterReasonHeader); r != ReasonExpired {
			t.Errorf("dead-letter reason %q; want %q", r, ReasonExpired)
		}
		if ms, _ := q.Receive(ctx, "t", 10, 0, 0); len(ms) != 0 {
			t.Errorf("Receive again = %q; want nothing", bodies(ms))
		}
		if s := q.Stats()["t"]; s.PastExpiry != 1 || s.DeadLettered != 1 {
			t.Errorf("stats: past expiry %d, dead-lettered %d; want 1 and 1", s.PastExpiry, s.DeadLettered)
		}
		var _ engine.ExpiryHandler = q
	})
}
