package enginebench

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// small returns a quick configuration of scenario: the heavy parts scaled
// down so each run takes a few seconds at most.
func small(t *testing.T, scenario string, messages int) Config {
	c := defaults()
	c.Scenario, c.Messages, c.Window = scenario, messages, time.Second
	c.Batch = 100
	c.Timeout, c.Grace = time.Minute, 10*time.Second
	c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return c
}

func run1(t *testing.T, c Config) *Report {
	t.Helper()
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	r.WriteJSON(&b)
	t.Log(strings.TrimSpace(b.String()))
	return r
}

// checkFired holds a scenario that fires everything to what it must show.
func checkFired(t *testing.T, r *Report, n int) {
	t.Helper()
	if r.End != endComplete || r.Scheduled != n || r.Delivered != int64(n) {
		t.Errorf("end %q, scheduled %d, delivered %d; want complete, %d, %d", r.End, r.Scheduled, r.Delivered, n, n)
	}
	if r.Lost != 0 || r.Early != 0 || r.Duplicates != 0 || r.Anomalies != 0 {
		t.Errorf("lost %d, early %d, duplicates %d, anomalies %d; want 0", r.Lost, r.Early, r.Duplicates, r.Anomalies)
	}
	if !(0 <= r.LatenessP50Ms && r.LatenessP50Ms <= r.LatenessP99Ms && r.LatenessP99Ms <= r.LatenessMaxMs) {
		t.Errorf("lateness p50 %v, p99 %v, max %v: want 0 <= p50 <= p99 <= max", r.LatenessP50Ms, r.LatenessP99Ms, r.LatenessMaxMs)
	}
	if r.SchedulePerSec <= 0 || r.FirePerSec <= 0 {
		t.Errorf("schedule %v/s, fire %v/s; want both positive", r.SchedulePerSec, r.FirePerSec)
	}
}

// The firing scenarios run in parallel with each other, after the heap
// measuring ones (which must have the process to themselves).

func TestUniform(t *testing.T) {
	t.Parallel()
	r := run1(t, small(t, Uniform, 2000))
	checkFired(t, r, 2000)
	// The window starts after 1 s plus the time to schedule at 500,000/s.
	if r.DueFromSeconds != 1.004 || r.DueToSeconds != 2.004 {
		t.Errorf("due %v to %v s, want 1.004 to 2.004", r.DueFromSeconds, r.DueToSeconds)
	}
}

func TestHotSecond(t *testing.T) {
	t.Parallel()
	r := run1(t, small(t, HotSecond, 2000))
	checkFired(t, r, 2000)
	if span := r.DueToSeconds - r.DueFromSeconds; span < 0.999 || span > 1.001 || r.DueFromSeconds <= 1 {
		t.Errorf("due %v to %v s, want one second starting after 1 s", r.DueFromSeconds, r.DueToSeconds)
	}
}

func TestFarFuture(t *testing.T) {
	c := small(t, FarFuture, 20_000)
	// Day-long buckets: 30 segments. With hour-long ones the reput keeps
	// a write buffer per segment touched (720), which dominates at this N.
	c.SegmentDuration = 24 * time.Hour
	r := run1(t, c)
	if r.End != endComplete || r.Scheduled != 20_000 || r.Delivered != 0 {
		t.Errorf("end %q, scheduled %d, delivered %d; want complete, 20000, 0", r.End, r.Scheduled, r.Delivered)
	}
	if r.Lost != 0 || r.Early != 0 || r.Duplicates != 0 || r.Anomalies != 0 || r.LatenessMaxMs != 0 || r.FirePerSec != 0 {
		t.Errorf("lost %d, early %d, duplicates %d, anomalies %d, lateness %v, fire %v: nothing fires, want 0",
			r.Lost, r.Early, r.Duplicates, r.Anomalies, r.LatenessMaxMs, r.FirePerSec)
	}
	if r.HeapBytesPerPending <= 0 || r.HeapBytesPerPending >= 2000 {
		t.Errorf("heap per pending %v bytes, want above 0 and below 2000", r.HeapBytesPerPending)
	}
	if r.Segments < 29 || r.Segments > 31 {
		t.Errorf("%d segments, want 29 to 31 day-long ones", r.Segments)
	}
}

func TestRecovery(t *testing.T) {
	c := small(t, Recovery, 2000)
	c.offset, c.spread = 2*time.Second, time.Second // leaves ample time to schedule 2000 and restart
	r := run1(t, c)
	checkFired(t, r, 2000)
	if r.ReadySeconds <= 0 {
		t.Errorf("ready %v s, want positive", r.ReadySeconds)
	}
	if r.DeliveredBeforeRestart != 0 || r.PendingAtReady != 2000 {
		t.Errorf("delivered before restart %d, pending at ready %d; want 0 and 2000", r.DeliveredBeforeRestart, r.PendingAtReady)
	}
	if r.HeapGrowthBytes <= 0 {
		t.Errorf("heap growth %d bytes after the restart, want positive (the wheel holds 2000 entries)", r.HeapGrowthBytes)
	}
}

func TestDir(t *testing.T) {
	t.Run("absent_is_created_and_kept", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		c := small(t, FarFuture, 10)
		c.Dir = dir
		run1(t, c)
		if ents, err := os.ReadDir(dir); err != nil || len(ents) == 0 {
			t.Fatalf("data directory after the run: %d entries, %v; want it kept", len(ents), err)
		}
	})
	t.Run("non_empty_is_refused", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "precious"), nil, 0o644)
		c := small(t, FarFuture, 10)
		c.Dir = dir
		_, err := Run(context.Background(), c)
		if err == nil || !strings.Contains(err.Error(), `is not empty (it holds "precious" and 0 more); give an empty or absent directory`) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("file_is_refused", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "f")
		os.WriteFile(f, nil, 0o644)
		c := small(t, FarFuture, 10)
		c.Dir = f
		_, err := Run(context.Background(), c)
		if err == nil || !strings.Contains(err.Error(), "cannot be used") {
			t.Fatalf("got %v", err)
		}
	})
}
