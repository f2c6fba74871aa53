package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/server"
)

// TestEdit edits a pending message's body and headers by ID and by key,
// receives the new content only, and checks the answers once it is too
// late.
func TestEdit(t *testing.T) {
	rs := startServer(t, server.Options{})
	c := newClient(t, rs.addr)
	ctx := context.Background()
	if _, err := c.Edit(ctx, mustParseID(t, fakeID("x")), Edit{}); !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("Edit of nothing: %v; want ErrInvalidMessage", err)
	}
	first, err := c.Schedule(ctx, Message{Topic: "e", Body: []byte("old"), Delay: 400 * time.Millisecond, IdempotencyKey: "k",
		Headers: map[string]string{"a": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Edit(ctx, first, Edit{Body: []byte{}}); err != nil {
		t.Fatalf("Edit to an empty body: %v", err)
	}
	edited, err := c.Edit(ctx, Key{Topic: "e", Key: "k"}, Edit{Headers: map[string]string{"b": "2"}})
	if err != nil || edited.Time() != first.Time() {
		t.Fatalf("Edit of the headers by key = %s, %v; want a new ID at %v", edited, err, first.Time())
	}
	if f, err := c.Get(ctx, first); err != nil || f.State != StatePending || f.Message.ID != edited || len(f.Message.Body) != 0 || f.Message.Headers["b"] != "2" {
		t.Fatalf("Get(first) = %+v, %v; want pending as %s, no body, b=2", f, err, edited)
	}
	ds, err := c.Receive(ctx, "e", ReceiveOptions{Wait: testTimeout})
	if err != nil || len(ds) != 1 {
		t.Fatalf("Receive: %v, %v", ds, err)
	}
	m := ds[0]
	if m.ID != edited || m.OriginID != first || len(m.Body) != 0 || m.Headers["b"] != "2" || m.Headers["a"] != "" {
		t.Fatalf("received %+v; want %s (origin %s), no body, b=2 only", m, edited, first)
	}
	if _, err := c.Edit(ctx, first, Edit{Body: []byte("late")}); !errors.Is(err, ErrAlreadyDelivered) {
		t.Fatalf("Edit of a delivered message: %v; want ErrAlreadyDelivered", err)
	}
	if _, err := c.Edit(ctx, Key{Topic: "e", Key: "nope"}, Edit{Body: []byte("x")}); !errors.Is(err, ErrNotPending) {
		t.Fatalf("Edit of an unknown key: %v; want ErrNotPending", err)
	}
}

// TestScheduleRefusesTwoExpiries: a Message with both ExpireAt and TTL,
// or a negative TTL, is refused before anything is sent.
func TestScheduleRefusesTwoExpiries(t *testing.T) {
	c := newClient(t, "127.0.0.1:1") // never called: refused before sending
	for _, m := range []Message{
		{Topic: "x", TTL: time.Second, ExpireAt: time.Now().Add(time.Hour)},
		{Topic: "x", TTL: -time.Second},
	} {
		if _, err := c.Schedule(context.Background(), m); !errors.Is(err, ErrInvalidMessage) {
			t.Errorf("Schedule(TTL %v, ExpireAt %v): %v; want ErrInvalidMessage", m.TTL, m.ExpireAt, err)
		}
	}
}
