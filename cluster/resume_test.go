package cluster

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/internal/logtest"
	"github.com/hourglassmq/hourglass/message"
)

// TestSinkRetriesResumeWithinASecond: a partition whose deliveries fail
// for a while (the delivery stream electing a leader) retries at most
// SinkBackoff apart, not the engine's default 30 s.
func TestSinkRetriesResumeWithinASecond(t *testing.T) {
	ns := startNATS(t)
	ctx := ctxT(t)
	var mu sync.Mutex
	fails := 7
	var delivered []message.ID
	sink := engine.SinkFunc(func(_ context.Context, _ string, b []engine.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 {
			fails--
			return errors.New("nats: no responders available for request")
		}
		for _, d := range b {
			delivered = append(delivered, d.ID)
		}
		return nil
	})
	h := &logtest.Durations{Key: "backoff"}
	n, err := Open(ctx, Options{IdempotencyWindow: 10 * time.Minute, URL: ns.ClientURL(), NodeID: "a", Advertise: "http://127.0.0.1:1", Partitions: 1,
		LeaseTTL: 3 * time.Second, Replicas: 1, DataDir: t.TempDir(), Sink: sink, Logger: slog.New(h), Engine: EngineOptions{SegmentDuration: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	waitFor(t, 10*time.Second, "node never owned its partition", func() bool { return len(n.Owned()) == 1 })
	ids, err := n.ScheduleBatch(ctx, []engine.Request{{Topic: "t", Body: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	// 50+100+200+400+800+1000+1000 ms of waits; 30 s would be a failure.
	waitFor(t, 15*time.Second, "not delivered after 7 failures", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(delivered) == 1 && delivered[0] == ids[0]
	})
	got := h.Seen()
	want := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
		800 * time.Millisecond, SinkBackoff, SinkBackoff}
	if !slices.Equal(got, want) {
		t.Fatalf("retry waits %v; want %v", got, want)
	}
}
