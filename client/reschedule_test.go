package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/server"
)

func TestRescheduleRefusesNoTime(t *testing.T) {
	c := newClient(t, "127.0.0.1:1") // never called: refused before sending
	id := mustParseID(t, fakeID("x"))
	for _, tc := range []struct {
		name string
		when When
	}{
		{"zero_when", When{}},
		{"negative_delay", In(-time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := c.Reschedule(context.Background(), id, tc.when); !errors.Is(err, ErrInvalidMessage) {
				t.Errorf("Reschedule(%v): %v; want ErrInvalidMessage", tc.when, err)
			}
		})
	}
}

// TestReschedule moves pending messages by ID and by key, later, sooner
// and to now, and checks the answers when nothing can move.
func TestReschedule(t *testing.T) {
	rs := startServer(t, server.Options{})
	c := newClient(t, rs.addr)
	ctx := context.Background()
	old, err := c.Schedule(ctx, Message{Topic: "r", Body: []byte("moved"), Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	moved, err := c.Reschedule(ctx, old, In(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if moved == old || moved.Time().Before(before.Add(300*time.Millisecond-time.Second)) || moved.Time().After(time.Now().Add(300*time.Millisecond+time.Second)) {
		t.Errorf("Reschedule = %s due %v; want a new ID due about 300ms from now", moved, moved.Time())
	}
	// The first ID names the message for its whole life: Get says what
	// carries it now, and Reschedule by it moves that one.
	if f, err := c.Get(ctx, old); err != nil || f.State != StatePending || f.RescheduledTo != moved || f.Message.ID != moved {
		t.Errorf("Get(old) = %+v, %v; want pending as %s", f, err, moved)
	}
	now, err := c.Reschedule(ctx, old, Now())
	if err != nil || now == moved || now == old {
		t.Fatalf("Reschedule of the first ID to now = %s, %v; want a third ID", now, err)
	}
	ds, err := c.Receive(ctx, "r", ReceiveOptions{Wait: testTimeout})
	if err != nil || len(ds) != 1 {
		t.Fatalf("Receive: %v, %v", ds, err)
	}
	if d := ds[0]; d.ID != now || d.OriginID != old || string(d.Body) != "moved" || d.ReceivedAt.Before(d.DeliverAt) {
		t.Errorf("received %+v; want %s (origin %s) not before its time", d, now, old)
	}
	if f, err := c.Get(ctx, old); err != nil || f.State != StateLeased || f.RescheduledTo != now {
		t.Errorf("Get(old) after the receive = %+v, %v; want leased as %s", f, err, now)
	}
	if _, err := c.Reschedule(ctx, old, In(time.Hour)); !errors.Is(err, ErrAlreadyDelivered) {
		t.Errorf("Reschedule of a delivered message: %v; want ErrAlreadyDelivered", err)
	}
	// Any ID of the message names it where it is now: delivered.
	if _, err := c.Reschedule(ctx, moved, In(time.Hour)); !errors.Is(err, ErrAlreadyDelivered) {
		t.Errorf("Reschedule of the replaced ID: %v; want ErrAlreadyDelivered (as the message now)", err)
	}
	never := mustParseID(t, "0000ffffffffffff0000000000000001")
	if _, err := c.Reschedule(ctx, never, Now()); !errors.Is(err, ErrNotPending) {
		t.Errorf("Reschedule of a message never scheduled: %v; want ErrNotPending", err)
	}

	t.Run("by_key_to_now", func(t *testing.T) {
		if _, err := c.Schedule(ctx, Message{Topic: "r", Body: []byte("promoted"), At: time.Now().Add(time.Hour), IdempotencyKey: "order-7"}); err != nil {
			t.Fatal(err)
		}
		id, err := c.Reschedule(ctx, Key{Topic: "r", Key: "order-7"}, Now())
		if err != nil {
			t.Fatal(err)
		}
		ds, err := c.Receive(ctx, "r", ReceiveOptions{Wait: testTimeout})
		if err != nil || len(ds) != 1 || ds[0].ID != id || string(ds[0].Body) != "promoted" {
			t.Fatalf("Receive after promoting: %v, %v; want %s at once", ds, err, id)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		id, err := c.Schedule(ctx, Message{Topic: "r", Delay: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := c.Cancel(ctx, id); err != nil || r != Cancelled {
			t.Fatalf("Cancel = %v, %v", r, err)
		}
		if _, err := c.Reschedule(ctx, id, At(time.Now().Add(time.Minute))); !errors.Is(err, ErrAlreadyCancelled) {
			t.Errorf("Reschedule of a cancelled message: %v; want ErrAlreadyCancelled", err)
		}
	})
}

// TestByKey cancels and looks up a message by its topic and idempotency
// key, past the idempotency window's meaning: for its whole life.
func TestByKey(t *testing.T) {
	rs := startServer(t, server.Options{})
	c := newClient(t, rs.addr)
	ctx := context.Background()
	id, err := c.Schedule(ctx, Message{Topic: "k", Body: []byte("order 42 timeout"), Delay: time.Hour, IdempotencyKey: "order-42"})
	if err != nil {
		t.Fatal(err)
	}
	key := Key{Topic: "k", Key: "order-42"}
	f, err := c.Get(ctx, key)
	if err != nil || f.State != StatePending || f.Message.ID != id {
		t.Fatalf("Get(%v) = %+v, %v; want %s pending", key, f, err, id)
	}
	r, err := c.Cancel(ctx, key)
	if err != nil || r != Cancelled {
		t.Fatalf("Cancel(%v) = %v, %v; want cancelled", key, r, err)
	}
	if r, err := c.Cancel(ctx, id); err != nil || r != AlreadyCancelled {
		t.Errorf("Cancel by ID after by key = %v, %v; want already-cancelled", r, err)
	}
	if r, err := c.Cancel(ctx, Key{Topic: "k", Key: "no-such-key"}); err != nil || r != Unknown {
		t.Errorf("Cancel of an unknown key = %v, %v; want unknown", r, err)
	}
}
