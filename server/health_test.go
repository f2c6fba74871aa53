package server

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// Stats' health: ready, the data directory's size and its file system's
// space, and recent fsyncs once there were some.
func TestStatsHealth(t *testing.T) {
	ts := newTestServer(t, Options{})
	<-ts.eng.Ready()
	ts.srv.metrics.Fsynced(3 * time.Millisecond)
	ts.srv.metrics.Fsynced(5 * time.Millisecond)
	res, err := ts.client.Stats(t.Context(), connect.NewRequest(&hourglassv1.StatsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	h := res.Msg.Health
	if h == nil || !h.Ready || h.NotReady != "" {
		t.Fatalf("health %+v: want ready", h)
	}
	if h.FsyncCount != 2 || h.FsyncP50Ms != 5 || h.FsyncP99Ms != 5 {
		t.Errorf("fsyncs %d, p50 %v, p99 %v; want 2, 5, 5", h.FsyncCount, h.FsyncP50Ms, h.FsyncP99Ms)
	}
	if h.DataAllocatedBytes <= 0 {
		t.Errorf("disk: %d bytes allocated to the data directory's files, want some", h.DataAllocatedBytes)
	}
	if h.DataBytes <= 0 || h.DiskTotalBytes <= 0 || h.DiskFreeBytes <= 0 || h.DiskFreeBytes > h.DiskTotalBytes {
		t.Errorf("disk: data %d, free %d of %d", h.DataBytes, h.DiskFreeBytes, h.DiskTotalBytes)
	}
	ts.srv.BeginShutdown()
	res, err = ts.client.Stats(t.Context(), connect.NewRequest(&hourglassv1.StatsRequest{}))
	if err == nil && (res.Msg.Health.Ready || res.Msg.Health.NotReady != "shutting down") {
		t.Errorf("health while shutting down: %+v", res.Msg.Health)
	}
}

// diskUsage counts a file's size and the space allocated to it apart: a
// preallocated segment that holds 8 KiB of its 1 MiB takes 8 KiB on disk
// where the file system leaves the rest sparse, as du says.
func TestDiskUsageAllocated(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "commitlog"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "commitlog", "00000000000000000000.log"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(make([]byte, 8192)); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 20); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	var got usage
	for _, u := range diskUsage(dir) {
		if u.log == "commitlog" {
			got = u
		}
	}
	if got.files != 1 || got.bytes != 1<<20 {
		t.Fatalf("commitlog usage %+v: want 1 file of 1 MiB", got)
	}
	if got.allocated < 8192 || got.allocated >= got.bytes {
		t.Errorf("commitlog: %d bytes allocated of %d; want at least the 8 KiB written and less than the file's size (sparse)", got.allocated, got.bytes)
	}
}
