package queue

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"time"

	"golang.org/x/time/rate"

	"github.com/hourglassmq/hourglass/message"
)

// Per-key flow control (Policy.Flow). Under a flow policy a topic's
// receivable messages go through its flowState: the reader moves due
// records, and the messages given back to be received again, into one
// queue per flow key, and Receive takes from the keys whose bounds allow
// it. Only keys with due or leased messages have state; the backlog that
// is not due stays in the queue log. Nothing of it is written: a
// message held in a key's queue is outstanding, as one waiting to be
// received again is, and a checkpoint names it with its attempt. After a
// restart it is receivable again and goes back to its key's queue in
// queue-log order.

// flowReadAhead bounds the records one Receive moves from the reader into
// the keys' queues (the work done under the topic's lock), and maxFlowHeld
// the messages a topic's keys hold in memory: beyond it the reader waits
// until the keys drain.
const (
	flowReadAhead = 4096
	maxFlowHeld   = 1 << 20
)

// flowKey is one flow key of a topic with due or leased messages.
// Guarded by topic.mu.
type flowKey struct {
	name   string
	wait   []entry // due, waiting to be received, in queue-log order
	leased int     // its leases (leased or settling)
	lim    *rate.Limiter
	// notBefore (unix ns): an ordered key's head waits out a Nack's
	// delay until then.
	notBefore int64
	inRing    bool
}

// flowState is a topic's flow keys. Guarded by topic.mu.
type flowState struct {
	pol  Flow                // the policy the keys were set up for
	keys map[string]*flowKey // nil while the topic has no flow policy
	// ring holds the keys with waiting messages whose concurrency allows
	// one more lease (their rate and an ordered key's retry delay are
	// checked when their turn comes), in turn order.
	ring []*flowKey
	held int64 // messages in the keys' queues
}

// entries appends every message the keys hold to dst.
func (f *flowState) entries(dst []entry) []entry {
	for _, k := range f.keys {
		dst = append(dst, k.wait...)
	}
	return dst
}

// key returns the state of key name, made if it has none. now is for a
// new key's rate bucket. t.mu is held.
func (t *topic) flowKeyLocked(name string, now time.Time) *flowKey {
	f := &t.mu.flow
	if k := f.keys[name]; k != nil {
		return k
	}
	k := &flowKey{name: name}
	if f.pol.Rate > 0 && name != "" {
		k.lim = t.q.newFlowLimiter(f.pol)
	}
	f.keys[name] = k
	return k
}

// newFlowLimiter is a key's rate bucket. It fills from the queue's Open:
// a key that comes due right after a restart does not get a full burst on
// top of what it took before the restart, so that the bound holds across
// a crash (the buckets are not written anywhere).
func (q *Queue) newFlowLimiter(f Flow) *rate.Limiter {
	b := f.burst()
	lim := rate.NewLimiter(rate.Limit(f.Rate), b)
	lim.AllowN(q.openedAt, b)
	return lim
}

// flowKeyOf returns the flow key among hs ("" for none).
func flowKeyOf(hs []message.Header) []byte {
	for _, h := range hs {
		if bytes.Equal(h.Key, flowKeyName) {
			return h.Value
		}
	}
	return nil
}

var flowKeyName = []byte(message.FlowKeyHeader)

// syncFlowLocked brings t's flow state in line with the policy pol: a
// new policy applies to what is already due. t.mu is held.
func (t *topic) syncFlowLocked(pol Flow, now time.Time) {
	f := &t.mu.flow
	if f.pol == pol {
		return
	}
	old := f.pol
	f.pol = pol
	if !pol.On() {
		// Back to one queue: what the keys hold waits to be received
		// again, in queue-log order; leases keep their key until settled.
		back := f.entries(nil)
		slices.SortFunc(back, func(a, b entry) int { return cmp.Compare(a.off, b.off) })
		t.mu.read.fifo = append(back, t.mu.read.fifo...)
		f.keys, f.ring, f.held = nil, nil, 0
		return
	}
	if f.keys == nil {
		f.keys = map[string]*flowKey{}
	}
	f.ring = f.ring[:0]
	for _, k := range f.keys {
		k.inRing = false
		switch {
		case pol.Rate <= 0 || k.name == "":
			k.lim = nil
		case k.lim == nil || old.Rate <= 0:
			k.lim = t.q.newFlowLimiter(pol)
		default:
			k.lim.SetLimitAt(now, rate.Limit(pol.Rate))
			k.lim.SetBurstAt(now, pol.burst())
		}
		if !pol.Ordered {
			k.notBefore = 0
		}
		t.ringLocked(k)
	}
	// The ring's order: the key whose oldest message came due first.
	slices.SortFunc(f.ring, func(a, b *flowKey) int { return cmp.Compare(a.wait[0].off, b.wait[0].off) })
}

