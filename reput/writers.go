package reput

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/segfile"
)

// defaultMaxOpenWriters is Options.maxOpenWriters' default: 1,024, so
// that messages spread over a month of hourly buckets (720) route without
// closing and reopening writers (with 64, routing 200,000 messages over
// 698 buckets took 53 s against 2.5 s: each eviction syncs the writers
// it closes; `hourglass bench engine --scenario far-future`), or a
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

// writerFor returns the writer of the segment that deliverAt belongs to,
// opening (and recovering) or creating it. Past maxOpenWriters it first
// closes the least recently used writers.
func (r *Reput) writerFor(deliverAt int64) (*segWriter, int64, error) {
	if err := r.resolveAt(deliverAt); err != nil {
		return nil, 0, err
	}
	r.segsMu.RLock()
	seg, exists := schedulelog.Place(r.segs, deliverAt, r.opts.SegmentDuration)
	r.segsMu.RUnlock()
	if sw, ok := r.writers[seg.Start]; ok {
		return sw, seg.Start, nil
	}
	if err := r.evict(); err != nil {
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
				r.reportDamaged(seg.Start, err)
			}
			return nil, 0, err
		}
		if rec.Truncated {
			r.log.Warn("reput: schedule segment torn tail truncated", "recovery", rec.String())
		}
		sw.w = w
		sw.lastSeq, sw.hasLast = w.LastSeq()
		if err := r.catchUp(seg.Start, w); err != nil {
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
		info := schedulelog.SegmentInfo{Name: schedulelog.Name(seg.Start), Start: seg.Start, Duration: seg.Duration}
		r.addSegment(info)
	}
	sw.flushed = true
	r.writers[seg.Start] = sw
	return sw, seg.Start, nil
}

// addSegment adds a segment reput created to the list and tells
// OnSegment.
func (r *Reput) addSegment(info schedulelog.SegmentInfo) {
	r.segsMu.Lock()
	if r.fresh == nil {
		r.fresh = map[int64]bool{}
	}
	r.fresh[info.Start] = true
	i := sort.Search(len(r.segs), func(i int) bool { return r.segs[i].Start >= info.Start })
	if i < len(r.segs) && r.segs[i].Start == info.Start {
		r.segs[i] = info
		r.segsMu.Unlock()
		return
	}
	r.segs = append(r.segs, schedulelog.SegmentInfo{})
	copy(r.segs[i+1:], r.segs[i:])
	r.segs[i] = info
	r.segsMu.Unlock()
	r.events = append(r.events, event{segEvent: true, segment: &info})
}

// evict closes the least recently used writers, a quarter of the bound at
// once (their fsyncs overlap), while the bound or more are open:
// maxOpenWriters, or fewer after the process ran out of descriptors.
// Close syncs, so the next checkpoint covers their entries.
func (r *Reput) evict() error {
	limit := r.writerCap
	if len(r.writers) < limit {
		return nil
	}
	all := make([]int64, 0, len(r.writers))
	for b := range r.writers {
		all = append(all, b)
	}
	sort.Slice(all, func(i, j int) bool { return r.writers[all[i]].lastUse < r.writers[all[j]].lastUse })
	n := max(1, limit/4, len(r.writers)-limit+1)
	closes := make([]func() error, 0, n)
	for _, b := range all[:min(n, len(all))] {
		sw := r.writers[b]
		delete(r.writers, b)
		closes = append(closes, sw.w.Close)
	}
	r.last = nil
	r.stats.evicted.Add(int64(len(closes)))
	return parallel(closes, syncWorkers)
}

// catchUp queues the entries of watched bucket start that its file holds
// beyond what the watcher has (written before a reset dropped their
// events), so that a reopened writer's bucket misses nothing.
func (r *Reput) catchUp(start int64, w *schedulelog.Writer) error {
	ws := r.watched[start]
	if ws == nil || ws.queued >= w.Size() {
		return nil
	}
	rd, err := schedulelog.OpenReader(w.Path())
	if err != nil {
		return err
	}
	defer rd.Close()
	it := rd.IterFrom(max(ws.queued, schedulelog.FirstOffset))
	for it.Next() && it.Offset() < w.Size() {
		r.events = append(r.events, event{entry: Entry{Bucket: start, Offset: it.Offset(), Seq: it.Seq(), DeliverAt: it.Message().DeliverAt}})
	}
	if err := it.Err(); err != nil {
		return err
	}
	ws.queued = w.Size()
	return nil
}

// openWriter returns the writer of the existing segment starting at
// bucket, opening and recovering it if needed; ok is false when there is
// no such segment.
func (r *Reput) openWriter(bucket int64) (*segWriter, bool, error) {
	if sw, ok := r.writers[bucket]; ok {
		return sw, true, nil
	}
	seg, ok, err := r.segmentErr(bucket)
	if err != nil || !ok {
		return nil, false, err
	}
	sw, _, err := r.writerFor(seg.Start)
	return sw, err == nil, err
}

// closeIdle closes writers untouched since the last checkpoint once more
// than maxOpenWriters are open. They are synced already.
func (r *Reput) closeIdle() {
	if len(r.writers) > r.opts.maxOpenWriters {
		for b, sw := range r.writers {
			if !sw.used && !sw.dirty && r.watched[b] == nil {
				if err := sw.w.Close(); err != nil {
					r.log.Warn("reput: closing idle segment", "err", err)
				}
				delete(r.writers, b)
				r.last = nil
			}
		}
	}
	for _, sw := range r.writers {
		sw.used = false
	}
	r.dmu.Lock()
	if len(r.dispatch) > r.opts.maxOpenWriters {
		for b, dw := range r.dispatch {
			if !dw.used && !dw.dirty && dw.inflight == 0 {
				dw.w.Close()
				delete(r.dispatch, b)
			}
		}
	}
	for _, dw := range r.dispatch {
		dw.used = false
	}
	r.dmu.Unlock()
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
