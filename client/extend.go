package client

import (
	"context"
	"time"
)

// extendLater arms r's timer to extend its lease after the given time,
// by lease, and again two thirds of a lease after each extension, until
// r is settled. cs.runMu is held.
func (cs *consumeState) extendLater(r *running, lease, after time.Duration) {
	r.timer = time.AfterFunc(max(after, 0), func() {
		ctx, cancel := context.WithTimeout(context.Background(), min(settleTimeout, lease/3))
		err := cs.extendLease(ctx, r, lease)
		cancel()
		cs.runMu.Lock()
		defer cs.runMu.Unlock()
		if r.gone {
			return // settled meanwhile: an error is no news
		}
		switch {
		case err == nil:
			cs.extendLater(r, lease, lease*2/3)
		case transient(err):
			cs.report(err)
			cs.extendLater(r, lease, lease/6)
		default:
			// The lease is over (FailedPrecondition): the server delivers
			// the message again.
			cs.report(err)
		}
	})
}
