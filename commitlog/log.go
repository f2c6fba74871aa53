package commitlog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hourglassmq/hourglass/internal/segfile"
	"github.com/hourglassmq/hourglass/record"
)

// Record is one record to append: a type (1-255, 0 is reserved), flags and
// a payload of at most record.MaxPayload bytes.
type Record struct {
	Type    uint8
	Flags   uint8
	Payload []byte
}

// Log is a segmented, append-only, memory-mapped log. Append, Sync,
// DeleteBefore, Close and the iterators may be called from any goroutine.
type Log struct {
	opts Options
	dir  string

	// mu serialises appends: it guards active, writePos, written, closed
	// and err, and the bytes of the active mapping beyond written.
	mu       sync.Mutex
	active   *segment
	writePos int64 // file-data position of the next record in active
	written  int64 // logical offset one past the last appended record
	// spareAsked is the base of the last segment requested from the
	// preallocator: the next one is asked for once the active segment is
	// half full, not as soon as it starts, so that opening a new log (a
	// new queue topic) does not write a second segment of zeros at once.
	spareAsked int64
	closed     bool
	err        error          // sticky write or fsync error
	pend       []pendingWrite // records staged for pwrite (SyncAlways)
	freeBufs   [][]byte       // staging buffers to reuse

	// segsMu guards segs (sorted by base; the last one is active).
	segsMu sync.RWMutex
	segs   []*segment
	first  atomic.Int64 // segs[0].base, readable after Close

	// visible is the logical end of what readers may see: durable data
	// under SyncAlways and SyncInterval, all written data under SyncNone.
	visible atomic.Int64
	// notifyMu guards notify, which is closed (and replaced) whenever
	// visible advances, the log fails, or it closes.
	notifyMu sync.Mutex
	notify   chan struct{}
	waiters  atomic.Int32          // goroutines blocked on notify
	failed   atomic.Pointer[error] // sticky error, for waiters
	// synced is the logical end of what an fsync has covered.
	synced atomic.Int64
	// syncMu serialises Sync, so that staged writes reach the file before
	// any fsync that claims to cover them.
	syncMu sync.Mutex

	// syncFile flushes one segment file (tests make it fail). Guarded by mu.
	syncFile func(*os.File) error

	// preMu guards spare, the preallocated next segment, spareErr, and
	// create, which makes a segment file (tests make it fail).
	preMu    sync.Mutex
	spare    *segment
	spareErr error
	create   func(dir string, base, size int64, zeroFill bool) (string, error)
	preCh    chan int64 // bases to preallocate
	// fillSyncs and fillSynced are syncs and synced when zeroFill last
	// decided how to preallocate. Guarded by preMu.
	fillSyncs, fillSynced int64
	// nextBase is the base the next segment must have: the active
	// segment's end, or further while a reservation is in progress.
	// Written under preMu.
	nextBase atomic.Int64

	syncCh  chan struct{} // wakes the syncer; capacity 1
	appends atomic.Int64  // Append calls that wrote records, for the syncer
	syncs   atomic.Int64  // fsync rounds that covered new data
	stop    chan struct{}
	wg      sync.WaitGroup

	recovery Recovery
}

// Recovery reports what Open did to the active segment.
type Recovery struct {
	// Segment is the path of the segment that was scanned.
	Segment string
	// End is the logical offset one past the last whole record.
	End int64
	// Records is how many whole records the active segment holds.
	Records int
	// Truncated is true when a torn tail was found and zeroed.
	Truncated bool
	// DroppedFrom is the logical offset where the torn tail began.
	DroppedFrom int64
	// DroppedBytes counts the non-zero bytes zeroed from DroppedFrom on.
	DroppedBytes int64
	// Cause is the decode error at DroppedFrom.
	Cause error
}

// Open opens or creates the log in opts.Dir, recovers the active segment,
// and starts the background syncer and preallocator. The returned
// Recovery says whether a torn tail was truncated.
func Open(opts Options) (*Log, Recovery, error) {
	if err := opts.fill(); err != nil {
		return nil, Recovery{}, err
	}
	l := &Log{
		opts:   opts,
		dir:    opts.Dir,
		notify: make(chan struct{}),
		preCh:  make(chan int64, 1),
		syncCh: make(chan struct{}, 1),
		stop:   make(chan struct{}),

		syncFile: fdatasync,
		create:   createSegment,
	}
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
	l.nextBase.Store(l.active.end())
	l.fillSynced = l.synced.Load()
	l.wg.Add(1)
	go l.preallocator()
	l.maybeRequestSpare()
	if opts.Sync != SyncNone {
		l.wg.Add(1)
		go l.syncer()
	}
	return l, l.recovery, nil
}

