package client

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// Delivery is a due message handed to this consumer under a lease.
type Delivery struct {
	// ID to Ack or Nack with; for a retry it is the retry's own ID.
	ID ID
	// OriginID is the ID the producer was given (equal to ID on attempt 0).
	OriginID ID
	Topic    string
	Headers  map[string]string
	Body     []byte
	// DeliverAt is when it was due; ReceivedAt when the server handed it
	// out; LeaseExpiresAt when it is delivered again if not acked (all on
	// the server's clock).
	DeliverAt, ReceivedAt, LeaseExpiresAt time.Time
	// Attempt is 0 for the first delivery, raised by every Nack and
	// expired lease.
	Attempt int
	// Receipt names this lease; Ack and Nack use it, so they act only
	// while this lease holds.
	Receipt string
}

func delivery(m *hourglassv1.Message) Delivery {
	// The server's IDs always parse; a receipt settles the message
	// whatever its ID.
	id, _ := ParseID(m.Id)
	origin, _ := ParseID(m.OriginId)
	d := Delivery{
		ID: id, OriginID: origin, Topic: m.Topic, Body: m.Body, Attempt: int(m.Attempt), Receipt: m.Receipt,
		DeliverAt: m.DeliverAt.AsTime(), ReceivedAt: m.ReceivedAt.AsTime(), LeaseExpiresAt: m.LeaseExpiresAt.AsTime(),
	}
	if len(m.Headers) > 0 {
		d.Headers = make(map[string]string, len(m.Headers))
		for _, h := range m.Headers {
			d.Headers[h.Key] = h.Value
		}
	}
	return d
}

// ReceiveOptions shape one Receive call.
type ReceiveOptions struct {
	// MaxMessages is the most messages to return, 1 to 1000; 0 means 1.
	MaxMessages int
	// Wait is how long to wait for a first message, up to 5m; 0 answers
	// at once with what is ready.
	Wait time.Duration
	// Lease is each message's visibility timeout, 1ms to 12h; 0 means the
	// server's --default-lease.
	Lease time.Duration
}

// Receive long-polls topic once: it returns as soon as at least one
// message is due, or no messages once Wait has passed.
func (c *Client) Receive(ctx context.Context, topic string, o ReceiveOptions) ([]Delivery, error) {
	res, err := c.svc.Receive(ctx, &hourglassv1.ReceiveRequest{
		Topic: topic, MaxMessages: int32(o.MaxMessages), WaitMs: o.Wait.Milliseconds(), LeaseMs: o.Lease.Milliseconds(),
	})
	if err != nil {
		return nil, wrap("Receive", err)
	}
	out := make([]Delivery, len(res.Messages))
	for i, m := range res.Messages {
		out[i] = delivery(m)
	}
	return out, nil
}

// Ack completes d: it is never delivered again. It fails with
// codes.FailedPrecondition if d's lease has ended.
func (c *Client) Ack(ctx context.Context, d Delivery) error {
	req := &hourglassv1.AckRequest{Topic: d.Topic, Receipt: d.Receipt}
	if d.Receipt == "" {
		req.Id = d.ID.String()
	}
	_, err := c.svc.Ack(ctx, req)
	return wrap("Ack", err)
}

// maxAckBatch is the server's limit of receipts per AckBatch.
const maxAckBatch = 1000

// AckBatch acks deliveries of one topic by receipt with one call and one
// fsync on the server. It returns one error per delivery (nil: acked); err
// is for the whole call, when none was acked. At most 1000 at a time.
func (c *Client) AckBatch(ctx context.Context, ds []Delivery) (res []error, err error) {
	if len(ds) == 0 {
		return nil, nil
	}
	req := &hourglassv1.AckBatchRequest{Topic: ds[0].Topic, Receipts: make([]string, len(ds))}
	for i, d := range ds {
		if d.Topic != req.Topic {
			return nil, fmt.Errorf("client: AckBatch: deliveries of topics %q and %q: one topic per call", req.Topic, d.Topic)
		}
		if d.Receipt == "" {
			return nil, fmt.Errorf("client: AckBatch: delivery %s has no receipt", d.ID)
		}
		req.Receipts[i] = d.Receipt
	}
	out, err := c.svc.AckBatch(ctx, req)
	if err != nil {
		return nil, wrap("AckBatch", err)
	}
	return ackErrors("AckBatch", ds, out.Results)
}

// ackErrors turns per-receipt results into errors.
func ackErrors(op string, ds []Delivery, results []*hourglassv1.AckResult) ([]error, error) {
	if len(results) != len(ds) {
		return nil, fmt.Errorf("client: %s: %d results for %d receipts", op, len(results), len(ds))
	}
	res := make([]error, len(ds))
	for i, r := range results {
		if !r.Acked {
			res[i] = fmt.Errorf("client: %s: %s: %s", op, ds[i].ID, r.Error)
		}
	}
	return res, nil
}

