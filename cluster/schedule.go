package cluster

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// publishTimeout bounds the wait for an intake publish's PubAck.
const publishTimeout = 10 * time.Second

// ScheduleBatch stores reqs as one intake message on one partition (the
// partition of the first message's idempotency key, else the next in
// round robin) and returns their IDs once JetStream acknowledged it. The
// batch is atomic: stored whole or not at all. If every message has an
// idempotency key, the same batch sent again within
// Options.IdempotencyWindow of the first (measured from when JetStream
// stored it, whichever node took either) is stored once and answered the
// first IDs; a single keyed message that was rescheduled since is
// answered its replacement's ID. A single message without a
// key may share its intake message with other such Schedules on this node
// (group commit).
func (n *Node) ScheduleBatch(ctx context.Context, reqs []engine.Request) ([]message.ID, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	if len(reqs) > MaxBatch {
		return nil, fmt.Errorf("%w: a batch of %d messages; at most %d per ScheduleBatch in cluster mode (the index of a message in its batch is 10 bits of its ID)",
			engine.ErrInvalid, len(reqs), MaxBatch)
	}
	now := n.now()
	ms := make([]message.Message, len(reqs))
	topics := make([]string, len(reqs))
	keys := make([]string, len(reqs))
	for i, r := range reqs {
		at := deliverAt(r, now)
		if at > now.UnixMilli()+n.opts.MaxDelay.Milliseconds() {
			return nil, fmt.Errorf("%w: messages[%d] is due at %s, beyond the max delay %v", engine.ErrTooFar, i, time.UnixMilli(at).UTC().Format(time.RFC3339), n.opts.MaxDelay)
		}
		for _, h := range r.Headers {
			if k := string(h.Key); reservedHeader(k) {
				return nil, fmt.Errorf("%w: messages[%d] has the header %q, which the cluster reserves for its message IDs; use another header name", engine.ErrInvalid, i, k)
			}
		}
		ms[i] = message.Message{DeliverAt: at, Attempt: r.Attempt, Topic: []byte(r.Topic), Headers: r.Headers, Body: r.Body, Origin: r.Origin}
		if r.IdempotencyKey != "" {
			ms[i].Headers = append(ms[i].Headers[:len(ms[i].Headers):len(ms[i].Headers)], message.Header{Key: []byte(engine.IdempotencyHeader), Value: []byte(r.IdempotencyKey)})
		}
		if r.FlowKey != "" {
			// Delivered as the header only: the cluster applies no flow
			// policy (SetPolicy refuses the flow fields).
			ms[i].Headers = append(ms[i].Headers[:len(ms[i].Headers):len(ms[i].Headers)], message.Header{Key: []byte(message.FlowKeyHeader), Value: []byte(r.FlowKey)})
		}
		topics[i], keys[i] = r.Topic, r.IdempotencyKey
	}
	// The expiry, as on one node: the header message.ExpireAtHeader, which
	// the consumer side (jsqueue) dead-letters past.
	if err := engine.ExpiryHeaders(reqs, ms); err != nil {
		return nil, err
	}
	var ids []message.ID
	var err error
	if len(reqs) == 1 && keys[0] == "" {
		var id message.ID
		id, err = n.gathered(ctx, &ms[0])
		ids = []message.ID{id}
	} else {
		p := int(n.rr.Add(1) % uint64(n.opts.Partitions))
		if keys[0] != "" {
			p = KeyPartition(topics[0], keys[0], n.opts.Partitions)
		}
		mid := ""
		if n.opts.IdempotencyWindow > 0 {
			mid = batchMsgID(topics, keys)
		}
		var dup bool
		ids, dup, err = n.publishIntakeDup(ctx, p, ms, mid)
		if err == nil && dup && len(ids) == 1 {
			ids[0] = n.replacement(ctx, ids[0])
		}
	}
	if err != nil {
		return nil, err
	}
	n.scheduled.Add(int64(len(reqs)))
	return ids, nil
}

