package reput

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/segfile"
)

// defaultMaxOpenWriters is Options.maxOpenWriters' default: 1,024, so
// that messages spread over a month of hourly buckets (720) route without
// closing and reopening writers (with 64, routing 200,000 messages over
// 698 buckets took 53 s against 2.5 s: each eviction syncs the writers
// it closes; `hourglass-bench engine --scenario far-future`), or a
// quarter of the descriptor limit when that is lower, leaving the rest to
// the dispatch log writers, the queue and the connections. (Go raises the
// soft limit to the hard one at start.)
func defaultMaxOpenWriters() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err == nil && rl.Cur/4 < 1024 {
		return max(16, int(rl.Cur/4))
	}
	return 1024
}

// scheduleBufferSize is the write buffer of each schedule segment writer
// (Options.schedule.BufferSize's default): a quarter of segfile's, since
// up to maxOpenWriters of them fill at once when deliveries spread over
// many buckets.
const scheduleBufferSize = 64 << 10

// segWriters are the open schedule segment writers, kept within a bound:
// past it the least recently used are closed first. Owned by the routing
// goroutine; evicted is read by Stats.
type segWriters struct {
	open map[int64]*segWriter
	tick uint64 // use counter for the LRU order
	max  int    // Options.maxOpenWriters
	// limit is the bound: max, lowered after EMFILE or ENFILE (stall.go)
	// and raised back towards max at each checkpoint.
	limit int
	// last is the writer the last schedule record went to; zero after
	// anything that could change it (a request, a writer closed).
	last    lastWriter
	evicted atomic.Int64 // writers closed to stay within the bound
}

type segWriter struct {
	w       *schedulelog.Writer
	lastUse uint64 // segWriters.tick when last used
	lastSeq uint64
	hasLast bool
	dirty   bool // appended since the last sync
	flushed bool // everything appended is flushed
	used    bool // touched since the last checkpoint
}

// lastWriter is a writer with its bucket [start, end) and whether the
// bucket is watched.
type lastWriter struct {
	w          *segWriter
	start, end int64
	watched    bool
}

// touch marks sw used now.
func (ws *segWriters) touch(sw *segWriter) {
	ws.tick++
	sw.used, sw.lastUse = true, ws.tick
}

// drop forgets the writer of bucket, closed by the caller.
func (ws *segWriters) drop(bucket int64) {
	delete(ws.open, bucket)
	ws.last = lastWriter{}
}

// evict closes the least recently used writers, a quarter of the bound at
// once (their fsyncs overlap), while the bound or more are open. Close
// syncs, so the next checkpoint covers their entries.
func (ws *segWriters) evict() error {
	limit := ws.limit
	if len(ws.open) < limit {
		return nil
	}
	all := make([]int64, 0, len(ws.open))
	for b := range ws.open {
		all = append(all, b)
	}
	sort.Slice(all, func(i, j int) bool { return ws.open[all[i]].lastUse < ws.open[all[j]].lastUse })
	n := max(1, limit/4, len(ws.open)-limit+1)
	closes := make([]func() error, 0, n)
	for _, b := range all[:min(n, len(all))] {
		closes = append(closes, ws.open[b].w.Close)
		delete(ws.open, b)
	}
	ws.last = lastWriter{}
	ws.evicted.Add(int64(len(closes)))
	return parallel(closes, syncWorkers)
}

// shrink halves the bound to what is open, after the process ran out of
// descriptors, and returns it if it lowered it (0 if not).
func (ws *segWriters) shrink() int {
	if c := max(1, len(ws.open)/2); c < ws.limit {
		ws.limit = c
		return c
	}
	return 0
}

// grow raises a lowered bound back towards max by a quarter.
func (ws *segWriters) grow() {
	if ws.limit < ws.max {
		ws.limit = min(ws.max, ws.limit+max(1, ws.limit/4))
	}
}

// flush makes what was appended readable.
func (ws *segWriters) flush() error {
	for _, sw := range ws.open {
		if !sw.flushed {
			if err := sw.w.Flush(); err != nil {
				return err
			}
			sw.flushed = true
		}
	}
	return nil
}

// syncDirty appends the syncs of the writers appended to since the last
// checkpoint to syncs, marking them clean.
func (ws *segWriters) syncDirty(syncs []func() error) []func() error {
	for _, sw := range ws.open {
		if sw.dirty {
			syncs = append(syncs, sw.w.Sync)
			sw.dirty, sw.flushed = false, true
		}
	}
	return syncs
}

