package jsqueue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/queue"
	"github.com/hourglassmq/hourglass/sink"
)

// What an ack subject takes (JetStream's protocol).
var (
	ackAck = []byte("+ACK")
	ackNak = []byte("-NAK")
)

// leased checks receipt s against topic: it must be an ack subject of
// topic's consumer on the delivery stream whose lease (from the
// receipt's time, or as Extend made it) has not ended by this node's
// clock.
func (q *Queue) leased(ctx context.Context, topic, s string) (*consumer, receipt, error) {
	if err := queue.ValidateTopic(topic); err != nil {
		return nil, receipt{}, err
	}
	r, ok := parseReceipt(s)
	if !ok {
		return nil, r, status.Errorf(codes.InvalidArgument, "receipt %.80q is not one a cluster node hands out (a time and an ack subject of the delivery stream's consumer)", s)
	}
	c, err := q.consumer(ctx, topic)
	if err != nil {
		return nil, r, err
	}
	if r.stream != q.opts.Stream || r.consumer != c.name {
		return nil, r, fmt.Errorf("%w: the receipt is of consumer %s on stream %s, not of topic %q (consumer %s on %s)",
			queue.ErrNotLeased, r.consumer, r.stream, topic, c.name, q.opts.Stream)
	}
	end := time.UnixMilli(r.got).Add(c.ackWait)
	if q.opts.Now().Before(end) {
		return c, r, nil
	}
	// Past the receipt's own lease: an Extend may have made it longer.
	ext, err := q.extendedUntil(ctx, r.subject)
	if err != nil {
		return nil, r, unavailable("checking whether the lease of a message of topic %q was extended: %v; retry", topic, err)
	}
	if ext.After(end) {
		end = ext
	}
	if !q.opts.Now().Before(end) {
		return nil, r, fmt.Errorf("%w: its lease ended at %s", queue.ErrNotLeased, end.UTC().Format(time.RFC3339Nano))
	}
	return c, r, nil
}

// AckReceipt acks the delivery receipt names: once it returns nil the
// consumer's leader has stored the ack (with replicas, a majority of
// them) and the message is not handed out again. An ack of a message
// acked before also returns nil. It fails with queue.ErrNotLeased once the
// lease has ended by this node's clock.
func (q *Queue) AckReceipt(ctx context.Context, topic, receipt string) error {
	_, r, err := q.leased(ctx, topic, receipt)
	if err != nil {
		return err
	}
	return q.request(ctx, topic, r.subject, ackAck)
}

// AckBatch acks each receipt as AckReceipt does, concurrently, and returns
// each one's error.
func (q *Queue) AckBatch(ctx context.Context, topic string, receipts []string) ([]error, error) {
	if err := queue.ValidateTopic(topic); err != nil {
		return nil, err
	}
	res := make([]error, len(receipts))
	var wg sync.WaitGroup
	slots := make(chan struct{}, 64)
	for i, rc := range receipts {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			res[i] = q.AckReceipt(ctx, topic, rc)
		})
	}
	wg.Wait()
	return res, nil
}

// NackReceipt gives the delivery receipt names back: with o.Delay it is
// handed out again once the delay has passed (JetStream's Nak with a
// delay), without at once; with o.Release too (its delivery still counts
// as an attempt). When this was its last attempt (its delivery count has
// reached the topic's max attempts), or with o.DeadLetter, it is moved to
// "<topic>.dlq" instead: published there, then acked here.
func (q *Queue) NackReceipt(ctx context.Context, topic, receipt string, o queue.NackOptions) error {
	c, r, err := q.leased(ctx, topic, receipt)
	if err != nil {
		return err
	}
	reason := o.Reason
	if len(reason) > queue.MaxReason {
		reason = strings.ToValidUTF8(reason[:queue.MaxReason], "")
	}
	switch {
	case o.Release:
		return q.request(ctx, topic, r.subject, ackNak)
	case isDLQ(topic):
	case o.DeadLetter:
		return q.deadLetter(ctx, c, r, queue.ReasonNacked, reason, r.delivered)
	case r.delivered >= uint64(c.maxAttempts):
		return q.deadLetter(ctx, c, r, queue.ReasonMaxAttempts, reason, r.delivered)
	}
	if o.Delay <= 0 {
		// As on one node, the topic's backoff for this retry (the
		// delivery count is the attempt that failed, counting from 1).
		o.Delay = c.backoff.Delay(uint32(min(r.delivered, math.MaxUint32)), rand.Float64)
	}
	if o.Delay <= 0 {
		return q.request(ctx, topic, r.subject, ackNak)
	}
	return q.request(ctx, topic, r.subject, fmt.Appendf(nil, "%s {\"delay\": %d}", ackNak, o.Delay.Nanoseconds()))
}

// request sends body to an ack subject and waits for the consumer's
// answer.
func (q *Queue) request(ctx context.Context, topic, subject string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, q.opts.Timeout)
	defer cancel()
	if _, err := q.nc.RequestWithContext(ctx, subject, body); err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			q.forget(topic)
		}
		return unavailable("settling a message of topic %q: %v; the outcome is unknown: retry (an ack or nack of a receipt whose lease holds may be sent again)", topic, err)
	}
	return nil
}

// deadLetter publishes the message r names to "<topic>.dlq", with why it
// died, and then acks it on topic. A crash in between leaves both (the
// copy is deduplicated if the move is done again within the stream's
// duplicate window). attempts is how many attempts failed.
func (q *Queue) deadLetter(ctx context.Context, c *consumer, r receipt, reason, lastErr string, attempts uint64) error {
	ctx, cancel := context.WithTimeout(ctx, q.opts.Timeout)
	defer cancel()
	st, err := q.deliveryStream(ctx)
	if err != nil {
		return unavailable("dead-lettering a message of topic %q: the delivery stream: %v; retry", c.topic, err)
	}
	raw, err := st.GetMsg(ctx, r.sseq)
	if err != nil {
		return unavailable("dead-lettering message %d of topic %q: reading it: %v; retry", r.sseq, c.topic, err)
	}
	dlq := c.topic + queue.DLQSuffix
	m := nats.NewMsg(q.opts.Prefix + dlq)
	m.Data = raw.Data
	for k, vs := range raw.Header {
		if strings.HasPrefix(k, "Nats-") {
			continue
		}
		m.Header[k] = vs
	}
	m.Header.Set(sink.HeaderTopic, dlq)
	m.Header.Set(sink.HeaderAttempt, strconv.FormatUint(attempts, 10))
	m.Header.Set(queue.DeadLetterOriginHeader, c.topic)
	m.Header.Set(queue.DeadLetterReasonHeader, reason)
	m.Header.Set(queue.DeadLetterErrorHeader, lastErr)
	m.Header.Set(queue.DeadLetterAtHeader, strconv.FormatInt(q.opts.Now().UnixMilli(), 10))
	if _, err := q.opts.JS.PublishMsg(ctx, m, jetstream.WithMsgID("dlq:"+q.opts.Stream+":"+strconv.FormatUint(r.sseq, 10)),
		jetstream.WithExpectStream(q.opts.Stream)); err != nil {
		return unavailable("dead-lettering message %d of topic %q to %s: %v; retry", r.sseq, c.topic, dlq, err)
	}
	if err := q.request(ctx, c.topic, r.subject, ackAck); err != nil {
		return err
	}
	q.opts.Logger.Warn("jsqueue: message dead-lettered", "topic", c.topic, "to", dlq, "id", raw.Header.Get(sink.HeaderID),
		"seq", r.sseq, "attempts", attempts, "reason", reason, "last_error", lastErr)
	return nil
}
