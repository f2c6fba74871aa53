package reput

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hourglassmq/hourglass/catalog"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// batchRecords bounds how many records are routed between looks at
// requests, so Watch and Retire are served promptly under load.
const batchRecords = 4096

func (r *Reput) run() {
	defer close(r.done)
	defer r.progress.wake()
	err := r.loop()
	if err != nil && !errors.Is(err, ErrClosed) {
		r.err.Store(&err)
		r.log.Error("reput: routing stopped", "err", err)
	}
	for _, q := range r.reqs.take(true) {
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
	if p := r.dispatch.rewind.Swap(nil); p != nil {
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
	if r.keys.endStep(r.it.Pos()) {
		r.progress.keys.Store(r.it.Pos())
	}
	if h := r.opts.hooks; h != nil && h.afterRoute != nil && n > 0 {
		h.afterRoute(r)
	}
	if err := r.it.Err(); err != nil {
		return fmt.Errorf("reput: reading the commitlog: %w", err)
	}
	// The iterator also moves without records, over a span repair
	// skipped (commitlog.TypeSkip): that is routed too.
	if n > 0 || r.it.Pos() > r.progress.routed.Load() {
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
		r.it.Pos()-r.progress.checkpoint.Load() >= r.opts.checkpointBytes
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
	if !r.reqs.park(cancel2, r.catalogDone) {
		return nil
	}
	err := r.it.Wait(ctx)
	r.reqs.unpark()
	return err
}

// publish flushes what was appended so that it is readable, advances the
// routed position and hands events to the callbacks.
func (r *Reput) publish() error {
	if err := r.writers.flush(); err != nil {
		return err
	}
	r.out.deliver(&r.opts)
	// After a rewind the iterator is behind what was published.
	r.progress.routed.Store(max(r.progress.routed.Load(), r.it.Pos()))
	r.progress.wake()
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
	r.keys.stage() // the catalog batch below must hold every key up to pos
	pos := r.it.Pos()
	syncs := r.writers.syncDirty(nil)
	// The dispatch logs are held in use while they sync, so that a
	// MarkDone keeping the writers within their bound does not close one.
	held := r.dispatch.holdDirty()
	for _, dw := range held {
		syncs = append(syncs, dw.w.Sync)
	}
	err := parallel(syncs, syncWorkers)
	r.dispatch.release(false, held...)
	if err != nil {
		return err
	}
	r.dirty = false // everything routed up to pos is synced or in the catalog batch below
	if c := r.opts.Catalog; c != nil {
		// What the checkpoint covers must be in the catalog for good.
		if r.keys.sweep() {
			r.dirty = true
		}
		if b := c.Begin(); b != nil {
			if wait {
				if err := b.Write(); err != nil {
					return err
				}
			} else {
				r.commit.pos, r.commit.done = pos, make(chan error, 1)
				done := r.commit.done
				go func() {
					done <- b.Write()
					// Wake the loop: it writes the checkpoint now rather
					// than an interval later (a kill replays less).
					r.reqs.wake()
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
	if r.commit.done == nil {
		return true, nil
	}
	var err error
	if wait {
		err = <-r.commit.done
	} else {
		select {
		case err = <-r.commit.done:
		default:
			return false, nil // not done: routing goes on, and a later call looks again
		}
	}
	r.commit.done = nil
	if err != nil {
		return false, err
	}
	return true, r.writeCheckpoint(r.commit.pos)
}

// catalogDone reports whether the catalog commit in flight has ended.
func (r *Reput) catalogDone() bool { return r.commit.done != nil && len(r.commit.done) > 0 }

// writeCheckpoint durably records pos, up to which everything routed is
// synced and in the catalog, and trims the commitlog below it.
func (r *Reput) writeCheckpoint(pos int64) error {
	if err := writeCheckpoint(r.opts.Dir, pos, r.retired.st.count()); err != nil {
		return fmt.Errorf("reput: write checkpoint: %w", err)
	}
	r.progress.checkpoint.Store(pos)
	r.lastCkpt = time.Now()
	if r.stall == nil {
		r.writers.grow()
	}
	// Keep the newest sealed segment too: damaged schedule entries of
	// recent buckets are rebuilt from it (the engine checks it at start).
	cut := pos
	if b := r.opts.Log.SegmentBases(); len(b) >= 2 {
		cut = min(cut, b[len(b)-2])
	}
	if _, err := r.opts.Log.DeleteBefore(cut); err != nil {
		r.log.Warn("reput: commitlog retention failed", "err", err)
	}
	r.writers.closeIdle(r.log, r.out.watched)
	r.dispatch.closeIdle()
	return nil
}

func (r *Reput) serveRequests() error {
	reqs := r.reqs.take(false)
	if len(reqs) > 0 {
		r.writers.last = lastWriter{} // Watch changes what is watched
	}
	for i, q := range reqs {
		var rep reply
		switch q.kind {
		case reqWatch:
			rep.end, rep.retired, rep.err = r.watch(q.bucket)
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

func (r *Reput) watch(bucket int64) (int64, Retired, error) {
	sw, ok, err := r.openWriter(bucket)
	if err != nil || !ok {
		if err == nil {
			r.out.watched[bucket] = &watchState{}
		}
		return 0, nil, err
	}
	if !sw.flushed {
		// Entries appended but not yet published would reach neither the
		// caller's scan nor OnEntries: publish them first.
		if err := r.publish(); err != nil {
			return 0, nil, err
		}
	}
	// Cancels routed to the bucket before now must be in its dispatch log
	// file for the caller's load to see them.
	if dw, _ := r.dispatch.hold(bucket, false); dw != nil {
		var err error
		if dw.dirty {
			err = dw.w.Sync()
		}
		r.dispatch.release(false, dw)
		if err != nil {
			return 0, nil, err
		}
	}
	end := sw.w.Size()
	r.out.watched[bucket] = &watchState{published: end, queued: end}
	return end, r.retired.st.overlapping(bucket, bucket+sw.w.Duration().Milliseconds()), nil
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
		if int64(last) >= r.progress.checkpoint.Load() {
			return ErrNotDurable
		}
		seqEnd = last + 1
	}
	if err := r.dispatch.remove(bucket); err != nil {
		return err
	}
	if err := sw.w.Close(); err != nil {
		return err
	}
	r.writers.drop(bucket)
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
	if err := r.retired.append(Retirement{Start: bucket, Duration: sw.w.Duration(), SeqEnd: seqEnd, Floor: r.progress.checkpoint.Load()}); err != nil {
		return err
	}
	r.stats.retired.Add(1)
	// Off the list before its files go: a reader that found the segment
	// and then reads a deleted dispatch log as empty looks again
	// (FindSegment) and finds it retired, not pending. A failed Remove
	// leaves files of a retired bucket, as a crash here would: the next
	// start lists them again, and the engine retires them again.
	delete(r.out.watched, bucket)
	r.segs.remove(bucket)
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
		if r.dirty || r.commit.done != nil {
			err = r.checkpointAt(true)
		}
	} else if r.commit.done != nil {
		<-r.commit.done // the catalog is closed after reput
	}
	if cerr := r.writers.closeAll(); err == nil {
		err = cerr
	}
	if cerr := r.dispatch.closeAll(); err == nil {
		err = cerr
	}
	r.retired.close()
	r.it.Close()
	return err
}

// syncWorkers bounds the fsyncs a checkpoint runs at once. A burst of
// messages spread over months touches hundreds of segments; their fsyncs
// overlap well on a disk with a queue.
const syncWorkers = 16
