package jsqueue

// The queue's management in cluster mode: a topic's policy is its
// consumer's config, its counts are the consumer's, and Purge,
// DeleteTopic and Redrive act on the delivery stream and the consumers.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/queue"
	"github.com/hourglassmq/hourglass/sink"
)

// pauseForever is the PauseUntil of a paused topic: JetStream pauses a
// consumer until a time, a topic is paused until it is resumed.
var pauseForever = time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)

// Policy fields (the names of SetPolicyRequest.defaults) kept in the
// consumer's metaPolicySet.
const (
	fieldMaxAttempts = "max_attempts"
	fieldLease       = "lease_ms"
	fieldPaused      = "paused"
	fieldBackoff     = "backoff"
)

// Policy returns topic's policy as SetPolicy set it (the fields it did
// not set are zero) and as it applies (every field as the consumer has
// it), read from the consumer now. A topic without a consumer gets one.
func (q *Queue) Policy(ctx context.Context, topic string) (set, effective queue.Policy, err error) {
	c, err := q.fresh(ctx, topic)
	if err != nil {
		return set, effective, err
	}
	set, effective = c.policy(q.opts.Now())
	return set, effective, nil
}

// policy is c's policy as set and as it applies.
func (c *consumer) policy(now time.Time) (set, effective queue.Policy) {
	effective = queue.Policy{MaxAttempts: c.maxAttempts, Lease: c.ackWait, Paused: c.paused(now), Backoff: c.backoff}
	for _, f := range c.set {
		switch f {
		case fieldBackoff:
			set.Backoff = effective.Backoff
		case fieldMaxAttempts:
			set.MaxAttempts = effective.MaxAttempts
		case fieldLease:
			set.Lease = effective.Lease
		}
	}
	set.Paused = effective.Paused
	return set, effective
}

// fresh returns topic's consumer as read now.
func (q *Queue) fresh(ctx context.Context, topic string) (*consumer, error) {
	if err := queue.ValidateTopic(topic); err != nil {
		return nil, err
	}
	c, err := q.consumer(ctx, topic)
	if err != nil {
		return nil, err
	}
	nc, err := q.readConsumer(ctx, topic, c)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return q.consumer(ctx, topic) // deleted meanwhile: made again
	}
	if err != nil {
		return nil, unavailable("reading the consumer of topic %q: %v; retry", topic, err)
	}
	return nc, nil
}

