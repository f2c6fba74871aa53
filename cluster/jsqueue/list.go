package jsqueue

// List of a topic's due messages (and so of a topic's dead letters, the
// due messages of "<topic>.dlq"): read from the delivery stream after the
// topic consumer's last delivered sequence, without handing anything out.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
	"github.com/hourglassmq/hourglass/sink"
)

// List returns up to n messages of topic its consumer has not handed out
// yet (those Topics counts as due), oldest first, after the page token
// (empty: from the first), and the next page's token ("" at the end). A
// message handed out and waiting to come again (nacked, or its lease
// ended) is not among them: JetStream tells how many deliveries wait for
// an ack, not which. The messages have no receipt and no lease.
func (q *Queue) List(ctx context.Context, topic, token string, n int) ([]queue.Message, string, error) {
	if err := queue.ValidateTopic(topic); err != nil {
		return nil, "", err
	}
	after := uint64(0)
	if token != "" {
		var err error
		if after, err = strconv.ParseUint(token, 10, 64); err != nil || after == 0 {
			return nil, "", fmt.Errorf("%w: page_token %q: not a token List returned in cluster mode (want the next_page_token of the previous page, or empty for the first page)", queue.ErrInvalid, token)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, q.opts.Timeout)
	defer cancel()
	jc, err := q.opts.JS.Consumer(ctx, q.opts.Stream, ConsumerName(topic))
	switch {
	case err == nil:
		after = max(after, jc.CachedInfo().Delivered.Stream)
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return nil, "", unavailable("reading the consumer of topic %q: %v; retry", topic, err)
	}
	st, err := q.deliveryStream(ctx)
	if err != nil {
		return nil, "", unavailable("the delivery stream: %v; retry", err)
	}
	subj := q.opts.Prefix + topic
	var out []queue.Message
	for len(out) < n {
		raw, err := st.GetMsg(ctx, after+1, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, "", nil
		}
		if err != nil {
			return nil, "", unavailable("reading topic %q after sequence %d: %v; retry", topic, after, err)
		}
		after = raw.Sequence
		out = append(out, stored(topic, raw))
	}
	return out, strconv.FormatUint(after, 10), nil
}

// stored is a message of the delivery stream as List shows it.
func stored(topic string, raw *jetstream.RawStreamMsg) queue.Message {
	out := queue.Message{Topic: topic, Body: raw.Data, Offset: int64(raw.Sequence)}
	out.ID, _ = message.ParseID(raw.Header.Get(sink.HeaderID))
	out.Origin, _ = message.ParseID(raw.Header.Get(sink.HeaderOriginID))
	out.DeliverAt = out.ID.DeliverAt
	base, _ := strconv.ParseUint(raw.Header.Get(sink.HeaderAttempt), 10, 32)
	out.Attempt = uint32(base)
	out.Headers = visibleHeaders(raw.Header)
	return out
}

// visibleHeaders is the producer's headers of a stored message, in key
// order.
func visibleHeaders(h nats.Header) []message.Header {
	keys := make([]string, 0, len(h))
	for k := range h {
		if !hiddenHeader(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var out []message.Header
	for _, k := range keys {
		for _, v := range h[k] {
			out = append(out, message.Header{Key: []byte(k), Value: []byte(v)})
		}
	}
	return out
}
