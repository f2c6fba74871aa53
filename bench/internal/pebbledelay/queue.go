package pebbledelay

import (
	"container/heap"
	"fmt"
	"strconv"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
)

// msg is a message in memory. Its fields but key, at, id and req are
// guarded by Queue.mu.
type msg struct {
	key string // its store key
	at  int64  // deliverAt, Unix ns
	id  string // message.ID: deliverAt in ms (rounded up) and seq
	req *hourglassv1.ScheduleRequest

	attempt  uint32
	receipt  string // "" while ready
	leaseEnd time.Time
	hidx     int // index in Queue.expiry while leased
}

func newMsg(key []byte, at int64, req *hourglassv1.ScheduleRequest) *msg {
	_, seq, _ := parseKey(key)
	ms := (at + int64(time.Millisecond) - 1) / int64(time.Millisecond)
	return &msg{key: string(key), at: at, req: req, id: message.ID{DeliverAt: ms, Seq: seq}.String()}
}

func timestamp(ns int64) *timestamppb.Timestamp { return timestamppb.New(time.Unix(0, ns)) }

// topic is one topic's ready messages and consumers (Queue.mu).
type topic struct {
	// again holds messages given back (expired, released, nacked), handed
	// out before ready; ready[head:] is in delivery order.
	again, ready []*msg
	head         int
	consumers    map[*consumer]struct{}
}

func (t *topic) pop() *msg {
	if n := len(t.again); n > 0 {
		m := t.again[0]
		t.again[0] = nil
		t.again = t.again[1:]
		return m
	}
	if t.head == len(t.ready) {
		return nil
	}
	m := t.ready[t.head]
	t.ready[t.head] = nil
	if t.head++; t.head == len(t.ready) {
		t.ready, t.head = t.ready[:0], 0
	} else if t.head >= 1024 && t.head*2 >= len(t.ready) {
		t.ready, t.head = append(t.ready[:0], t.ready[t.head:]...), 0
	}
	return m
}

// consumer is one Consume stream's place in its topic.
type consumer struct {
	topic    string
	lease    time.Duration
	maxBatch int
	// wake is signalled when the consumer may have messages to take.
	wake    chan struct{}
	credits int // Queue.mu
}

func (c *consumer) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// leaseHeap orders leased messages by lease end.
type leaseHeap []*msg

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].leaseEnd.Before(h[j].leaseEnd) }
func (h leaseHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].hidx = i; h[j].hidx = j }
func (h *leaseHeap) Push(x any)        { m := x.(*msg); m.hidx = len(*h); *h = append(*h, m) }
func (h *leaseHeap) Pop() any {
	old := *h
	m := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return m
}

// topicOf returns the topic, made if new. q.mu is held.
func (q *Queue) topicOf(name string) *topic {
	t := q.topics[name]
	if t == nil {
		t = &topic{consumers: map[*consumer]struct{}{}}
		q.topics[name] = t
	}
	return t
}

// ready makes m ready: at the front of its topic if again. q.mu is held.
func (q *Queue) ready(m *msg, again bool) {
	q.mem[m.key] = m
	t := q.topicOf(m.req.Topic)
	if again {
		t.again = append(t.again, m)
	} else {
		t.ready = append(t.ready, m)
	}
	q.nReady++
	for c := range t.consumers {
		if c.credits > 0 {
			c.poke()
		}
	}
}

// unlease ends m's lease. q.mu is held.
func (q *Queue) unlease(m *msg) {
	delete(q.leases, m.receipt)
	heap.Remove(&q.expiry, m.hidx)
	m.receipt = ""
}

// Tick gives back the leases that ended by now, loads what is due by now
// (one chunk), and returns when it wants to be called next.
func (q *Queue) Tick(now time.Time) time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.expiry) > 0 && !q.expiry[0].leaseEnd.After(now) {
		m := q.expiry[0]
		q.unlease(m)
		m.attempt++
		q.ready(m, true)
	}
	next, err := q.scan(now)
	if err != nil {
		q.log.Error("due scan failed", "err", err)
		next = now.Add(time.Second)
	}
	if len(q.expiry) > 0 && q.expiry[0].leaseEnd.Before(next) {
		next = q.expiry[0].leaseEnd
	}
	q.wakeAt = next
	return next
}

// scan loads up to scanChunk due keys past the cursor and returns when the
// next key is due. q.mu is held.
func (q *Queue) scan(now time.Time) (next time.Time, err error) {
	idle := now.Add(time.Hour)
	if q.nReady >= q.opts.MaxReady {
		q.stalled = true // take pokes the loop when it drops below
		return idle, nil
	}
	q.stalled = false
	var lower []byte
	if q.cursor != nil {
		lower = append(append(lower, q.cursor...), 0)
	}
	it, err := q.db.NewIter(&pebble.IterOptions{LowerBound: lower})
	if err != nil {
		return idle, err
	}
	defer it.Close()
	bound := timeBound(now.UnixNano())
	loaded := 0
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if string(k) >= string(bound) {
			at, _, err := parseKey(k)
			if err != nil {
				return idle, err
			}
			return time.Unix(0, at), nil // the first key not yet due
		}
		if q.nReady >= q.opts.MaxReady {
			q.stalled = true
			return idle, nil
		}
		if loaded == scanChunk {
			return now, nil
		}
		q.cursor = append(q.cursor[:0], k...)
		if q.inflight[string(k)] > 0 || q.mem[string(k)] != nil {
			continue
		}
		at, _, err := parseKey(k)
		if err != nil {
			return idle, err
		}
		req := &hourglassv1.ScheduleRequest{}
		if err := req.UnmarshalVT(it.Value()); err != nil {
			return idle, fmt.Errorf("%w: value of key %x: %v", ErrCorrupt, k, err)
		}
		q.ready(newMsg(k, at, req), false)
		loaded++
	}
	return idle, it.Error()
}