// load lists, maps and checks the segments and recovers the active one.
func (l *Log) load() error {
	if !l.opts.ReadOnly {
		if err := os.MkdirAll(l.dir, 0o755); err != nil {
			return err
		}
	}
	names, err := listDir(l.dir, !l.opts.ReadOnly)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		if l.opts.ReadOnly {
			return fmt.Errorf("commitlog: no segments in %s", l.dir)
		}
		if _, err := createSegment(l.dir, 0, l.opts.SegmentSize, l.opts.Sync == SyncAlways && !l.opts.FallocateFirst); err != nil {
			return fmt.Errorf("commitlog: create first segment: %w", wrapNoSpace(err))
		}
		names = []string{segmentName(0)}
	}
	for _, name := range names {
		s, err := openSegment(l.dir+"/"+name, l.opts.ReadOnly)
		if err != nil {
			return err
		}
		if n := len(l.segs); n > 0 {
			prev := l.segs[n-1]
			if s.base != prev.end() {
				s.release()
				if s.base > prev.end() {
					return fmt.Errorf("%w: %s ends at offset %d but the next file is %s", ErrMissingSegment, prev.path, prev.end(), name)
				}
				return &CorruptionError{File: s.path, Offset: -1, Err: fmt.Errorf("unexpected segment file: base %d overlaps %s", s.base, prev.path)}
			}
		}
		l.segs = append(l.segs, s)
	}
	// The active segment is the last one holding data; empty segments
	// after it are preallocated spares.
	ai := len(l.segs) - 1
	for ai > 0 && isEmpty(l.segs[ai]) {
		ai--
	}
	if !l.opts.ReadOnly && ai+1 < len(l.segs) {
		l.spare = l.segs[ai+1]
		for _, s := range l.segs[ai+2:] {
			s.removed.Store(true)
			s.release()
		}
		l.segs = l.segs[:ai+1]
	}
	l.active = l.segs[ai]
	l.first.Store(l.segs[0].base)
	end, err := l.recoverActive()
	if err != nil {
		return err
	}
	l.writePos = end
	l.written = l.active.base + end
	l.visible.Store(l.written)
	l.synced.Store(l.written)
	return nil
}

func isEmpty(s *segment) bool {
	_, _, err := record.Decode(s.data)
	return errors.Is(err, record.ErrEnd)
}

// recoverActive scans the active segment and zeroes a torn tail. It returns
// the data position one past the last whole record.
func (l *Log) recoverActive() (int64, error) {
	s := l.active
	rec := Recovery{Segment: s.path}
	var pos int64
	for {
		_, n, err := record.Decode(s.data[pos:])
		if err == nil {
			pos += int64(n)
			rec.Records++
			continue
		}
		if !errors.Is(err, record.ErrEnd) {
			rec.Truncated = true
			rec.DroppedFrom = s.base + pos
			rec.DroppedBytes = nonZeroExtent(s.data[pos:])
			rec.Cause = err
		}
		break
	}
	rec.End = s.base + pos
	l.recovery = rec
	if l.opts.ReadOnly {
		return pos, nil
	}
	if rec.Truncated {
		clear(s.data[pos : pos+rec.DroppedBytes])
		l.opts.Logger.Warn("commitlog: truncated torn tail",
			"segment", s.path, "offset", rec.DroppedFrom, "dropped_bytes", rec.DroppedBytes, "cause", rec.Cause)
	}
	// What survived a crash of the process may still be only in the page
	// cache: make it durable before readers may see it.
	for _, seg := range l.segs[max(0, len(l.segs)-2):] {
		if err := fdatasync(seg.f); err != nil {
			return 0, fmt.Errorf("commitlog: sync %s: %w", seg.path, err)
		}
	}
	return pos, nil
}

// nonZeroExtent returns the length of b up to and including its last
// non-zero byte.
func nonZeroExtent(b []byte) int64 {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] != 0 {
			return int64(i + 1)
		}
	}
	return 0
}

