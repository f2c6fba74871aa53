package reput

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// batchRecords bounds how many records are routed between looks at
// requests, so Watch and Retire are served promptly under load.
const batchRecords = 4096

func (r *Reput) run() {
	defer close(r.done)
	defer r.wakeRouted()
	err := r.loop()
	if err != nil && !errors.Is(err, ErrClosed) {
		r.err.Store(&err)
		r.log.Error("reput: routing stopped", "err", err)
	}
	r.reqMu.Lock()
	r.stopped.Store(true)
	reqs := r.reqs
	r.reqs = nil
	r.reqMu.Unlock()
	for _, q := range reqs {
		q.reply <- reply{err: ErrClosed}
	}
	cerr := r.shutdown()
	if err == nil && cerr != nil {
		r.err.Store(&cerr)
	}
}

func (r *Reput) loop() error {
	for {
		if err := r.serveRequests(); err != nil {
			return err
		}
		n := 0
		for n < batchRecords && r.it.Next() {
			if err := r.route(r.it.Offset(), r.it.Record().Type, r.it.Record().Payload); err != nil {
				return err
			}
			n++
		}
		if err := r.it.Err(); err != nil {
			return fmt.Errorf("reput: reading the commitlog: %w", err)
		}
		if n > 0 {
			if err := r.publish(); err != nil {
				return err
			}
		}
		if r.dirty && time.Since(r.lastCkpt) >= r.opts.CheckpointInterval {
			if err := r.doCheckpoint(); err != nil {
				return err
			}
		}
		if n == batchRecords {
			continue
		}
		if err := r.wait(); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
	}
}

// wait blocks until the commitlog has more, a request arrives, or the
// next checkpoint is due. It sleeps without ticking when idle.
func (r *Reput) wait() error {
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if r.dirty {
		ctx, cancel = context.WithDeadline(ctx, r.lastCkpt.Add(r.opts.CheckpointInterval))
	}
	ctx, cancel2 := context.WithCancel(ctx)
	defer cancel()
	defer cancel2()
	r.reqMu.Lock()
	if len(r.reqs) > 0 {
		r.reqMu.Unlock()
		return nil
	}
	r.wakeWait = cancel2
	r.reqMu.Unlock()
	err := r.it.Wait(ctx)
	r.reqMu.Lock()
	r.wakeWait = nil
	r.reqMu.Unlock()
	return err
}

// route handles one commitlog record.
func (r *Reput) route(off int64, typ uint8, p []byte) error {
	switch typ {
	case message.TypeSchedule:
		return r.routeSchedule(off, p)
	case message.TypeCancel:
		return r.routeCancel(p)
	default:
		r.stats.malformed.Add(1)
		r.log.Error("reput: unknown commitlog record type; skipped", "offset", off, "type", typ)
		return nil
	}
}

