package e2e

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// startInProcess runs a node of the root package in this process, as a
// program embedding Hourglass does, configured like start's servers, and
// returns it as a proc the tests that only talk to a server can use (no
// signals, no log); set, if not nil, changes the default config.
func startInProcess(t *testing.T, set func(*hourglass.Config)) *proc {
	t.Helper()
	cfg := hourglass.DefaultConfig()
	cfg.DataDir, cfg.SegmentDuration = t.TempDir(), 2*time.Second
	if set != nil {
		set(&cfg)
	}
	cfg.Logger = slog.New(slog.DiscardHandler)
	node, err := hourglass.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		node.Close()
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- node.Serve(ln) }()
	t.Cleanup(func() {
		if err := node.Close(); err != nil {
			t.Errorf("closing the node: %v", err)
		}
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v, want http.ErrServerClosed", err)
		}
	})
	select {
	case <-node.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the node was not ready after 30s")
	}
	p := &proc{t: t, addr: ln.Addr().String(), exited: make(chan struct{})}
	p.url = "http://" + p.addr
	p.client = hourglassv1connect.NewHourglassServiceClient(http.DefaultClient, p.url)
	return p
}

// TestClientInProcess runs TestClient's cases against an embedded node:
// the same answers as from the binary.
func TestClientInProcess(t *testing.T) {
	p := startInProcess(t, func(c *hourglass.Config) { c.AuthToken = "sesame" })
	t.Run("schedule_consume_round_trip", func(t *testing.T) { t.Parallel(); testClientRoundTrip(t, p) })
	t.Run("producer_batches", func(t *testing.T) { t.Parallel(); testClientProducer(t, p) })
	t.Run("cancel_answers", func(t *testing.T) { t.Parallel(); testClientCancel(t, p) })
	t.Run("consumer_nack_retry", func(t *testing.T) { t.Parallel(); testClientNack(t, p) })
	t.Run("errors_keep_codes", func(t *testing.T) { t.Parallel(); testClientErrors(t, p) })
	t.Run("ack_batch", func(t *testing.T) { t.Parallel(); testClientAckBatch(t, p) })
	t.Run("consume_acks_in_batches", func(t *testing.T) { t.Parallel(); testClientConsumeBatchesAcks(t, p) })
}
