package workload

import (
	"context"
	"net"
	"os/exec"
	"testing"
	"time"

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