// SetPolicy makes p topic's policy: its consumer's AckWait (p.Lease),
// its max attempts and backoff (kept in the consumer's metadata) and its
// pause (JetStream's consumer pause, until the year 2200): a consumer
// update, then a pause or resume if that changes. A zero field that was
// set before goes back to this node's default (Options.Lease,
// Options.MaxAttempts); one never set keeps the consumer's. A rate cannot
// be served by a JetStream pull consumer and is refused.
// Two SetPolicy calls at once on different nodes: the last update wins
// whole.
func (q *Queue) SetPolicy(ctx context.Context, topic string, p queue.Policy) (setP, effective queue.Policy, err error) {
	if p.Rate != 0 {
		return setP, effective, status.Errorf(codes.InvalidArgument, "max_dispatch_rate: in cluster mode a topic has no dispatch rate (JetStream limits the rate of push consumers only, and a topic is a pull consumer every node fetches from): leave it 0 and bound the consumers instead (a Worker's Concurrency, Consume credits), or run one node")
	}
	if err := p.Validate(queue.DefaultMaxLease); err != nil {
		return setP, effective, status.Errorf(codes.InvalidArgument, "policy: %v", err)
	}
	c, err := q.fresh(ctx, topic)
	if err != nil {
		return setP, effective, err
	}
	ctx, cancel := context.WithTimeout(ctx, q.opts.Timeout)
	defer cancel()
	jc, err := q.opts.JS.Consumer(ctx, q.opts.Stream, c.name)
	if err != nil {
		return setP, effective, unavailable("reading the consumer of topic %q: %v; retry", topic, err)
	}
	cfg := jc.CachedInfo().Config
	pausedUntil := cfg.PauseUntil // an update keeps it; the answer to one may not say so
	// A field never set keeps what the consumer has (the defaults of the
	// node that made it); one set before and now zero is set back to this
	// node's default.
	var set []string
	was := strings.Split(cfg.Metadata[metaPolicySet], ",")
	switch {
	case p.Lease != 0:
		cfg.AckWait = p.Lease
		set = append(set, fieldLease)
	case slices.Contains(was, fieldLease):
		cfg.AckWait = q.opts.Lease
	}
	attempts := c.maxAttempts
	switch {
	case p.MaxAttempts != 0:
		attempts = p.MaxAttempts
		set = append(set, fieldMaxAttempts)
	case slices.Contains(was, fieldMaxAttempts):
		attempts = q.opts.MaxAttempts
	}
	backoff := c.backoff
	switch {
	case !p.Backoff.IsZero():
		backoff = p.Backoff
		set = append(set, fieldBackoff)
	case slices.Contains(was, fieldBackoff):
		backoff = queue.Backoff{}
	}
	if p.Paused {
		set = append(set, fieldPaused)
	}
	cfg.Metadata = maps.Clone(cfg.Metadata)
	if cfg.Metadata == nil {
		cfg.Metadata = map[string]string{}
	}
	delete(cfg.Metadata, metaBackoff)
	if !backoff.IsZero() {
		cfg.Metadata[metaBackoff] = formatBackoff(backoff)
	}
	cfg.Metadata[metaMaxAttempts] = strconv.Itoa(attempts)
	cfg.Metadata[metaPolicySet] = strings.Join(set, ",")
	jc, err = q.opts.JS.UpdateConsumer(ctx, q.opts.Stream, cfg)
	if err != nil {
		return setP, effective, unavailable("updating the consumer of topic %q: %v; retry", topic, err)
	}
	info := jc.CachedInfo()
	info.Config.PauseUntil = pausedUntil
	// JetStream changes a consumer's pause only by its own request.
	if was := pausedUntil != nil && q.opts.Now().Before(*pausedUntil); was != p.Paused {
		var pr *jetstream.ConsumerPauseResponse
		if p.Paused {
			pr, err = q.opts.JS.PauseConsumer(ctx, q.opts.Stream, c.name, pauseForever)
		} else {
			pr, err = q.opts.JS.ResumeConsumer(ctx, q.opts.Stream, c.name)
		}
		if err != nil {
			return setP, effective, unavailable("the consumer of topic %q has the new lease and max attempts, but pausing or resuming it failed: %v; retry", topic, err)
		}
		if err := waitPaused(ctx, jc, p.Paused); err != nil {
			return setP, effective, unavailable("the consumer of topic %q was asked to pause or resume, but its leader did not say it did: %v; retry", topic, err)
		}
		info.Config.PauseUntil = nil
		if pr.Paused {
			info.Config.PauseUntil = &pr.PauseUntil
		}
	}
	made := q.fromInfo(topic, info, c.refreshing)
	q.keep(topic, made)
	q.opts.Logger.Info("jsqueue: topic policy set", "topic", topic, "lease", cfg.AckWait, "max_attempts", attempts, "paused", p.Paused)
	setP, effective = made.policy(q.opts.Now())
	return setP, effective, nil
}

// TopicStats are one topic's counts as JetStream keeps them.
type TopicStats struct {
	Topic string
	// Due are the messages of the topic its consumer has not handed
	// out yet (NumPending), or, without a consumer, the messages on its
	// subject.
	Due int64
	// Leased are the messages handed out and not acked (NumAckPending):
	// leased, waiting out a Nack's delay, or whose lease ran out and
	// that wait to be handed out again.
	Leased int64
	// DeadLettered are those of "<topic>.dlq" not acked there.
	DeadLettered int64
	// Policy is the topic's as set (see Policy); Consumer whether it has
	// a consumer yet.
	Policy   queue.Policy
	Consumer bool
}

