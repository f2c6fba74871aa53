package server

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// lazyDeadline is context.WithDeadline(parent, at) with the timer made
// only when something asks for Done: a plain Schedule is stored and
// answered without anything waiting on its context, and the timer of
// context.WithTimeout, which connect-go makes for every call that carries
// a Connect-Timeout-Ms, cost about 3 % of a single Schedule's CPU on the
// server. Err and Deadline answer without a timer.
type lazyDeadline struct {
	context.Context // the parent
	at              time.Time

	once sync.Once
	real atomic.Pointer[realDeadline] // set by the first Done
}

type realDeadline struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newLazyDeadline(parent context.Context, at time.Time) *lazyDeadline {
	return &lazyDeadline{Context: parent, at: at}
}

func (d *lazyDeadline) Deadline() (time.Time, bool) { return d.at, true }

func (d *lazyDeadline) Done() <-chan struct{} {
	d.once.Do(func() {
		ctx, cancel := context.WithDeadline(d.Context, d.at)
		d.real.Store(&realDeadline{ctx, cancel})
	})
	return d.real.Load().ctx.Done()
}

// Value answers from the context Done made once there is one, so that
// context.Cause and the contexts derived from d see its cancellation.
func (d *lazyDeadline) Value(key any) any {
	if r := d.real.Load(); r != nil && r != cancelledDeadline {
		return r.ctx.Value(key)
	}
	return d.Context.Value(key)
}

func (d *lazyDeadline) Err() error {
	if r := d.real.Load(); r != nil {
		return r.ctx.Err() // consistent with the channel Done returned
	}
	if err := d.Context.Err(); err != nil {
		return err
	}
	if !time.Now().Before(d.at) {
		return context.DeadlineExceeded
	}
	return nil
}

// cancel cancels the context, as the CancelFunc of WithDeadline does, and
// releases the timer if Done made one.
func (d *lazyDeadline) cancel() {
	d.once.Do(func() { d.real.Store(cancelledDeadline) })
	d.real.Load().cancel()
}

// cancelledDeadline stands for the context of a lazyDeadline cancelled
// before anything asked for Done.
var cancelledDeadline = func() *realDeadline {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return &realDeadline{ctx, cancel}
}()
