package cluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/client"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// The management of scheduled messages: Get, Reschedule and the lookup of
// a message by its idempotency key, decided by the owner of the message's
// partition and forwarded there like Cancel.

// Get says what became of the message id, as its partition's owner knows
// it: pending, delivering, delivered, cancelled, rescheduled (the second
// result names the replacement) or not found. It is forwarded to the
// owner unless forwarded is set. The message is in the answer while the
// owner holds it, or its original intake message is still in the stream.
func (n *Node) Get(ctx context.Context, id message.ID, forwarded bool) (engine.Found, message.ID, error) {
	p, _, _ := SplitID(id)
	if p >= n.opts.Partitions {
		return engine.Found{ID: id}, message.ID{}, nil
	}
	pt, fw, err := n.route(ctx, p, forwarded, "Get")
	if err != nil || pt != nil {
		if err != nil {
			return engine.Found{}, message.ID{}, err
		}
		return pt.get(ctx, id)
	}
	f, err := fw.c.Get(ctx, clientID(id))
	if err != nil {
		return engine.Found{}, message.ID{}, fw.err("Get", err)
	}
	return foundOf(id, f)
}

// Reschedule moves the pending message id to at (a past time: due now),
// decided by the owner of its partition (forwarded there unless forwarded
// is set). The owner stores the replacement, under a new ID in the same
// partition, before it records the old message cancelled, and answers
// Rescheduled only once both are stored while it held the partition: the
// old time then never fires. An error may leave the outcome unknown (it
// says so); the owner that next reads the replacement makes sure that only
// one of the two is delivered.
func (n *Node) Reschedule(ctx context.Context, id message.ID, at time.Time, forwarded bool) (engine.RescheduleResult, message.ID, error) {
	p, _, _ := SplitID(id)
	if p >= n.opts.Partitions {
		return engine.RescheduleUnknown, message.ID{}, nil
	}
	pt, fw, err := n.route(ctx, p, forwarded, "Reschedule")
	if err != nil {
		return engine.RescheduleUnknown, message.ID{}, err
	}
	if pt != nil {
		return pt.reschedule(ctx, id, at)
	}
	nid, err := fw.c.Reschedule(ctx, clientID(id), client.At(at))
	switch {
	case err == nil:
		mid, perr := message.ParseID(nid.String())
		return engine.Rescheduled, mid, perr
	case errors.Is(err, client.ErrAlreadyDelivered):
		return engine.RescheduleTooLate, message.ID{}, nil
	case errors.Is(err, client.ErrAlreadyCancelled):
		return engine.RescheduleCancelled, message.ID{}, nil
	case errors.Is(err, client.ErrNotPending):
		return engine.RescheduleUnknown, message.ID{}, nil
	}
	return engine.RescheduleUnknown, message.ID{}, fw.err("Reschedule", err)
}

// Lookup returns the cluster ID of the message scheduled on topic with the
// idempotency key: the newest one the owners hold (after a Reschedule, the
// replacement). A keyed message's partition is KeyPartition's for a single
// Schedule and the first key's for a batch, so the owner of the key's
// partition is asked first, then, if it has none, the owners of the other
// partitions, one call per node. With forwarded set, only this node's
// partitions are searched (another node is fanning out). Each owner waits
// until it has read its intake stream to the end, so that a Schedule
// answered before the call is found.
func (n *Node) Lookup(ctx context.Context, topic, key string, forwarded bool) (message.ID, bool, error) {
	kp := KeyPartition(topic, key, n.opts.Partitions)
	order := make([]int, 0, n.opts.Partitions)
	order = append(order, kp)
	for p := range n.opts.Partitions {
		if p != kp {
			order = append(order, p)
		}
	}
	asked := map[string]bool{}
	for _, p := range order {
		if forwarded {
			if pt := n.partition(p); pt != nil {
				if id, ok, err := pt.lookup(ctx, topic, key); err != nil || ok {
					return id, ok, err
				}
			}
			continue
		}
		pt, fw, err := n.route(ctx, p, false, "a lookup by key")
		if err != nil {
			return message.ID{}, false, err
		}
		if pt != nil {
			if id, ok, err := pt.lookup(ctx, topic, key); err != nil || ok {
				return id, ok, err
			}
			continue
		}
		if asked[fw.owner.URL] {
			continue
		}
		asked[fw.owner.URL] = true
		f, err := fw.c.Get(ctx, client.Key{Topic: topic, Key: key})
		if err != nil {
			return message.ID{}, false, fw.err("a lookup by key", err)
		}
		if f.State != client.StateNotFound {
			id, err := message.ParseID(f.Message.ID.String())
			return id, err == nil, err
		}
	}
	return message.ID{}, false, nil
}

