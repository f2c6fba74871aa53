package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// rssMiB is the resident set of process pid in MiB.
func rssMiB(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("cannot read the server's resident set: %v", err)
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	t.Skip("no VmRSS in /proc/<pid>/status")
	return 0
}

// TestIdleTopicsReturnMemory: topics used once and left idle cost what
// unused ones do once --topic-idle-timeout passed: the goroutines go back
// to the baseline (the queue's topics and the engine's lanes close; the
// logs' goroutines ran only while they had work) and the resident set to
// within 50 MiB of the unused server's (the report: 10,000 topics took it
// from 29 to 595 MB, 49,094 goroutines, and it stayed at 490 MB). 2,000
// topics by default; HOURGLASS_IDLE_TOPICS=10000 runs the report's case.
func TestIdleTopicsReturnMemory(t *testing.T) {
	topics := 2000
	if v := os.Getenv("HOURGLASS_IDLE_TOPICS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("HOURGLASS_IDLE_TOPICS=%q: want a count", v)
		}
		topics = n
	}
	p := start(t, t.TempDir(), nil, "--topic-idle-timeout", "1s", "--max-topics", strconv.Itoa(topics+10))
	pid := p.cmd.Process.Pid
	g0, rss0 := metric(t, p, "go_goroutines"), rssMiB(t, pid)
	for from := 0; from < topics; from += 1000 {
		var msgs []*hourglassv1.ScheduleRequest
		for i := from; i < min(from+1000, topics); i++ {
			msgs = append(msgs, &hourglassv1.ScheduleRequest{Topic: fmt.Sprintf("once-%05d", i), Body: []byte("x")})
		}
		if _, err := p.client.ScheduleBatch(ctxT(t), connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: msgs})); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	var gPeak, rssPeak float64
	sample := func() (float64, float64) {
		g, rss := metric(t, p, "go_goroutines"), rssMiB(t, pid)
		gPeak, rssPeak = max(gPeak, g), max(rssPeak, rss)
		return g, rss
	}
	within := time.Duration(topics/100+60) * time.Second
	for metric(t, p, "hourglass_queue_appended_total") < float64(topics) {
		sample()
		if time.Since(start) > within {
			t.Fatalf("%v of %d messages in the queue after %v", metric(t, p, "hourglass_queue_appended_total"), topics, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
	delivered := time.Since(start)
	// Idle now: /metrics is read every 2 s only, as a scraper would (each
	// read of 10,000 topics' series allocates, and an idle server returns
	// memory once no collection ran for 5 s).
	var g, rss float64
	for i := 0; ; i++ {
		rss = rssMiB(t, pid)
		if i%4 == 0 {
			g, _ = sample()
		}
		if g <= g0+2 && rss <= rss0+50 {
			break
		}
		if time.Since(start) > 2*within {
			t.Fatalf("%d topics idle for %v: %v goroutines (%v before them), resident %.0f MiB (%.0f before them); want the goroutines back and at most 50 MiB more",
				topics, time.Since(start)-delivered, g, g0, rss, rss0)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("%d topics: unused %v goroutines, %.0f MiB resident; at most %v goroutines and %.0f MiB while used (all delivered after %v); %v goroutines and %.0f MiB %v later",
		topics, g0, rss0, gPeak, rssPeak, delivered.Round(time.Millisecond), g, rss, (time.Since(start) - delivered).Round(time.Second))
	// The messages wait on disk: an idle topic opens again when received.
	if ids := qDrain(t, p, "once-00000"); len(ids) != 1 {
		t.Errorf("topic once-00000 handed out %d messages after going idle, want its one", len(ids))
	}
	p.stop(syscall.SIGTERM)
}