// addConsumer opens a consumer of topic with credits; it is poked at once.
func (q *Queue) addConsumer(name string, credits, maxBatch int, lease time.Duration) *consumer {
	if lease <= 0 {
		lease = q.opts.DefaultLease
	}
	c := &consumer{topic: name, lease: lease, maxBatch: maxBatch, credits: credits, wake: make(chan struct{}, 1)}
	q.mu.Lock()
	q.topicOf(name).consumers[c] = struct{}{}
	q.mu.Unlock()
	c.poke()
	return c
}

// removeConsumer closes c; its leases run out as usual.
func (q *Queue) removeConsumer(c *consumer) {
	q.mu.Lock()
	delete(q.topicOf(c.topic).consumers, c)
	q.mu.Unlock()
}

// maxCredits bounds the credits a consumer holds.
const maxCredits = 10_000

// credit grants c n more credits.
func (q *Queue) credit(c *consumer, n int) {
	q.mu.Lock()
	c.credits = min(c.credits+n, maxCredits)
	q.mu.Unlock()
	c.poke()
}

// take leases up to c's credits and batch size of ready messages to c.
func (q *Queue) take(c *consumer, now time.Time) []*hourglassv1.Message {
	q.mu.Lock()
	defer q.mu.Unlock()
	t := q.topicOf(c.topic)
	var out []*hourglassv1.Message
	for len(out) < min(c.credits, c.maxBatch) {
		m := t.pop()
		if m == nil {
			break
		}
		q.nReady--
		q.leaseN++
		m.receipt = q.boot + strconv.FormatUint(q.leaseN, 36)
		m.leaseEnd = now.Add(c.lease)
		q.leases[m.receipt] = m
		heap.Push(&q.expiry, m)
		if m.hidx == 0 && m.leaseEnd.Before(q.wakeAt) {
			q.poke()
		}
		out = append(out, &hourglassv1.Message{
			Id: m.id, OriginId: m.id, Topic: m.req.Topic, Headers: m.req.Headers, Body: m.req.Body,
			DeliverAt: timestamp(m.at), Attempt: m.attempt, ReceivedAt: timestamppb.New(now),
			LeaseExpiresAt: timestamppb.New(m.leaseEnd), Receipt: m.receipt,
		})
	}
	c.credits -= len(out)
	if q.stalled && q.nReady < q.opts.MaxReady {
		q.poke()
	}
	return out
}

// leased returns the message receipt names while its lease holds. q.mu is
// held.
func (q *Queue) leased(receipt string, now time.Time) (*msg, string) {
	m := q.leases[receipt]
	if m == nil || now.After(m.leaseEnd) {
		return nil, fmt.Sprintf("receipt %q names no lease: it ended, was settled, or is from before a restart", receipt)
	}
	return m, ""
}

// ack deletes the messages of receipts: one result each, in order.
func (q *Queue) ack(receipts []string, now time.Time) []*hourglassv1.AckResult {
	res := make([]*hourglassv1.AckResult, len(receipts))
	var dels []string
	var done []int
	q.mu.Lock()
	for i, r := range receipts {
		m, why := q.leased(r, now)
		if m == nil {
			res[i] = &hourglassv1.AckResult{Error: why}
			continue
		}
		// Out of memory now: the scan is past its key, so it is not loaded
		// again before its delete commits.
		q.unlease(m)
		delete(q.mem, m.key)
		dels = append(dels, m.key)
		done = append(done, i)
	}
	q.mu.Unlock()
	var err error
	if len(dels) > 0 {
		err = q.write(nil, dels)
	}
	for _, i := range done {
		res[i] = &hourglassv1.AckResult{Acked: err == nil}
		if err != nil {
			res[i].Error = err.Error()
		}
	}
	return res
}

// nack gives a leased message back: at once with its attempt not counted
// (release), at once as another attempt (no delay), or as a new message
// due after delay. n's seq is not read.
func (q *Queue) nack(receipt string, n *hourglassv1.ConsumeNack, now time.Time) *hourglassv1.AckResult {
	switch {
	case n.DeadLetter:
		return &hourglassv1.AckResult{Error: "pebbledelay: dead letters are not supported"}
	case n.DelayMs < 0:
		return &hourglassv1.AckResult{Error: fmt.Sprintf("pebbledelay: delay_ms %d is negative", n.DelayMs)}
	case n.Release && (n.DelayMs != 0 || n.Reason != ""):
		return &hourglassv1.AckResult{Error: "pebbledelay: release takes no delay_ms or reason"}
	}
	q.mu.Lock()
	m, why := q.leased(receipt, now)
	if m == nil {
		q.mu.Unlock()
		return &hourglassv1.AckResult{Error: why}
	}
	q.unlease(m)
	if n.DelayMs == 0 {
		if !n.Release {
			m.attempt++
		}
		q.ready(m, true)
		q.mu.Unlock()
		return &hourglassv1.AckResult{Acked: true}
	}
	delete(q.mem, m.key)
	q.mu.Unlock()
	at := now.Add(time.Duration(n.DelayMs) * time.Millisecond).UnixNano()
	req := &hourglassv1.ScheduleRequest{
		Topic: m.req.Topic, Body: m.req.Body, Headers: m.req.Headers, IdempotencyKey: m.req.IdempotencyKey,
		When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamp(at)},
	}
	if err := q.write([]*msg{newMsg(appendKey(nil, at, q.seq.Add(1)), at, req)}, []string{m.key}); err != nil {
		return &hourglassv1.AckResult{Error: err.Error()}
	}
	return &hourglassv1.AckResult{Acked: true}
}