// listDir returns the segment file names in dir, sorted. It removes
// leftover .tmp files when clean is set and rejects .log files whose
// names are not segment names.
func listDir(dir string, clean bool) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		name := e.Name()
		switch {
		case len(name) > len(tmpSuffix) && name[len(name)-len(tmpSuffix):] == tmpSuffix:
			if clean {
				if err := os.Remove(dir + "/" + name); err != nil {
					return nil, err
				}
			}
		case len(name) > len(segmentSuffix) && name[len(name)-len(segmentSuffix):] == segmentSuffix:
			if _, ok := parseSegmentName(name); !ok {
				return nil, fmt.Errorf("commitlog: unexpected file %s in %s: segment files are named by a 20-digit offset", name, dir)
			}
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names, nil
}

// Recovery returns what Open found and did.
func (l *Log) Recovery() Recovery { return l.recovery }

// Dir returns the log's directory.
func (l *Log) Dir() string { return l.dir }

// SegmentBases returns the base offset of every segment, oldest first;
// the last is the active one.
func (l *Log) SegmentBases() []int64 {
	l.segsMu.RLock()
	defer l.segsMu.RUnlock()
	out := make([]int64, len(l.segs))
	for i, s := range l.segs {
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
	return l.written
}

// EndOffset returns the offset one past the last record readers can see.
func (l *Log) EndOffset() int64 { return l.visible.Load() }

// Append appends recs and appends their offsets to offs, returning it. It
// returns once the records are durable under SyncAlways, at once otherwise.
// Either every record of the call is appended or, on error, none is.
func (l *Log) Append(offs []int64, recs ...Record) ([]int64, error) {
	offs, end, err := l.AppendNoWait(offs, recs...)
	if err != nil || l.opts.Sync != SyncAlways {
		return offs, err
	}
	return offs, l.waitVisible(end)
}

// AppendNoWait appends recs as Append does but does not wait for them to
// become durable: it returns their offsets and end, the offset one past
// the last of them, and WaitVisible(end) waits for the fsync that covers
// them (under SyncAlways it is already asked for). A record appended by a
// later call has a higher offset, and no fsync makes it durable without
// these, so a caller may append under a lock, release it, and then wait.
func (l *Log) AppendNoWait(offs []int64, recs ...Record) (_ []int64, end int64, _ error) {
	if l.opts.ReadOnly {
		return offs, 0, ErrReadOnly
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return offs, 0, ErrClosed
	}
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return offs, 0, err
	}
	next, err := l.reserve(recs)
	if err != nil {
		l.mu.Unlock()
		return offs, 0, err
	}
	seg, pos := l.active, l.writePos
	// Under SyncAlways records are staged in l.pend and written with pwrite
	// by the syncer just before its fsync: on ext4 an fsync after writes
	// through a shared mapping costs several times more than after pwrite
	// (docs/BENCHMARKS.md), and one pwrite per group commit keeps system
	// calls off the appenders' path. Otherwise they are copied straight
	// into the mapping.
	direct := l.opts.Sync == SyncAlways
	for _, r := range recs {
		size := int64(record.Size(len(r.Payload)))
		if pos+size > seg.capacity {
			seg, next = next[0], next[1:]
			l.segsMu.Lock()
			l.segs = append(l.segs, seg)
			l.segsMu.Unlock()
			l.active, pos = seg, 0
		}
		var dst []byte
		if direct {
			dst = l.stage(seg, pos, int(size))
		} else {
			dst = seg.data[pos : pos+size]
		}
		record.PutHeader(dst, r.Type, r.Flags, len(r.Payload))
		copy(dst[record.HeaderSize:], r.Payload)
		record.Seal(dst)
		offs = append(offs, seg.base+pos)
		pos += size
	}
	l.writePos = pos
	l.written = seg.base + pos
	l.appends.Add(1)
	l.maybeRequestSpare()
	end = l.written
	l.mu.Unlock()

	if l.opts.Sync == SyncNone {
		l.publish(end)
	} else {
		l.kickSyncer()
	}
	return offs, end, nil
}

// pendingWrite is a run of encoded records staged for pwrite at data
// position pos of seg.
type pendingWrite struct {
	seg *segment
	pos int64
	buf []byte
}

