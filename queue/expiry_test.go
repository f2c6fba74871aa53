package queue

import (
	"context"
	"errors"
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

// expiring is a message of topic due now that expires in expireIn.
func expiring(topic, body string, now int64, expireIn time.Duration) engine.Delivery {
	m := &message.Message{DeliverAt: now, Topic: []byte(topic), Body: []byte(body),
		Headers: []message.Header{{Key: []byte(message.ExpireAtHeader), Value: []byte(strconv.FormatInt(now+expireIn.Milliseconds(), 10))}}}
	return engine.Delivery{ID: message.ID{DeliverAt: now, Seq: nextSeq.Add(1)}, Message: m}
}

// TestExpiryPolicy: what becomes of a message past its expiry under each
// topic policy. Received mode (the default) dead-letters one a Receive
// reaches, and an Ack after the expiry of one received before it
// succeeds; Drop acks it away instead (counted, nothing in the
// dead-letter topic); under a flow policy it is never handed out either;
// Unacked ends a leased message as expired when its lease ends after its
// expiry (no redelivery, no retry), refuses an Ack after the expiry with
// ErrExpired (singly and in AckBatch) and takes a Nack as ending it.
func TestExpiryPolicy(t *testing.T) {
	const lease = 5 * time.Second
	for _, tc := range []struct {
		name   string
		pol    Policy
		expire time.Duration // after delivery
		// recvAt: when the Receive is (0: at once); the test then
		// sleeps until actAt and does act: "ack", "nack", "batch" or
		// "" (the lease runs out).
		recvAt, actAt time.Duration
		act           string
		wantRecv      bool  // the Receive gets it
		wantAckErr    error // of the act
		wantDead      bool  // ends in the dead-letter topic with reason expired
		wantAgain     bool  // received again from the topic afterwards
		wantPast      uint64
		wantDropped   uint64
	}{
		{name: "received_mode_dead_letters_at_receive", expire: time.Second, recvAt: 2 * time.Second, wantDead: true, wantPast: 1},
		{name: "received_mode_ack_after_expiry_succeeds", expire: time.Second, actAt: 2 * time.Second, act: "ack", wantRecv: true},
		{name: "received_mode_lease_end_then_receive_dead_letters", expire: time.Second, actAt: lease + time.Second, wantRecv: true, wantDead: true, wantPast: 1},
		{name: "drop_at_receive", pol: Policy{Expiry: Expiry{Drop: true}}, expire: time.Second, recvAt: 2 * time.Second, wantDropped: 1},
		{name: "flow_policy_never_hands_it_out", pol: Policy{Flow: Flow{Concurrency: 1}}, expire: time.Second, recvAt: 2 * time.Second, wantDead: true, wantPast: 1},
		{name: "flow_policy_drop", pol: Policy{Flow: Flow{Ordered: true}, Expiry: Expiry{Drop: true}}, expire: time.Second, recvAt: 2 * time.Second, wantDropped: 1},
		{name: "unacked_ack_after_expiry_refused", pol: Policy{Expiry: Expiry{Unacked: true}}, expire: time.Second, actAt: 2 * time.Second, act: "ack",
			wantRecv: true, wantAckErr: ErrExpired, wantDead: true, wantPast: 1},
		{name: "unacked_batch_ack_after_expiry_refused_and_dropped", pol: Policy{Expiry: Expiry{Unacked: true, Drop: true}}, expire: time.Second, actAt: 2 * time.Second, act: "batch",
			wantRecv: true, wantAckErr: ErrExpired, wantDropped: 1},
		{name: "unacked_ack_before_expiry_succeeds", pol: Policy{Expiry: Expiry{Unacked: true}}, expire: 3 * time.Second, actAt: 2 * time.Second, act: "ack", wantRecv: true},
		{name: "unacked_nack_after_expiry_ends_it", pol: Policy{Expiry: Expiry{Unacked: true}, Backoff: Backoff{Initial: time.Second}}, expire: time.Second, actAt: 2 * time.Second, act: "nack",
			wantRecv: true, wantDead: true, wantPast: 1},
		{name: "unacked_lease_end_after_expiry_dead_letters", pol: Policy{Expiry: Expiry{Unacked: true}}, expire: time.Second, actAt: lease + time.Second, wantRecv: true, wantDead: true, wantPast: 1},
		{name: "unacked_lease_end_after_expiry_drops", pol: Policy{Expiry: Expiry{Unacked: true, Drop: true}, Backoff: Backoff{Initial: time.Second}}, expire: time.Second, actAt: lease + time.Second,
			wantRecv: true, wantDropped: 1},
		{name: "unacked_lease_end_before_expiry_hands_it_out_again", pol: Policy{Expiry: Expiry{Unacked: true}}, expire: time.Hour, actAt: lease + time.Second, wantRecv: true, wantAgain: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := openQ(t, t.TempDir(), nil)
				defer q.Close()
				ctx := context.Background()
				if err := q.SetPolicy("t", tc.pol); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				if err := q.Deliver(ctx, "t", []engine.Delivery{expiring("t", "m", start.UnixMilli(), tc.expire)}); err != nil {
					t.Fatal(err)
				}
				time.Sleep(tc.recvAt)
				ms, err := q.Receive(ctx, "t", 10, 0, lease)
				if err != nil || (len(ms) == 1) != tc.wantRecv {
					t.Fatalf("Receive = %q, %v; want it: %v", bodies(ms), err, tc.wantRecv)
				}
				time.Sleep(time.Until(start.Add(tc.actAt)))
				var aerr error
				switch tc.act {
				case "ack":
					aerr = q.AckReceipt(ctx, "t", ms[0].Receipt)
				case "nack":
					aerr = q.NackReceipt(ctx, "t", ms[0].Receipt, NackOptions{})
				case "batch":
					var res []error
					res, aerr = q.AckBatch(ctx, "t", []string{ms[0].Receipt})
					if aerr == nil {
						aerr = res[0]
					}
				}
				if !errors.Is(aerr, tc.wantAckErr) || (tc.wantAckErr == nil && aerr != nil) {
					t.Fatalf("%s = %v; want %v", tc.act, aerr, tc.wantAckErr)
				}
				synctest.Wait() // the workers that end expired messages are done
				again, err := q.Receive(ctx, "t", 10, 0, lease)
				if err != nil || (len(again) == 1) != tc.wantAgain {
					t.Errorf("Receive afterwards = %q, %v; want it again: %v", bodies(again), err, tc.wantAgain)
				}
				synctest.Wait() // and those this Receive started
				ds, err := q.Receive(ctx, "t"+DLQSuffix, 10, 0, 0)
				if err != nil || (len(ds) == 1) != tc.wantDead {
					t.Fatalf("Receive of the dead letters = %q, %v; want it: %v", bodies(ds), err, tc.wantDead)
				}
				if tc.wantDead {
					if r := message.HeaderValue(ds[0].Headers, DeadLetterReasonHeader); r != ReasonExpired {
						t.Errorf("dead-letter reason %q; want %q", r, ReasonExpired)
					}
				}
				if s := q.Stats()["t"]; s.PastExpiry != tc.wantPast || s.ExpiryDropped != tc.wantDropped {
					t.Errorf("stats: past expiry %d, dropped %d; want %d and %d", s.PastExpiry, s.ExpiryDropped, tc.wantPast, tc.wantDropped)
				}
			})
		})
	}
}

