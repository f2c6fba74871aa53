package engine

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/dispatchlog"
)

// doneLogs reads a dispatch log as it grows, answers the first record of
// a seq, and starts over when the file is made anew under its name.
func TestDoneCache(t *testing.T) {
	dir := t.TempDir()
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	w, _, err := dispatchlog.Open(dir, start, time.Hour, dispatchlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, dispatchlog.Name(start))
	var c doneLogs
	want := func(seq uint64, r dispatchlog.Reason, ok bool) {
		t.Helper()
		got, found, err := c.reason(path, seq)
		if err != nil || found != ok || (ok && got != r) {
			t.Fatalf("reason(%d) = %v, %v, %v; want %v, %v", seq, got, found, err, r, ok)
		}
	}
	want(1, 0, false)
	if err := w.AppendSync(dispatchlog.Done{Seq: 1, Reason: dispatchlog.Cancelled}, dispatchlog.Done{Seq: 2, Reason: dispatchlog.Delivered}); err != nil {
		t.Fatal(err)
	}
	want(1, dispatchlog.Cancelled, true)
	want(2, dispatchlog.Delivered, true)
	want(3, 0, false)
	// Enough more to be merged into the sorted part; seq 1 again: the
	// first record wins.
	for i := range 3000 {
		if err := w.Append(dispatchlog.Done{Seq: uint64(10 + i), Reason: dispatchlog.Rescheduled}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.AppendSync(dispatchlog.Done{Seq: 1, Reason: dispatchlog.Delivered}); err != nil {
		t.Fatal(err)
	}
	want(1, dispatchlog.Cancelled, true)
	want(2999, dispatchlog.Rescheduled, true)
	want(5000, 0, false)
	w.Close()
	// Made anew: the old records are gone.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	want(1, 0, false)
	w, _, err = dispatchlog.Open(dir, start, time.Hour, dispatchlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.AppendSync(dispatchlog.Done{Seq: 7, Reason: dispatchlog.DeadLettered}); err != nil {
		t.Fatal(err)
	}
	want(1, 0, false)
	want(7, dispatchlog.DeadLettered, true)
}