// stage returns n bytes of staging space for data position pos of seg.
// l.mu is held.
func (l *Log) stage(seg *segment, pos int64, n int) []byte {
	k := len(l.pend)
	if k == 0 || l.pend[k-1].seg != seg || l.pend[k-1].pos+int64(len(l.pend[k-1].buf)) != pos {
		var buf []byte
		if j := len(l.freeBufs); j > 0 {
			buf, l.freeBufs = l.freeBufs[j-1][:0], l.freeBufs[:j-1]
		}
		l.pend = append(l.pend, pendingWrite{seg: seg, pos: pos, buf: buf})
		k++
	}
	w := &l.pend[k-1]
	m := len(w.buf)
	w.buf = slices.Grow(w.buf, n)[:m+n]
	return w.buf[m:]
}

// reserve checks recs and obtains the new segments the batch needs, so
// that a batch either fits entirely or fails before anything is written.
// l.mu is held.
func (l *Log) reserve(recs []Record) ([]*segment, error) {
	pos, capacity, rotations := l.writePos, l.active.capacity, 0
	for _, r := range recs {
		if r.Type == 0 {
			return nil, record.ErrInvalidType
		}
		if len(r.Payload) > record.MaxPayload {
			return nil, record.ErrTooLarge
		}
		size := int64(record.Size(len(r.Payload)))
		if pos+size > capacity {
			rotations++
			pos, capacity = 0, l.opts.SegmentSize-headerSize
			if size > capacity {
				return nil, fmt.Errorf("%w: %d bytes framed, segments hold %d", ErrRecordTooLarge, size, capacity)
			}
		}
		pos += size
	}
	var next []*segment
	base := l.active.end()
	for range rotations {
		s, err := l.takeSpare(base)
		if err != nil {
			for i := len(next) - 1; i >= 0; i-- {
				l.putBackSpare(next[i])
			}
			return nil, err
		}
		next = append(next, s)
		base = s.end()
	}
	return next, nil
}

// takeSpare returns the preallocated segment for base, creating it now if
// the preallocator has not.
func (l *Log) takeSpare(base int64) (*segment, error) {
	l.preMu.Lock()
	defer l.preMu.Unlock()
	if s := l.spare; s != nil && s.base == base {
		l.spare = nil
		l.nextBase.Store(s.end())
		return s, nil
	}
	if _, err := l.create(l.dir, base, l.opts.SegmentSize, l.zeroFill()); err != nil {
		return nil, fmt.Errorf("commitlog: create segment at offset %d: %w", base, wrapNoSpace(err))
	}
	s, err := openSegment(l.dir+"/"+segmentName(base), false)
	if err == nil {
		l.nextBase.Store(s.end())
	}
	return s, err
}

// maybeRequestSpare asks the preallocator for the segment after the
// active one once the active one is half full. l.mu is held, or l is not
// shared yet.
func (l *Log) maybeRequestSpare() {
	if end := l.active.end(); l.spareAsked != end && l.writePos >= l.active.capacity/2 {
		l.spareAsked = end
		l.requestSpare(end)
	}
}

// requestSpare asks the preallocator for the segment at base, replacing
// any request it has not picked up yet. It never blocks.
func (l *Log) requestSpare(base int64) {
	select {
	case <-l.preCh:
	default:
	}
	select {
	case l.preCh <- base:
	default:
	}
}

// putBackSpare returns an unused new segment after a failed reservation.
func (l *Log) putBackSpare(s *segment) {
	l.preMu.Lock()
	defer l.preMu.Unlock()
	if l.spare == nil && s.base == l.active.end() {
		l.spare = s
		l.nextBase.Store(s.base)
		return
	}
	s.removed.Store(true)
	s.release()
}

func wrapNoSpace(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%w: %w", ErrDiskFull, err)
	}
	return err
}

// preallocator creates the next segment ahead of need.
func (l *Log) preallocator() {
	defer l.wg.Done()
	for {
		select {
		case <-l.stop:
			return
		case base := <-l.preCh:
			l.preMu.Lock()
			if base == l.nextBase.Load() && (l.spare == nil || l.spare.base != base) {
				if l.spare != nil {
					l.spare.removed.Store(true)
					l.spare.release()
					l.spare = nil
				}
				var s *segment
				_, err := l.create(l.dir, base, l.opts.SegmentSize, l.zeroFill())
				if err == nil {
					s, err = openSegment(l.dir+"/"+segmentName(base), false)
				}
				l.spare, l.spareErr = s, err
				if err != nil {
					l.opts.Logger.Warn("commitlog: preallocating next segment failed; will retry when needed", "offset", base, "err", err)
				}
			}
			l.preMu.Unlock()
		}
	}
}

