package client

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// loopConfig is what one consuming loop runs with: a Consume call, or one
// topic of a Worker.
type loopConfig struct {
	topic       string
	handler     Handler
	concurrency int // handler calls at once, at least 1
	prefetch    int // the stream's credits when it opens, 1 to 10000
	// maxPrefetch is the most credits the stream grows to while handlers
	// keep up (window); prefetch when the user set it.
	maxPrefetch int
	maxBatch    int // the most messages of one push, 1 to 1000
	lease       time.Duration
	// retryDelay is the nack delay after a plain error (not Retry or
	// DeadLetter); nil means 0, the topic's backoff on the server.
	retryDelay func(failures int) time.Duration
	onError    func(error)
	// extend: leases of running handlers are extended before they end.
	extend bool
	// graceful: handlers keep a live ctx for grace after the loop's ctx
	// ends; then their ctx is cancelled, their messages released and the
	// loop returns without them. Otherwise their ctx is the loop's and the
	// loop waits for them to return.
	graceful bool
	grace    time.Duration
}

// consumeState is one running loop. Its methods are called from the
// loop's goroutines: run's, the handlers', the settler, and the stream
// readers.
type consumeState struct {
	c *Client
	loopConfig
	// waited is 1 plus the longest a delivery waited for a handler since
	// the settler last looked, in nanoseconds; 0 when no handler started
	// since (credits).
	waited atomic.Int64

	mu  sync.Mutex
	cur *cstream // guarded by mu: the open stream, nil between streams

	runMu     sync.Mutex
	out       chan<- outcome        // guarded by runMu: sends and the close
	outClosed bool                  // guarded by runMu
	running   map[*running]struct{} // guarded by runMu: handler calls not yet settled
	abandoned bool                  // guarded by runMu: the grace ran out
}

// swapCur makes s the open stream and returns the one before it.
func (cs *consumeState) swapCur(s *cstream) *cstream {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	old := cs.cur
	cs.cur = s
	return old
}

// held is a delivery, the stream it came on and when it came (this
// machine's clock).
type held struct {
	d   Delivery
	on  *cstream // the stream it came on
	seq uint64   // its number on that stream
	got time.Time
}

// running is a delivery being handled.
type running struct {
	held
	gone  bool        // guarded by consumeState.runMu: settled or released
	timer *time.Timer // guarded by consumeState.runMu: the next Extend
}

// outcome is what to tell the server of a delivery: ack, or nack after
// delay (0: the topic's backoff) with reason, or dead-letter.
type outcome struct {
	held
	nack       bool
	delay      time.Duration
	reason     string
	deadLetter bool
	release    bool // given back unhandled: its attempt not counted
}

func release(h held) outcome { return outcome{held: h, nack: true, release: true} }

func newConsumeState(c *Client, cfg loopConfig) *consumeState {
	return &consumeState{c: c, loopConfig: cfg, running: map[*running]struct{}{}}
}

func (cs *consumeState) report(err error) {
	if cs.onError != nil && err != nil {
		cs.onError(err)
	}
}

