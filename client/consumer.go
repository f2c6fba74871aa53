package client

import (
	"context"
	"fmt"
	"time"

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
	// while this lease holds. It is empty on a message a Consume or a
	// Worker got from a single node (the stream settles it by its number
	// there): Ack, Nack and Extend then name it by ID.
	Receipt string
	// DeadLetter is set on a message of a dead-letter topic
	// ("<topic>.dlq"): why it died and where.
	DeadLetter *DeadLetterInfo
}

// DeadLetterInfo says why a message was dead-lettered.
type DeadLetterInfo struct {
	// OriginTopic is the topic it died on.
	OriginTopic string
	// Reason is "max-attempts" (nacked or expired past the topic's
	// maximum attempts), "nacked" (a consumer asked for it: DeadLetter),
	// or "sink" (the sink refused it for good).
	Reason string
	// LastError is the reason of the last nack, or "lease expired".
	LastError string
	// Attempts made on the origin topic.
	Attempts int
	// At is when it was dead-lettered (the server's clock).
	At time.Time
}

func delivery(m *hourglassv1.Message) Delivery {
	// The server's IDs always parse; a receipt settles the message
	// whatever its ID.
	id, _ := ParseID(m.Id)
	origin, _ := ParseID(m.OriginId)
	return Delivery{
		ID: id, OriginID: origin, Topic: m.Topic, Body: m.Body, Attempt: int(m.Attempt), Receipt: m.Receipt,
		DeliverAt: m.DeliverAt.AsTime(), ReceivedAt: m.ReceivedAt.AsTime(), LeaseExpiresAt: m.LeaseExpiresAt.AsTime(),
		DeadLetter: deadLetterOf(m.DeadLetter), Headers: headersOf(m.Headers),
	}
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

// maxAckBatch is the server's limit of receipts per AckBatch, and of
// messages per settle on a Consume stream.
const maxAckBatch = 1000

// maxPush is the server's limit of messages per pushed batch.
const maxPush = 1000

// defaultPrefetch is the credits a stream opens with by default, and
// defaultMaxPrefetch the most it grows to while its handlers keep up
// (consumeState.credits). In a hot second (200,000 messages due in one
// second, 4 streams) 100 credits a stream delivered 133,930 a second and
// 1,000 181,689 (medians of three, docs/CLIENTS.md); a stream whose
// handlers are slow stays near 100, so its messages do not wait out their
// leases in the client.
const (
	defaultPrefetch    = 100
	defaultMaxPrefetch = 1000
)

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
// raised); with delay 0 the topic's retry backoff on the server decides
// when (by default at once). After the server's --max-attempts it goes to
// "<topic>.dlq" instead.
func (c *Client) Nack(ctx context.Context, d Delivery, delay time.Duration) error {
	return c.nack(ctx, d, delay, "", false, false)
}

func (c *Client) nack(ctx context.Context, d Delivery, delay time.Duration, reason string, deadLetter, release bool) error {
	req := &hourglassv1.NackRequest{Topic: d.Topic, Receipt: d.Receipt, DelayMs: delay.Milliseconds(), Reason: reason, DeadLetter: deadLetter, Release: release}
	if d.Receipt == "" {
		req.Id = d.ID.String()
	}
	_, err := c.svc.Nack(ctx, req)
	return wrap("Nack", err)
}

// Settle acks or nacks d by the result of handling it, as a Worker does:
// nil acks it; Retry(after) nacks it with that delay; DeadLetter(reason)
// sends it to "<topic>.dlq" now; any other error nacks it with delay 0
// (the topic's retry backoff on the server decides when it comes back).
// A nack carries result's text as its reason, kept with the message and
// shown with it if it is dead-lettered.
func (c *Client) Settle(ctx context.Context, d Delivery, result error) error {
	a := actionOf(result)
	if !a.nack {
		return c.Ack(ctx, d)
	}
	return c.nack(ctx, d, a.delay, a.reason, a.deadLetter, false)
}

// Extend gives d more time: its lease ends lease from now (1ms to 12h)
// instead, and Extend returns when that is on the server's clock. It
// fails with codes.FailedPrecondition if d's lease has already ended. A
// Worker extends the leases of its running handlers by itself.
func (c *Client) Extend(ctx context.Context, d Delivery, lease time.Duration) (time.Time, error) {
	req := &hourglassv1.ExtendRequest{Topic: d.Topic, Receipt: d.Receipt, LeaseMs: lease.Milliseconds()}
	if d.Receipt == "" {
		req.Id = d.ID.String()
	}
	res, err := c.svc.Extend(ctx, req)
	if err != nil {
		return time.Time{}, wrap("Extend", err)
	}
	return res.LeaseExpiresAt.AsTime(), nil
}

// ConsumeOptions shape Consume; the zero value works.
type ConsumeOptions struct {
	// Prefetch is how many messages the server may hand this consumer
	// before it has settled them (the stream's credits), 1 to 10000.
	// Unset, a stream starts at 2 * Concurrency, at least 100, and grows
	// up to 1000 (or that start) while every delivery finds a handler
	// within 100 ms; once one waits over a second it shrinks back.
	Prefetch int
	// MaxBatch is the most messages the server pushes at once, 1 to 1000;
	// default the most credits the stream may have (at most 1000).
	MaxBatch int
	// Lease of each message; 0 means the server's --default-lease. A
	// handler running longer than the lease sees its message delivered
	// again (a Worker extends the lease instead).
	Lease time.Duration
	// Concurrency is how many handler calls run at once; default 1.
	Concurrency int
	// RetryDelay is the Nack delay after the handler failed a delivery
	// with an error other than Retry and DeadLetter; failures counts them,
	// 1 for the first failure (Delivery.Attempt+1). Default: 1s doubled
	// per failure, at most 5m.
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
// calls handler with each message: a nil error acks it, Retry and
// DeadLetter do what they say (see Settle), any other error nacks it with
// RetryDelay. Acks and nacks go back on the stream in batches (one
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
// goroutines at once, and none is called once ctx has ended. A Worker
// does the same for many topics, with middleware, lease extension and a
// shutdown that lets running handlers finish.
func (c *Client) Consume(ctx context.Context, topic string, handler func(context.Context, Delivery) error, o ConsumeOptions) error {
	if o.Concurrency <= 0 {
		o.Concurrency = 1
	}
	maxPrefetch := o.Prefetch
	if o.Prefetch <= 0 {
		o.Prefetch = max(defaultPrefetch, 2*o.Concurrency)
		maxPrefetch = max(defaultMaxPrefetch, o.Prefetch)
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = min(maxPrefetch, maxPush)
	}
	if o.RetryDelay == nil {
		o.RetryDelay = DefaultRetryDelay
	}
	return newConsumeState(c, loopConfig{
		topic: topic, handler: HandlerFunc(handler), concurrency: o.Concurrency, prefetch: o.Prefetch, maxPrefetch: maxPrefetch, maxBatch: o.MaxBatch,
		lease: o.Lease, retryDelay: o.RetryDelay, onError: o.OnError,
	}).run(ctx)
}
