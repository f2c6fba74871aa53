package client

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// DefaultMaxCalls is how many Schedule calls a Client keeps in flight
// before it merges what waits into ScheduleBatch calls (WithMaxCalls).
const DefaultMaxCalls = 2

// Limits of one merged call: the server's ScheduleBatch limit, and a size
// below the server's default request limit (8 MiB).
const (
	mergeMaxMessages = 1000
	mergeMaxBytes    = 4 << 20
	// resendCalls is how many single calls resend the messages of a
	// merged call the server refused.
	resendCalls = 4
)

// coalescer sends concurrent Schedule calls: while fewer than max calls
// are in flight, a Schedule is sent at once, on its own, as a Schedule
// RPC; while max are in flight, the Schedules that arrive wait, and each
// call that ends sends everything waiting as one ScheduleBatch. So a lone
// caller's call is never delayed, and many callers share calls.
//
// A merged call is all or none on the server (ScheduleBatch is atomic):
// if it is refused as InvalidArgument, nothing of it was stored, and each
// of its messages is sent again on its own so that each caller gets the
// answer its own message deserves. Any other error goes to every caller
// of the call, as it would have to each of their own calls.
//
// Its methods may be called from any goroutine.
type coalescer struct {
	svc hourglassv1.HourglassServiceClient
	max int

	calls  atomic.Int64 // RPCs sent, for this package's tests
	merged atomic.Int64 // messages that went in ScheduleBatch calls of 2 or more, for tests

	mu       sync.Mutex
	inflight int        // calls in flight, at most max; guarded by mu
	waiting  []*pending // guarded by mu
}

// pending is one Schedule waiting for a merged call.
type pending struct {
	ctx  context.Context
	req  *hourglassv1.ScheduleRequest
	size int
	// gone is set when the caller stopped waiting (its ctx ended) before
	// the message was sent; a merged call then leaves it out.
	gone atomic.Bool
	done chan struct{}
	id   string // set before done is closed
	err  error  // set before done is closed
}

func (p *pending) finish(id string, err error) {
	p.id, p.err = id, err
	close(p.done)
}

func newCoalescer(svc hourglassv1.HourglassServiceClient, max int) *coalescer {
	return &coalescer{svc: svc, max: max}
}

// schedule sends req alone or merged with others and returns its ID.
func (c *coalescer) schedule(ctx context.Context, req *hourglassv1.ScheduleRequest) (string, error) {
	c.mu.Lock()
	if c.inflight < c.max && len(c.waiting) == 0 {
		c.inflight++
		c.mu.Unlock()
		id, err := c.one(ctx, req)
		c.release()
		return id, err
	}
	p := &pending{ctx: ctx, req: req, size: approxSize(req), done: make(chan struct{})}
	c.waiting = append(c.waiting, p)
	c.mu.Unlock()
	select {
	case <-p.done:
		return p.id, p.err
	case <-ctx.Done():
		p.gone.Store(true)
		select {
		case <-p.done: // answered meanwhile: the answer wins
			return p.id, p.err
		default:
		}
		// If the message was already sent, it may be stored: the same
		// doubt as a single call cancelled in flight.
		return "", ctx.Err()
	}
}

// one sends a single Schedule.
func (c *coalescer) one(ctx context.Context, req *hourglassv1.ScheduleRequest) (string, error) {
	c.calls.Add(1)
	res, err := c.svc.Schedule(ctx, req)
	if err != nil {
		return "", err
	}
	return res.Id, nil
}

// release ends a call: it hands the slot to what waits, or frees it.
func (c *coalescer) release() {
	c.mu.Lock()
	batch := c.take()
	if len(batch) == 0 {
		c.inflight--
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	go c.send(batch)
}

// take removes the next merged call's messages from c.waiting: those
// whose callers still wait, up to mergeMaxMessages and mergeMaxBytes.
// c.mu is held.
func (c *coalescer) take() []*pending {
	n, size := 0, 0
	var batch []*pending
	for ; n < len(c.waiting); n++ {
		p := c.waiting[n]
		if p.gone.Load() {
			continue
		}
		if len(batch) == mergeMaxMessages || (len(batch) > 0 && size+p.size > mergeMaxBytes) {
			break
		}
		batch = append(batch, p)
		size += p.size
	}
	rest := copy(c.waiting, c.waiting[n:])
	clear(c.waiting[rest:])
	c.waiting = c.waiting[:rest]
	return batch
}

// send sends batch, answers its callers, and releases its slot.
func (c *coalescer) send(batch []*pending) {
	defer c.release()
	if len(batch) == 1 {
		id, err := c.one(batch[0].ctx, batch[0].req)
		batch[0].finish(id, err)
		return
	}
	ctx, stop := batchContext(batch)
	defer stop()
	msgs := make([]*hourglassv1.ScheduleRequest, len(batch))
	for i, p := range batch {
		msgs[i] = p.req
	}
	c.calls.Add(1)
	c.merged.Add(int64(len(batch)))
	res, err := c.svc.ScheduleBatch(ctx, &hourglassv1.ScheduleBatchRequest{Messages: msgs})
	if err == nil && len(res.Results) != len(batch) {
		err = fmt.Errorf("the server answered %d results for a ScheduleBatch of %d messages", len(res.Results), len(batch))
	}
	switch {
	case err == nil:
		for i, p := range batch {
			p.finish(res.Results[i].Id, nil)
		}
	case status.Code(err) == codes.InvalidArgument:
		// Nothing was stored. Let each message answer for itself, a few
		// calls at a time.
		work := make(chan *pending)
		var wg sync.WaitGroup
		for range min(len(batch), resendCalls) {
			wg.Go(func() {
				for p := range work {
					id, err := c.one(p.ctx, p.req)
					p.finish(id, err)
				}
			})
		}
		for _, p := range batch {
			work <- p
		}
		close(work)
		wg.Wait()
	default:
		for _, p := range batch {
			p.finish("", err)
		}
	}
}

// batchContext is the context of a merged call: it keeps the values of
// the first caller's context and ends once every caller's context has
// ended (a call some caller still waits for goes on).
func batchContext(batch []*pending) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(batch[0].ctx))
	for _, p := range batch {
		if p.ctx.Done() == nil {
			return ctx, cancel // this caller waits forever: so does the call
		}
	}
	left := atomic.Int64{}
	left.Store(int64(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, p := range batch {
		stops[i] = context.AfterFunc(p.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, s := range stops {
			s()
		}
		cancel()
	}
}

// approxSize is about the encoded size of req, for mergeMaxBytes.
func approxSize(req *hourglassv1.ScheduleRequest) int {
	n := 32 + len(req.Topic) + len(req.Body) + len(req.IdempotencyKey)
	for _, h := range req.Headers {
		n += 8 + len(h.Key) + len(h.Value)
	}
	return n
}