// forward is the owner of a partition that another node decides for.
type forward struct {
	c     *client.Client
	owner Owner
	p     int
}

// err is the error of a forwarded call: the owner's own status, or
// Unavailable naming the owner.
func (f forward) err(what string, err error) error {
	// The client wraps the status, with a sentinel beside it for some
	// calls (client.ErrScheduleNotFound): errors.Unwrap would miss it.
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		st := se.GRPCStatus()
		if st.Code() == codes.Unavailable {
			// The owner's own, or the connection's: say where.
			return unavailable("forwarding %s to %s (%s), the owner of partition %d: %s", what, f.owner.Node, f.owner.URL, f.p, st.Message())
		}
		return st.Err()
	}
	return unavailable("forwarding %s to %s (%s), the owner of partition %d: %v", what, f.owner.Node, f.owner.URL, f.p, err)
}

// route says who decides for partition p: this node (the partition) or
// its owner (a client that forwards to it). A request that was forwarded
// here is never forwarded again. No owner, or an owner being replaced, is
// Unavailable: the partition moves within the lease TTL.
func (n *Node) route(ctx context.Context, p int, forwarded bool, what string) (*partition, forward, error) {
	if pt := n.partition(p); pt != nil {
		return pt, forward{}, nil
	}
	if forwarded {
		return nil, forward{}, unavailable("partition %d moved away from this node while %s was forwarded to it; retry", p, what)
	}
	o, ok, err := owner(ctx, n.owners, p)
	if err != nil {
		return nil, forward{}, unavailable("looking up the owner of partition %d: %v", p, err)
	}
	if !ok {
		return nil, forward{}, unavailable("partition %d has no owner at the moment (a node stopped; another takes it over within the lease TTL %v); retry", p, n.opts.LeaseTTL)
	}
	if o.Node == n.opts.NodeID {
		return nil, forward{}, unavailable("partition %d is being taken over by this node; retry", p)
	}
	c, err := n.forwarder(o.URL)
	if err != nil {
		return nil, forward{}, unavailable("forwarding %s to %s (%s), the owner of partition %d: %v", what, o.Node, o.URL, p, err)
	}
	return nil, forward{c: c, owner: o, p: p}, nil
}

// clientID is id as package client names it.
func clientID(id message.ID) client.ID {
	cid, _ := client.ParseID(id.String()) // a message.ID always parses
	return cid
}

// foundOf turns a forwarded Get's answer back into the engine's terms.
// Headers come back in key order (the client keeps them in a map).
func foundOf(id message.ID, f client.Found) (engine.Found, message.ID, error) {
	out := engine.Found{ID: id}
	switch f.State {
	case client.StatePending:
		out.State = engine.StatePending
	case client.StateDelivering:
		out.State = engine.StateDelivering
	case client.StateDelivered:
		out.State = engine.StateDelivered
	case client.StateCancelled:
		out.State = engine.StateCancelled
	case client.StateRescheduled:
		out.State = engine.StateRescheduled
	case client.StateDeadLettered:
		out.State = engine.StateDeadLettered
	case client.StateNotFound:
		return out, message.ID{}, nil
	default:
		return out, message.ID{}, fmt.Errorf("cluster: a forwarded Get answered the state %q", f.State)
	}
	var moved message.ID
	if !f.RescheduledTo.IsZero() {
		moved, _ = message.ParseID(f.RescheduledTo.String())
	}
	m := f.Message
	if m.Topic == "" {
		return out, moved, nil
	}
	out.Message = message.Message{DeliverAt: m.DeliverAt.UnixMilli(), Attempt: m.Attempt, Topic: []byte(m.Topic), Body: m.Body}
	if !m.OriginID.IsZero() {
		out.Message.Origin, _ = message.ParseID(m.OriginID.String())
	}
	for _, k := range slices.Sorted(maps.Keys(m.Headers)) {
		out.Message.Headers = append(out.Message.Headers, message.Header{Key: []byte(k), Value: []byte(m.Headers[k])})
	}
	return out, moved, nil
}

