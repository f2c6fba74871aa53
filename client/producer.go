package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// ErrProducerClosed is the error of a Send or Flush after Close.
var ErrProducerClosed = errors.New("client: producer closed")

// ProducerOptions shape NewProducer; the zero value works.
type ProducerOptions struct {
	// MaxBatch is the most messages per ScheduleBatch call, 1 to 1000;
	// default 100.
	MaxBatch int
	// Linger is how long a batch waits for more messages after its first
	// before it is sent; default 5ms. Flush sends without waiting.
	Linger time.Duration
	// MaxPending is how many messages may wait to be sent; Send blocks
	// while that many are waiting. Default 10 * MaxBatch.
	MaxPending int
	// Timeout of each ScheduleBatch call; default 30s.
	Timeout time.Duration
}

// Result is the outcome of one Send: the message's ID, or why it was not
// stored. It is safe to read from any goroutine.
type Result struct {
	done chan struct{}
	id   string
	err  error
}

// Done is closed once the result is known.
func (r *Result) Done() <-chan struct{} { return r.done }

// Wait blocks until the result is known or ctx ends, and returns the ID or
// the error. A ctx ending does not withdraw the message.
func (r *Result) Wait(ctx context.Context) (string, error) {
	select {
	case <-r.done:
		return r.id, r.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (r *Result) finish(id string, err error) {
	r.id, r.err = id, err
	close(r.done)
}

// item is one queued message, or (with flush set) a Flush marker.
type item struct {
	req   *hourglassv1.ScheduleRequest
	res   *Result
	flush chan struct{}
}

// Producer schedules messages asynchronously in batches: Send queues a
// message and returns at once; one goroutine sends what is queued with
// ScheduleBatch, at most MaxBatch at a time. It is safe for concurrent use.
type Producer struct {
	c       *Client
	o       ProducerOptions
	ch      chan item // closed by Close, under mu
	done    chan struct{}
	batches atomic.Int64

	mu     sync.RWMutex
	closed bool // guarded by mu
}

// NewProducer starts a producer sending through c. Close it to send what
// is queued and stop its goroutine.
func NewProducer(c *Client, o ProducerOptions) *Producer {
	if o.MaxBatch <= 0 {
		o.MaxBatch = 100
	}
	o.MaxBatch = min(o.MaxBatch, 1000)
	if o.Linger <= 0 {
		o.Linger = 5 * time.Millisecond
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 10 * o.MaxBatch
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	p := &Producer{c: c, o: o, ch: make(chan item, o.MaxPending), done: make(chan struct{})}
	go p.loop()
	return p
}

// Send queues m and returns its Result, blocking while MaxPending
// messages wait. A message this package refuses, a ctx that ends while
// Send blocks, or a closed producer give a Result that is already done
// with the error.
func (p *Producer) Send(ctx context.Context, m Message) *Result {
	r := &Result{done: make(chan struct{})}
	req, err := m.request()
	if err != nil {
		r.finish("", err)
		return r
	}
	if err := p.enqueue(ctx, item{req: req, res: r}); err != nil {
		r.finish("", err)
	}
	return r
}

func (p *Producer) enqueue(ctx context.Context, it item) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrProducerClosed
	}
	select {
	case p.ch <- it:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Flush sends every message queued before it without waiting for Linger,
// and returns once all of them have results.
func (p *Producer) Flush(ctx context.Context) error {
	f := make(chan struct{})
	if err := p.enqueue(ctx, item{flush: f}); err != nil {
		return err
	}
	select {
	case <-f:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close sends what is queued, waits for its results, and stops the
// producer; later Sends fail with ErrProducerClosed.
func (p *Producer) Close() error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.ch)
	}
	p.mu.Unlock()
	<-p.done
	return nil
}

// Batches is how many ScheduleBatch calls the producer has made.
func (p *Producer) Batches() int64 { return p.batches.Load() }

// loop is the producer's one goroutine: it gathers batches and sends them.
func (p *Producer) loop() {
	defer close(p.done)
	var batch []item
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var it item
		var ok bool
		if len(batch) == 0 {
			it, ok = <-p.ch
		} else {
			select {
			case it, ok = <-p.ch:
			case <-timer.C:
				p.send(batch)
				batch = batch[:0]
				continue
			}
		}
		if !ok {
			p.send(batch)
			return
		}
		if it.flush != nil {
			timer.Stop()
			p.send(batch)
			batch = batch[:0]
			close(it.flush)
			continue
		}
		batch = append(batch, it)
		if len(batch) == 1 {
			timer.Reset(p.o.Linger)
		}
		if len(batch) >= p.o.MaxBatch {
			timer.Stop()
			p.send(batch)
			batch = batch[:0]
		}
	}
}

// send schedules batch and finishes each of its results. The server
// stores a batch all or none, so when it refuses one for bad input each
// message is sent alone to give every message its own ID or error.
func (p *Producer) send(batch []item) {
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.o.Timeout)
	defer cancel()
	reqs := make([]*hourglassv1.ScheduleRequest, len(batch))
	for i, it := range batch {
		reqs[i] = it.req
	}
	p.batches.Add(1)
	res, err := p.c.svc.ScheduleBatch(ctx, connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: reqs}))
	switch {
	case err == nil && len(res.Msg.Results) == len(batch):
		for i, it := range batch {
			it.res.finish(res.Msg.Results[i].Id, nil)
		}
	case err == nil:
		err = fmt.Errorf("the server answered %d results for %d messages", len(res.Msg.Results), len(batch))
		fallthrough
	case connect.CodeOf(err) != connect.CodeInvalidArgument || len(batch) == 1:
		for _, it := range batch {
			it.res.finish("", wrap("ScheduleBatch", err))
		}
	default:
		for _, it := range batch {
			r, err := p.c.svc.Schedule(ctx, connect.NewRequest(it.req))
			if err != nil {
				it.res.finish("", wrap("Schedule", err))
			} else {
				it.res.finish(r.Msg.Id, nil)
			}
		}
	}
}
