package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/client"
)

// TestFreeze freezes a topic with the client, reads a pending message's
// due time while frozen and after Resume, and checks the freeze's record.
func TestFreeze(t *testing.T) {
	c := startNode(t, nil)
	ctx := context.Background()
	id, err := c.Schedule(ctx, client.Message{Topic: "fz", Body: []byte("later"), Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Freeze(ctx, "fz")
	if err != nil || !*p.Effective.Freeze || !*p.Effective.Paused || len(p.Freezes) != 1 || !p.Freezes[0].EndedAt.IsZero() {
		t.Fatalf("Freeze = %+v, %v; want frozen, paused, one lasting freeze", p, err)
	}
	// The freeze counts whole milliseconds: wait until one has passed.
	deadline := time.Now().Add(opTimeout)
	for {
		f, err := c.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if f.Message.Frozen && f.Message.DueAt.After(f.Message.DeliverAt) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Get while frozen = %+v; want Frozen and DueAt after DeliverAt", f.Message)
		}
	}
	p, err = c.Resume(ctx, "fz")
	if err != nil || *p.Effective.Freeze || *p.Effective.Paused || len(p.Freezes) != 1 || p.Freezes[0].EndedAt.IsZero() {
		t.Fatalf("Resume = %+v, %v; want neither paused nor frozen, the freeze ended", p, err)
	}
	f, err := c.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	fz := p.Freezes[0]
	if want := f.Message.DeliverAt.Add(fz.EndedAt.Sub(fz.BeganAt)); f.Message.Frozen || !f.Message.DueAt.Equal(want) {
		t.Errorf("Get after Resume: due %v, frozen %v; want %v (deliver_at + the freeze's length)", f.Message.DueAt, f.Message.Frozen, want)
	}
}
