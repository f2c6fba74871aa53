package server

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// TestPendingFromReputSegments: the buckets Stats and hourglass_pending
// count beyond memory are the segments reput knows, each counted from its
// header; a segment file reput does not know (made behind its back) is
// not one of them.
func TestPendingFromReputSegments(t *testing.T) {
	var opts Options
	eng := newBackend(t, &opts, nil)
	ctx := context.Background()
	at := time.Now().Add(time.Hour).Truncate(opts.SegmentDuration)
	for range 3 {
		if _, err := eng.Schedule(ctx, engine.Request{Topic: "far", At: at, Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(opts.DataDir, "schedule")
	bucket := at.UnixMilli()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		si, err := schedulelog.Stat(dir, bucket)
		if err == nil && si.HintEntries == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bucket's segment does not hold 3 synced entries within 10 s: %+v, %v", si, err)
		}
	}
	stray := bucket + 10*opts.SegmentDuration.Milliseconds()
	w, err := schedulelog.Create(dir, stray, opts.SegmentDuration, schedulelog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	src := &sources{eng: eng, dataDir: opts.DataDir, segDur: opts.SegmentDuration}
	buckets, err := src.pending(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, b := range buckets {
		switch b.start {
		case bucket:
			found = true
			if b.count != 3 || !b.approx || b.end != bucket+opts.SegmentDuration.Milliseconds() {
				t.Errorf("bucket %d: %+v, want 3 entries, approximate, ending %v later", bucket, b, opts.SegmentDuration)
			}
		case stray:
			t.Errorf("bucket %d of a segment reput does not know is counted: %+v", stray, b)
		}
	}
	if !found {
		t.Errorf("bucket %d is not counted: %+v", bucket, buckets)
	}
}
