package reput

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglassmq/hourglass/dispatchlog"
)

// dispatchWriters are the open dispatch log writers, shared by the routing
// goroutine (cancels, checkpoints) and MarkDone and SyncDispatch callers.
// They are kept within Options.maxOpenWriters: the least recently used
// idle writer is closed first (Close syncs it).
type dispatchWriters struct {
	opts *Options
	segs *segList

	mu struct {
		sync.Mutex
		open map[int64]*dispWriter
		tick uint64 // use counter for the LRU order
	}
	evicted atomic.Int64 // writers closed to stay within the bound
	// rewind, when set, makes the routing goroutine treat it as a failed
	// attempt: a writer closed to stay within the bound held cancels
	// reput had routed and not synced.
	rewind atomic.Pointer[error]
}

// dispWriter is an open dispatch log writer. Its fields other than w are
// guarded by dispatchWriters.mu; only the routing goroutine writes dirty,
// and it reads it without the lock.
type dispWriter struct {
	w        *dispatchlog.Writer
	dirty    bool // appended by reput since the last checkpoint
	used     bool // touched since the last checkpoint
	inflight int  // callers using w: never closed meanwhile
	lastUse  uint64
}

// MarkDone durably appends done-records to bucket's dispatch log (group
// committed with concurrent callers). It is how the engine records a
// delivery.
func (r *Reput) MarkDone(bucket int64, recs ...dispatchlog.Done) error {
	d := &r.dispatch
	dw, err := d.hold(bucket, true)
	if err != nil {
		return err
	}
	err = dw.w.AppendSync(recs...)
	d.mu.Lock()
	dw.inflight--
	if err != nil && dw.inflight == 0 && !dw.dirty && d.mu.open[bucket] == dw {
		// A failed write or fsync is sticky: drop the writer, so the
		// next call reopens (and recovers) the file instead of failing
		// for good. One with reput's unsynced cancels is left to the
		// routing goroutine, which rewinds to re-route them.
		dw.w.Close()
		delete(d.mu.open, bucket)
	}
	d.mu.Unlock()
	return err
}

// SyncDispatch makes the done-records reput has routed to bucket's
// dispatch log so far (its cancels) durable and readable in the file, so
// that a reader of the file (dispatchlog.Records) sees every cancel routed
// before the call. It does nothing when reput has no writer of the
// bucket's dispatch log open (then everything it routed there is synced),
// and costs no fsync when nothing was appended since the last one. Safe
// from any goroutine.
func (r *Reput) SyncDispatch(bucket int64) error {
	dw, err := r.dispatch.hold(bucket, false)
	if dw == nil {
		return err
	}
	err = dw.w.Sync()
	r.dispatch.release(false, dw)
	return err
}

// hold returns bucket's writer marked in use, so that keeping the writers
// within their bound does not close it until release. With open it is
// marked used (the LRU order) and opened if none is; without, nil is
// returned when none is.
func (d *dispatchWriters) hold(bucket int64, open bool) (*dispWriter, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	dw := d.mu.open[bucket]
	if open {
		var err error
		if dw, err = d.openLocked(bucket); err != nil {
			return nil, err
		}
	}
	if dw != nil {
		dw.inflight++
	}
	return dw, nil
}

// release ends the use of dws that hold began; appended says reput
// appended to them.
func (d *dispatchWriters) release(appended bool, dws ...*dispWriter) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, dw := range dws {
		dw.inflight--
		dw.dirty = dw.dirty || appended
	}
}

// holdDirty returns the writers reput appended to since the last
// checkpoint, marked clean and in use (release them after syncing).
func (d *dispatchWriters) holdDirty() []*dispWriter {
	d.mu.Lock()
	defer d.mu.Unlock()
	var held []*dispWriter
	for _, dw := range d.mu.open {
		if dw.dirty {
			dw.dirty = false
			dw.inflight++
			held = append(held, dw)
		}
	}
	return held
}

