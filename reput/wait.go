package reput

import (
	"context"
	"sync"
	"sync/atomic"
)

// WaitRouted blocks until every record below offset has been routed (its
// entry is readable and, for a watched bucket, handed to OnEntries), the
// context ends, or routing stops.
func (r *Reput) WaitRouted(ctx context.Context, offset int64) error {
	return r.progress.wait(ctx, &r.progress.routed, offset, r.stopped)
}

// KeysAt returns the commitlog position below which the idempotency key
// of every routed record is in the catalog (staged or committed): after a
// restart it stays at the checkpoint until the records found after it
// are routed again.
func (r *Reput) KeysAt() int64 { return r.progress.keys.Load() }

// WaitKeys returns once the keys of every record below offset are in the
// catalog (KeysAt), or ctx ends, or routing stopped.
func (r *Reput) WaitKeys(ctx context.Context, offset int64) error {
	return r.progress.wait(ctx, &r.progress.keys, offset, r.stopped)
}

// stopped returns the error that stopped routing, ErrClosed after Close,
// and nil while it runs.
func (r *Reput) stopped() error {
	if err := r.Err(); err != nil {
		return err
	}
	if r.reqs.stopped.Load() {
		return ErrClosed
	}
	return nil
}

// progress is how far routing has come: any goroutine may read it and wait
// for it; the routing goroutine advances it.
type progress struct {
	routed     atomic.Int64 // next commitlog offset to route (Position)
	keys       atomic.Int64 // the keys of every record below it are in the catalog, staged at least (KeysAt)
	checkpoint atomic.Int64 // the durable position (Checkpoint)

	// mu guards advanced, which wake closes and replaces when routed or
	// keys advance.
	mu struct {
		sync.Mutex
		advanced chan struct{}
	}
}

// wait returns once pos (routed or keys) reaches offset, or with the
// error of ctx, or with the error stopped returns once routing stopped.
func (p *progress) wait(ctx context.Context, pos *atomic.Int64, offset int64, stopped func() error) error {
	for {
		p.mu.Lock()
		ch := p.mu.advanced
		p.mu.Unlock()
		if pos.Load() >= offset {
			return nil
		}
		if err := stopped(); err != nil {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// wake wakes the waiters, to look at the positions again.
func (p *progress) wake() {
	p.mu.Lock()
	close(p.mu.advanced)
	p.mu.advanced = make(chan struct{})
	p.mu.Unlock()
}