// zeroFillMaxSyncBytes is the most data an fsync covers on average for
// zeroFill to choose zeros. Writing a segment's zeros costs its size in
// disk bandwidth once; reserving it with fallocate instead costs each
// later fsync the conversion of the extents it wrote. On this project's
// reference disk (docs/BENCHMARKS.md, RawFsync) the conversion adds about
// 135 µs per fsync and zeros are written at about 300 MB/s, so zeros pay
// off while the fsyncs are more often than one per 135 µs × 300 MB/s ≈
// 40 KB of data, whatever the segment size.
const zeroFillMaxSyncBytes = 32 << 10

// zeroFill says how to preallocate the next segment: with zeros under
// SyncAlways while the fsyncs since the last decision covered less than
// zeroFillMaxSyncBytes each on average (small group commits, where an
// fsync's latency is what appenders wait for), with fallocate when they
// covered more (large group commits, where the disk's bandwidth is the
// limit and the zeros would take a third of it beside the commitlog's
// and the schedule log's own writes), and with fallocate under the other
// policies, which fsync rarely. With no fsync since the last decision it
// keeps zeros under SyncAlways. preMu is held.
func (l *Log) zeroFill() bool {
	if l.opts.Sync != SyncAlways {
		return false
	}
	syncs, synced := l.syncs.Load(), l.synced.Load()
	n, bytes := syncs-l.fillSyncs, synced-l.fillSynced
	l.fillSyncs, l.fillSynced = syncs, synced
	if n <= 0 {
		return true
	}
	zero := bytes/n < zeroFillMaxSyncBytes
	if !zero {
		l.opts.Logger.Debug("commitlog: preallocating the next segment with fallocate: large group commits",
			"bytes_per_fsync", bytes/n, "fsyncs", n)
	}
	return zero
}

func (l *Log) kickSyncer() {
	select {
	case l.syncCh <- struct{}{}:
	default:
	}
}

// syncer makes written data durable and publishes it to readers. Under
// SyncInterval it waits out the interval after a sync before the next one;
// under SyncAlways it syncs as soon as asked, so appenders that arrive
// during an fsync share the next one.
func (l *Log) syncer() {
	defer l.wg.Done()
	for {
		select {
		case <-l.stop:
			return
		case <-l.syncCh:
		}
		if err := l.Sync(); err != nil {
			return
		}
		if l.opts.Sync == SyncAlways {
			// Let the appenders this fsync just released stage their next
			// records before the next fsync starts, so that one fsync
			// covers them all rather than half of them per round. Yield
			// while appends keep arriving, a bounded number of times.
			for range 16 {
				n := l.appends.Load()
				runtime.Gosched()
				if l.appends.Load() == n {
					break
				}
			}
		}
		if l.opts.Sync == SyncInterval {
			select {
			case <-l.stop:
				return
			case <-time.After(l.opts.SyncInterval):
			}
		}
	}
}

// Sync makes everything appended so far durable and visible to readers.
func (l *Log) Sync() error {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return err
	}
	target, syncFile := l.written, l.syncFile
	pend := l.pend
	l.pend = nil
	l.mu.Unlock()
	from := l.synced.Load()
	if target <= from {
		return nil
	}
	// Segments below synced cannot be deleted (DeleteBefore stops there),
	// so the staged writes' segments are still mapped and open.
	var err error
	for _, w := range pend {
		if _, werr := w.seg.f.WriteAt(w.buf, headerSize+w.pos); werr != nil && err == nil {
			err = fmt.Errorf("commitlog: write %s: %w", w.seg.path, werr)
		}
	}
	if len(pend) > 0 {
		l.mu.Lock()
		for _, w := range pend {
			if cap(w.buf) <= 4<<20 {
				l.freeBufs = append(l.freeBufs, w.buf)
			}
		}
		l.mu.Unlock()
	}
	if err != nil {
		l.fail(err)
		return err
	}
	l.segsMu.RLock()
	var dirty []*segment
	for _, s := range l.segs {
		if s.end() > from && s.base < target {
			s.acquire()
			dirty = append(dirty, s)
		}
	}
	l.segsMu.RUnlock()
	start := time.Now()
	for _, s := range dirty {
		if err == nil {
			if serr := syncFile(s.f); serr != nil {
				err = fmt.Errorf("commitlog: fsync %s: %w", s.path, serr)
			}
		}
		s.release()
	}
	if err != nil {
		l.fail(err)
		return err
	}
	if l.opts.OnSync != nil {
		l.opts.OnSync(time.Since(start))
	}
	storeMax(&l.synced, target)
	l.syncs.Add(1)
	if l.opts.Sync != SyncNone {
		l.publish(target)
	}
	return nil
}

