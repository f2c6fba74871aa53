package commitlog

import (
	"errors"
	"io/fs"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglassmq/hourglass/segfile"
)

// Log is a segmented, append-only, memory-mapped log. Append, Sync,
// DeleteBefore, Close and the iterators may be called from any goroutine.
// A writable Log runs two goroutines of its own while they have work: the
// syncer (syncer.go), which makes appended records durable and visible,
// and the preallocator (prealloc.go), which creates the next segment file
// ahead of need. Each starts when asked for work and ends when none is
// left, so an idle log holds none.
type Log struct {
	opts Options
	dir  string

	// mu serialises appends (append.go) and guards the bytes of the
	// active mapping beyond written.
	mu struct {
		sync.Mutex
		active   *segment
		writePos int64 // file-data position of the next record in active
		written  int64 // logical offset one past the last appended record
		// spareAsked is the base of the last segment requested from the
		// preallocator: the next one is asked for once the active segment
		// is half full, not as soon as it starts, so that opening a new log
		// (a new queue topic) does not write a second segment of zeros at
		// once.
		spareAsked int64
		closed     bool
		err        error          // sticky write or fsync error
		pend       []pendingWrite // records staged for pwrite (SyncAlways)
		freeBufs   [][]byte       // staging buffers to reuse
		// syncFile flushes one segment file (tests make it fail).
		syncFile func(*os.File) error
		// syncing and preallocating: the syncer and the preallocator
		// goroutines run. A request that finds one stopped starts it; each
		// stops once no request waits (checked under mu, under which
		// requests are sent), so that an idle log (a queue topic with
		// nothing to do) holds no goroutine.
		syncing, preallocating bool
	}

	// segs are the segments sorted by base; the last one is active.
	segs struct {
		sync.RWMutex
		list []*segment
	}
	first atomic.Int64 // segs.list[0].base, readable after Close

	view   view         // what readers may see, and how they wait (view.go)
	syncer syncer       // group-commit state (syncer.go)
	pre    preallocator // the next segment, made ahead of need (prealloc.go)

	stop chan struct{} // closed by Close: stops the syncer and the preallocator
	wg   sync.WaitGroup

	recovery Recovery // what Open found; not changed after Open returns
}

// Open opens or creates the log in opts.Dir and recovers the active
// segment. The returned
// Recovery says whether a torn tail was truncated.
func Open(opts Options) (*Log, Recovery, error) {
	if err := opts.fill(); err != nil {
		return nil, Recovery{}, err
	}
	l := &Log{
		opts:   opts,
		dir:    opts.Dir,
		view:   view{notify: make(chan struct{})},
		syncer: syncer{kick: make(chan struct{}, 1)},
		pre:    preallocator{ask: make(chan int64, 1), extend: make(chan extendReq, 1), create: createSegment, allocRange: allocRange},
		stop:   make(chan struct{}),
	}
	l.mu.syncFile = fdatasync
	err := l.load()
	// Beside a writer, a read-only open can list a segment that retention
	// deletes before it is opened, or miss one being renamed into place:
	// such a race is gone when the directory is read again.
	for attempt := 0; err != nil && opts.ReadOnly && attempt < liveRetries &&
		(errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrMissingSegment)); attempt++ {
		l.releaseAll()
		l.recovery = Recovery{}
		time.Sleep(time.Millisecond)
		err = l.load()
	}
	if err != nil {
		l.releaseAll()
		return nil, Recovery{}, err
	}
	if opts.ReadOnly {
		return l, l.recovery, nil
	}
	l.pre.nextBase.Store(l.mu.active.end())
	l.pre.fill.synced = l.syncer.synced.Load()
	l.maybeRequestSpare() // l is not shared yet: no lock needed
	return l, l.recovery, nil
}

// Recovery returns what Open found and did.
func (l *Log) Recovery() Recovery { return l.recovery }

// Dir returns the log's directory.
func (l *Log) Dir() string { return l.dir }

// SegmentBases returns the base offset of every segment, oldest first;
// the last is the active one.
func (l *Log) SegmentBases() []int64 {
	l.segs.RLock()
	defer l.segs.RUnlock()
	out := make([]int64, len(l.segs.list))
	for i, s := range l.segs.list {
		out[i] = s.base
	}
	return out
}

// FirstOffset returns the offset of the oldest retained data.
func (l *Log) FirstOffset() int64 { return l.first.Load() }

// WrittenOffset returns the offset one past the last appended record,
// durable or not; readers see up to EndOffset.
func (l *Log) WrittenOffset() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.written
}

// EndOffset returns the offset one past the last record readers can see.
func (l *Log) EndOffset() int64 { return l.view.visible.Load() }

// DeleteBefore deletes whole segments that end at or before offset and are
// durable, never the active one, and fsyncs the directory. Iterators still
// reading a deleted segment keep it until they move on. It returns how many
// segments it deleted.
func (l *Log) DeleteBefore(offset int64) (int, error) {
	if l.opts.ReadOnly {
		return 0, ErrReadOnly
	}
	limit := min(offset, l.syncer.synced.Load(), l.view.visible.Load())
	l.segs.Lock()
	n := 0
	for n < len(l.segs.list)-1 && l.segs.list[n].end() <= limit {
		n++
	}
	gone := append([]*segment(nil), l.segs.list[:n]...)
	l.segs.list = append(l.segs.list[:0:0], l.segs.list[n:]...)
	l.first.Store(l.segs.list[0].base)
	l.segs.Unlock()
	var err error
	for _, s := range gone {
		s.removed.Store(true)
		if rerr := s.release(); rerr != nil && err == nil {
			err = rerr
		}
	}
	if n > 0 {
		if serr := segfile.SyncDir(l.dir); serr != nil && err == nil {
			err = serr
		}
	}
	return n, err
}

// Close syncs what was appended, stops the background goroutines and
// unmaps the segments. Iterators must be closed first or be abandoned.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.mu.closed = true
	l.mu.Unlock()
	var err error
	if !l.opts.ReadOnly {
		err = l.Sync()
		if err == nil {
			l.view.publish(l.syncer.synced.Load())
		}
		close(l.stop)
		l.wg.Wait()
	}
	l.view.wake()
	if rerr := l.releaseAll(); err == nil {
		err = rerr
	}
	return err
}

func (l *Log) releaseAll() error {
	var err error
	l.segs.Lock()
	for _, s := range l.segs.list {
		if rerr := s.release(); rerr != nil && err == nil {
			err = rerr
		}
	}
	l.segs.list = nil
	l.segs.Unlock()
	l.pre.mu.Lock()
	if l.pre.spare != nil {
		if rerr := l.pre.spare.release(); rerr != nil && err == nil {
			err = rerr
		}
		l.pre.spare = nil
	}
	l.pre.mu.Unlock()
	return err
}

// segmentFor returns the segment holding offset, acquired, or nil.
func (l *Log) segmentFor(offset int64) *segment {
	l.segs.RLock()
	defer l.segs.RUnlock()
	i := sort.Search(len(l.segs.list), func(i int) bool { return l.segs.list[i].end() > offset })
	if i == len(l.segs.list) || l.segs.list[i].base > offset {
		return nil
	}
	s := l.segs.list[i]
	s.acquire()
	return s
}

func (l *Log) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.closed
}
