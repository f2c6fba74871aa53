package e2e

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// metricValue returns the value of the unlabelled metric name on p's
// /metrics, or -1 if it is not there.
func metricValue(t *testing.T, p *proc, name string) float64 {
	t.Helper()
	resp, err := http.Get(p.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// TestFaultEngineEntryFlip: one flipped byte inside an entry in the middle
// of a due bucket of a stopped server costs that entry only: after the
// restart every other message of the bucket is delivered, the damaged one
// is rebuilt from the commitlog (which still holds it) and delivered too,
// and the damage is reported in the log, the metric and inspect verify.
func TestFaultEngineEntryFlip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, dir, nil)
	const topic, n = "flip", 20
	// One 2 s bucket, a few seconds ahead.
	bucket := (time.Now().Add(4*time.Second).UnixMilli()/2000 + 1) * 2000
	at := time.UnixMilli(bucket + 500)
	ids := clScheduleAt(t, p, topic, "m", n, at)
	// Wait until reput has routed every record into the segment (a stop
	// leaves the rest to route at the next start).
	for deadline := time.Now().Add(10 * time.Second); metricValue(t, p, "hourglass_reput_lag_bytes") != 0; {
		if time.Now().After(deadline) {
			t.Fatal("reput did not route the messages within 10 s")
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
	p.stop(syscall.SIGTERM)

	sched := filepath.Join(dir, "schedule", schedulelog.Name(bucket))
	rd, err := schedulelog.OpenReader(sched)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	it := rd.Iter()
	for it.Next() {
		offs = append(offs, it.Offset())
	}
	rd.Close()
	if it.Err() != nil || len(offs) != n {
		t.Fatalf("segment %s: %d entries, %v; want %d", sched, len(offs), it.Err(), n)
	}
	f, err := os.OpenFile(sched, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := []byte{0}
	f.ReadAt(b, offs[n/2]+24)
	b[0] ^= 0x08
	if _, err := f.WriteAt(b, offs[n/2]+24); err != nil {
		t.Fatal(err)
	}
	f.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, binary, "inspect", "verify", "--data-dir", dir).CombinedOutput()
	if !strings.Contains(string(out), schedulelog.Name(bucket)) || !strings.Contains(string(out), "the commitlog still holds them") {
		t.Errorf("inspect verify does not report the damaged entry and that the commitlog holds it:\n%s", out)
	}

	p2 := start(t, dir, nil)
	got := receive(t, p2.client, topic, n, 20*time.Second)
	var gotIDs []string
	for _, r := range got {
		gotIDs = append(gotIDs, r.m.Id)
		if r.at.Before(at) {
			t.Errorf("%s delivered %v before its time", r.m.Id, at.Sub(r.at))
		}
	}
	for _, id := range ids {
		if c := countOf(gotIDs, id); c != 1 {
			t.Errorf("%s delivered %d times, want once", id, c)
		}
	}
	receiveNone(t, p2.client, topic, 300*time.Millisecond)
	if !strings.Contains(p2.log(), "rebuilt from the commitlog") || !strings.Contains(p2.log(), sched) {
		t.Errorf("the server log does not report the damaged entry with its file")
	}
	if v := metricValue(t, p2, "hourglass_corrupt_entries_total"); v < 1 {
		t.Errorf("hourglass_corrupt_entries_total = %v, want at least 1", v)
	}
	p2.stop(syscall.SIGTERM)
}

func countOf(s []string, v string) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

// TestFaultEngineIdempotencyAcrossRestart: an idempotency key reused after
// its window is over gets a new message, also when a restart lies between:
// the window is measured from the first Schedule's time, not from the
// restart that read the key back.
func TestFaultEngineIdempotencyAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const window = time.Second
	args := []string{"--idempotency-window", window.String()}
	p := start(t, dir, nil, args...)
	req := func(body string) *hourglassv1.ScheduleRequest {
		return &hourglassv1.ScheduleRequest{Topic: "keys", Body: []byte(body), When: delayMs(60_000), IdempotencyKey: "order-1"}
	}
	first := schedule(t, p.client, req("first"))
	t0 := time.Now()
	if again := schedule(t, p.client, req("retry")); again != first {
		t.Fatalf("a retry within the window got %s, want %s", again, first)
	}
	p.stop(syscall.SIGTERM)
	// The window is what is tested: let it pass on the server's clock.
	time.Sleep(time.Until(t0.Add(window + 100*time.Millisecond)))
	p2 := start(t, dir, nil, args...)
	second := schedule(t, p2.client, req("after the window"))
	if second == first {
		t.Fatalf("a key reused after its window, across a restart, was answered with the old ID %s", first)
	}
	p2.stop(syscall.SIGTERM)
}