// Topics returns the topics of the delivery stream, sorted: those with a
// consumer, and those with messages on their subject (dead-letter topics
// are counted with their topic, not listed).
func (q *Queue) Topics(ctx context.Context) ([]TopicStats, error) {
	ctx, cancel := context.WithTimeout(ctx, q.opts.Timeout)
	defer cancel()
	st, err := q.deliveryStream(ctx)
	if err != nil {
		return nil, unavailable("listing topics: the delivery stream: %v; retry", err)
	}
	type counts struct {
		unacked, due, leased int64
		consumer             bool
		policy               queue.Policy
	}
	all := map[string]*counts{}
	get := func(t string) *counts {
		if all[t] == nil {
			all[t] = &counts{}
		}
		return all[t]
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(q.opts.Prefix+">"))
	if err != nil {
		return nil, unavailable("listing topics: the delivery stream's subjects: %v; retry", err)
	}
	for subj, n := range info.State.Subjects {
		if t, ok := strings.CutPrefix(subj, q.opts.Prefix); ok && queue.ValidateTopic(t) == nil {
			c := get(t)
			c.due, c.unacked = int64(n), int64(n)
		}
	}
	now := q.opts.Now()
	list := st.ListConsumers(ctx)
	for ci := range list.Info() {
		t, ok := strings.CutPrefix(ci.Config.FilterSubject, q.opts.Prefix)
		if !ok || ci.Name != ConsumerName(t) || queue.ValidateTopic(t) != nil {
			continue // not a topic's consumer
		}
		c := get(t)
		c.consumer = true
		c.due, c.leased = int64(ci.NumPending), int64(ci.NumAckPending)
		c.unacked = c.due + c.leased
		c.policy, _ = q.fromInfo(t, ci, nil).policy(now)
	}
	if err := list.Err(); err != nil {
		return nil, unavailable("listing topics: the delivery stream's consumers: %v; retry", err)
	}
	var out []TopicStats
	for _, t := range slices.Sorted(maps.Keys(all)) {
		if isDLQ(t) {
			if origin := strings.TrimSuffix(t, queue.DLQSuffix); all[origin] == nil {
				out = append(out, TopicStats{Topic: origin}) // its dead letters are all that is left
			}
			continue
		}
		c := all[t]
		out = append(out, TopicStats{Topic: t, Due: c.due, Leased: c.leased, Policy: c.policy, Consumer: c.consumer})
	}
	slices.SortFunc(out, func(a, b TopicStats) int { return strings.Compare(a.Topic, b.Topic) })
	for i := range out {
		if d := all[out[i].Topic+queue.DLQSuffix]; d != nil {
			out[i].DeadLettered = d.unacked
		}
	}
	return out, nil
}

// Purge removes every message of topic from the delivery stream (a purge
// of its subject): those not handed out yet, and, unlike one node, those
// leased or waiting out a Nack's delay (their Acks then answer OK and
// do nothing). It returns how many were not acked by the topic's
// consumer just before (its NumPending and NumAckPending; without a
// consumer, the messages on the subject). Other readers of the delivery
// stream lose them too.
func (q *Queue) Purge(ctx context.Context, topic string) (int64, error) {
	if err := queue.ValidateTopic(topic); err != nil {
		return 0, err
	}
	n, _, err := q.unacked(ctx, topic)
	if err != nil {
		return 0, err
	}
	if err := q.purgeSubject(ctx, topic); err != nil {
		return 0, err
	}
	q.opts.Logger.Info("jsqueue: topic purged", "topic", topic, "unacked", n)
	return n, nil
}

// DeleteTopic purges topic's subject and deletes its consumer, and with
// it the topic's policy. "<topic>.dlq" is a topic of its own. It returns
// how many messages were not acked (as Purge), and reports whether the
// topic had a consumer or messages.
func (q *Queue) DeleteTopic(ctx context.Context, topic string) (int64, bool, error) {
	if err := queue.ValidateTopic(topic); err != nil {
		return 0, false, err
	}
	n, hasConsumer, err := q.unacked(ctx, topic)
	if err != nil {
		return 0, false, err
	}
	// Purge first: a consumer deleted first could be made again by a
	// Receive on another node and hand out what is about to go.
	if err := q.purgeSubject(ctx, topic); err != nil {
		return 0, false, err
	}
	if hasConsumer {
		cctx, cancel := context.WithTimeout(ctx, q.opts.Timeout)
		err := q.opts.JS.DeleteConsumer(cctx, q.opts.Stream, ConsumerName(topic))
		cancel()
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return 0, false, unavailable("deleting the consumer of topic %q (its messages are purged): %v; retry", topic, err)
		}
	}
	q.forget(topic)
	q.opts.Logger.Info("jsqueue: topic deleted", "topic", topic, "unacked", n)
	return n, hasConsumer || n > 0, nil
}

