package server

import (
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
	if h.DataBytes <= 0 || h.DiskTotalBytes <= 0 || h.DiskFreeBytes <= 0 || h.DiskFreeBytes > h.DiskTotalBytes {
		t.Errorf("disk: data %d, free %d of %d", h.DataBytes, h.DiskFreeBytes, h.DiskTotalBytes)
	}
	ts.srv.BeginShutdown()
	res, err = ts.client.Stats(t.Context(), connect.NewRequest(&hourglassv1.StatsRequest{}))
	if err == nil && (res.Msg.Health.Ready || res.Msg.Health.NotReady != "shutting down") {
		t.Errorf("health while shutting down: %+v", res.Msg.Health)
	}
}
