package e2e

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/hourglassmq/hourglass/cluster"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// TestClusterKeysAcrossKill runs a 3-node NATS cluster and two `serve
// --cluster` nodes with a 6 s idempotency window: a keyed Schedule on a
// key of node a's partitions, a's process killed -9, and the same
// Schedule on b within the window answers the first ID; once the window
// has passed, the key makes a new message. (What keys do on one node and
// on a cluster alike is the conformance suite's, conform_cases_test.go.)
func TestClusterKeysAcrossKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 nats-server and 2 hourglass processes; takes about 15 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const partitions, window = 4, 6 * time.Second
	_, nodes := startCluster(t, ctx, 2, partitions, "--idempotency-window", window.String())
	a, b := nodes[0], nodes[1]
	const topic = "lst"

	// A key on one of a's partitions, a killed, the retry on b.
	onA := owned(a)
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("key%d", i); onA[cluster.KeyPartition(topic, k, partitions)] {
			key = k
		}
	}
	keyed := &hourglassv1.ScheduleRequest{Topic: topic, IdempotencyKey: key, When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 3_600_000}}
	sent := time.Now()
	first, err := a.client.Schedule(ctx, connect.NewRequest(keyed))
	if err != nil {
		t.Fatal(err)
	}
	a.stop(syscall.SIGKILL)
	again, err := b.client.Schedule(ctx, connect.NewRequest(keyed))
	if time.Since(sent) > window-time.Second {
		t.Fatalf("the retry came %v after the first Schedule; the window is %v", time.Since(sent), window)
	}
	if err != nil || again.Msg.Id != first.Msg.Id {
		t.Errorf("the retry on b after a was killed = %v, %v; want the first ID %s", again, err, first.Msg.Id)
	}
	// After the window (bounded polling; a retry within it stores nothing).
	var fresh string
	end := time.Now().Add(window + 30*time.Second)
	for fresh == "" && time.Now().Before(end) {
		res, err := b.client.Schedule(ctx, connect.NewRequest(keyed))
		switch {
		case err != nil:
			t.Logf("a retry during the takeover: %v", err) // Unavailable while partitions move
		case res.Msg.Id != first.Msg.Id:
			fresh = res.Msg.Id
		}
		time.Sleep(200 * time.Millisecond) // polling the server's answer, not waiting for time
	}
	if fresh == "" {
		t.Fatalf("the key never made a new message after the %v window", window)
	}
	if since := time.Since(sent); since < window {
		t.Errorf("a new message for the key %v after the first; want at least the window %v", since, window)
	}
}