// openLocked returns bucket's writer, opening it if none is. d.mu is held.
func (d *dispatchWriters) openLocked(bucket int64) (*dispWriter, error) {
	d.mu.tick++
	if dw, ok := d.mu.open[bucket]; ok {
		dw.used, dw.lastUse = true, d.mu.tick
		return dw, nil
	}
	seg, ok, err := d.segs.get(bucket)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("reput: no schedule segment starts at %s", time.UnixMilli(bucket).UTC().Format(time.RFC3339))
	}
	d.evictLocked()
	// A segment's dispatch log is created with it (Options.OnSegment);
	// one missing now was lost, unless the segment was created in this
	// run (a cancel routed in the batch that created it comes before
	// OnSegment), and the one created in its place says so, so that
	// whoever loads the bucket does not take it for a whole log.
	do := d.opts.dispatch
	do.CreateLost = !d.segs.isFresh(bucket)
	w, rec, err := dispatchlog.Open(d.opts.Dir, bucket, seg.Duration, do)
	if err != nil {
		return nil, err
	}
	if rec.Truncated {
		d.opts.Logger.Warn("reput: dispatch log torn tail truncated", "recovery", rec.String())
	}
	dw := &dispWriter{w: w, used: true, lastUse: d.mu.tick}
	d.mu.open[bucket] = dw
	return dw, nil
}

// evictLocked closes the least recently used idle writers (Close syncs
// them) while maxOpenWriters are open. Writers in use are never closed, so
// the bound can be passed by as many as there are concurrent MarkDone
// calls. d.mu is held.
func (d *dispatchWriters) evictLocked() {
	for len(d.mu.open) >= d.opts.maxOpenWriters {
		var victim *dispWriter
		var vb int64
		for b, dw := range d.mu.open {
			if dw.inflight == 0 && (victim == nil || dw.lastUse < victim.lastUse) {
				victim, vb = dw, b
			}
		}
		if victim == nil {
			return
		}
		if err := victim.w.Close(); err != nil {
			d.opts.Logger.Warn("reput: closing a dispatch log", "err", err)
			if victim.dirty {
				// Cancels reput routed there may not be durable: the
				// routing goroutine must route them again.
				err = fmt.Errorf("reput: closing a dispatch log with unsynced cancels: %w", err)
				d.rewind.CompareAndSwap(nil, &err)
			}
		}
		delete(d.mu.open, vb)
		d.evicted.Add(1)
	}
}

// remove closes bucket's writer for Retire, unless it is in use.
func (d *dispatchWriters) remove(bucket int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if dw, ok := d.mu.open[bucket]; ok {
		if dw.inflight > 0 {
			return fmt.Errorf("%w: done-records are being written", ErrBusy)
		}
		dw.w.Close()
		delete(d.mu.open, bucket)
	}
	return nil
}

// closeIdle closes the writers untouched since the last checkpoint once
// more than maxOpenWriters are open. They are synced already.
func (d *dispatchWriters) closeIdle() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.mu.open) > d.opts.maxOpenWriters {
		for b, dw := range d.mu.open {
			if !dw.used && !dw.dirty && dw.inflight == 0 {
				dw.w.Close()
				delete(d.mu.open, b)
			}
		}
	}
	for _, dw := range d.mu.open {
		dw.used = false
	}
}

// reset closes every writer not in use and forgets what reput appended:
// routing rewinds to the checkpoint and appends it again.
func (d *dispatchWriters) reset() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for b, dw := range d.mu.open {
		if dw.inflight == 0 {
			dw.w.Close()
			delete(d.mu.open, b)
		}
		dw.dirty = false
	}
}

// closeAll closes every writer and returns the first error.
func (d *dispatchWriters) closeAll() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var err error
	for b, dw := range d.mu.open {
		if cerr := dw.w.Close(); cerr != nil && err == nil {
			err = cerr
		}
		delete(d.mu.open, b)
	}
	return err
}
