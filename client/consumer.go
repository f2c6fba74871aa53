package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// Delivery is a due message handed to this consumer under a lease.
type Delivery struct {
	// ID to Ack or Nack with; for a retry it is the retry's own ID.
	ID string
	// OriginID is the ID the producer was given (equal to ID on attempt 0).
	OriginID string
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
	d := Delivery{
		ID: m.Id, OriginID: m.OriginId, Topic: m.Topic, Body: m.Body, Attempt: int(m.Attempt), Receipt: m.Receipt,
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
	res, err := c.svc.Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{
		Topic: topic, MaxMessages: int32(o.MaxMessages), WaitMs: o.Wait.Milliseconds(), LeaseMs: o.Lease.Milliseconds(),
	}))
	if err != nil {
		return nil, wrap("Receive", err)
	}
	out := make([]Delivery, len(res.Msg.Messages))
	for i, m := range res.Msg.Messages {
		out[i] = delivery(m)
	}
	return out, nil
}

// Ack completes d: it is never delivered again. It fails with
// connect.CodeFailedPrecondition if d's lease has ended.
func (c *Client) Ack(ctx context.Context, d Delivery) error {
	req := &hourglassv1.AckRequest{Topic: d.Topic, Receipt: d.Receipt}
	if d.Receipt == "" {
		req.Id = d.ID
	}
	_, err := c.svc.Ack(ctx, connect.NewRequest(req))
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
			return nil, fmt.Errorf("hourglass: AckBatch: deliveries of topics %q and %q: one topic per call", req.Topic, d.Topic)
		}
		if d.Receipt == "" {
			return nil, fmt.Errorf("hourglass: AckBatch: delivery %s has no receipt", d.ID)
		}
		req.Receipts[i] = d.Receipt
	}
	out, err := c.svc.AckBatch(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, wrap("AckBatch", err)
	}
	if len(out.Msg.Results) != len(ds) {
		return nil, fmt.Errorf("hourglass: AckBatch: %d results for %d receipts", len(out.Msg.Results), len(ds))
	}
	res = make([]error, len(ds))
	for i, r := range out.Msg.Results {
		if !r.Acked {
			res[i] = fmt.Errorf("hourglass: AckBatch: %s: %s", ds[i].ID, r.Error)
		}
	}
	return res, nil
}

// Nack gives d back to be delivered again after delay (its attempt
// raised); after the server's --max-attempts it goes to "<topic>.dlq".
func (c *Client) Nack(ctx context.Context, d Delivery, delay time.Duration) error {
	req := &hourglassv1.NackRequest{Topic: d.Topic, Receipt: d.Receipt, DelayMs: delay.Milliseconds()}
	if d.Receipt == "" {
		req.Id = d.ID
	}
	_, err := c.svc.Nack(ctx, connect.NewRequest(req))
	return wrap("Nack", err)
}

// ConsumeOptions shape Consume; the zero value works.
type ConsumeOptions struct {
	// MaxMessages per Receive, 1 to 1000; default 10.
	MaxMessages int
	// Wait of each long poll, up to 5m; default 20s.
	Wait time.Duration
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
	// OnError, if set, is told of Ack, Nack and transient Receive errors;
	// they do not stop Consume (an unacked message comes back after its
	// lease).
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

// Consume receives from topic until ctx ends and calls handler with each
// message: a nil error Acks it, an error Nacks it with RetryDelay. It
// returns nil when ctx ends (after the running handlers returned and their
// messages were acked or nacked), or the first Receive error that retrying
// cannot fix (bad topic, bad token: connect.CodeOf tells).
//
// The handler's ctx is Consume's; handlers may run on Concurrency
// goroutines at once.
func (c *Client) Consume(ctx context.Context, topic string, handler func(context.Context, Delivery) error, o ConsumeOptions) error {
	if o.MaxMessages <= 0 {
		o.MaxMessages = 10
	}
	if o.Wait <= 0 {
		o.Wait = 20 * time.Second
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	if o.RetryDelay == nil {
		o.RetryDelay = DefaultRetryDelay
	}
	report := func(err error) {
		if o.OnError != nil && err != nil {
			o.OnError(err)
		}
	}
	// Successful deliveries are acked by one goroutine, which acks all
	// that wait in one AckBatch call (one fsync on the server). Up to a
	// full batch may wait: with room for only a few, handlers stalled
	// during every AckBatch and each call carried a handful of acks.
	acks := make(chan Delivery, maxAckBatch)
	ackerDone := make(chan struct{})
	go func() {
		defer close(ackerDone)
		for d := range acks {
			batch := []Delivery{d}
		more:
			for len(batch) < maxAckBatch {
				select {
				case d, ok := <-acks:
					if !ok {
						break more
					}
					batch = append(batch, d)
				default:
					break more
				}
			}
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			if len(batch) == 1 || batch[0].Receipt == "" {
				for _, d := range batch {
					report(c.Ack(actx, d))
				}
			} else {
				res, err := c.AckBatch(actx, batch)
				report(err)
				for _, e := range res {
					report(e)
				}
			}
			cancel()
		}
	}()
	work := make(chan Delivery)
	var wg sync.WaitGroup
	for range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range work {
				err := handler(ctx, d)
				// Record the outcome even when ctx has just ended.
				if err == nil {
					acks <- d
					continue
				}
				actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				report(c.Nack(actx, d, o.RetryDelay(d.Attempt+1)))
				cancel()
			}
		}()
	}
	defer func() {
		close(work)
		wg.Wait()
		close(acks)
		<-ackerDone
	}()

	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		ds, err := c.Receive(ctx, topic, ReceiveOptions{MaxMessages: o.MaxMessages, Wait: o.Wait, Lease: o.Lease})
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if !transient(err) {
				return err
			}
			report(err)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		for i, d := range ds {
			select {
			case work <- d:
			case <-ctx.Done():
				// Not handed to a handler: give the rest back at once
				// rather than let their leases run out.
				for _, d := range ds[i:] {
					nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
					report(c.Nack(nctx, d, 0))
					cancel()
				}
				return nil
			}
		}
	}
	return nil
}

// transient reports whether a failed Receive may succeed when retried.
func transient(err error) bool {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return true // a network error
	}
	switch ce.Code() {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeResourceExhausted,
		connect.CodeAborted, connect.CodeInternal, connect.CodeUnknown:
		return true
	}
	return false
}
