package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
	// MaxInflight is how many batches may be sent and not yet answered;
	// default 16.
	MaxInflight int
}

// Result is the outcome of one Send: the message's ID, or why it was not
// stored. It is safe to read from any goroutine.
type Result struct {
	done chan struct{}
	id   ID
	err  error
}

// Done is closed once the result is known.
func (r *Result) Done() <-chan struct{} { return r.done }

// Wait blocks until the result is known or ctx ends, and returns the ID or
// the error. A ctx ending does not withdraw the message.
func (r *Result) Wait(ctx context.Context) (ID, error) {
	select {
	case <-r.done:
		return r.id, r.err
	case <-ctx.Done():
		return ID{}, ctx.Err()
	}
}

// finish sets the result: the ID the server answered, or err.
func (r *Result) finish(id string, err error) {
	if err == nil {
		r.id, err = idOf("ScheduleStream", id)
	}
	r.err = err
	close(r.done)
}

// item is one queued message, or (with flush set) a Flush marker.
type item struct {
	req   *hourglassv1.ScheduleRequest
	res   *Result
	flush chan struct{}
}

// Producer schedules messages asynchronously in batches: Send queues a
// message and returns at once; one goroutine sends what is queued as
// batch requests of at most MaxBatch messages on the Client's
// ScheduleStream, up to MaxInflight of them at once; the server answers
// each after the fsync that covers it. It is safe for concurrent use.
type Producer struct {
	c     *Client
	o     ProducerOptions
	ch    chan item // closed by Close, under mu
	done  chan struct{}
	slots chan struct{} // one per batch in flight
	// sent holds the done channels of batches in flight, for Flush; only
	// the loop goroutine uses it.
	sent []chan struct{}

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
	if o.MaxInflight <= 0 {
		o.MaxInflight = 16
	}
	p := &Producer{c: c, o: o, ch: make(chan item, o.MaxPending), done: make(chan struct{}), slots: make(chan struct{}, o.MaxInflight)}
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
			p.wait(p.sent)
			return
		}
		if it.flush != nil {
			timer.Stop()
			p.send(batch)
			batch = batch[:0]
			sent := slices.Clone(p.sent)
			go func() { p.wait(sent); close(it.flush) }()
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

// wait waits for batches to be answered.
func (p *Producer) wait(sent []chan struct{}) {
	for _, d := range sent {
		<-d
	}
}

// send sends batch on the stream; its results are finished when the
// answer comes. The server stores a batch all or none, so when it refuses
// one for bad input each message is sent again alone, to give every
// message its own ID or error.
func (p *Producer) send(batch []item) {
	if len(batch) == 0 {
		return
	}
	// Forget the batches answered since the last send.
	p.sent = slices.DeleteFunc(p.sent, func(d chan struct{}) bool {
		select {
		case <-d:
			return true
		default:
			return false
		}
	})
	p.slots <- struct{}{}
	done := make(chan struct{})
	p.sent = append(p.sent, done)
	items := slices.Clone(batch)
	reqs := make([]*hourglassv1.ScheduleRequest, len(items))
	for i, it := range items {
		reqs[i] = it.req
	}
	release := func() { <-p.slots; close(done) }
	p.c.ssm.do(&hourglassv1.ScheduleStreamRequest{Kind: &hourglassv1.ScheduleStreamRequest_Batch{Batch: &hourglassv1.ScheduleBatchRequest{Messages: reqs}}},
		func(res *hourglassv1.ScheduleStreamResponse, err error) {
			if err == nil {
				err = streamResultErr(res)
			}
			var results []*hourglassv1.ScheduleResponse
			if err == nil {
				results = res.GetBatch().GetResults()
				if len(results) != len(items) {
					err = fmt.Errorf("the server answered %d results for %d messages", len(results), len(items))
				}
			}
			switch {
			case err == nil:
				for i, it := range items {
					it.res.finish(results[i].Id, nil)
				}
				release()
			case status.Code(err) != codes.InvalidArgument || len(items) == 1:
				for _, it := range items {
					it.res.finish("", wrap("ScheduleStream", err))
				}
				release()
			default:
				// Nothing was stored: each message answers for itself.
				go p.resend(items, release)
			}
		})
}

// resend sends each item alone on the stream, then calls release.
func (p *Producer) resend(items []item, release func()) {
	var wg sync.WaitGroup
	for _, it := range items {
		wg.Add(1)
		p.c.ssm.do(&hourglassv1.ScheduleStreamRequest{Kind: &hourglassv1.ScheduleStreamRequest_Message{Message: it.req}},
			func(res *hourglassv1.ScheduleStreamResponse, err error) {
				defer wg.Done()
				if err == nil {
					err = streamResultErr(res)
				}
				if err != nil {
					it.res.finish("", wrap("ScheduleStream", err))
					return
				}
				it.res.finish(res.GetResult().GetId(), nil)
			})
	}
	wg.Wait()
	release()
}