func (r *Reput) routeSchedule(off int64, p []byte) error {
	deliverAt, ok := deliverAtOf(p)
	if !ok {
		r.stats.malformed.Add(1)
		r.log.Error("reput: malformed schedule record; skipped", "offset", off)
		return nil
	}
	// Consecutive records mostly go to one bucket: the last writer first,
	// without the segment list's lock and search.
	sw, bucket, watched := r.last, r.lastStart, r.lastWatched
	if sw == nil || deliverAt < r.lastStart || deliverAt >= r.lastEnd {
		var err error
		if sw, bucket, err = r.writerFor(deliverAt); err != nil {
			return err
		}
		watched = r.watched[bucket]
		r.last, r.lastStart, r.lastEnd, r.lastWatched = sw, bucket, bucket+sw.w.Duration().Milliseconds(), watched
	}
	seq := uint64(off)
	sw.used = true
	if sw.hasLast && seq <= sw.lastSeq {
		r.stats.skipped.Add(1) // routed before a restart
		return nil
	}
	eoff, err := sw.w.Append(seq, p)
	if errors.Is(err, schedulelog.ErrBadPayload) {
		r.stats.malformed.Add(1)
		r.log.Error("reput: malformed schedule record; skipped", "offset", off, "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	sw.lastSeq, sw.hasLast, sw.dirty, sw.flushed = seq, true, true, false
	r.dirty = true
	r.stats.routed.Add(1)
	if watched {
		r.events = append(r.events, event{entry: Entry{Bucket: bucket, Offset: eoff, Seq: seq, DeliverAt: deliverAt}})
	}
	return nil
}

func (r *Reput) routeCancel(p []byte) error {
	id, err := message.DecodeCancel(p)
	if err != nil {
		r.stats.malformed.Add(1)
		r.log.Error("reput: malformed cancel record; skipped", "err", err)
		return nil
	}
	seg, ok := r.FindSegment(id.DeliverAt)
	if !ok {
		// Its segment was retired: every entry in it was done, so this
		// one was delivered or cancelled already.
		r.stats.orphans.Add(1)
		return nil
	}
	w, err := r.dispatchWriter(seg.Start)
	if err != nil {
		return err
	}
	if err := w.Append(dispatchlog.Done{Seq: id.Seq, Reason: dispatchlog.Cancelled}); err != nil {
		return err
	}
	r.dmu.Lock()
	r.dispatch[seg.Start].dirty = true
	r.dmu.Unlock()
	r.dirty = true
	r.stats.cancels.Add(1)
	if r.watched[seg.Start] {
		r.events = append(r.events, event{cancel: true, bucket: seg.Start, seq: id.Seq})
	}
	return nil
}

// writerFor returns the writer of the segment that deliverAt belongs to,
// opening (and recovering) or creating it.
func (r *Reput) writerFor(deliverAt int64) (*segWriter, int64, error) {
	r.segsMu.RLock()
	seg, exists := schedulelog.Place(r.segs, deliverAt, r.opts.SegmentDuration)
	r.segsMu.RUnlock()
	if sw, ok := r.writers[seg.Start]; ok {
		return sw, seg.Start, nil
	}
	sw := &segWriter{}
	if exists {
		w, rec, err := schedulelog.Open(r.opts.Dir, seg.Start, r.opts.Schedule)
		if err != nil {
			return nil, 0, err
		}
		if rec.Truncated {
			r.log.Warn("reput: schedule segment torn tail truncated", "recovery", rec.String())
		}
		sw.w = w
		sw.lastSeq, sw.hasLast = w.LastSeq()
	} else {
		w, err := schedulelog.Create(r.opts.Dir, seg.Start, seg.Duration, r.opts.Schedule)
		if err != nil {
			return nil, 0, err
		}
		sw.w = w
		info := schedulelog.SegmentInfo{Name: schedulelog.Name(seg.Start), Start: seg.Start, Duration: seg.Duration}
		r.segsMu.Lock()
		i := sort.Search(len(r.segs), func(i int) bool { return r.segs[i].Start > seg.Start })
		r.segs = append(r.segs, schedulelog.SegmentInfo{})
		copy(r.segs[i+1:], r.segs[i:])
		r.segs[i] = info
		r.segsMu.Unlock()
		r.events = append(r.events, event{segEvent: true, segment: &info})
	}
	sw.flushed = true
	r.writers[seg.Start] = sw
	return sw, seg.Start, nil
}

// publish flushes what was appended so that it is readable, advances the
// routed position and hands events to the callbacks.
func (r *Reput) publish() error {
	for _, sw := range r.writers {
		if !sw.flushed {
			if err := sw.w.Flush(); err != nil {
				return err
			}
			sw.flushed = true
		}
	}
	var entries []Entry
	flush := func() {
		if len(entries) > 0 && r.opts.OnEntries != nil {
			r.opts.OnEntries(entries)
		}
		entries = nil
	}
	for i, ev := range r.events {
		switch {
		case ev.segEvent:
			flush()
			if r.opts.OnSegment != nil {
				r.opts.OnSegment(*ev.segment)
			}
		case ev.cancel:
			flush()
			if r.opts.OnCancel != nil {
				r.opts.OnCancel(ev.bucket, ev.seq)
			}
		default:
			if entries == nil {
				// Room for the rest: one allocation, not one per doubling
				// (the slice is OnEntries' to keep, so it is new each time).
				entries = make([]Entry, 0, len(r.events)-i)
			}
			entries = append(entries, ev.entry)
		}
	}
	flush()
	clear(r.events)
	r.events = r.events[:0]
	r.position.Store(r.it.Pos())
	r.wakeRouted()
	return nil
}

// doCheckpoint syncs every segment and dispatch log routed to since the
// last checkpoint, then durably records the position and trims the
// commitlog below it.
func (r *Reput) doCheckpoint() error {
	pos := r.it.Pos()
	var syncs []func() error
	for _, sw := range r.writers {
		if sw.dirty {
			syncs = append(syncs, sw.w.Sync)
			sw.dirty, sw.flushed = false, true
		}
	}
	r.dmu.Lock()
	for _, dw := range r.dispatch {
		if dw.dirty {
			syncs = append(syncs, dw.w.Sync)
			dw.dirty = false
		}
	}
	r.dmu.Unlock()
	if err := parallel(syncs, syncWorkers); err != nil {
		return err
	}
	if err := writeCheckpoint(r.opts.Dir, pos); err != nil {
		return fmt.Errorf("reput: write checkpoint: %w", err)
	}
	r.checkpoint.Store(pos)
	r.dirty = false
	r.lastCkpt = time.Now()
	// Keep the newest sealed segment too: the engine rereads the recent
	// records at start-up (idempotency keys of retried Schedules).
	cut := pos
	if b := r.opts.Log.SegmentBases(); len(b) >= 2 {
		cut = min(cut, b[len(b)-2])
	}
	if _, err := r.opts.Log.DeleteBefore(cut); err != nil {
		r.log.Warn("reput: commitlog retention failed", "err", err)
	}
	r.closeIdle()
	return nil
}

// closeIdle closes writers untouched since the last checkpoint once more
// than MaxOpenWriters are open. They are synced already.
func (r *Reput) closeIdle() {
	if len(r.writers) > r.opts.MaxOpenWriters {
		for b, sw := range r.writers {
			if !sw.used && !sw.dirty && !r.watched[b] {
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
	if len(r.dispatch) > r.opts.MaxOpenWriters {
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

func (r *Reput) serveRequests() error {
	r.reqMu.Lock()
	reqs := r.reqs
	r.reqs = nil
	r.reqMu.Unlock()
	if len(reqs) > 0 {
		r.last = nil // Watch and Unwatch change what is watched
	}
	for i, q := range reqs {
		var rep reply
		switch q.kind {
		case reqWatch:
			rep.end, rep.err = r.watch(q.bucket)
		case reqUnwatch:
			delete(r.watched, q.bucket)
		case reqRetire:
			rep.err = r.retire(q.bucket, q.known)
		case reqClose:
			for _, rest := range reqs[i+1:] {
				rest.reply <- reply{err: ErrClosed}
			}
			q.reply <- reply{}
			return ErrClosed
		}
		q.reply <- rep
	}
	return nil
}

func (r *Reput) watch(bucket int64) (int64, error) {
	sw, ok, err := r.openWriter(bucket)
	if err != nil || !ok {
		r.watched[bucket] = err == nil
		return 0, err
	}
	if !sw.flushed {
		// Entries appended but not yet published would reach neither the
		// caller's scan nor OnEntries: publish them first.
		if err := r.publish(); err != nil {
			return 0, err
		}
	}
	// Cancels routed to the bucket before now must be in its dispatch log
	// file for the caller's load to see them.
	r.dmu.Lock()
	dw := r.dispatch[bucket]
	r.dmu.Unlock()
	if dw != nil && dw.dirty {
		if err := dw.w.Sync(); err != nil {
			return 0, err
		}
	}
	r.watched[bucket] = true
	return sw.w.Size(), nil
}

// openWriter returns the writer of the existing segment starting at
// bucket, opening and recovering it if needed; ok is false when there is
// no such segment.
func (r *Reput) openWriter(bucket int64) (*segWriter, bool, error) {
	if sw, ok := r.writers[bucket]; ok {
		return sw, true, nil
	}
	seg, ok := r.segment(bucket)
	if !ok {
		return nil, false, nil
	}
	sw, _, err := r.writerFor(seg.Start)
	return sw, err == nil, err
}

func (r *Reput) retire(bucket int64, known uint64) error {
	sw, ok, err := r.openWriter(bucket)
	if err != nil || !ok {
		return err
	}
	if n := sw.w.Entries(); n != known {
		return fmt.Errorf("%w: segment holds %d entries, caller accounted for %d", ErrBusy, n, known)
	}
	if last, ok := sw.w.LastSeq(); ok && int64(last) >= r.checkpoint.Load() {
		return ErrNotDurable
	}
	r.dmu.Lock()
	if dw, ok := r.dispatch[bucket]; ok {
		if dw.inflight > 0 {
			r.dmu.Unlock()
			return fmt.Errorf("%w: done-records are being written", ErrBusy)
		}
		dw.w.Close()
		delete(r.dispatch, bucket)
	}
	r.dmu.Unlock()
	if err := sw.w.Close(); err != nil {
		return err
	}
	delete(r.writers, bucket)
	r.last = nil
	if err := schedulelog.Remove(r.opts.Dir, bucket); err != nil {
		return err
	}
	delete(r.watched, bucket)
	r.segsMu.Lock()
	i := sort.Search(len(r.segs), func(i int) bool { return r.segs[i].Start >= bucket })
	if i < len(r.segs) && r.segs[i].Start == bucket {
		r.segs = append(r.segs[:i], r.segs[i+1:]...)
	}
	r.segsMu.Unlock()
	return nil
}

// shutdown syncs, checkpoints and closes everything.
func (r *Reput) shutdown() error {
	if r.abandoned.Load() {
		r.it.Close()
		return nil
	}
	var err error
	if r.Err() == nil {
		if r.dirty {
			err = r.doCheckpoint()
		}
	}
	for b, sw := range r.writers {
		if cerr := sw.w.Close(); cerr != nil && err == nil {
			err = cerr
		}
		delete(r.writers, b)
	}
	r.last = nil
	r.dmu.Lock()
	for b, dw := range r.dispatch {
		if cerr := dw.w.Close(); cerr != nil && err == nil {
			err = cerr
		}
		delete(r.dispatch, b)
	}
	r.dmu.Unlock()
	r.it.Close()
	return err
}

// syncWorkers bounds the fsyncs a checkpoint runs at once. A burst of
// messages spread over months touches hundreds of segments; their fsyncs
// overlap well on a disk with a queue.
const syncWorkers = 16

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
