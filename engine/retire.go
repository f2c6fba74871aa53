package engine

import (
	"errors"
	"time"

	"github.com/hourglassmq/hourglass/reput"
)

// defaultLaneIdle is Options.laneIdle's default: how long a topic's lane
// with nothing to deliver keeps its goroutines.
const defaultLaneIdle = time.Minute

// retireBuckets retires the buckets that are over and fully done (reput
// deletes their segment and dispatch log), and returns when it next needs
// to run. Not while a Cancel is between its decision and its durable
// cancel record: the entry it keeps from firing would vanish with its
// segment if that append then failed.
func (d *driver) retireBuckets(now int64) int64 {
	next := never
	unarmed := d.claiming()
	for _, b := range d.buckets {
		if unarmed {
			next = min(next, now+1)
			break
		}
		if !b.ready || b.retiring || b.end > now {
			if b.end > now {
				next = min(next, b.end)
			}
			continue
		}
		if b.pending > 0 || b.inflight > 0 || b.corrupt {
			continue
		}
		if time.Now().Before(b.retryAt) {
			next = min(next, now+time.Until(b.retryAt).Milliseconds()+1)
			continue
		}
		b.retiring = true
		start, entries := b.start, b.entries
		go func() {
			err := d.e.reput.Retire(start, entries)
			d.post(ev{kind: evRetired, bucket: start, err: err})
		}()
	}
	return next
}

// retired finishes the retirement of the bucket at start: it is unloaded,
// or, if reput refused or failed, tried again a second later.
func (d *driver) retired(start int64, err error) {
	b := d.buckets[start]
	if b == nil {
		return
	}
	b.retiring = false
	if err != nil {
		b.retryAt = time.Now().Add(time.Second)
		// After routing stopped (reput closed) every retry fails alike;
		// the stall on /readyz already says why.
		if !errors.Is(err, reput.ErrNotDurable) && !errors.Is(err, reput.ErrBusy) && !errors.Is(err, reput.ErrClosed) {
			d.e.opts.Logger.Warn("engine: retiring a segment failed", "bucket", fmtMs(b.start), "err", err)
		}
		return
	}
	d.unload(b)
}

func (d *driver) unload(b *bucket) {
	d.segsDirty = true
	if b.mr != nil {
		b.mr.Close()
	}
	delete(d.buckets, b.start)
	d.freeSlots(b)
	d.loadedN.Add(-1)
}

// retireLanes stops the lanes that have held nothing for laneIdleMs, so
// that a topic no longer fired to keeps no goroutines, and returns when
// the next idle lane is due to retire. A lane holds nothing once every
// entry sent to it is confirmed: its goroutines are waiting for work, and
// closing its queue ends them. The next entry fired for the topic starts
// a new lane (driver.lane); both happen on the driver goroutine, so an
// entry goes either to the old lane before it retires or to the new one.
func (d *driver) retireLanes(now int64) int64 {
	next := never
	if d.laneIdleMs < 0 {
		return next
	}
	for topic, l := range d.lanes {
		if l.held > 0 {
			continue
		}
		if at := l.idleSince + d.laneIdleMs; at > now {
			next = min(next, at)
			continue
		}
		delete(d.lanes, topic)
		close(l.queue)
	}
	return next
}
