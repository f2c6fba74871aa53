package reput

import (
	"time"

	"github.com/hourglassmq/hourglass/catalog"
)

// sweepPage bounds the catalog entries one checkpoint's sweep looks at.
const sweepPage = 4096

// movedKept is how long after its delivery time an origin's latest
// incarnation stays in the Moved table once its segment is gone: the
// queue may hold it (due, leased, dead-lettered) that long at least, and
// Get by the first ID finds it there.
const movedKept = 7 * 24 * time.Hour

// sweepCatalog removes from the catalog's Keys and Moved tables a page of
// the entries whose value names a message whose segment is gone (retired:
// every entry of it was done), going on from where the last sweep
// stopped: a message's key is kept while its bucket exists and for
// Options.KeyWindow after its Schedule arrived, an origin's latest
// incarnation for movedKept after its delivery time besides.
func (r *Reput) sweepCatalog() {
	c := r.opts.Catalog
	gone := func(id []byte) bool {
		v, ok := catalog.DecodeID(id)
		if !ok {
			return true
		}
		_, exists := r.FindSegment(v.DeliverAt)
		return !exists
	}
	var err error
	var n int
	if r.sweepAt, n, err = c.Sweep(catalog.Keys, r.sweepAt, sweepPage, func(_, v []byte) bool {
		id, at, ok := catalog.DecodeKey(v)
		if !ok {
			return true
		}
		if at == 0 {
			at = id.DeliverAt // a Schedule never arrives after its delivery time
		}
		return gone(v) && time.UnixMilli(at).Add(r.opts.KeyWindow).Before(time.Now())
	}); err != nil {
		r.log.Warn("reput: sweeping the catalog's keys failed", "err", err)
	}
	m := 0
	if r.movedAt, m, err = c.Sweep(catalog.Moved, r.movedAt, sweepPage, func(_, v []byte) bool {
		id, ok := catalog.DecodeID(v)
		return !ok || gone(v) && time.UnixMilli(id.DeliverAt).Add(movedKept).Before(time.Now())
	}); err != nil {
		r.log.Warn("reput: sweeping the catalog's reschedules failed", "err", err)
	}
	if n+m > 0 {
		r.dirty = true
	}
}
