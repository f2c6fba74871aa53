package reput

import (
	"context"
	"sync/atomic"
)

// WaitRouted blocks until every record below offset has been routed (its
// entry is readable and, for a watched bucket, handed to OnEntries), the
// context ends, or routing stops.
func (r *Reput) WaitRouted(ctx context.Context, offset int64) error {
	return r.waitFor(ctx, &r.position, offset)
}

// waitFor returns once pos (a position publish advances) reaches offset.
func (r *Reput) waitFor(ctx context.Context, pos *atomic.Int64, offset int64) error {
	for {
		r.routedMu.Lock()
		ch := r.routedCh
		r.routedMu.Unlock()
		if pos.Load() >= offset {
			return nil
		}
		if err := r.Err(); err != nil {
			return err
		}
		if r.stopped.Load() {
			return ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// KeysAt returns the commitlog position below which the idempotency key
// of every routed record is in the catalog (staged or committed): after a
// restart it stays at the checkpoint until the records found after it
// are routed again.
func (r *Reput) KeysAt() int64 { return r.keysAt.Load() }

// WaitKeys returns once the keys of every record below offset are in the
// catalog (KeysAt), or ctx ends, or routing stopped.
func (r *Reput) WaitKeys(ctx context.Context, offset int64) error {
	return r.waitFor(ctx, &r.keysAt, offset)
}

func (r *Reput) wakeRouted() {
	r.routedMu.Lock()
	close(r.routedCh)
	r.routedCh = make(chan struct{})
	r.routedMu.Unlock()
}
