package workload

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/bench/internal/measure"
	"github.com/hourglassmq/hourglass/bench/internal/peers"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func redisAlways(t *testing.T) peers.System {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed (bash peers.sh install): the workloads are tested on a real Redis")
	}
	for _, s := range peers.Systems(peers.Config{PollInterval: 5 * time.Millisecond, Redeliver: time.Second}) {
		if s.Name == "redis" && s.Variant == "appendfsync always" {
			return s
		}
	}
	t.Fatal("no redis (appendfsync always) system")
	return peers.System{}
}

func smallOptions(t *testing.T) Options {
	return Options{
		Scale: 0.001, W3Scale: 0.0001, BodySize: 64, Producers: 2, Consumers: 2, Batch: 20,
		MinDelay: 200 * time.Millisecond, MaxDelay: 700 * time.Millisecond,
		RunTimeout: 30 * time.Second, Grace: 100 * time.Millisecond, CrashGrace: 200 * time.Millisecond,
		WorkDir: t.TempDir(), Port: freePort(t), Log: t.Logf,
	}
}

// TestWorkloadsOnRedis runs every workload small on a real redis-server
// that Run starts itself, and checks what each counts.
func TestWorkloadsOnRedis(t *testing.T) {
	sys := redisAlways(t)
	o := smallOptions(t)
	ctx := context.Background()

	w1 := Run(ctx, "W1", sys, 1, o, 0)
	if w1.End != "complete" || w1.Messages != 200 || w1.Acked != 200 || w1.Delivered != 200 || w1.Lost != 0 || w1.Early != 0 {
		t.Fatalf("W1: %+v", w1)
	}
	if w1.ProducePerSec <= 0 || w1.LatenessMax <= 0 || w1.LatenessP50 > w1.LatenessP99 || w1.LatenessP99 > w1.LatenessMax {
		t.Fatalf("W1: rate %v, lateness p50 %v p99 %v max %v", w1.ProducePerSec, w1.LatenessP50, w1.LatenessP99, w1.LatenessMax)
	}

	w2 := Run(ctx, "W2", sys, 1, o, w1.ProducePerSec)
	if w2.End != "complete" || w2.Delivered != 200 || w2.Early != 0 {
		t.Fatalf("W2: %+v", w2)
	}
	// Everything is due within one second that starts DrainSeconds before the last delivery.
	if w2.DrainSeconds <= 0 || w2.DrainSeconds > 10 {
		t.Fatalf("W2: drain %v s", w2.DrainSeconds)
	}

	w3 := Run(ctx, "W3", sys, 1, o, 0)
	if w3.End != "complete" || w3.Acked != 200 || w3.Delivered != 0 {
		t.Fatalf("W3: %+v", w3)
	}
	if w3.RSSAfter <= 0 || w3.PSSAfter <= 0 || w3.AnonAfter <= 0 || w3.DiskAfter <= w3.DiskBefore {
		t.Fatalf("W3: RSS %d PSS %d disk %d -> %d; want memory read and the AOF grown", w3.RSSAfter, w3.PSSAfter, w3.DiskBefore, w3.DiskAfter)
	}
}

// TestCrashWorkloadKillsAndRestarts checks that W4 kills the server (a new
// process serves afterwards) and still accounts for every message.
func TestCrashWorkloadKillsAndRestarts(t *testing.T) {
	sys := redisAlways(t)
	o := smallOptions(t)
	o.Scale = 0.005 // 1,000 messages, so that the kill comes while producing
	r := Run(context.Background(), "W4", sys, 1, o, 0)
	if r.End != "complete" || r.Acked != 1000 || r.Delivered != 1000 || r.Lost != 0 || r.Early != 0 {
		t.Fatalf("W4: %+v", r)
	}
	if r.DowntimeSeconds <= 0 {
		t.Fatalf("W4: downtime %v s; the server was not killed and restarted", r.DowntimeSeconds)
	}
}

func TestCrashEnd(t *testing.T) {
	deadline := time.Date(2026, 12, 2, 16, 0, 0, 0, time.UTC)
	grace := 12 * time.Second
	for _, c := range []struct {
		last time.Time
		want string
	}{
		{time.Time{}, "complete"},                // nothing delivered at all
		{deadline.Add(-time.Minute), "complete"}, // deliveries had stopped: what is missing is lost
		{deadline.Add(-time.Second), "timeout while still delivering: lost may count a backlog"},
	} {
		if got := crashEnd(c.last, deadline, grace); got != c.want {
			t.Errorf("crashEnd(last delivery %v before the deadline) = %q, want %q", deadline.Sub(c.last), got, c.want)
		}
	}
}

func TestCountsFollowTheirScales(t *testing.T) {
	for _, tc := range []struct {
		o      Options
		w2, w3 int
	}{
		{Options{Scale: 1}, 200_000, 2_000_000},
		{Options{Scale: 0.1}, 20_000, 200_000},
		{Options{Scale: 1, W2Scale: 10, W3Scale: 50}, 2_000_000, 100_000_000},
		{Options{Scale: 0.01, W3Scale: 5}, 2_000, 10_000_000},
	} {
		if tc.o.W2Count() != tc.w2 || tc.o.W3Count() != tc.w3 {
			t.Errorf("%+v: W2 %d, W3 %d; want %d, %d", tc.o, tc.o.W2Count(), tc.o.W3Count(), tc.w2, tc.w3)
		}
	}
}

func TestRandomBodyPadding(t *testing.T) {
	at := time.Unix(1_800_000_000, 5)
	zero := Options{BodySize: 256}.body(7, at)
	o := Options{BodySize: 256, RandomBody: true}
	a, b := o.body(7, at), o.body(8, at)
	for _, body := range [][]byte{zero, a, b} {
		id, due, err := measure.DecodeBody(body)
		if err != nil || len(body) != 256 || !due.Equal(at) || (id != 7 && id != 8) {
			t.Fatalf("body %x: id %d, due %v, err %v", body[:measure.HeaderSize], id, due, err)
		}
	}
	if !bytes.Equal(zero[measure.HeaderSize:], make([]byte, 256-measure.HeaderSize)) {
		t.Error("without RandomBody the padding is not zeros")
	}
	if n := bytes.Count(a[measure.HeaderSize:], []byte{0}); n > 20 {
		t.Errorf("random padding has %d zero bytes of %d", n, 256-measure.HeaderSize)
	}
	if bytes.Equal(a[measure.HeaderSize:], b[measure.HeaderSize:]) || !bytes.Equal(a, o.body(7, at)) {
		t.Error("random padding: the same for two messages, or not the same twice for one")
	}
}
