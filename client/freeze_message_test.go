package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/server"
)

// TestFreezeMessage freezes a pending message by key, sees it frozen with
// its remaining delay through Get by the first ID, thaws it by the first
// ID and receives it once, then checks the answers that change nothing.
func TestFreezeMessage(t *testing.T) {
	rs := startServer(t, server.Options{})
	c := newClient(t, rs.addr)
	ctx := context.Background()
	first, err := c.Schedule(ctx, Message{Topic: "fz", Body: []byte("b"), Delay: 300 * time.Millisecond, IdempotencyKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	frozen, left, err := c.FreezeMessage(ctx, Key{Topic: "fz", Key: "k"})
	if err != nil || left > 300*time.Millisecond {
		t.Fatalf("FreezeMessage by key = %s, %v, %v; want at most 300ms left", frozen, left, err)
	}
	if _, _, err := c.FreezeMessage(ctx, first); !errors.Is(err, ErrAlreadyFrozen) {
		t.Fatalf("FreezeMessage of a frozen message: %v; want ErrAlreadyFrozen", err)
	}
	// Past its old time: nothing is due while it is frozen.
	if ds, err := c.Receive(ctx, "fz", ReceiveOptions{Wait: 600 * time.Millisecond}); err != nil || len(ds) != 0 {
		t.Fatalf("Receive while frozen = %v, %v; want nothing", ds, err)
	}
	f, err := c.Get(ctx, first)
	if err != nil || f.State != StatePending || f.Message.ID != frozen || !f.Message.Frozen || f.Message.FrozenRemaining != left {
		t.Fatalf("Get(first) = %+v, %v; want pending as %s, frozen with %v left", f, err, frozen, left)
	}
	thawed, err := c.ThawMessage(ctx, first)
	if err != nil || thawed == frozen {
		t.Fatalf("ThawMessage(first) = %s, %v", thawed, err)
	}
	if _, err := c.ThawMessage(ctx, first); !errors.Is(err, ErrNotFrozen) {
		t.Fatalf("ThawMessage of a thawed message: %v; want ErrNotFrozen", err)
	}
	ds, err := c.Receive(ctx, "fz", ReceiveOptions{Wait: testTimeout})
	if err != nil || len(ds) != 1 || ds[0].ID != thawed || ds[0].OriginID != first {
		t.Fatalf("Receive after the thaw = %+v, %v; want %s (origin %s)", ds, err, thawed, first)
	}
	if _, ok := ds[0].Headers["hourglass-frozen"]; ok {
		t.Fatalf("delivered with the frozen mark: %v", ds[0].Headers)
	}
	if _, _, err := c.FreezeMessage(ctx, first); !errors.Is(err, ErrAlreadyDelivered) {
		t.Fatalf("FreezeMessage of a delivered message: %v; want ErrAlreadyDelivered", err)
	}
	if _, err := c.ThawMessage(ctx, Key{Topic: "fz", Key: "nope"}); !errors.Is(err, ErrNotPending) {
		t.Fatalf("ThawMessage of an unknown key: %v; want ErrNotPending", err)
	}
}