// closeIdle closes writers untouched since the last checkpoint, other
// than those of watched buckets, once more than max are open. They are
// synced already.
func (ws *segWriters) closeIdle(log *slog.Logger, watched map[int64]*watchState) {
	if len(ws.open) > ws.max {
		for b, sw := range ws.open {
			if !sw.used && !sw.dirty && watched[b] == nil {
				if err := sw.w.Close(); err != nil {
					log.Warn("reput: closing idle segment", "err", err)
				}
				ws.drop(b)
			}
		}
	}
	for _, sw := range ws.open {
		sw.used = false
	}
}

// closeAll closes every writer (Close flushes and syncs a good writer,
// and closes a failed one) and returns the first error.
func (ws *segWriters) closeAll() error {
	var err error
	for b, sw := range ws.open {
		if cerr := sw.w.Close(); cerr != nil && err == nil {
			err = cerr
		}
		delete(ws.open, b)
	}
	ws.last = lastWriter{}
	return err
}

// writerFor returns the writer of the segment that deliverAt belongs to,
// opening (and recovering) or creating it. Past the bound it first closes
// the least recently used writers.
func (r *Reput) writerFor(deliverAt int64) (*segWriter, int64, error) {
	if err := r.segs.resolveAt(deliverAt); err != nil {
		return nil, 0, err
	}
	seg, exists := r.segs.place(deliverAt, r.opts.SegmentDuration)
	if sw, ok := r.writers.open[seg.Start]; ok {
		return sw, seg.Start, nil
	}
	if err := r.writers.evict(); err != nil {
		return nil, 0, err
	}
	if h := r.opts.hooks; h != nil && h.open != nil {
		if err := h.open(seg.Start); err != nil {
			return nil, 0, err
		}
	}
	sw := &segWriter{}
	if exists {
		w, rec, err := schedulelog.Open(r.opts.Dir, seg.Start, r.opts.schedule)
		if err != nil {
			var ce *segfile.CorruptionError
			if errors.As(err, &ce) {
				r.segs.reportDamaged(seg.Start, err)
			}
			return nil, 0, err
		}
		if rec.Truncated {
			r.log.Warn("reput: schedule segment torn tail truncated", "recovery", rec.String())
		}
		sw.w = w
		sw.lastSeq, sw.hasLast = w.LastSeq()
		if err := r.out.catchUp(seg.Start, w); err != nil {
			w.Close()
			return nil, 0, err
		}
	} else {
		w, err := schedulelog.Create(r.opts.Dir, seg.Start, seg.Duration, r.opts.schedule)
		if errors.Is(err, schedulelog.ErrExist) {
			// An earlier attempt created it and then failed (reopening
			// it after the rename ran out of descriptors, say): list it
			// and open it like any other.
			si, serr := schedulelog.Stat(r.opts.Dir, seg.Start)
			if serr != nil {
				return nil, 0, serr
			}
			if !si.Contains(deliverAt) {
				return nil, 0, fmt.Errorf("reput: %s exists but its bucket [%d, %d) does not hold %d", si.Name, si.Start, si.End(), deliverAt)
			}
			r.addSegment(si)
			return r.writerFor(deliverAt)
		}
		if err != nil {
			return nil, 0, err
		}
		sw.w = w
		r.addSegment(schedulelog.SegmentInfo{Name: schedulelog.Name(seg.Start), Start: seg.Start, Duration: seg.Duration})
	}
	sw.flushed = true
	r.writers.open[seg.Start] = sw
	return sw, seg.Start, nil
}

// addSegment adds a segment reput created to the list and tells
// OnSegment.
func (r *Reput) addSegment(info schedulelog.SegmentInfo) {
	if r.segs.add(info) {
		r.out.events = append(r.out.events, event{segEvent: true, segment: &info})
	}
}

// openWriter returns the writer of the existing segment starting at
// bucket, opening and recovering it if needed; ok is false when there is
// no such segment.
func (r *Reput) openWriter(bucket int64) (*segWriter, bool, error) {
	if sw, ok := r.writers.open[bucket]; ok {
		return sw, true, nil
	}
	seg, ok, err := r.segs.get(bucket)
	if err != nil || !ok {
		return nil, false, err
	}
	sw, _, err := r.writerFor(seg.Start)
	return sw, err == nil, err
}

// parallel runs fns on up to n goroutines and returns the first error.
// The routing goroutine waits for all of them, so writers it owns may be
// used here.
func parallel(fns []func() error, n int) error {
	if len(fns) <= 1 {
		for _, fn := range fns {
			return fn()
		}
		return nil
	}
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		next  = make(chan func() error)
	)
	for range min(n, len(fns)) {
		wg.Go(func() {
			for fn := range next {
				if err := fn(); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for _, fn := range fns {
		next <- fn
	}
	close(next)
	wg.Wait()
	return first
}
