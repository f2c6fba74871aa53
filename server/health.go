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
	mu sync.Mutex
	at time.Time
	disk
}

// disk is the data directory's size (its files' sizes, and the space
// allocated to them) and its file system's free and total space.
type disk struct {
	data, allocated, free, total int64
}

func (d *diskSample) read(dir string) disk {
	d.mu.Lock()
	defer d.mu.Unlock()
	if dir == "" || time.Since(d.at) < diskEvery {
		return d.disk
	}
	d.at = time.Now()
	var st syscall.Statfs_t
	if syscall.Statfs(dir, &st) == nil {
		d.free, d.total = int64(st.Bavail)*int64(st.Bsize), int64(st.Blocks)*int64(st.Bsize)
	}
	d.data, d.allocated = 0, 0
	for _, u := range diskUsage(dir) {
		d.data += u.bytes
		d.allocated += u.allocated
	}
	return d.disk
}

// health is Stats' health section.
func (s *Server) health() *hourglassv1.ServerHealth {
	h := &hourglassv1.ServerHealth{}
	h.NotReady = s.notReady()
	h.Ready = h.NotReady == ""
	f := s.metrics.fsyncs.summary()
	h.FsyncCount, h.FsyncP50Ms, h.FsyncP99Ms = f.Count, f.P50Ms, f.P99Ms
	d := s.disk.read(s.opts.DataDir)
	h.DataBytes, h.DataAllocatedBytes, h.DiskFreeBytes, h.DiskTotalBytes = d.data, d.allocated, d.free, d.total
	return h
}