// TestTakeExpired: Take (a message by name, out of turn) never hands out
// a message past its expiry: it ends it as expired instead.
func TestTakeExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQ(t, t.TempDir(), nil)
		defer q.Close()
		ctx := context.Background()
		now := time.Now().UnixMilli()
		if err := q.Deliver(ctx, "t", []engine.Delivery{expiring("t", "m", now, time.Second)}); err != nil {
			t.Fatal(err)
		}
		ls, _, err := q.List(ctx, "t", ListDue, "", 10)
		if err != nil || len(ls) != 1 {
			t.Fatalf("List = %d, %v; want 1", len(ls), err)
		}
		time.Sleep(2 * time.Second)
		if m, err := q.Take(ctx, "t", ls[0].Offset, time.Minute); !errors.Is(err, ErrNotWaiting) {
			t.Fatalf("Take = %q, %v; want ErrNotWaiting", m.Body, err)
		}
		synctest.Wait()
		if ds, err := q.Receive(ctx, "t"+DLQSuffix, 10, 0, 0); err != nil || len(ds) != 1 {
			t.Fatalf("dead letters = %q, %v; want the expired message", bodies(ds), err)
		}
		if ms, _ := q.Receive(ctx, "t", 10, 0, 0); len(ms) != 0 {
			t.Errorf("Receive = %q; want nothing", bodies(ms))
		}
	})
}

// TestExpiryPolicyStored: the expiry fields survive EncodePolicy and
// DecodePolicy under the names the format documents.
func TestExpiryPolicyStored(t *testing.T) {
	p := Policy{Expiry: Expiry{Drop: true, Unacked: true}}
	b := EncodePolicy(p)
	if want := `{"expiry_drop":true,"expiry_unacked":true}`; string(b) != want {
		t.Errorf("EncodePolicy = %s; want %s", b, want)
	}
	if got, err := DecodePolicy(b); err != nil || got != p {
		t.Errorf("DecodePolicy = %+v, %v; want %+v", got, err, p)
	}
}