// Nack gives d back to be delivered again after delay (its attempt
// raised); after the server's --max-attempts it goes to "<topic>.dlq".
func (c *Client) Nack(ctx context.Context, d Delivery, delay time.Duration) error {
	req := &hourglassv1.NackRequest{Topic: d.Topic, Receipt: d.Receipt, DelayMs: delay.Milliseconds()}
	if d.Receipt == "" {
		req.Id = d.ID.String()
	}
	_, err := c.svc.Nack(ctx, req)
	return wrap("Nack", err)
}

// ConsumeOptions shape Consume; the zero value works.
type ConsumeOptions struct {
	// Prefetch is how many messages the server may hand this consumer
	// before it has settled them (the stream's credits), 1 to 10000;
	// default 2 * Concurrency, at least 10.
	Prefetch int
	// Lease of each message; 0 means the server's --default-lease. A
	// handler running longer than the lease sees its message delivered
	// again.
	Lease time.Duration
	// Concurrency is how many handler calls run at once; default 1.
	Concurrency int
	// RetryDelay is the Nack delay after the handler failed a delivery;
	// failures counts them, 1 for the first failure (Delivery.Attempt+1).
	// Default: 1s doubled per failure, at most 5m.
	RetryDelay func(failures int) time.Duration
	// OnError, if set, is told of failed acks and nacks and of streams
	// that broke; they do not stop Consume (an unacked message comes back
	// after its lease).
	OnError func(error)
}

// DefaultRetryDelay is ConsumeOptions.RetryDelay's default: 1s, 2s, 4s,
// ... at most 5m.
func DefaultRetryDelay(failures int) time.Duration {
	d := time.Second
	for i := 1; i < failures && d < 5*time.Minute; i++ {
		d *= 2
	}
	return min(d, 5*time.Minute)
}

// Consume receives from topic on a Consume stream until ctx ends and
// calls handler with each message: a nil error acks it, an error nacks it
// with RetryDelay. Acks and nacks go back on the stream in batches (one
// fsync on the server for many): while a few settle requests wait for
// their answers, the outcomes that come meanwhile wait too and go
// together in the next. A stream that breaks is opened again, with
// backoff. It returns nil when ctx ends (after the running handlers
// returned and the server answered the settles of their messages, and
// the messages received but not yet handled were given back), or the
// first error that retrying cannot fix (bad topic, bad token: status.Code
// tells).
//
// The handler's ctx is Consume's; handlers may run on Concurrency
// goroutines at once, and none is called once ctx has ended.
func (c *Client) Consume(ctx context.Context, topic string, handler func(context.Context, Delivery) error, o ConsumeOptions) error {
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	if o.Prefetch <= 0 {
		o.Prefetch = max(10, 2*o.Concurrency)
	}
	if o.RetryDelay == nil {
		o.RetryDelay = DefaultRetryDelay
	}
	cs := &consumeState{c: c, topic: topic, o: o}
	return cs.run(ctx, handler)
}

// consumeState is one Consume call.
type consumeState struct {
	c     *Client
	topic string
	o     ConsumeOptions

	mu  sync.Mutex
	cur *cstream // guarded by mu: the open stream, nil between streams
}

type consumeStream = grpc.BidiStreamingClient[hourglassv1.ConsumeRequest, hourglassv1.ConsumeResponse]

// Limits of the settling on a stream.
const (
	// maxUnanswered is how many settle requests of a stream may wait for
	// their answers; outcomes that come meanwhile wait and go together in
	// the next request, so a slow server gets fewer, larger settles.
	maxUnanswered = 4
)

// settleTimeout bounds the unary acks and nacks, and each wait of a
// stopping Consume for answers to its settles (a variable for tests).
var settleTimeout = 10 * time.Second

// cstream is one open Consume stream.
type cstream struct {
	st     consumeStream
	cancel context.CancelFunc
	sendMu sync.Mutex // serializes Send and CloseSend
	// unanswered holds a token per settle request sent and not yet
	// answered; the stream's reader takes one per answer.
	unanswered chan struct{}
	// done is closed when the stream's responses have ended (Recv
	// failed): no answer comes any more.
	done chan struct{}
}

func (s *cstream) send(r *hourglassv1.ConsumeRequest) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.st.Send(r)
}

func (s *cstream) closeSend() {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.st.CloseSend()
}

// held is a delivery and the stream it came on.
type held struct {
	d  Delivery
	on *cstream
}

