package reput

import (
	"github.com/hourglassmq/hourglass/catalog"
)

// sweepPage bounds the catalog entries one checkpoint's sweep looks at.
const sweepPage = 4096

// sweepCatalog removes from the catalog's Keys and Moved tables a page of
// the entries whose value names a message whose segment is gone (retired:
// every entry of it was done), going on from where the last sweep
// stopped: a message's key and its origin's latest incarnation are kept
// while that incarnation's bucket exists.
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
	if r.sweepAt, n, err = c.Sweep(catalog.Keys, r.sweepAt, sweepPage, func(_, v []byte) bool { return gone(v) }); err != nil {
		r.log.Warn("reput: sweeping the catalog's keys failed", "err", err)
	}
	m := 0
	if r.movedAt, m, err = c.Sweep(catalog.Moved, r.movedAt, sweepPage, func(_, v []byte) bool { return gone(v) }); err != nil {
		r.log.Warn("reput: sweeping the catalog's reschedules failed", "err", err)
	}
	if n+m > 0 {
		r.dirty = true
	}
}
