package queue

import (
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

// TestLookup follows messages through the states Lookup tells apart, and
// checks that Lookup leases nothing: after it, Receive gets every waiting
// message with attempt 0.
func TestLookup(t *testing.T) {
	dir := t.TempDir()
	q := openQ(t, dir, nil)
	ctx := t.Context()
	ids := deliver(t, q, "lk", "a", "b", "c")
	look := func(id message.ID) Lookup {
		t.Helper()
		l, err := q.Lookup(ctx, "lk", id)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	for _, id := range ids {
		if l := look(id); l.Held != Waiting {
			t.Errorf("before Receive: %v held %v, want Waiting", id, l.Held)
		}
	}
	got := recv(t, q, "lk", 2, time.Minute)
	if len(got) != 2 || got[0].Attempt != 0 {
		t.Fatalf("Receive after Lookup: %d messages (attempt %d), want 2 with attempt 0", len(got), got[0].Attempt)
	}
	if l := look(ids[0]); l.Held != Leased || l.LeaseUntil.Before(time.Now()) {
		t.Errorf("received: %+v, want Leased until after now", l)
	}
	if l := look(ids[2]); l.Held != Waiting {
		t.Errorf("not received: %+v, want Waiting", l)
	}
	if err := q.Ack(ctx, "lk", ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := q.Nack(ctx, "lk", ids[1], NackOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		id   message.ID
		want Held
	}{
		{"acked", ids[0], Acked},
		{"nacked_to_receive_again", ids[1], Waiting},
		{"never_received", ids[2], Waiting},
		{"never_delivered", message.ID{DeliverAt: 1, Seq: 1 << 40}, NotHeld},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if l := look(tc.id); l.Held != tc.want {
				t.Errorf("%+v, want %v", l, tc.want)
			}
		})
	}
	if l, err := q.Lookup(ctx, "no-such-topic", ids[0]); err != nil || l.Held != NotHeld {
		t.Errorf("unknown topic: %+v, %v; want NotHeld", l, err)
	}
	if _, err := q.Lookup(ctx, "bad topic", ids[0]); err == nil {
		t.Error("bad topic name: no error")
	}
	// After a restart the acked one is still acked, the others wait.
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = openQ(t, dir, nil)
	defer q.Close()
	for i, want := range []Held{Acked, Waiting, Waiting} {
		if l := look(ids[i]); l.Held != want {
			t.Errorf("after restart: %s held %v, want %v", []string{"a", "b", "c"}[i], l.Held, want)
		}
	}
}
