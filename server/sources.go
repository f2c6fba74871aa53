package server

import (
	"cmp"
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/queue"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// sources are what Metrics and Stats read at request time.
type sources struct {
	eng     *engine.Engine
	q       *queue.Queue
	dataDir string
	segDur  time.Duration

	listMu  sync.Mutex
	listAt  time.Time                 // guarded by listMu
	list    []schedulelog.SegmentInfo // guarded by listMu
	listErr error                     // guarded by listMu
}

// listTTL is how long the segments' headers read by segments are reused:
// a bucket not in memory is counted from its segment's header, one file
// opened per bucket (up to years ahead), and far buckets change slowly.
const listTTL = 10 * time.Second

var errNoDataDir = errors.New("server: no data directory given")

// bucketCount is what one schedule bucket holds that is not delivered.
type bucketCount struct {
	start, end int64 // UTC epoch ms
	count      int64
	approx     bool // not in memory: entries written, cancelled ones included
}

// segments returns the schedule segments with their headers, at most
// every listTTL. Which segments exist is reput's list (Engine.Segments);
// how many entries a segment holds is known only to its file's header
// (reput lists names alone at start, I5, and keeps no counts), so each
// listed segment's header is read here. A segment retired meanwhile is
// left out; the first damaged header is returned with the rest.
func (s *sources) segments() ([]schedulelog.SegmentInfo, error) {
	if s.dataDir == "" {
		return nil, errNoDataDir
	}
	s.listMu.Lock()
	defer s.listMu.Unlock()
	if !s.listAt.IsZero() && time.Since(s.listAt) <= listTTL {
		return s.list, s.listErr
	}
	dir := filepath.Join(s.dataDir, "schedule")
	known := s.eng.Segments()
	list := make([]schedulelog.SegmentInfo, 0, len(known))
	var first error
	for _, sg := range known {
		si, err := schedulelog.Stat(dir, sg.Start)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			first = cmp.Or(first, err)
		default:
			list = append(list, si)
		}
	}
	s.list, s.listErr, s.listAt = list, first, time.Now()
	return s.list, s.listErr
}

// pending returns what each bucket holds that is not delivered, sorted by
// start: exact for the buckets in memory, the synced entry count of the
// others. Without a data directory it has only the loaded buckets.
func (s *sources) pending(now time.Time) ([]bucketCount, error) {
	loaded := s.eng.PendingByBucket()
	segs, err := s.segments()
	out := make([]bucketCount, 0, len(segs)+len(loaded))
	seen := make(map[int64]bool, len(segs))
	for _, sg := range segs {
		seen[sg.Start] = true
		if n, ok := loaded[sg.Start]; ok {
			out = append(out, bucketCount{start: sg.Start, end: sg.End(), count: n})
			continue
		}
		if sg.End() <= now.UnixMilli() && sg.HintEntries == 0 {
			continue
		}
		out = append(out, bucketCount{start: sg.Start, end: sg.End(), count: int64(sg.HintEntries), approx: true})
	}
	for start, n := range loaded {
		if !seen[start] {
			out = append(out, bucketCount{start: start, end: start + s.segDur.Milliseconds(), count: n})
		}
	}
	slices.SortFunc(out, func(a, b bucketCount) int { return cmp.Compare(a.start, b.start) })
	return out, err
}

// usage is the size of one log's files: the sum of their sizes, and the
// space allocated to them on disk (what du counts; less than bytes while
// preallocated segments are unwritten, on file systems that leave them
// sparse).
type usage struct {
	log                     string
	bytes, allocated, files int64
}

// diskUsage adds up the files of the engine's and the queue's logs. It
// stats the files themselves: their sizes on disk are the filesystem's to
// know (segments are claimed ahead of their data, idle queue topics are
// closed, and a stray temporary file takes space too), and no log's owner
// keeps them.
func diskUsage(dataDir string) []usage {
	out := []usage{{log: "commitlog"}, {log: "schedule"}, {log: "queue"}}
	for i := range out {
		dir := filepath.Join(dataDir, out[i].log)
		filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			if info, err := d.Info(); err == nil && info.Mode().IsRegular() {
				out[i].bytes += info.Size()
				out[i].allocated += allocated(info)
				out[i].files++
			}
			return nil
		})
	}
	return out
}

// allocated is the space a file takes on disk: its 512-byte blocks, as
// du counts them, or its size where the system does not say.
func allocated(info fs.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return info.Size()
}

// QueueDir is where the server's queue lives inside a data directory.
func QueueDir(dataDir string) string { return filepath.Join(dataDir, "queue") }
