package reput

import (
	"context"
	"sync"
	"sync/atomic"
)

// requests are the calls (Watch, Retire, Close) waiting for the routing
// goroutine. Any goroutine may push one; the routing goroutine takes them.
type requests struct {
	mu struct {
		sync.Mutex
		list []request
		// wake, set while the routing goroutine waits, ends its wait.
		wake context.CancelFunc
	}
	// stopped: the routing goroutine has ended and serves no more
	// requests. Set under mu, after which nothing is pushed.
	stopped atomic.Bool
}

type reqKind int

const (
	reqWatch reqKind = iota
	reqRetire
	reqClose
)

type request struct {
	kind   reqKind
	bucket int64
	known  uint64
	topics []string // reqRetire
	reply  chan reply
}

type reply struct {
	end     int64
	retired Retired // reqWatch
	err     error
}

// push queues req and wakes the routing goroutine; false once it stopped.
func (q *requests) push(req request) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped.Load() {
		return false
	}
	q.mu.list = append(q.mu.list, req)
	if q.mu.wake != nil {
		q.mu.wake()
	}
	return true
}

// take returns the requests waiting, and leaves none; with stop, the
// routing goroutine serves no more.
func (q *requests) take(stop bool) []request {
	q.mu.Lock()
	defer q.mu.Unlock()
	if stop {
		q.stopped.Store(true)
	}
	reqs := q.mu.list
	q.mu.list = nil
	return reqs
}

// park makes the next push or wake call cancel, unless a request waits or
// ready (if not nil; called under the same lock as wake) reports true: it
// returns whether the caller may wait for cancel. unpark ends it.
func (q *requests) park(cancel context.CancelFunc, ready func() bool) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.mu.list) > 0 || ready != nil && ready() {
		return false
	}
	q.mu.wake = cancel
	return true
}

func (q *requests) unpark() {
	q.mu.Lock()
	q.mu.wake = nil
	q.mu.Unlock()
}

// wake ends the routing goroutine's wait, if it waits.
func (q *requests) wake() {
	q.mu.Lock()
	if q.mu.wake != nil {
		q.mu.wake()
	}
	q.mu.Unlock()
}