// unacked counts topic's messages its consumer has not acked (NumPending
// and NumAckPending), or, if it has no consumer, those on its subject.
func (q *Queue) unacked(ctx context.Context, topic string) (int64, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, q.opts.Timeout)
	defer cancel()
	jc, err := q.opts.JS.Consumer(ctx, q.opts.Stream, ConsumerName(topic))
	if err == nil {
		ci := jc.CachedInfo()
		return int64(ci.NumPending) + int64(ci.NumAckPending), true, nil
	}
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return 0, false, unavailable("reading the consumer of topic %q: %v; retry", topic, err)
	}
	st, err := q.deliveryStream(ctx)
	if err != nil {
		return 0, false, unavailable("the delivery stream: %v; retry", err)
	}
	subj := q.opts.Prefix + topic
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subj))
	if err != nil {
		return 0, false, unavailable("counting the messages of topic %q: %v; retry", topic, err)
	}
	return int64(info.State.Subjects[subj]), false, nil
}

// purgeSubject removes every message of topic from the delivery stream.
func (q *Queue) purgeSubject(ctx context.Context, topic string) error {
	ctx, cancel := context.WithTimeout(ctx, q.opts.Timeout)
	defer cancel()
	st, err := q.deliveryStream(ctx)
	if err == nil {
		err = st.Purge(ctx, jetstream.WithPurgeSubject(q.opts.Prefix+topic))
	}
	if err != nil {
		return unavailable("purging topic %q from the delivery stream: %v; retry", topic, err)
	}
	return nil
}

// waitPaused waits until the leader of consumer jc says it is paused
// (paused) or not. A clustered JetStream answers a pause or a resume once
// its meta leader proposed it, before the consumer's leader applied it.
// Until then the leader still serves pulls after a pause: on an R3
// consumer a pull sent right after the answer got a message in about one
// try in three. And a pause right after a resume read the consumer still
// paused, sent no pause, and the resume applied after it left the topic
// resumed. The consumer's info comes from its leader, from the config it
// applied: once it agrees, a Receive sent after SetPolicy answered gets
// nothing on any node while paused, as on one node, and the next
// SetPolicy reads what this one did.
func waitPaused(ctx context.Context, jc jetstream.Consumer, paused bool) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		ci, err := jc.Info(ctx)
		if err == nil && ci.Paused == paused {
			return nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("paused is %v", ci.Paused)
			}
			return fmt.Errorf("%w (%v)", err, ctx.Err())
		case <-t.C:
		}
	}
}

// redriveBatch is how many dead letters one pull of a Redrive takes.
const redriveBatch = 100

