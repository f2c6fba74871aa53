package commitlog

import (
	"context"
	"sync"
	"sync/atomic"
)

// view is what readers may see of the log, and how they wait for more:
// the appenders and the syncer publish a new end, readers wait on notify.
type view struct {
	// visible is the logical end of what readers may see: durable data
	// under SyncAlways and SyncInterval, all written data under SyncNone.
	visible atomic.Int64
	// mu guards notify, which is closed (and replaced) whenever visible
	// advances, the log fails, or it closes.
	mu      sync.Mutex
	notify  chan struct{}
	waiters atomic.Int32          // goroutines blocked on notify
	failed  atomic.Pointer[error] // the log's sticky error, for waiters
}

// publish makes data up to end visible to readers and wakes them.
func (v *view) publish(end int64) {
	// A waiter counts itself before it reads visible, so either it sees
	// the new end or this sees it waiting.
	if storeMax(&v.visible, end) && v.waiters.Load() > 0 {
		v.wake()
	}
}

// wake wakes every waiter.
func (v *view) wake() {
	v.mu.Lock()
	close(v.notify)
	v.notify = make(chan struct{})
	v.mu.Unlock()
}

// changed returns a channel closed at the next wake.
func (v *view) changed() <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.notify
}

// WaitVisible returns once readers can see every record before offset end
// (EndOffset >= end), or with the log's sticky error, or ErrClosed. Under
// SyncAlways that is already so when Append returns; under SyncInterval it
// takes until the next fsync.
func (l *Log) WaitVisible(end int64) error { return l.waitFor(context.Background(), end) }

// waitFor blocks until readers can see end, the log fails or closes, or
// ctx ends. The writer wakes it; it does not poll.
func (l *Log) waitFor(ctx context.Context, end int64) error {
	l.view.waiters.Add(1)
	defer l.view.waiters.Add(-1)
	for {
		ch := l.view.changed()
		if l.view.visible.Load() >= end {
			return nil
		}
		if p := l.view.failed.Load(); p != nil {
			return *p
		}
		if l.isClosed() {
			return ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