// waitReady waits until the partition's local engine is open.
func (pt *partition) waitReady(ctx context.Context) error {
	select {
	case <-pt.ready:
		return nil
	case <-pt.exited:
		return unavailable("partition %d stopped on this node; retry", pt.p)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// catchUp waits until this owner has read its intake stream far enough to
// hold the messages of intake sequence seq if any is pending: up to seq,
// or, if seq was compacted away, to the stream's last sequence (its
// pending messages are then among the copies). held is false if the
// stream never had seq.
func (pt *partition) catchUp(ctx context.Context, seq uint64) (held bool, err error) {
	info, err := pt.n.inStreams[pt.p].Info(ctx)
	if err != nil {
		return false, unavailable("reading the state of %s: %v", inStream(pt.p), err)
	}
	if seq == 0 || seq > info.State.LastSeq {
		return false, nil
	}
	if info.State.Msgs == 0 {
		return true, nil
	}
	target := seq
	if seq < info.State.FirstSeq {
		target = info.State.LastSeq
	}
	return true, pt.waitConsumed(ctx, target)
}

// waitConsumed waits, up to publishTimeout, until the intake messages up
// to sequence target are scheduled into the local engine.
func (pt *partition) waitConsumed(ctx context.Context, target uint64) error {
	timer := time.NewTimer(publishTimeout)
	defer timer.Stop()
	for {
		pt.mu.Lock()
		at, ch := pt.mu.consumed, pt.mu.progress
		pt.mu.Unlock()
		if at >= target {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-pt.exited:
			return unavailable("partition %d stopped on this node; retry", pt.p)
		case <-timer.C:
			return unavailable("partition %d is still reading its intake stream (at sequence %d of %d); retry", pt.p, at, target)
		}
	}
}

// get answers Get for a message of this partition.
func (pt *partition) get(ctx context.Context, id message.ID) (engine.Found, message.ID, error) {
	f := engine.Found{ID: id}
	if err := pt.waitReady(ctx); err != nil {
		return f, message.ID{}, err
	}
	_, seq, _ := SplitID(id)
	held, err := pt.catchUp(ctx, seq)
	if err != nil || !held {
		return f, message.ID{}, err
	}
	pt.mu.Lock()
	r, done := pt.mu.done[id]
	firing := pt.mu.firing[id]
	local, taken := pt.mu.taken[id]
	moved := pt.mu.moved[id]
	eng := pt.mu.eng
	pt.mu.Unlock()
	switch {
	case done && r == Delivered:
		f.State = engine.StateDelivered
	case done && !moved.IsZero():
		f.State = engine.StateRescheduled
	case done:
		f.State = engine.StateCancelled
	case firing:
		f.State = engine.StateDelivering
	case taken:
		f.State = engine.StatePending
	default:
		return f, message.ID{}, nil
	}
	if f.State != engine.StateRescheduled {
		moved = message.ID{}
	}
	if taken && !local.IsZero() {
		lf, err := eng.Get(ctx, local)
		if err == nil && lf.State != engine.StateNotFound {
			f.Message = lf.Message
			f.Message.Headers = shown(lf.Message.Headers)
			if f.State == engine.StatePending && lf.State == engine.StateDelivering {
				f.State = engine.StateDelivering
			}
			return f, moved, nil
		}
	}
	if m, ok := pt.original(ctx, id); ok {
		f.Message = m
	}
	return f, moved, nil
}

// shown is a stored message's headers without those the cluster adds.
func shown(hs []message.Header) []message.Header {
	_, hs = splitIDHeader(hs)
	return withoutHeader(hs, replacesHeader)
}

// original reads id's message from its original intake message, if the
// stream still holds it.
func (pt *partition) original(ctx context.Context, id message.ID) (message.Message, bool) {
	_, seq, idx := SplitID(id)
	raw, err := pt.n.inStreams[pt.p].GetMsg(ctx, seq)
	if err != nil {
		return message.Message{}, false
	}
	ms, err := DecodeIntake(raw.Data, nil)
	if err != nil || idx >= len(ms) {
		return message.Message{}, false
	}
	got, hs, err := intakeID(pt.p, seq, idx, &ms[idx])
	if err != nil || got != id {
		return message.Message{}, false
	}
	m := ms[idx]
	m.Headers = withoutHeader(hs, replacesHeader)
	return m, true
}

// reschedule decides a Reschedule of a message of this partition.
func (pt *partition) reschedule(ctx context.Context, id message.ID, at time.Time) (engine.RescheduleResult, message.ID, error) {
	if err := pt.waitReady(ctx); err != nil {
		return engine.RescheduleUnknown, message.ID{}, err
	}
	now := pt.n.now()
	if at.After(now.Add(pt.n.opts.MaxDelay)) {
		return engine.RescheduleUnknown, message.ID{}, fmt.Errorf("%w: the new time %s is beyond the max delay %v", engine.ErrTooFar,
			at.UTC().Format(time.RFC3339), pt.n.opts.MaxDelay)
	}
	// settled answers for a message that is done, being delivered or due.
	settled := func() (engine.RescheduleResult, bool) {
		r, done := pt.mu.done[id]
		switch {
		case done && r == CancelledReason:
			return engine.RescheduleCancelled, true
		case done || pt.mu.firing[id] || id.DeliverAt <= pt.n.now().UnixMilli():
			return engine.RescheduleTooLate, true
		}
		return 0, false
	}
	pt.mu.Lock()
	res, ok := settled()
	pt.mu.Unlock()
	if ok {
		return res, message.ID{}, nil
	}
	_, seq, _ := SplitID(id)
	held, err := pt.catchUp(ctx, seq)
	if err != nil || !held {
		return engine.RescheduleUnknown, message.ID{}, err
	}
	pt.mu.Lock()
	res, ok = settled()
	local, taken := pt.mu.taken[id]
	eng := pt.mu.eng
	pt.mu.Unlock()
	if ok {
		return res, message.ID{}, nil
	}
	if !taken {
		return engine.RescheduleUnknown, message.ID{}, nil
	}
	if local.IsZero() {
		return engine.RescheduleUnknown, message.ID{}, unavailable("partition %d is scheduling %s locally; retry", pt.p, id)
	}
	lf, err := eng.Get(ctx, local)
	if err != nil {
		return engine.RescheduleUnknown, message.ID{}, unavailable("reading %s from partition %d's local engine: %v", id, pt.p, err)
	}
	switch lf.State {
	case engine.StatePending:
	case engine.StateNotFound:
		return engine.RescheduleUnknown, message.ID{}, nil
	default:
		return engine.RescheduleTooLate, message.ID{}, nil
	}
	m := lf.Message
	m.Headers = append(shown(m.Headers), message.Header{Key: []byte(replacesHeader), Value: appendIDBytes(nil, id)})
	if m.Origin.IsZero() {
		m.Origin = id
	}
	m.DeliverAt = deliverAt(engine.Request{At: at}, now)

	// From here the sink drops the old message; the replacement is stored
	// before the old one's record, so that a crash between the two leaves
	// the replacement, which its next reader settles (requests).
	pt.mu.Lock()
	if res, ok := settled(); ok {
		pt.mu.Unlock()
		return res, message.ID{}, nil
	}
	pt.mu.done[id] = CancelledReason
	pt.mu.Unlock()
	ids, err := pt.n.publishIntake(ctx, pt.p, []message.Message{m}, "")
	if err != nil {
		// Maybe not stored: the old message is pending again, unless the
		// replacement was read meanwhile (it was stored after all).
		pt.mu.Lock()
		if _, read := pt.mu.moved[id]; !read && pt.mu.done[id] == CancelledReason {
			delete(pt.mu.done, id)
		}
		pt.mu.Unlock()
		return engine.RescheduleUnknown, message.ID{}, err
	}
	nid := ids[0]
	pt.mu.Lock()
	pt.mu.moved[id] = nid
	pt.mu.Unlock()
	if err := pt.n.publishDone(ctx, pt.p, AppendDone(nil, id, CancelledReason)); err != nil {
		return engine.RescheduleUnknown, message.ID{}, unavailable("recording the reschedule of %s to %s: %v; the outcome is unknown, retry", id, nid, err)
	}
	if !pt.lease.valid(pt.n.now()) {
		return engine.RescheduleUnknown, message.ID{}, unavailable("partition %d moved while rescheduling %s; the outcome is unknown, retry", pt.p, id)
	}
	return engine.Rescheduled, nid, nil
}

// lookup returns the newest message of this partition with topic and key,
// once the intake stream is read to its end.
func (pt *partition) lookup(ctx context.Context, topic, key string) (message.ID, bool, error) {
	if err := pt.caughtUp(ctx); err != nil {
		return message.ID{}, false, err
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	id, ok := pt.mu.keys[topic+"\x00"+key]
	return id, ok, nil
}

// pruneIndexes forgets keys and moves of messages that are neither done
// nor held: after a compaction pruned the done set. Called with mu held.
func (pt *partition) pruneIndexes() {
	known := func(id message.ID) bool {
		_, done := pt.mu.done[id]
		_, taken := pt.mu.taken[id]
		return done || taken
	}
	for k, id := range pt.mu.keys {
		if !known(id) {
			delete(pt.mu.keys, k)
		}
	}
	for old := range pt.mu.moved {
		if _, done := pt.mu.done[old]; !done {
			delete(pt.mu.moved, old)
		}
	}
}