// outcome is a handled delivery: ack, or nack after delay.
type outcome struct {
	held
	nack  bool
	delay time.Duration
}

func (cs *consumeState) report(err error) {
	if cs.o.OnError != nil && err != nil {
		cs.o.OnError(err)
	}
}

func (cs *consumeState) run(ctx context.Context, handler func(context.Context, Delivery) error) error {
	work := make(chan held, cs.o.Prefetch)
	outcomes := make(chan outcome, cs.o.Prefetch)
	settled := make(chan struct{})
	go func() { defer close(settled); cs.settler(ctx, outcomes) }()
	var wg sync.WaitGroup
	for range cs.o.Concurrency {
		wg.Go(func() {
			for h := range work {
				if ctx.Err() != nil {
					// Stopping: give it back untouched (no attempt
					// counted), rather than hand it to a handler whose ctx
					// has ended.
					outcomes <- outcome{held: h, nack: true}
					continue
				}
				err := handler(ctx, h.d)
				// Record the outcome even when ctx has just ended.
				if err == nil {
					outcomes <- outcome{held: h}
				} else {
					outcomes <- outcome{held: h, nack: true, delay: cs.o.RetryDelay(h.d.Attempt + 1)}
				}
			}
		})
	}
	err := cs.receive(ctx, work)
	// Give back what no handler took, finish what they hold, settle it.
	close(work)
	for h := range work {
		outcomes <- outcome{held: h, nack: true}
	}
	wg.Wait()
	close(outcomes)
	<-settled
	cs.mu.Lock()
	cur := cs.cur
	cs.cur = nil
	cs.mu.Unlock()
	if cur != nil {
		// The server answers every settle it has read before it ends the
		// stream; cancelling it sooner could drop the last settles.
		cur.closeSend()
		select {
		case <-cur.done:
		case <-time.After(settleTimeout):
		}
		cur.cancel()
	}
	return err
}

// receive opens streams and hands what they push to work until ctx ends.
func (cs *consumeState) receive(ctx context.Context, work chan<- held) error {
	const firstBackoff = 100 * time.Millisecond
	backoff := firstBackoff
	for ctx.Err() == nil {
		opened := time.Now()
		err := cs.stream(ctx, work)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(opened) > 10*time.Second {
			// The stream worked for a while: this break is news, not a
			// server that keeps failing.
			backoff = firstBackoff
		}
		if !transient(err) {
			return wrap("Consume", err)
		}
		cs.report(wrap("Consume", err))
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	return nil
}

// stream runs one Consume stream until it breaks or ctx ends. When ctx
// ends the stream stays open, for the settles of the last handlers, and
// what it still pushes is given back.
func (cs *consumeState) stream(ctx context.Context, work chan<- held) error {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	st, err := cs.c.svc.Consume(sctx)
	if err != nil {
		cancel()
		return err
	}
	s := &cstream{st: st, cancel: cancel, unanswered: make(chan struct{}, maxUnanswered), done: make(chan struct{})}
	if err := s.send(&hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Open{Open: &hourglassv1.ConsumeOpen{
		Topic: cs.topic, Credits: int32(cs.o.Prefetch), LeaseMs: cs.o.Lease.Milliseconds(), MaxBatch: int32(min(cs.o.Prefetch, 1000)),
	}}}); err != nil {
		_, err = st.Recv() // the reason
		cancel()
		return err
	}
	cs.mu.Lock()
	old := cs.cur
	cs.cur = s
	cs.mu.Unlock()
	if old != nil {
		old.cancel()
	}
	// The reader; in is read to its end, by this loop or by drain.
	in := make(chan *hourglassv1.ConsumeResponse)
	var rerr error // set before in is closed
	go func() {
		defer close(in)
		for {
			res, err := st.Recv()
			if err != nil {
				rerr = err
				return
			}
			in <- res
		}
	}()
	for {
		select {
		case <-ctx.Done():
			go cs.drain(s, in)
			return nil
		case res, ok := <-in:
			if !ok {
				cs.mu.Lock()
				if cs.cur == s {
					cs.cur = nil
				}
				cs.mu.Unlock()
				close(s.done)
				cancel()
				return rerr
			}
			if set := res.GetSettled(); set != nil {
				cs.answered(s, set)
				continue
			}
			for _, m := range res.GetMessages().GetMessages() {
				select {
				case work <- held{d: delivery(m), on: s}:
				case <-ctx.Done():
					cs.giveBack(delivery(m))
				}
			}
		}
	}
}