// ringLocked puts k in the ring if it has waiting messages and room for
// a lease; it drops k's state if it holds nothing. t.mu is held.
func (t *topic) ringLocked(k *flowKey) {
	f := &t.mu.flow
	switch {
	case k.inRing:
	case len(k.wait) > 0 && (f.pol.limit() == 0 || k.name == "" || k.leased < f.pol.limit()):
		k.inRing = true
		f.ring = append(f.ring, k)
	case len(k.wait) == 0 && k.leased == 0 && (k.lim == nil || k.lim.TokensAt(t.q.now()) >= float64(k.lim.Burst())):
		// Nothing due or leased, and its bucket is full again (a new one
		// would be the same): it costs nothing from now on.
		delete(f.keys, k.name)
	}
}

// holdLocked puts the message e, whose flow key is key, in its key's
// queue, in queue-log order. t.mu is held.
func (t *topic) holdLocked(key []byte, e entry, now time.Time) {
	k := t.mu.flow.keys[string(key)]
	if k == nil {
		k = t.flowKeyLocked(string(key), now)
	}
	if n := len(k.wait); n == 0 || k.wait[n-1].off < e.off {
		k.wait = append(k.wait, e)
	} else {
		i, _ := slices.BinarySearchFunc(k.wait, e.off, func(x entry, off int64) int { return cmp.Compare(x.off, off) })
		k.wait = slices.Insert(k.wait, i, e)
	}
	t.mu.flow.held++
	t.ringLocked(k)
}

// fillFlowLocked moves the messages waiting to be received again, and due
// records from the reader (at most flowReadAhead), into their keys'
// queues. t.mu is held.
func (t *topic) fillFlowLocked(now time.Time) error {
	rd := &t.mu.read
	m := &t.mu.scratch
	var id message.ID
	for len(rd.fifo) > 0 {
		e := rd.fifo[0]
		if err := t.readAt(e.off, &id, m); err != nil {
			return err
		}
		rd.fifo = rd.fifo[1:]
		t.holdLocked(flowKeyOf(m.Headers), e, now)
	}
	for n := 0; n < flowReadAhead && t.mu.flow.held < maxFlowHeld; n++ {
		if !rd.peeked {
			if !rd.it.Next() {
				if err := rd.it.Err(); err != nil {
					return fmt.Errorf("queue: topic %q: %w", t.name, err)
				}
				return nil
			}
			rd.peeked = true
		}
		off := rd.it.Offset()
		if len(rd.skip) > 0 && rd.skip[0] == off {
			rd.skip = rd.skip[1:]
			rd.peeked = false
			rd.unread--
			continue // acked before a restart
		}
		if err := t.decode(rd.it, &id, m); err != nil {
			return t.stayAt(off, err)
		}
		if due := m.DeliverAt * int64(time.Millisecond); due > now.UnixNano() {
			t.armDueLocked(due, now)
			return nil
		}
		rd.peeked = false
		rd.unread--
		t.holdLocked(flowKeyOf(m.Headers), entry{off: off, attempt: m.Attempt}, now)
	}
	return nil
}

