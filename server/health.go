package server

import (
	"sync"
	"syscall"
	"time"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// diskEvery bounds how often Stats measures the data directory.
const diskEvery = 10 * time.Second

// diskSample is the data directory's size and its file system's space,
// measured at most every diskEvery.
type diskSample struct {
	mu                sync.Mutex
	at                time.Time
	data, free, total int64
}

func (d *diskSample) read(dir string) (data, free, total int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if dir == "" || time.Since(d.at) < diskEvery {
		return d.data, d.free, d.total
	}
	d.at = time.Now()
	var st syscall.Statfs_t
	if syscall.Statfs(dir, &st) == nil {
		d.free, d.total = int64(st.Bavail)*int64(st.Bsize), int64(st.Blocks)*int64(st.Bsize)
	}
	var n int64
	for _, u := range diskUsage(dir) {
		n += u.bytes
	}
	d.data = n
	return d.data, d.free, d.total
}

// health is Stats' health section.
func (s *Server) health() *hourglassv1.ServerHealth {
	h := &hourglassv1.ServerHealth{}
	h.NotReady = s.notReady()
	h.Ready = h.NotReady == ""
	f := s.metrics.fsyncs.summary()
	h.FsyncCount, h.FsyncP50Ms, h.FsyncP99Ms = f.Count, f.P50Ms, f.P99Ms
	h.DataBytes, h.DiskFreeBytes, h.DiskTotalBytes = s.disk.read(s.opts.DataDir)
	return h
}