// deliverAt is when r is due in UTC ms: At, or now plus Delay rounded up
// to the millisecond; a past time becomes now, as the engine does.
func deliverAt(r engine.Request, now time.Time) int64 {
	var at int64
	if !r.At.IsZero() {
		// In integers: a float64 of the nanoseconds is off by up to
		// 256 ns, which made a whole millisecond one more.
		ns := r.At.UnixNano()
		at = ns / 1e6
		if ns%1e6 > 0 {
			at++
		}
	} else {
		t := now.Add(r.Delay)
		at = t.UnixMilli()
		if t.UnixNano()%1e6 != 0 {
			at++
		}
	}
	return max(at, now.UnixMilli())
}

// publishIntake stores ms as one intake message of partition p with
// Nats-Msg-Id mid (none if empty) and returns their IDs. A duplicate
// (mid seen within the window) answers the stored message's IDs, with
// their first delivery times.
func (n *Node) publishIntake(ctx context.Context, p int, ms []message.Message, mid string) ([]message.ID, error) {
	ids, _, err := n.publishIntakeDup(ctx, p, ms, mid)
	return ids, err
}

// replacementHops bounds how many Reschedules replacement follows.
const replacementHops = 16

// replacement is the message that took id's place: id, or, if id was
// rescheduled, its replacement's (as a single node's key names the
// replacement). If the owner cannot say, it is id (whose Get names the
// replacement).
func (n *Node) replacement(ctx context.Context, id message.ID) message.ID {
	for range replacementHops {
		f, moved, err := n.Get(ctx, id, false)
		if err != nil || f.State != engine.StateRescheduled || moved.IsZero() {
			break
		}
		id = moved
	}
	return id
}

// publishIntakeDup is publishIntake that also says whether the intake
// message was a duplicate (the IDs are then the stored ones).
func (n *Node) publishIntakeDup(ctx context.Context, p int, ms []message.Message, mid string) ([]message.ID, bool, error) {
	data := AppendIntake(nil, ms)
	if max := n.nc.MaxPayload(); int64(len(data))+copyOverhead > max {
		return nil, false, fmt.Errorf("%w: %d messages encode to %d bytes, more than the NATS servers' max_payload of %d bytes (the largest message they store) less the %d bytes a compaction's copy may add: send fewer or smaller messages per request (or raise max_payload)",
			engine.ErrInvalid, len(ms), len(data), max, copyOverhead)
	}
	msg := nats.NewMsg(inSubject(p))
	msg.Data = data
	popts := []jetstream.PublishOpt{jetstream.WithExpectStream(inStream(p))}
	if mid != "" {
		popts = append(popts, jetstream.WithMsgID(mid))
	}
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	// Async with a wait for the future: the PubAcks of concurrent
	// requests come back over one subscription (a synchronous publish was
	// half as fast for concurrent single Schedules on this machine).
	fut, err := n.js.PublishMsgAsync(msg, popts...)
	if err != nil {
		return nil, false, n.intakeError(p, len(ms), err)
	}
	var ack *jetstream.PubAck
	select {
	case ack = <-fut.Ok():
	case err := <-fut.Err():
		return nil, false, n.intakeError(p, len(ms), err)
	case <-ctx.Done():
		return nil, false, n.intakeError(p, len(ms), ctx.Err())
	}
	if ack.Sequence > MaxSeq {
		return nil, false, fmt.Errorf("cluster: intake stream %s passed sequence %d, the most an ID can hold", inStream(p), uint64(MaxSeq))
	}
	ids := make([]message.ID, len(ms))
	if ack.Duplicate {
		// A retry: the IDs are the stored batch's, due when they were.
		raw, err := n.inStreams[p].GetMsg(ctx, ack.Sequence)
		var first []message.Message
		if err == nil {
			first, err = DecodeIntake(raw.Data, nil)
		}
		if err != nil {
			return nil, false, n.intakeError(p, len(ms), fmt.Errorf("reading the stored batch of a retried request: %w", err))
		}
		if len(first) != len(ms) {
			return nil, false, fmt.Errorf("%w: this batch of %d messages has the idempotency keys of a batch of %d stored at sequence %d of %s within the last %v; a retry must resend the same batch",
				engine.ErrInvalid, len(ms), len(first), ack.Sequence, inStream(p), n.opts.IdempotencyWindow)
		}
		ms = first
	}
	for i := range ms {
		ids[i] = MakeID(p, ack.Sequence, i, ms[i].DeliverAt)
	}
	return ids, ack.Duplicate, nil
}