// receiveFlowLocked leases up to max messages under the flow policy: the
// keys in the ring in turn (one message each under Fair, as many as the
// key allows otherwise), skipping those whose rate or retry delay holds
// them. t.mu is held.
func (t *topic) receiveFlowLocked(max int, leaseDur time.Duration, now time.Time, expired *[]*lease) ([]Message, error) {
	if err := t.fillFlowLocked(now); err != nil {
		return nil, err
	}
	f := &t.mu.flow
	deadline, until := t.q.mono()+int64(leaseDur), now.Add(leaseDur).UnixNano()
	var out []Message
	var id message.ID
	var arena []byte
	m := &t.mu.scratch
	var wait time.Duration
	for misses := 0; len(out) < max && len(f.ring) > 0 && misses < len(f.ring); {
		k := f.ring[0]
		if d := t.flowDelay(k, now); d > 0 {
			f.ring = append(f.ring[1:], k)
			misses++
			if wait == 0 || d < wait {
				wait = d
			}
			continue
		}
		misses = 0
		e := k.wait[0]
		if err := t.readAt(e.off, &id, m); err != nil {
			if len(out) == 0 {
				return nil, err
			}
			break
		}
		k.wait = k.wait[1:]
		f.held--
		_, dup := t.mu.leases.byID[id]
		switch {
		case dup:
			// Another copy of this message (delivered again after a
			// crash) is leased: this one is settled with it, as without
			// a flow policy.
		case message.Expired(m.Headers, now.UnixMilli()) && !t.dlq:
			// Past its expiry: never handed out, as without a flow
			// policy; it does not count against its key.
			*expired = append(*expired, t.pastExpiryLocked(e.off, id, e.attempt))
		default:
			if e.attempt > 0 {
				t.mu.stats.Redelivered++
			}
			if k.lim != nil {
				k.lim.AllowN(now, 1)
			}
			k.leased++
			l := &lease{off: e.off, id: id, attempt: e.attempt, deadline: deadline, until: until, serial: t.q.serial.Add(1), key: k, expireAt: expiryOf(m.Headers)}
			t.mu.leases.add(l)
			out = append(out, t.message(l, now, m, &arena))
		}
		room := f.pol.limit() == 0 || k.name == "" || k.leased < f.pol.limit()
		switch {
		case len(k.wait) == 0 || !room:
			f.ring = f.ring[1:]
			k.inRing = false
			t.ringLocked(k)
		case f.pol.Fair:
			f.ring = append(f.ring[1:], k)
		}
	}
	if len(out) == 0 && wait > 0 {
		t.armRateLocked(wait)
	}
	if len(f.ring) == 0 {
		f.ring = nil // let the array go
	}
	return out, nil
}

// flowDelay is how long k must wait before its next message may be
// leased: its rate, or an ordered key's retry delay. t.mu is held.
func (t *topic) flowDelay(k *flowKey, now time.Time) time.Duration {
	if k.notBefore > now.UnixNano() {
		return time.Duration(k.notBefore - now.UnixNano())
	}
	if k.lim == nil || k.lim.TokensAt(now) >= 1 {
		return 0
	}
	r := k.lim.ReserveN(now, 1)
	d := r.DelayFrom(now)
	r.CancelAt(now)
	return max(d, time.Millisecond)
}

// forgetLocked removes lease l and lets its key lease another. t.mu is
// held.
func (t *topic) forgetLocked(l *lease) {
	t.mu.leases.forget(l)
	k := l.key
	if k == nil {
		return
	}
	l.key = nil
	k.leased--
	if t.mu.flow.keys[k.name] != k {
		return // the topic's flow policy was lifted
	}
	t.ringLocked(k)
	if len(k.wait) > 0 {
		t.wake()
	}
}

// retryInPlaceLocked gives l's message back to its ordered key after a
// failed attempt, at its head, receivable after delay: the key's later
// messages wait for it. t.mu is held; l is out of the heap.
func (t *topic) retryInPlaceLocked(l *lease, delay time.Duration) {
	k := l.key
	now := t.q.now()
	if k != nil && t.mu.flow.keys[k.name] == k {
		k.notBefore = now.Add(delay).UnixNano()
		t.armDueLocked(k.notBefore, now)
	}
	t.forgetLocked(l)
	t.mu.read.fifo = append(t.mu.read.fifo, entry{off: l.off, attempt: l.attempt + 1})
	t.wake()
}

// orderedLocked reports whether l's message belongs to an ordered key:
// its retries wait in place. t.mu is held.
func (t *topic) orderedLocked(l *lease) bool {
	return l.key != nil && l.key.name != "" && t.mu.flow.pol.Ordered
}

// FlowBacklog is what one flow key of a topic holds.
type FlowBacklog struct {
	Key    string
	Due    int64 // due, waiting to be received
	Leased int
	// HeldBy says what holds the key's due messages back: "concurrency",
	// "rate", "ordered"; "" when a consumer may take one now.
	HeldBy string
}

// heldByLocked says what holds k's due messages back ("" if nothing).
// t.mu is held.
func (t *topic) heldByLocked(k *flowKey, now time.Time) string {
	pol := t.mu.flow.pol
	switch {
	case len(k.wait) == 0 || k.name == "":
		return ""
	case pol.Ordered && (k.leased > 0 || k.notBefore > now.UnixNano()):
		return "ordered"
	case pol.Concurrency > 0 && k.leased >= pol.Concurrency:
		return "concurrency"
	case k.lim != nil && k.lim.TokensAt(now) < 1:
		return "rate"
	}
	return ""
}

