package reput

import (
	"fmt"
	"time"

	"github.com/hourglassmq/hourglass/dispatchlog"
)

// MarkDone durably appends done-records to bucket's dispatch log (group
// committed with concurrent callers). It is how the engine records a
// delivery.
func (r *Reput) MarkDone(bucket int64, recs ...dispatchlog.Done) error {
	r.dmu.Lock()
	dw, err := r.dispatchWriterLocked(bucket)
	if err != nil {
		r.dmu.Unlock()
		return err
	}
	dw.inflight++
	r.dmu.Unlock()
	err = dw.w.AppendSync(recs...)
	r.dmu.Lock()
	dw.inflight--
	if err != nil && dw.inflight == 0 && !dw.dirty && r.dispatch[bucket] == dw {
		// A failed write or fsync is sticky: drop the writer, so the
		// next call reopens (and recovers) the file instead of failing
		// for good. One with reput's unsynced cancels is left to the
		// routing goroutine, which rewinds to re-route them.
		dw.w.Close()
		delete(r.dispatch, bucket)
	}
	r.dmu.Unlock()
	return err
}

func (r *Reput) dispatchWriterLocked(bucket int64) (*dispWriter, error) {
	r.dtick++
	if dw, ok := r.dispatch[bucket]; ok {
		dw.used, dw.lastUse = true, r.dtick
		return dw, nil
	}
	seg, ok, err := r.segmentErr(bucket)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("reput: no schedule segment starts at %s", time.UnixMilli(bucket).UTC().Format(time.RFC3339))
	}
	r.evictDispatchLocked()
	// A segment's dispatch log is created with it (Options.OnSegment);
	// one missing now was lost, unless the segment was created in this
	// run (a cancel routed in the batch that created it comes before
	// OnSegment), and the one created in its place says so, so that
	// whoever loads the bucket does not take it for a whole log.
	r.segsMu.RLock()
	fresh := r.fresh[bucket]
	r.segsMu.RUnlock()
	do := r.opts.dispatch
	do.CreateLost = !fresh
	w, rec, err := dispatchlog.Open(r.opts.Dir, bucket, seg.Duration, do)
	if err != nil {
		return nil, err
	}
	if rec.Truncated {
		r.log.Warn("reput: dispatch log torn tail truncated", "recovery", rec.String())
	}
	dw := &dispWriter{w: w, used: true, lastUse: r.dtick}
	r.dispatch[bucket] = dw
	return dw, nil
}

// evictDispatchLocked closes the least recently used idle dispatch log
// writers (Close syncs them) while maxOpenWriters are open. Writers in use
// by MarkDone are never closed, so the bound can be passed by as many as
// there are concurrent MarkDone calls. r.dmu must be held.
func (r *Reput) evictDispatchLocked() {
	for len(r.dispatch) >= r.opts.maxOpenWriters {
		var victim *dispWriter
		var vb int64
		for b, dw := range r.dispatch {
			if dw.inflight == 0 && (victim == nil || dw.lastUse < victim.lastUse) {
				victim, vb = dw, b
			}
		}
		if victim == nil {
			return
		}
		if err := victim.w.Close(); err != nil {
			r.log.Warn("reput: closing a dispatch log", "err", err)
			if victim.dirty {
				// Cancels reput routed there may not be durable: the
				// routing goroutine must route them again.
				err = fmt.Errorf("reput: closing a dispatch log with unsynced cancels: %w", err)
				r.rewind.CompareAndSwap(nil, &err)
			}
		}
		delete(r.dispatch, vb)
		r.stats.evicted.Add(1)
	}
}