func storeMax(v *atomic.Int64, x int64) bool {
	for {
		old := v.Load()
		if x <= old {
			return false
		}
		if v.CompareAndSwap(old, x) {
			return true
		}
	}
}

// publish makes data up to end visible to readers and wakes them.
func (l *Log) publish(end int64) {
	// A waiter counts itself before it reads visible, so either it sees
	// the new end or this sees it waiting.
	if storeMax(&l.visible, end) && l.waiters.Load() > 0 {
		l.wake()
	}
}

func (l *Log) wake() {
	l.notifyMu.Lock()
	close(l.notify)
	l.notify = make(chan struct{})
	l.notifyMu.Unlock()
}

func (l *Log) notifyChan() <-chan struct{} {
	l.notifyMu.Lock()
	defer l.notifyMu.Unlock()
	return l.notify
}

// fail records a sticky error: every later Append and Sync returns it.
func (l *Log) fail(err error) {
	l.mu.Lock()
	if l.err == nil {
		l.err = err
		l.failed.Store(&err)
	}
	l.mu.Unlock()
	l.wake()
}

// waitVisible blocks until readers can see end, or the log fails or closes.
// WaitVisible returns once readers can see every record before offset end
// (EndOffset >= end), or with the log's sticky error, or ErrClosed. Under
// SyncAlways that is already so when Append returns; under SyncInterval it
// takes until the next fsync.
func (l *Log) WaitVisible(end int64) error { return l.waitVisible(end) }

func (l *Log) waitVisible(end int64) error {
	l.waiters.Add(1)
	defer l.waiters.Add(-1)
	for {
		ch := l.notifyChan()
		if l.visible.Load() >= end {
			return nil
		}
		if p := l.failed.Load(); p != nil {
			return *p
		}
		if l.isClosed() {
			return ErrClosed
		}
		<-ch
	}
}

func (l *Log) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// DeleteBefore deletes whole segments that end at or before offset and are
// durable, never the active one, and fsyncs the directory. Iterators still
// reading a deleted segment keep it until they move on. It returns how many
// segments it deleted.
func (l *Log) DeleteBefore(offset int64) (int, error) {
	if l.opts.ReadOnly {
		return 0, ErrReadOnly
	}
	limit := min(offset, l.synced.Load(), l.visible.Load())
	l.segsMu.Lock()
	n := 0
	for n < len(l.segs)-1 && l.segs[n].end() <= limit {
		n++
	}
	gone := append([]*segment(nil), l.segs[:n]...)
	l.segs = append(l.segs[:0:0], l.segs[n:]...)
	l.first.Store(l.segs[0].base)
	l.segsMu.Unlock()
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
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.closed = true
	l.mu.Unlock()
	var err error
	if !l.opts.ReadOnly {
		err = l.Sync()
		if err == nil {
			l.publish(l.synced.Load())
		}
		close(l.stop)
		l.wg.Wait()
	}
	l.wake()
	if rerr := l.releaseAll(); err == nil {
		err = rerr
	}
	return err
}

func (l *Log) releaseAll() error {
	var err error
	l.segsMu.Lock()
	for _, s := range l.segs {
		if rerr := s.release(); rerr != nil && err == nil {
			err = rerr
		}
	}
	l.segs = nil
	l.segsMu.Unlock()
	l.preMu.Lock()
	if l.spare != nil {
		if rerr := l.spare.release(); rerr != nil && err == nil {
			err = rerr
		}
		l.spare = nil
	}
	l.preMu.Unlock()
	return err
}

// segmentFor returns the segment holding offset, acquired, or nil.
func (l *Log) segmentFor(offset int64) *segment {
	l.segsMu.RLock()
	defer l.segsMu.RUnlock()
	i := sort.Search(len(l.segs), func(i int) bool { return l.segs[i].end() > offset })
	if i == len(l.segs) || l.segs[i].base > offset {
		return nil
	}
	s := l.segs[i]
	s.acquire()
	return s
}