// Redrive moves the dead letters of dlq ("<topic>.dlq") that are waiting
// to be received back to their topic: it receives them from dlq's
// consumer (each such delivery counts as an attempt in dlq), publishes
// each that matches to its topic's subject with its headers (those of the
// dead letter left out; the same ID, attempt 0, Nats-Msg-Id
// "redrive:<stream>:<its sequence>") and then acks it in dlq; the others
// are given back when it ends. A crash between the publish and the ack
// leaves the message in both; a Redrive run again within the delivery
// stream's duplicate window does not publish it twice.
func (q *Queue) Redrive(ctx context.Context, dlq string, o queue.RedriveOptions) (queue.RedriveResult, error) {
	var res queue.RedriveResult
	if err := queue.ValidateTopic(dlq); err != nil {
		return res, err
	}
	if !isDLQ(dlq) {
		return res, status.Errorf(codes.InvalidArgument, "%q is not a dead-letter topic (it does not end in %q)", dlq, queue.DLQSuffix)
	}
	c, err := q.fresh(ctx, dlq)
	if err != nil {
		return res, err
	}
	if c.paused(q.opts.Now()) {
		return res, status.Errorf(codes.FailedPrecondition, "%s is paused: in cluster mode dead letters are redriven by receiving them, which a paused topic does not allow; resume it (SetPolicy paused false) first", dlq)
	}
	var held []receipt // given back when it ends
	defer func() {
		for _, r := range held {
			if err := q.request(context.WithoutCancel(ctx), dlq, r.subject, ackNak); err != nil {
				q.opts.Logger.Warn("jsqueue: redrive: giving a dead letter back failed; it is handed out again when its lease ends", "topic", dlq, "seq", r.sseq, "err", err)
			}
		}
	}()
	seen := map[uint64]bool{}
	for {
		got, err := q.fetch(ctx, c, redriveBatch, 0)
		if err != nil {
			return res, err
		}
		fresh := 0
		for i, d := range got {
			r, ok := parseAckSubject(d.msg.Reply)
			if !ok {
				continue
			}
			if seen[r.sseq] {
				// Skipped before, and its lease ran out meanwhile.
				held = append(held, r)
				continue
			}
			seen[r.sseq] = true
			fresh++
			m, _ := q.toMessage(ctx, c, d.msg, d.got)
			if o.Match != nil && !o.Match(m) {
				res.Skipped++
				held = append(held, r)
				continue
			}
			// giveBack holds the rest of the batch, from j on, when
			// the Redrive stops here.
			giveBack := func(j int) {
				for _, rest := range got[j:] {
					if rr, ok := parseAckSubject(rest.msg.Reply); ok {
						held = append(held, rr)
					}
				}
			}
			if o.Max > 0 && res.Redriven >= o.Max {
				res.More = true
				giveBack(i)
				return res, nil
			}
			if o.Wait != nil {
				if err := o.Wait(ctx); err != nil {
					giveBack(i)
					return res, err
				}
			}
			if err := q.redriveOne(ctx, dlq, o.To, d.msg, r); err != nil {
				// This one is not given back: a publish that failed may
				// have been stored, and a Nack would hand it out again at
				// once; its lease runs out instead.
				giveBack(i + 1)
				return res, err
			}
			res.Redriven++
		}
		if fresh == 0 && len(got) < redriveBatch {
			return res, nil
		}
	}
}

// redriveOne publishes the dead letter m of dlq (delivered as r) to its
// topic and acks it in dlq.
func (q *Queue) redriveOne(ctx context.Context, dlq, to string, m *nats.Msg, r receipt) error {
	if to == "" {
		to = m.Header.Get(queue.DeadLetterOriginHeader)
	}
	if to == "" || queue.ValidateTopic(to) != nil {
		to = strings.TrimSuffix(dlq, queue.DLQSuffix)
	}
	out := nats.NewMsg(q.opts.Prefix + to)
	out.Data = m.Data
	for k, vs := range m.Header {
		switch {
		case strings.HasPrefix(k, "Nats-"), k == queue.DeadLetterOriginHeader, k == queue.DeadLetterReasonHeader,
			k == queue.DeadLetterErrorHeader, k == queue.DeadLetterAtHeader, k == queue.LastErrorHeader:
			continue
		}
		out.Header[k] = vs
	}
	out.Header.Set(sink.HeaderTopic, to)
	out.Header.Set(sink.HeaderAttempt, "0")
	pctx, cancel := context.WithTimeout(ctx, q.opts.Timeout)
	defer cancel()
	if _, err := q.opts.JS.PublishMsg(pctx, out, jetstream.WithMsgID(fmt.Sprintf("redrive:%s:%d", q.opts.Stream, r.sseq)),
		jetstream.WithExpectStream(q.opts.Stream)); err != nil {
		return unavailable("redriving message %d of %s to %s: %v; retry", r.sseq, dlq, to, err)
	}
	return q.request(ctx, dlq, r.subject, ackAck)
}

// formatBackoff is b as the consumer's metaBackoff keeps it: initial and
// max in milliseconds, multiplier and jitter, comma-separated.
func formatBackoff(b queue.Backoff) string {
	return fmt.Sprintf("%d,%d,%g,%g", b.Initial.Milliseconds(), b.Max.Milliseconds(), b.Multiplier, b.Jitter)
}

// parseBackoff reads formatBackoff's text; a malformed one is no backoff.
func parseBackoff(s string) queue.Backoff {
	var b queue.Backoff
	var initial, maxMs int64
	if _, err := fmt.Sscanf(s, "%d,%d,%g,%g", &initial, &maxMs, &b.Multiplier, &b.Jitter); err != nil {
		return queue.Backoff{}
	}
	b.Initial, b.Max = time.Duration(initial)*time.Millisecond, time.Duration(maxMs)*time.Millisecond
	return b
}