// flowStatsLocked returns the messages held back by their key's bound,
// the keys holding them, and the n largest backlogs by key. t.mu is held.
func (t *topic) flowStatsLocked(n int) (held int64, keys int, top []FlowBacklog) {
	now := t.q.now()
	for _, k := range t.mu.flow.keys {
		b := FlowBacklog{Key: k.name, Due: int64(len(k.wait)), Leased: k.leased, HeldBy: t.heldByLocked(k, now)}
		if b.HeldBy != "" {
			held += b.Due
			keys++
		}
		if n > 0 {
			top = append(top, b)
		}
	}
	slices.SortFunc(top, func(a, b FlowBacklog) int {
		if c := cmp.Compare(b.Due, a.Due); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return held, keys, top[:min(n, len(top))]
}

// flowWaitLocked says why the message at off, waiting, waits for its flow
// key, or "" if it does not. t.mu is held.
func (t *topic) flowWaitLocked(off int64, key string) string {
	k := t.mu.flow.keys[key]
	if k == nil || key == "" {
		return ""
	}
	i, found := slices.BinarySearchFunc(k.wait, off, func(x entry, off int64) int { return cmp.Compare(x.off, off) })
	if !found {
		return ""
	}
	now := t.q.now()
	why := t.heldByLocked(k, now)
	switch {
	case why == "ordered":
		return fmt.Sprintf("flow key %q is ordered: %d of its messages come before it, and one is leased or waits out a retry delay", key, i)
	case why == "concurrency":
		return fmt.Sprintf("flow key %q has %d messages leased, its concurrency; %d more wait before this one", key, k.leased, i)
	case why == "rate":
		return fmt.Sprintf("flow key %q is at its rate of %g a second; %d more wait before this one", key, t.mu.flow.pol.Rate, i)
	case t.mu.flow.pol.Ordered && i > 0:
		return fmt.Sprintf("flow key %q is ordered: %d of its messages come before it", key, i)
	}
	return ""
}

// find returns the entry at off in key's queue.
func (f *flowState) find(off int64, key string) (entry, bool) {
	k := f.keys[key]
	if k == nil {
		return entry{}, false
	}
	i, found := slices.BinarySearchFunc(k.wait, off, func(x entry, off int64) int { return cmp.Compare(x.off, off) })
	if !found {
		return entry{}, false
	}
	return k.wait[i], true
}

// take removes the entry at off from the key that holds it, and returns
// it and the key (nil if no key holds it). The caller puts the key back
// in the ring (ringLocked) once it has leased the message.
func (f *flowState) take(off int64) (entry, *flowKey) {
	for _, k := range f.keys {
		i, found := slices.BinarySearchFunc(k.wait, off, func(x entry, off int64) int { return cmp.Compare(x.off, off) })
		if !found {
			continue
		}
		e := k.wait[i]
		k.wait = slices.Delete(k.wait, i, i+1)
		f.held--
		if k.inRing {
			k.inRing = false
			f.ring = slices.DeleteFunc(f.ring, func(x *flowKey) bool { return x == k })
		}
		return e, k
	}
	return entry{}, nil
}

// clear drops every message the keys hold (a purge); keys with leases
// stay until those are settled.
func (f *flowState) clear() {
	for name, k := range f.keys {
		k.wait, k.inRing = nil, false
		if k.leased == 0 {
			delete(f.keys, name)
		}
	}
	f.ring, f.held = nil, 0
}

// FlowBacklogs returns the n largest backlogs by flow key of topic, the
// largest first: the keys with due or leased messages under its flow
// policy. A topic without one, or not open, has none.
func (q *Queue) FlowBacklogs(name string, n int) []FlowBacklog {
	if q.enter() != nil {
		return nil
	}
	defer q.leave()
	q.mu.Lock()
	var t *topic
	if s := q.mu.topics[name]; s != nil {
		t = s.t
	}
	q.mu.Unlock()
	if t == nil || !q.hold(t) {
		return nil
	}
	defer q.release(t)
	t.mu.Lock()
	defer t.mu.Unlock()
	_, _, top := t.flowStatsLocked(n)
	return top
}
