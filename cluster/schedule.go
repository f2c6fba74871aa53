package cluster

import (
	"context"
	"fmt"
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
		id, err = n.gather.schedule(ctx, &ms[0])
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
	n.counts.scheduled.Add(int64(len(reqs)))
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
