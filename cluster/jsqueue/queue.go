package jsqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
	"github.com/hourglassmq/hourglass/sink"
)

// Defaults for zero Options fields.
const (
	// DefaultMaxAckPending bounds the messages of one topic that are
	// leased or waiting out a Nack's delay at once (JetStream keeps each
	// in the consumer's memory); past it the topic hands out nothing new
	// until some are settled.
	DefaultMaxAckPending = 100_000
	DefaultTimeout       = 10 * time.Second
	DefaultMaxTopics     = 10_000
)

// Consumer metadata keys: the topic's max attempts, so that every node
// applies the same number, and the policy fields SetPolicy set (the
// others hold the defaults of the node that made the consumer).
const (
	metaMaxAttempts = "hourglass-max-attempts"
	metaPolicySet   = "hourglass-policy-set"
	metaBackoff     = "hourglass-backoff" // formatBackoff
)

// DefaultRefresh is how long a node uses what it read of a topic's
// consumer (its lease, max attempts, pause) before it reads it again:
// how long a policy another node set takes to reach this one.
const DefaultRefresh = 2 * time.Second

// Options configure a Queue. JS, Stream and Prefix are required.
type Options struct {
	// JS is the node's JetStream handle.
	JS jetstream.JetStream
	// Stream is the delivery stream; topic T's messages are on subject
	// Prefix+T.
	Stream, Prefix string
	// Lease is the AckWait of the consumers this node creates; default
	// queue.DefaultLease. A consumer that exists keeps its own.
	Lease time.Duration
	// MaxAttempts of the consumers this node creates (kept in their
	// metadata); default queue.DefaultMaxAttempts.
	MaxAttempts int
	// MaxAckPending of the consumers this node creates; default
	// DefaultMaxAckPending.
	MaxAckPending int
	// MaxTopics bounds the topics this node serves consumers of; one more
	// is refused with ResourceExhausted. Default DefaultMaxTopics; -1 for
	// no limit.
	MaxTopics int
	// Timeout bounds each request to JetStream (an ack, a consumer
	// lookup); default DefaultTimeout.
	Timeout time.Duration
	// Replicas of the key-value bucket of extended leases (HG_EXTENDED),
	// made at the first Extend; default 1.
	Replicas int
	// Refresh is how long a consumer read is used before it is read
	// again; default DefaultRefresh.
	Refresh time.Duration
	// Now is the wall clock leases are checked against; default time.Now.
	Now func() time.Time
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Queue serves Receive, Ack and Nack of topics from the durable pull
// consumers of the delivery stream. Its methods may be called from any
// goroutine.
type Queue struct {
	opts Options
	nc   *nats.Conn
	hb   time.Duration // pullHeartbeat; tests shorten it

	mu       sync.Mutex
	topics   map[string]*consumer // guarded by mu
	stream   jetstream.Stream     // guarded by mu; nil until first needed
	extended jetstream.KeyValue   // guarded by mu; nil until first needed

	gaveBack atomic.Int64 // messages of abandoned pulls given back (giveBack)
}

// consumer is what a Queue knows of one topic's consumer, as read at
// read (by the node's clock). It is not changed once made: a newer read
// replaces it in Queue.topics.
type consumer struct {
	topic, name string
	next        string // the subject pull requests go to
	ackWait     time.Duration
	maxAttempts int
	backoff     queue.Backoff // of a Nack without a delay
	pausedUntil time.Time     // zero: not paused
	set         []string      // the policy fields SetPolicy set (metaPolicySet)
	read        time.Time
	refreshing  *atomic.Bool // shared by the reads of one topic's consumer: one read again at a time
}

// paused reports whether c's consumer hands out nothing at now.
func (c *consumer) paused(now time.Time) bool {
	return !c.pausedUntil.IsZero() && now.Before(c.pausedUntil)
}

// New returns a Queue; it creates consumers as topics are first used.
func New(opts Options) (*Queue, error) {
	if opts.JS == nil || opts.Stream == "" || opts.Prefix == "" {
		return nil, errors.New("jsqueue: Options.JS, Stream and Prefix are required")
	}
	if opts.Lease == 0 {
		opts.Lease = queue.DefaultLease
	}
	if opts.Lease < 0 || opts.Lease > queue.DefaultMaxLease {
		return nil, fmt.Errorf("jsqueue: lease %v: from 1ms to %v", opts.Lease, queue.DefaultMaxLease)
	}
	if opts.MaxAttempts == 0 {
		opts.MaxAttempts = queue.DefaultMaxAttempts
	}
	if opts.MaxAttempts < 1 {
		return nil, fmt.Errorf("jsqueue: max attempts %d: at least 1", opts.MaxAttempts)
	}
	if opts.MaxAckPending == 0 {
		opts.MaxAckPending = DefaultMaxAckPending
	}
	if opts.MaxTopics == 0 {
		opts.MaxTopics = DefaultMaxTopics
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Replicas <= 0 {
		opts.Replicas = 1
	}
	if opts.Refresh <= 0 {
		opts.Refresh = DefaultRefresh
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Queue{opts: opts, nc: opts.JS.Conn(), hb: pullHeartbeat, topics: map[string]*consumer{}}, nil
}

// Lease returns the lease of topic's messages: its consumer's AckWait.
func (q *Queue) Lease(ctx context.Context, topic string) (time.Duration, error) {
	c, err := q.consumer(ctx, topic)
	if err != nil {
		return 0, err
	}
	return c.ackWait, nil
}

// consumer returns topic's consumer, creating it on the delivery stream
// if it does not exist. A consumer that exists is used as it is, whatever
// this node's Options say (the first node to serve a topic fixes its
// lease and max attempts; SetPolicy changes them). What the node read of
// it is read again once it is older than Options.Refresh, by one caller
// at a time (the others go on with what was read).
func (q *Queue) consumer(ctx context.Context, topic string) (*consumer, error) {
	q.mu.Lock()
	c := q.topics[topic]
	full := q.opts.MaxTopics > 0 && len(q.topics) >= q.opts.MaxTopics
	q.mu.Unlock()
	if c != nil {
		if q.opts.Now().Sub(c.read) >= q.opts.Refresh && c.refreshing.CompareAndSwap(false, true) {
			defer c.refreshing.Store(false)
			if nc, err := q.readConsumer(ctx, topic, c); err == nil {
				return nc, nil
			}
		}
		return c, nil
	}
	if full {
		return nil, status.Errorf(codes.ResourceExhausted, "this node serves the consumers of %d topics, its limit (--max-topics); receive on another node", q.opts.MaxTopics)
	}
	name := ConsumerName(topic)
	cfg := jetstream.ConsumerConfig{
		Durable: name, Description: "hourglass: the queue of topic " + topic,
		FilterSubject: q.opts.Prefix + topic,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       q.opts.Lease,
		// Attempts are counted here (NumDelivered), not by JetStream:
		// its MaxDeliver stops redelivering and only says so in an
		// advisory, which no node may be listening to.
		MaxDeliver:    -1,
		MaxAckPending: q.opts.MaxAckPending,
		Metadata:      map[string]string{metaMaxAttempts: strconv.Itoa(q.opts.MaxAttempts)},
	}
	cctx, cancel := context.WithTimeout(ctx, q.lookupTimeout())
	defer cancel()
	jc, err := q.opts.JS.CreateConsumer(cctx, q.opts.Stream, cfg)
	if errors.Is(err, jetstream.ErrConsumerExists) {
		jc, err = q.opts.JS.Consumer(cctx, q.opts.Stream, name)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, unavailable("the JetStream consumer %s of topic %q on stream %s: %v; retry", name, topic, q.opts.Stream, err)
	}
	c = q.fromInfo(topic, jc.CachedInfo(), &atomic.Bool{})
	if c.ackWait != q.opts.Lease || c.maxAttempts != q.opts.MaxAttempts {
		q.opts.Logger.Info("jsqueue: the topic's consumer has another lease or max attempts than this node's flags; using the consumer's",
			"topic", topic, "consumer", name, "lease", c.ackWait, "max_attempts", c.maxAttempts, "node_lease", q.opts.Lease, "node_max_attempts", q.opts.MaxAttempts)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if old := q.topics[topic]; old != nil {
		return old, nil
	}
	q.topics[topic] = c
	return c, nil
}

// readConsumer reads topic's consumer again and replaces old with what
// it read; a consumer that is gone is forgotten (the next use makes it).
func (q *Queue) readConsumer(ctx context.Context, topic string, old *consumer) (*consumer, error) {
	ctx, cancel := context.WithTimeout(ctx, q.lookupTimeout())
	defer cancel()
	jc, err := q.opts.JS.Consumer(ctx, q.opts.Stream, old.name)
	if err != nil {
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			q.forget(topic)
		}
		return nil, err
	}
	return q.keep(topic, q.fromInfo(topic, jc.CachedInfo(), old.refreshing)), nil
}

// lookupTimeout bounds one lookup or creation of a topic's consumer (the
// Receive path): JetStream answers it in milliseconds while the consumer,
// or for a creation the meta group, has a leader, and never when the
// request reached one that died. A Receive then goes on with what was
// read before, or fails Unavailable, instead of waiting Options.Timeout
// (a Receive hung 7 s after a NATS kill in a crashtest --cluster run,
// the topic's consumer reading again what it knew).
const lookupTimeout = 2 * time.Second

func (q *Queue) lookupTimeout() time.Duration { return min(q.opts.Timeout, lookupTimeout) }

// keep makes c what the node knows of topic's consumer.
func (q *Queue) keep(topic string, c *consumer) *consumer {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.topics[topic]; ok || q.opts.MaxTopics <= 0 || len(q.topics) < q.opts.MaxTopics {
		q.topics[topic] = c
	}
	return c
}

// fromInfo is what the node knows of topic's consumer from its info.
func (q *Queue) fromInfo(topic string, info *jetstream.ConsumerInfo, refreshing *atomic.Bool) *consumer {
	c := &consumer{topic: topic, name: info.Name, next: "$JS.API.CONSUMER.MSG.NEXT." + q.opts.Stream + "." + info.Name,
		ackWait: info.Config.AckWait, maxAttempts: q.opts.MaxAttempts, read: q.opts.Now(), refreshing: refreshing}
	if n, err := strconv.Atoi(info.Config.Metadata[metaMaxAttempts]); err == nil && n > 0 {
		c.maxAttempts = n
	}
	c.backoff = parseBackoff(info.Config.Metadata[metaBackoff])
	if p := info.Config.PauseUntil; p != nil && !p.IsZero() {
		c.pausedUntil = *p
	}
	if v := info.Config.Metadata[metaPolicySet]; v != "" {
		c.set = strings.Split(v, ",")
	}
	return c
}

// forget drops topic's consumer from the cache (it was deleted, or
// JetStream did not answer for it): the next use looks it up again.
func (q *Queue) forget(topic string) {
	q.mu.Lock()
	delete(q.topics, topic)
	q.mu.Unlock()
}

// deliveryStream returns the delivery stream's handle.
func (q *Queue) deliveryStream(ctx context.Context) (jetstream.Stream, error) {
	q.mu.Lock()
	st := q.stream
	q.mu.Unlock()
	if st != nil {
		return st, nil
	}
	st, err := q.opts.JS.Stream(ctx, q.opts.Stream)
	if err != nil {
		return nil, err
	}
	q.mu.Lock()
	q.stream = st
	q.mu.Unlock()
	return st, nil
}

// Receive hands out up to n due messages of topic, each leased for the
// topic consumer's AckWait, waiting up to wait for the first. lease must
// be 0 or that AckWait. A paused topic hands out nothing. A message that has been delivered more than the
// topic's max attempts times is moved to "<topic>.dlq" instead of being
// handed out (not for a dead-letter topic).
func (q *Queue) Receive(ctx context.Context, topic string, n int, wait, lease time.Duration) ([]queue.Message, error) {
	if err := queue.ValidateTopic(topic); err != nil {
		return nil, err
	}
	c, err := q.consumer(ctx, topic)
	if err != nil {
		return nil, err
	}
	if lease != 0 && lease != c.ackWait {
		return nil, status.Errorf(codes.FailedPrecondition,
			"lease_ms %d: in cluster mode the lease of topic %q is its JetStream consumer's AckWait, %v (SetPolicy lease_ms changes it): send lease_ms 0 or %d",
			lease.Milliseconds(), topic, c.ackWait, c.ackWait.Milliseconds())
	}
	if wait == 0 && c.paused(q.opts.Now()) {
		// A pull that does not wait would stay queued on a paused
		// consumer holding messages; one that waits ends at its expiry.
		return nil, nil
	}
	end := time.Now().Add(wait)
	pause := false
	for {
		if pause {
			// The last pull ended early with nothing (a leader moved, the
			// consumer was deleted): look the consumer up again after a
			// pause.
			select {
			case <-time.After(min(repull, max(time.Until(end), 0))):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if c, err = q.consumer(ctx, topic); err != nil {
				return nil, err
			}
		}
		left := max(time.Until(end), 0)
		if wait > 0 && left == 0 {
			return nil, nil
		}
		msgs, err := q.fetch(ctx, c, n, left)
		var out []queue.Message
		for _, m := range msgs {
			qm, ok := q.toMessage(ctx, c, m.msg, m.got)
			if ok {
				out = append(out, qm)
			}
		}
		if len(out) > 0 {
			return out, nil // a failed fetch still hands out what it got
		}
		var rp repullError
		if errors.As(err, &rp) {
			if wait > 0 && time.Until(end) > 0 {
				pause = true
				continue
			}
			return nil, rp.err
		}
		if err != nil {
			return nil, err
		}
		if len(msgs) == 0 && (wait == 0 || time.Until(end) <= 0) {
			return nil, nil
		}
		// Everything fetched was dead-lettered (pull again at once), or a
		// pull ended early with nothing (pause first).
		pause = len(msgs) == 0
	}
}

// hidden are the headers a Receive does not hand back: JetStream's and
// those the NATS sink adds (their values are Message fields).
var hidden = map[string]bool{
	sink.HeaderID: true, sink.HeaderOriginID: true, sink.HeaderTopic: true,
	sink.HeaderDeliverAt: true, sink.HeaderAttempt: true,
}

// hiddenHeader reports whether Receive leaves header k out: JetStream's
// (Nats-*, reserved by NATS) and hidden.
func hiddenHeader(k string) bool { return hidden[k] || strings.HasPrefix(k, "Nats-") }

// DeliveryMargin bounds how long a delivery takes from the NATS server
// to this node: a lease is taken to start that much before the message
// arrived (toMessage), so a receipt acts only while JetStream's AckWait,
// which starts when the server sends, has not ended.
const DeliveryMargin = 20 * time.Millisecond

// toMessage turns a delivered message into what Receive hands out; false
// if it was dead-lettered instead (or could not be, and waits for its
// next delivery).
func (q *Queue) toMessage(ctx context.Context, c *consumer, m *nats.Msg, got time.Time) (queue.Message, bool) {
	r, ok := parseAckSubject(m.Reply)
	if !ok {
		q.opts.Logger.Error("jsqueue: a delivered message without a valid ack subject; skipped", "topic", c.topic, "reply", m.Reply)
		return queue.Message{}, false
	}
	if !isDLQ(c.topic) && r.delivered > uint64(c.maxAttempts) {
		// Its last lease ran out after the last attempt.
		if err := q.deadLetter(ctx, c, r, queue.ReasonMaxAttempts, "lease expired", r.delivered-1); err != nil {
			q.opts.Logger.Error("jsqueue: dead-lettering failed; tried again at its next delivery", "topic", c.topic, "seq", r.sseq, "err", err)
		}
		return queue.Message{}, false
	}
	if exp, err := strconv.ParseInt(m.Header.Get(message.ExpireAtHeader), 10, 64); err == nil && !isDLQ(c.topic) && q.opts.Now().UnixMilli() >= exp {
		// Past its expiry: never handed out, as on one node.
		if err := q.deadLetter(ctx, c, r, queue.ReasonExpired, "", r.delivered); err != nil {
			q.opts.Logger.Error("jsqueue: dead-lettering an expired message failed; tried again at its next delivery", "topic", c.topic, "seq", r.sseq, "err", err)
		}
		return queue.Message{}, false
	}
	base, _ := strconv.ParseUint(m.Header.Get(sink.HeaderAttempt), 10, 32)
	// JetStream starts AckWait when it sends the message, before it
	// arrives here: the lease is taken to start DeliveryMargin earlier,
	// so the receipt stops acting before JetStream can hand it out again.
	start := got.Add(-DeliveryMargin)
	out := queue.Message{
		Topic:      c.topic,
		Body:       m.Data,
		Attempt:    uint32(base + r.delivered - 1),
		ReceivedAt: got,
		LeaseUntil: start.Add(c.ackWait),
		Receipt:    formatReceipt(start, r.subject),
		Offset:     int64(r.sseq),
	}
	out.ID, _ = message.ParseID(m.Header.Get(sink.HeaderID))
	out.Origin, _ = message.ParseID(m.Header.Get(sink.HeaderOriginID))
	out.DeliverAt = out.ID.DeliverAt
	out.Headers = visibleHeaders(m.Header)
	return out, true
}

func isDLQ(topic string) bool { return strings.HasSuffix(topic, queue.DLQSuffix) }

func unavailable(format string, args ...any) error {
	return status.Error(codes.Unavailable, "cluster: "+fmt.Sprintf(format, args...))
}