// drain reads what a stream of a stopping Consume still sends, until it
// ends: answers to settles, and messages, given back at once.
func (cs *consumeState) drain(s *cstream, in <-chan *hourglassv1.ConsumeResponse) {
	defer close(s.done)
	for res := range in {
		if set := res.GetSettled(); set != nil {
			cs.answered(s, set)
			continue
		}
		for _, m := range res.GetMessages().GetMessages() {
			cs.giveBack(delivery(m))
		}
	}
}

// answered takes the answer to a settle request of s.
func (cs *consumeState) answered(s *cstream, set *hourglassv1.ConsumeSettled) {
	select {
	case <-s.unanswered:
	default: // an answer to nothing sent: nothing waits for it
	}
	for _, r := range append(set.Acks, set.Nacks...) {
		if !r.Acked {
			cs.report(fmt.Errorf("client: Consume: settle: %s", r.Error))
		}
	}
}

// giveBack nacks d without delay, for a Consume that stops.
func (cs *consumeState) giveBack(d Delivery) {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	cs.report(cs.c.Nack(ctx, d, 0))
}

// settler sends outcomes back: on the stream they came on while it is
// the open one, as settle requests of up to maxAckBatch outcomes, each
// followed by as many credits (none once ctx has ended: nothing more is
// wanted), at most maxUnanswered of them waiting for answers; by unary
// calls otherwise. While it waits it gathers what comes, so that handlers
// never wait for it.
func (cs *consumeState) settler(ctx context.Context, outcomes <-chan outcome) {
	var ref uint64
	var batch []outcome
	in := outcomes // nil once closed
	// Once ctx has ended, answers are waited for settleTimeout at most;
	// after that (unary) everything goes by unary calls.
	stopped := ctx.Done()
	var giveUp <-chan time.Time
	unary := false
	for in != nil || len(batch) > 0 {
		if len(batch) == 0 {
			o, ok := <-in
			if !ok {
				in = nil
				continue
			}
			batch = append(batch, o)
		}
	gather:
		for in != nil {
			select {
			case o, ok := <-in:
				if !ok {
					in = nil
					break gather
				}
				batch = append(batch, o)
			default:
				break gather
			}
		}
		cs.mu.Lock()
		cur := cs.cur
		cs.mu.Unlock()
		var other []outcome
		batch = slices.DeleteFunc(batch, func(o outcome) bool {
			if cur == nil || unary || o.on != cur {
				other = append(other, o)
				return true
			}
			return false
		})
		cs.settleUnary(other)
		if len(batch) == 0 {
			continue
		}
		select {
		case cur.unanswered <- struct{}{}:
		case o, ok := <-in: // in is nil once closed: never ready
			if !ok {
				in = nil
			} else {
				batch = append(batch, o)
			}
			continue
		case <-cur.done:
			continue // the stream ended: the next round settles by unary calls
		case <-stopped:
			stopped, giveUp = nil, time.After(settleTimeout)
			continue
		case <-giveUp:
			unary = true // the server does not answer
			continue
		}
		n := min(len(batch), maxAckBatch)
		ref++
		set := &hourglassv1.ConsumeSettle{Ref: ref}
		for _, o := range batch[:n] {
			if o.nack {
				set.Nacks = append(set.Nacks, &hourglassv1.ConsumeNack{Receipt: o.d.Receipt, DelayMs: o.delay.Milliseconds()})
			} else {
				set.Acks = append(set.Acks, o.d.Receipt)
			}
		}
		err := cur.send(&hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Settle{Settle: set}})
		if err == nil && ctx.Err() == nil {
			err = cur.send(&hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Credit{Credit: &hourglassv1.ConsumeCredit{Credits: int32(n)}}})
		}
		if err != nil {
			// The stream broke: settle them by unary calls. One sent
			// just before may be settled twice; the second is refused.
			cs.settleUnary(batch[:n])
		}
		// A settle sent on a stream that then breaks is not answered:
		// its messages come back after their leases if it was lost.
		// TODO: resend those by unary calls when the stream breaks.
		batch = slices.Delete(batch, 0, n)
	}
}

// settleUnary acks and nacks by unary calls.
func (cs *consumeState) settleUnary(batch []outcome) {
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	var acks []Delivery
	for _, o := range batch {
		if o.nack {
			cs.report(cs.c.Nack(ctx, o.d, o.delay))
		} else {
			acks = append(acks, o.d)
		}
	}
	for chunk := range slices.Chunk(acks, maxAckBatch) {
		res, err := cs.c.AckBatch(ctx, chunk)
		cs.report(err)
		for _, e := range res {
			cs.report(e)
		}
	}
}

// transient reports whether a failed call may succeed when retried.
func transient(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return true // a network error
	}
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted,
		codes.Aborted, codes.Internal, codes.Unknown, codes.Canceled:
		return true
	}
	return false
}