func (n *Node) intakeError(p, count int, err error) error {
	return status.Errorf(codes.Unavailable,
		"storing %d messages in the cluster's intake stream %s: %v; a batch is stored whole or not at all, and whether this one was is unknown: retry the same batch (if every message has an idempotency key, a retry of the same messages in the same order is not stored twice)",
		count, inStream(p), err)
}

// gather is the group commit of this node's unkeyed single Schedules: one
// is published at once while fewer than gatherInflight publishes of them
// are in flight; those that arrive while that many are in flight wait and
// go together in the next intake message. Each intake message goes to the
// next partition in round robin, so the partitions share the load as they
// do for batches.
type gather struct {
	mu       sync.Mutex
	inflight int       // guarded by mu: leader goroutines publishing
	waiting  []*waiter // guarded by mu
}

// gatherInflight is how many gathered publishes may be in flight on a
// node. One gathers the most: a Schedule that arrives during a publish
// waits for it and then one more round trip, but each publish carries
// all that arrived meanwhile, and an R3 publish costs the NATS servers
// about the same CPU whatever it carries. With 64 clients making single
// unary Schedules against one node, medians of 3 interleaved runs
// (`CLIENTS=64 NODES=1 bash scripts/bench-cluster.sh 40000 single`,
// bench/results/cluster-gather-2026-12-02.txt): 9,293/s at 1, 8,541/s
// at 2, 7,711/s at 4. It is per node, not per partition: with a bound
// per partition, 64 concurrent Schedules over 8 partitions went about
// two to an intake message, and a node made 4,252 Schedules/s.
const gatherInflight = 1

type waiter struct {
	m    *message.Message
	size int
	done chan gatherResult // buffered: the leader never blocks on it
}

type gatherResult struct {
	id  message.ID
	err error
}

// gatherBytes bounds the encoded size of one gathered intake message.
const gatherBytes = 256 << 10

// gathered stores m through the node's group commit.
func (n *Node) gathered(ctx context.Context, m *message.Message) (message.ID, error) {
	g := &n.gather
	w := &waiter{m: m, size: message.ScheduleSize(m) + 4, done: make(chan gatherResult, 1)}
	g.mu.Lock()
	g.waiting = append(g.waiting, w)
	if g.inflight < gatherInflight {
		g.inflight++
		go n.lead()
	}
	g.mu.Unlock()
	select {
	case r := <-w.done:
		return r.id, r.err
	case <-ctx.Done():
		return message.ID{}, status.Errorf(codes.Unavailable,
			"storing 1 message in the cluster's intake streams: %v; whether it was stored is unknown: retry it (with an idempotency key, a retry is not stored twice)", ctx.Err())
	}
}

// lead publishes the node's waiting Schedules, as many per intake message
// as fit, each intake message to the next partition, until none wait.
func (n *Node) lead() {
	g := &n.gather
	// A gathered intake message must pass publishIntake's size check
	// (max_payload less copyOverhead, less its own framing) even where the
	// NATS servers set max_payload below gatherBytes.
	limit := min(gatherBytes, int(n.nc.MaxPayload())-copyOverhead-16)
	for {
		g.mu.Lock()
		k, size := 0, 0
		for k < len(g.waiting) && k < MaxBatch && (k == 0 || size+g.waiting[k].size <= limit) {
			size += g.waiting[k].size
			k++
		}
		batch := g.waiting[:k:k]
		g.waiting = g.waiting[k:]
		if k == 0 {
			g.waiting = nil
			g.inflight--
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		ms := make([]message.Message, len(batch))
		for i, w := range batch {
			ms[i] = *w.m
		}
		p := int(n.rr.Add(1) % uint64(n.opts.Partitions))
		ids, err := n.publishIntake(n.ctx, p, ms, "")
		for i, w := range batch {
			if err != nil {
				w.done <- gatherResult{err: err}
			} else {
				w.done <- gatherResult{id: ids[i]}
			}
		}
	}
}
