package jsqueue

import (
	"context"
	"encoding/json"
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

// repullError is a pull that JetStream ended or did not take for a
// reason that may pass (a leader moved, the consumer is gone): a Receive
// with time left looks the consumer up again and pulls again.
type repullError struct{ err error }

func (e repullError) Error() string { return e.err.Error() }
func (e repullError) Unwrap() error { return e.err }

// repull is the pause before a pull that follows one that ended early
// with nothing.
const repull = 100 * time.Millisecond

// pullRequest is JetStream's request for messages of a pull consumer.
type pullRequest struct {
	Batch     int           `json:"batch"`
	Expires   time.Duration `json:"expires,omitempty"`
	NoWait    bool          `json:"no_wait,omitempty"`
	Heartbeat time.Duration `json:"idle_heartbeat,omitempty"`
}

// pullHeartbeat is the idle heartbeat of pulls that wait long: a pull
// whose heartbeats stop (its consumer's leader died and the pull with it)
// is ended after two and a half of them and made again, so that a
// Consume stream finds the consumer's new leader as soon as it is
// elected (nats-server's followers campaign after 4-9 s without their
// leader). Each waiting pull costs a status message a second.
const pullHeartbeat = time.Second

// pullGrace is how long a pull without heartbeats is waited for past its
// expiry, at which JetStream ends it with a status: a pull silent that
// long was lost with its consumer's leader. (A message a live but slow
// leader sends later finds no listener and is handed out again when its
// AckWait ends.)
const pullGrace = time.Second

// delivery is a message a pull got, and when (by the node's clock, in
// whole milliseconds): its lease counts from then.
type delivery struct {
	msg *nats.Msg
	got time.Time
}

// fetch sends one pull request for up to n messages that waits up to wait
// for the first and returns as soon as it has any (JetStream's no_wait
// with expires), and collects what it gets.
func (q *Queue) fetch(ctx context.Context, c *consumer, n int, wait time.Duration) ([]delivery, error) {
	ch := make(chan *nats.Msg, n+16)
	inbox := q.nc.NewInbox()
	sub, err := q.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, unavailable("subscribing to a pull's inbox: %v", err)
	}
	defer sub.Unsubscribe()
	req := pullRequest{Batch: n, NoWait: true}
	var hb time.Duration
	if wait > 0 {
		req.Expires = wait
		if wait >= 4*q.hb {
			hb = q.hb
			req.Heartbeat = hb
		}
	}
	body, _ := json.Marshal(req)
	if err := q.nc.PublishRequest(c.next, inbox, body); err != nil {
		return nil, unavailable("pull request to the consumer of topic %q: %v", c.topic, err)
	}
	// The pull ends with a status message (404 or 408) or its n-th
	// message; if JetStream forgets it (its leader died), the watchdog
	// ends it: wait plus pullGrace, or two and a half missed heartbeats.
	watch := wait + pullGrace
	if hb > 0 {
		watch = 2*hb + hb/2
	}
	dog := time.NewTimer(watch)
	defer dog.Stop()
	var out []delivery
	for {
		select {
		case m := <-ch:
			if code := pullStatus(m); code != "" {
				switch code {
				case "100": // idle heartbeat
					dog.Reset(watch)
					continue
				case "404", "408": // nothing (more) now; the wait ran out
					return out, nil
				case "409": // a leader moved, the consumer was deleted, too many pulls waiting
					q.forget(c.topic)
					if len(out) > 0 {
						return out, nil
					}
					if strings.Contains(m.Header.Get("Description"), "Exceeded MaxWaiting") {
						return nil, status.Errorf(codes.ResourceExhausted, "too many Receives wait on topic %q at once (its consumer's MaxWaiting); retry later", c.topic)
					}
					return nil, repullError{unavailable("the consumer of topic %q: %s; retry", c.topic, m.Header.Get("Description"))}
				case "503": // no responders: the consumer is gone, or its leader is being elected
					q.forget(c.topic)
					return out, repullError{unavailable("no JetStream server answers for the consumer of topic %q (a leader election?); retry", c.topic)}
				default:
					return out, unavailable("pull from the consumer of topic %q: status %s %s", c.topic, code, m.Header.Get("Description"))
				}
			}
			out = append(out, delivery{msg: m, got: time.UnixMilli(q.opts.Now().UnixMilli())})
			if len(out) == n {
				return out, nil
			}
			if hb > 0 {
				dog.Reset(watch)
			}
		case <-dog.C:
			return out, nil
		case <-ctx.Done():
			// What came is handed out to nobody: give it back now rather
			// than let JetStream wait out its AckWait (its delivery
			// counts as an attempt either way). Without the inbox's
			// interest JetStream drops the pull and hands what comes
			// next to other pulls.
			q.giveBack(sub, ch, out)
			return nil, ctx.Err()
		}
	}
}

// giveBack ends a pull whose caller went away: it drains its inbox's
// subscription (the server drops its interest while ch still receives),
// waits for a round trip with the server (after it, every message the
// server sent to the inbox before dropping the interest is on ch, and the
// server hands nothing more to the pull), then Naks (without delay) the
// messages it got and those on ch. A plain unsubscribe would drop,
// unseen, a message the server sent before it learned of the unsubscribe:
// that message would wait out its AckWait.
func (q *Queue) giveBack(sub *nats.Subscription, ch chan *nats.Msg, got []delivery) {
	if err := sub.Drain(); err != nil {
		sub.Unsubscribe()
	} else {
		// Best effort: if the round trip fails, AckWait ends the leases
		// of what came after.
		q.nc.FlushTimeout(q.opts.Timeout)
	}
	nak := func(m *nats.Msg) {
		if m.Reply != "" && pullStatus(m) == "" {
			// Best effort: if it is lost, AckWait still ends the lease.
			q.nc.Publish(m.Reply, []byte("-NAK"))
			q.gaveBack.Add(1)
		}
	}
	for _, d := range got {
		nak(d.msg)
	}
	for {
		select {
		case m := <-ch:
			nak(m)
		default:
			return
		}
	}
}

// pullStatus is the status code of a status message of a pull ("100",
// "404", ...), or "" for a message of the stream.
func pullStatus(m *nats.Msg) string {
	if len(m.Data) > 0 || m.Header == nil {
		return ""
	}
	return m.Header.Get("Status")
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
