package reput

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/hourglassmq/hourglass/catalog"
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
		err := r.step()
		if err == nil {
			continue
		}
		if errors.Is(err, ErrClosed) {
			return err
		}
		if err := r.failed(err); err != nil {
			return err
		}
	}
}

// step is one round of routing: requests, a batch of records, publishing,
// the checkpoint when due (always while stalled: it proves that what
// failed works again), and a wait when there is nothing to do.
func (r *Reput) step() error {
	if err := r.serveRequests(); err != nil {
		return err
	}
	if p := r.rewind.Swap(nil); p != nil {
		return *p
	}
	n := 0
	for n < batchRecords && r.it.Next() {
		if err := r.route(r.it.Offset(), r.it.Record().Type, r.it.Record().Payload); err != nil {
			return err
		}
		n++
	}
	// Before publish: a Lookup waits until what was appended before it is
	// published, and then finds its key staged.
	if r.it.Pos() >= r.replayEnd || r.heldN >= maxReplayKeys {
		r.stageKeys()
		r.keysAt.Store(r.it.Pos())
	} else {
		r.collectKeys(true)
	}
	if h := r.opts.hooks; h != nil && h.afterRoute != nil && n > 0 {
		h.afterRoute(r)
	}
	if err := r.it.Err(); err != nil {
		return fmt.Errorf("reput: reading the commitlog: %w", err)
	}
	// The iterator also moves without records, over a span repair
	// skipped (commitlog.TypeSkip): that is routed too.
	if n > 0 || r.it.Pos() > r.position.Load() {
		if err := r.publish(); err != nil {
			return err
		}
	}
	if r.stall != nil {
		if err := r.doCheckpoint(); err != nil {
			return err
		}
		if r.it.Pos() >= r.stall.at {
			r.resumed()
		}
		return nil
	}
	if r.catalogDone() {
		// The commit of the last checkpoint's catalog batch ended: its
		// position is durable now, not at the next interval.
		if _, err := r.finishCatalog(false); err != nil {
			return err
		}
	}
	if r.dirty && r.checkpointDue() {
		if err := r.doCheckpoint(); err != nil {
			return err
		}
	}
	if n == batchRecords {
		return nil
	}
	if err := r.wait(); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// defaultCheckpointBytes is Options.checkpointBytes' default. At 100,000
// Schedules a second of 256-byte bodies (about 38 MB/s of commitlog) it
// checkpoints about five times a second; a restart after a kill then routes
// again, scans and syncs at most about 8 MiB and what one catalog commit
// took, not the whole interval (docs/DESIGN.md, "A checkpoint every
// second or every 8 MiB").
const defaultCheckpointBytes = 8 << 20

// checkpointDue reports whether the interval has passed since the last
// checkpoint, or checkpointBytes of commitlog have been routed past it.
func (r *Reput) checkpointDue() bool {
	return time.Since(r.lastCkpt) >= r.opts.checkpointInterval ||
		r.it.Pos()-r.checkpoint.Load() >= r.opts.checkpointBytes
}

// wait blocks until the commitlog has more, a request arrives, the
// catalog commit in flight ends, or the next checkpoint is due. It sleeps
// without ticking when idle.
func (r *Reput) wait() error {
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if r.dirty {
		ctx, cancel = context.WithDeadline(ctx, r.lastCkpt.Add(r.opts.checkpointInterval))
	}
	ctx, cancel2 := context.WithCancel(ctx)
	defer cancel()
	defer cancel2()
	r.reqMu.Lock()
	if len(r.reqs) > 0 || r.catalogDone() {
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
				r.opts.OnCancel(ev.bucket, ev.seq, ev.why)
			}
		case ev.control != nil:
			flush()
			if r.opts.OnControl != nil {
				r.opts.OnControl(*ev.control)
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
	for _, ws := range r.watched {
		ws.published = ws.queued
	}
	// After a rewind the iterator is behind what was published.
	r.position.Store(max(r.position.Load(), r.it.Pos()))
	r.wakeRouted()
	return nil
}

// doCheckpoint syncs every segment and dispatch log routed to since the
// last checkpoint, then durably records the position and trims the
// commitlog below it. With a catalog the position is recorded once the
// catalog holds everything routed before it: its commit runs on a
// goroutine of its own (a second of keyed Schedules can take hundreds of
// milliseconds to write) while routing goes on, and the checkpoint is
// written when it is done (the step after the commit ends: catalogDone).
// While stalled, or at shutdown, everything is done at once (wait).
func (r *Reput) doCheckpoint() error { return r.checkpointAt(r.stall != nil) }

func (r *Reput) checkpointAt(wait bool) error {
	if done, err := r.finishCatalog(wait); err != nil || !done {
		return err
	}
	r.stageKeys() // the catalog batch below must hold every key up to pos
	pos := r.it.Pos()
	var syncs []func() error
	for _, sw := range r.writers {
		if sw.dirty {
			syncs = append(syncs, sw.w.Sync)
			sw.dirty, sw.flushed = false, true
		}
	}
	// The dispatch logs are marked in use while they sync, so that a
	// MarkDone keeping the writers within their bound does not close one.
	var held []*dispWriter
	r.dmu.Lock()
	for _, dw := range r.dispatch {
		if dw.dirty {
			syncs = append(syncs, dw.w.Sync)
			dw.dirty = false
			dw.inflight++
			held = append(held, dw)
		}
	}
	r.dmu.Unlock()
	err := parallel(syncs, syncWorkers)
	r.dmu.Lock()
	for _, dw := range held {
		dw.inflight--
	}
	r.dmu.Unlock()
	if err != nil {
		return err
	}
	r.dirty = false // everything routed up to pos is synced or in the catalog batch below
	if c := r.opts.Catalog; c != nil {
		// What the checkpoint covers must be in the catalog for good.
		r.sweepCatalog()
		if b := c.Begin(); b != nil {
			if wait {
				if err := b.Write(); err != nil {
					return err
				}
			} else {
				r.catPos, r.catBusy = pos, make(chan error, 1)
				done := r.catBusy
				go func() {
					done <- b.Write()
					// Wake the loop: it writes the checkpoint now rather
					// than an interval later (a kill replays less).
					r.reqMu.Lock()
					if r.wakeWait != nil {
						r.wakeWait()
					}
					r.reqMu.Unlock()
				}()
				// Dirty until the checkpoint is written: the loop comes
				// back after an interval, also when idle.
				r.dirty, r.lastCkpt = true, time.Now()
				return nil
			}
		}
	}
	return r.writeCheckpoint(pos)
}

// finishCatalog writes the checkpoint of the catalog commit in flight once
// that commit is done (with wait, after waiting for it). It reports
// whether none is left in flight.
func (r *Reput) finishCatalog(wait bool) (bool, error) {
	if r.catBusy == nil {
		return true, nil
	}
	var err error
	if wait {
		err = <-r.catBusy
	} else {
		select {
		case err = <-r.catBusy:
		default:
			return false, nil // not done: routing goes on, and a later call looks again
		}
	}
	r.catBusy = nil
	if err != nil {
		return false, err
	}
	return true, r.writeCheckpoint(r.catPos)
}

// catalogDone reports whether the catalog commit in flight has ended.
func (r *Reput) catalogDone() bool { return r.catBusy != nil && len(r.catBusy) > 0 }

// writeCheckpoint durably records pos, up to which everything routed is
// synced and in the catalog, and trims the commitlog below it.
func (r *Reput) writeCheckpoint(pos int64) error {
	if err := writeCheckpoint(r.opts.Dir, pos, r.retired.st.count()); err != nil {
		return fmt.Errorf("reput: write checkpoint: %w", err)
	}
	r.checkpoint.Store(pos)
	r.lastCkpt = time.Now()
	if r.writerCap < r.opts.maxOpenWriters && r.stall == nil {
		r.writerCap = min(r.opts.maxOpenWriters, r.writerCap+max(1, r.writerCap/4))
	}
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

func (r *Reput) serveRequests() error {
	r.reqMu.Lock()
	reqs := r.reqs
	r.reqs = nil
	r.reqMu.Unlock()
	if len(reqs) > 0 {
		r.last = nil // Watch changes what is watched
	}
	for i, q := range reqs {
		var rep reply
		switch q.kind {
		case reqWatch:
			rep.end, rep.err = r.watch(q.bucket)
		case reqRetire:
			rep.err = r.retire(q.bucket, q.known, q.topics)
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
		if err == nil {
			r.watched[bucket] = &watchState{}
		}
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
	if dw != nil {
		dw.inflight++
	}
	r.dmu.Unlock()
	if dw != nil {
		var err error
		if dw.dirty {
			err = dw.w.Sync()
		}
		r.dmu.Lock()
		dw.inflight--
		r.dmu.Unlock()
		if err != nil {
			return 0, err
		}
	}
	end := sw.w.Size()
	r.watched[bucket] = &watchState{published: end, queued: end}
	return end, nil
}

func (r *Reput) retire(bucket int64, known uint64, topics []string) error {
	sw, ok, err := r.openWriter(bucket)
	if err != nil || !ok {
		return err
	}
	if n := sw.w.Entries(); n != known {
		return fmt.Errorf("%w: segment holds %d entries, caller accounted for %d", ErrBusy, n, known)
	}
	var seqEnd uint64
	if last, ok := sw.w.LastSeq(); ok {
		if int64(last) >= r.checkpoint.Load() {
			return ErrNotDurable
		}
		seqEnd = last + 1
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
	if c := r.opts.Catalog; c != nil && len(topics) > 0 {
		// Committed at once: the bucket's topics must outlive its files.
		// The catalog takes one batch at a time: the checkpoint's first.
		if _, err := r.finishCatalog(true); err != nil {
			return err
		}
		c.Put(catalog.Delivered, catalog.BucketKey(bucket), catalog.EncodeDelivered(sw.w.Duration(), topics))
		if err := c.Commit(); err != nil {
			return err
		}
	}
	// Durably recorded before anything is deleted: a restart that lost
	// the checkpoint must not route the bucket's records again.
	if err := r.retired.append(Retirement{Start: bucket, Duration: sw.w.Duration(), SeqEnd: seqEnd, Floor: r.checkpoint.Load()}); err != nil {
		return err
	}
	r.stats.retired.Add(1)
	// Off the list before its files go: a reader that found the segment
	// and then reads a deleted dispatch log as empty looks again
	// (FindSegment) and finds it retired, not pending. A failed Remove
	// leaves files of a retired bucket, as a crash here would: the next
	// start lists them again, and the engine retires them again.
	delete(r.watched, bucket)
	r.segsMu.Lock()
	i := sort.Search(len(r.segs), func(i int) bool { return r.segs[i].Start >= bucket })
	if i < len(r.segs) && r.segs[i].Start == bucket {
		r.segs = append(r.segs[:i], r.segs[i+1:]...)
	}
	delete(r.fresh, bucket)
	r.segsMu.Unlock()
	if h := r.opts.hooks; h != nil && h.beforeRemove != nil {
		h.beforeRemove(bucket)
	}
	return schedulelog.Remove(r.opts.Dir, bucket)
}

// shutdown syncs, checkpoints and closes everything.
func (r *Reput) shutdown() error {
	if r.abandoned.Load() {
		r.it.Close()
		return nil
	}
	var err error
	if r.Err() == nil {
		if r.dirty || r.catBusy != nil {
			err = r.checkpointAt(true)
		}
	} else if r.catBusy != nil {
		<-r.catBusy // the catalog is closed after reput
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
	r.retired.close()
	r.it.Close()
	return err
}

// syncWorkers bounds the fsyncs a checkpoint runs at once. A burst of
// messages spread over months touches hundreds of segments; their fsyncs
// overlap well on a disk with a queue.
const syncWorkers = 16