// run consumes until ctx ends, then stops as loopConfig.graceful says:
// what no handler took is released at once, what handlers hold is
// settled by their results (or released once the grace ran out), and
// every settle is answered or has given up before run returns.
func (cs *consumeState) run(ctx context.Context) error {
	work := make(chan held, cs.maxPrefetch)
	outcomes := make(chan outcome, cs.maxPrefetch)
	cs.out = outcomes
	settled := make(chan struct{})
	go func() { defer close(settled); cs.settler(ctx, outcomes) }()
	hctx, stopHandlers := ctx, context.CancelFunc(func() {})
	if cs.graceful {
		hctx, stopHandlers = context.WithCancel(context.WithoutCancel(ctx))
	}
	defer stopHandlers()
	var wg sync.WaitGroup
	for range cs.concurrency {
		wg.Go(func() {
			for h := range work {
				if ctx.Err() != nil {
					// Stopping: give it back rather than start it.
					cs.finish(nil, release(h))
					continue
				}
				cs.handle(hctx, h)
			}
		})
	}
	err := cs.receive(ctx, work)
	close(work)
	for h := range work {
		cs.finish(nil, release(h))
	}
	handled := make(chan struct{})
	go func() { wg.Wait(); close(handled) }()
	if !cs.graceful {
		<-handled
	} else {
		grace := time.NewTimer(cs.grace)
		select {
		case <-handled:
		case <-grace.C:
			stopHandlers()
			cs.abandon()
		}
		grace.Stop()
	}
	cs.runMu.Lock()
	cs.outClosed = true
	close(outcomes)
	cs.runMu.Unlock()
	<-settled
	if cur := cs.swapCur(nil); cur != nil {
		// The server answers every settle it has read before it ends the
		// stream; cancelling it sooner could drop the last settles.
		cur.closeSend()
		select {
		case <-cur.done:
		case <-time.After(settleTimeout):
		}
		cur.cancel()
		// Its end settles again by unary calls what got no answer.
		<-cur.done
	}
	return err
}

// handle calls the handler with h and settles h by its result.
func (cs *consumeState) handle(ctx context.Context, h held) {
	lease := h.d.LeaseExpiresAt.Sub(h.d.ReceivedAt) // both on the server's clock
	if cs.extend && lease > 0 && time.Since(h.got) >= lease {
		// Its lease ran out while it waited for a handler: the server
		// delivers it again, to this consumer or another.
		return
	}
	if w := int64(time.Since(h.got)) + 1; w > cs.waited.Load() {
		cs.waited.Store(w) // racing handlers may keep the smaller: a hint
	}
	r := &running{held: h}
	cs.runMu.Lock()
	if cs.abandoned {
		cs.runMu.Unlock()
		cs.finish(nil, release(h))
		return
	}
	cs.running[r] = struct{}{}
	if cs.extend && lease > 0 {
		cs.extendLater(r, lease, time.Until(h.got.Add(lease*2/3)))
	}
	cs.runMu.Unlock()
	ctx, span := startHandlerSpan(ctx, h.d)
	err := cs.handler.Handle(ctx, h.d)
	endHandlerSpan(span, err)
	cs.finish(r, cs.outcomeOf(h, err))
}

// outcomeOf maps a handler's result to what to tell the server.
func (cs *consumeState) outcomeOf(h held, err error) outcome {
	a := actionOf(err)
	o := outcome{held: h, nack: a.nack, delay: a.delay, reason: a.reason, deadLetter: a.deadLetter}
	if a.plain && cs.retryDelay != nil {
		o.delay = cs.retryDelay(h.d.Attempt + 1)
	}
	return o
}

// finish hands o to the settler, once per running handler call r (nil
// for a delivery no handler took): a call released by abandon is not
// settled again. Once the settler has stopped, o is settled by unary
// calls here.
func (cs *consumeState) finish(r *running, o outcome) {
	cs.runMu.Lock()
	if r != nil {
		if r.gone {
			cs.runMu.Unlock()
			return
		}
		r.gone = true
		if r.timer != nil {
			r.timer.Stop()
		}
		delete(cs.running, r)
	}
	if cs.outClosed {
		cs.runMu.Unlock()
		cs.settleUnary([]outcome{o}, false)
		return
	}
	defer cs.runMu.Unlock()
	cs.out <- o // the settler never waits for runMu
}

// abandon releases the messages of the handler calls still running once
// the grace has run out; their results are dropped when they come.
func (cs *consumeState) abandon() {
	cs.runMu.Lock()
	defer cs.runMu.Unlock()
	cs.abandoned = true
	for r := range cs.running {
		r.gone = true
		if r.timer != nil {
			r.timer.Stop()
		}
		cs.out <- release(r.held)
	}
	clear(cs.running)
}
