package queue

import (
	"container/heap"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/record"
	"github.com/hourglassmq/hourglass/segfile"
)

// lease states.
const (
	leased   = iota // held by a consumer until deadline
	settling        // an Ack, Nack or dead-lettering is writing its outcome
)

// lease is a received, not yet acked message. While it exists its offset
// holds the topic's low-water mark down.
type lease struct {
	off      int64
	id       message.ID
	attempt  uint32
	deadline int64 // on Queue.mono, the monotonic clock
	until    int64 // the deadline on the wall clock (UnixNano), as shown to the consumer
	serial   uint64
	state    uint8
	hi       int // index in topic.heap, -1 when not in it
	// ahead: taken out of turn (Take) at or after the cursor, never
	// received: once acked, the reader must skip its record.
	ahead bool
}

// leaseHeap orders leases in the leased state by deadline.
type leaseHeap []*lease

func (h leaseHeap) Len() int           { return len(h) }
func (h leaseHeap) Less(i, j int) bool { return h[i].deadline < h[j].deadline }
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hi, h[j].hi = i, j
}
func (h *leaseHeap) Push(x any) {
	l := x.(*lease)
	l.hi = len(*h)
	*h = append(*h, l)
}
func (h *leaseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.hi = -1
	return l
}

// topic is one queue topic: its two logs and the in-memory state rebuilt
// from them. Memory holds only what is outstanding (leases, messages
// waiting to be received again, acks the reader has not reached after a
// restart); the backlog stays in the queue log.
type topic struct {
	q     *Queue
	slot  *slot // the queue's entry for the topic
	name  string
	dlq   bool // a dead-letter topic: failures stay here
	log   *commitlog.Log
	acks  *commitlog.Log
	stats TopicStats // counters; guarded by mu
	// broken: a log failed for good (a write or fsync error is sticky);
	// the next Queue.topic with no one holding t closes and reopens it.
	broken atomic.Bool

	// recent holds the IDs of the last records of the queue log when the
	// topic was opened (loadRecent); Deliver drops messages whose IDs are
	// in it and removes them. Guarded by amu.
	recent  map[message.ID]struct{}
	dropped uint64 // messages dropped by dropRedelivered
	// amu guards appending and queued: appends are serialised so that
	// end and unread count exactly, and batched so that callers arriving
	// during an fsync share the next one.
	amu       sync.Mutex
	appending bool
	queued    []*appendReq

	// ackMu is held shared while an ack record is appended and applied,
	// and exclusively while a checkpoint is taken and written (not while
	// its fsync runs): a checkpoint therefore reflects every ack record
	// before it, and every ack record after it is applied after it.
	ackMu sync.RWMutex

	// mu guards everything below.
	mu     sync.Mutex
	closed bool
	reader *commitlog.Iterator // at the cursor: the next never-received record
	// peeked: the reader is on the record at the cursor (Next returned
	// it) but it is not received yet, because it is not due: the engine
	// may hand messages over before their deliverAt (HandoffLead), and
	// no consumer gets one early (I4).
	peeked     bool
	dueTimer   *time.Timer      // wakes Receives when the peeked record is due
	dueAt      int64            // unix ns dueTimer is set for; 0 if none
	end        int64            // queue-log offset up to which unread counts records
	unread     int64            // records in [cursor, end)
	skip       []int64          // acked records at or after the cursor (after a restart), sorted
	fifo       []entry          // waiting to be received again, in order
	leases     map[int64]*lease // by offset: leased and settling
	byID       map[message.ID]*lease
	heap       leaseHeap
	timer      *time.Timer
	timerAt    int64 // deadline the timer is set for; 0 if none
	notify     chan struct{}
	scratch    message.Message
	acksSince  int   // acks since the last checkpoint
	bytesSince int64 // bytes delivered since the last checkpoint
	ckptQueued bool
	lastCk     ckKey // the last checkpoint written or recovered
	// lastEntries are its entries: a checkpoint that would say the same
	// is not written again (a topic closing with nothing new).
	lastEntries []entry
	// lastErr holds, by queue-log offset, the error a consumer gave with
	// its last Nack of an outstanding message (or "lease expired"), shown
	// if the message is dead-lettered. In memory only: a restart forgets
	// it (a retry scheduled with a delay carries it in LastErrorHeader).
	lastErr map[int64]string
	// rateTimer wakes Receives when the topic's rate allows more.
	rateTimer *time.Timer
}

func newTopic(q *Queue, s *slot, name string, qlog, alog *commitlog.Log) *topic {
	return &topic{
		q: q, slot: s, name: name, dlq: isDLQ(name), log: qlog, acks: alog,
		leases: map[int64]*lease{}, byID: map[message.ID]*lease{},
	}
}

// dropRedelivered returns batch without the messages the queue log already
// held when the topic was opened: the engine delivers them again when it
// crashed before recording them done (see loadRecent).
func (t *topic) dropRedelivered(batch []engine.Delivery) []engine.Delivery {
	t.amu.Lock()
	defer t.amu.Unlock()
	if len(t.recent) == 0 {
		return batch
	}
	var out []engine.Delivery
	for i, d := range batch {
		if _, dup := t.recent[d.ID]; dup {
			if out == nil {
				out = append(make([]engine.Delivery, 0, len(batch)), batch[:i]...)
			}
			delete(t.recent, d.ID)
			t.dropped++
			continue
		}
		if out != nil {
			out = append(out, d)
		}
	}
	if out == nil {
		return batch
	}
	if len(t.recent) == 0 {
		t.recent = nil
	}
	t.q.opts.Logger.Info("queue: dropped messages delivered again after a restart", "topic", t.name, "dropped", len(batch)-len(out))
	return out
}

// appendReq is one caller's records waiting to be appended.
type appendReq struct {
	recs [][]byte
	err  error
	done chan struct{}
}

// append appends recs to the queue log and returns once they are durable
// (under SyncAlways and SyncInterval: see openTopic). The first caller appends for everyone queued behind
// it, in one Append and so one fsync, until the queue is empty.
func (t *topic) append(recs [][]byte) error {
	req := &appendReq{recs: recs, done: make(chan struct{})}
	t.amu.Lock()
	t.queued = append(t.queued, req)
	if t.appending {
		t.amu.Unlock()
		<-req.done
		return req.err
	}
	t.appending = true
	var crecs []commitlog.Record
	var offs []int64
	for len(t.queued) > 0 {
		reqs := t.queued
		t.queued = nil
		t.amu.Unlock()
		crecs = crecs[:0]
		bytes := int64(0)
		for _, r := range reqs {
			for _, p := range r.recs {
				crecs = append(crecs, commitlog.Record{Type: typeMessage, Payload: p})
				bytes += int64(record.Size(len(p)))
			}
		}
		var err error
		offs, err = t.log.Append(offs[:0], crecs...)
		if err == nil {
			// Receives read only what the log made visible, after its
			// fsync (under SyncNone at once): waking them before would let
			// them find nothing and sleep out their long poll. Waiting
			// here also keeps Deliver from returning (and the engine from
			// recording the messages done) before the queue holds them
			// durably.
			last := len(offs) - 1
			err = t.log.WaitVisible(offs[last] + int64(record.Size(len(crecs[last].Payload))))
		}
		if err == nil {
			last := len(offs) - 1
			t.mu.Lock()
			t.end = offs[last] + int64(record.Size(len(crecs[last].Payload)))
			t.unread += int64(len(offs))
			t.stats.Delivered += uint64(len(offs))
			t.bytesSince += bytes
			t.wake()
			t.maybeCheckpointLocked()
			t.mu.Unlock()
		}
		if err != nil {
			t.broke(StageAppend, err)
		} else {
			t.q.ok(t.name, StageAppend)
		}
		for _, r := range reqs {
			r.err = err
			close(r.done)
		}
		t.amu.Lock()
	}
	t.appending = false
	t.amu.Unlock()
	return req.err
}

// waitChan returns a channel closed when messages may have become
// receivable. t.mu is held.
func (t *topic) waitChan() <-chan struct{} {
	if t.notify == nil {
		t.notify = make(chan struct{})
	}
	return t.notify
}

// wake wakes the Receives waiting on t. t.mu is held.
func (t *topic) wake() {
	if t.notify != nil {
		close(t.notify)
		t.notify = nil
	}
}

// receive leases up to max messages for lease. With none available it
// returns a channel that is closed when that may have changed.
func (t *topic) receive(max int, leaseDur time.Duration) ([]Message, <-chan struct{}, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, nil, ErrClosed
	}
	now := t.q.now()
	max, wait := t.q.allow(t.name, max, now)
	if max == 0 {
		if wait > 0 {
			t.armRateLocked(wait)
		}
		return nil, t.waitChan(), nil
	}
	deadline, until := t.q.mono()+int64(leaseDur), now.Add(leaseDur).UnixNano()
	var out []Message
	var id message.ID
	var arena []byte // the received messages' bytes, a few allocations per call
	m := &t.scratch
	for len(out) < max {
		var off int64
		var attempt uint32
		redelivery := len(t.fifo) > 0
		if redelivery {
			e := t.fifo[0]
			t.fifo = t.fifo[1:]
			if err := t.readAt(e.off, &id, m); err != nil {
				t.fifo = append([]entry{e}, t.fifo...)
				return t.failed(out, err)
			}
			off, attempt = e.off, e.attempt
		} else {
			if !t.peeked {
				if !t.reader.Next() {
					if err := t.reader.Err(); err != nil {
						return t.failed(out, fmt.Errorf("queue: topic %q: %w", t.name, err))
					}
					break
				}
				t.peeked = true
			}
			off = t.reader.Offset()
			for len(t.skip) > 0 && t.skip[0] < off {
				t.skip = t.skip[1:] // cannot happen: skip holds record offsets
			}
			if len(t.skip) > 0 && t.skip[0] == off {
				t.skip = t.skip[1:]
				t.peeked = false
				t.unread--
				continue // acked before a restart
			}
			if err := t.decode(t.reader, &id, m); err != nil {
				// Stay at the damaged record: every Receive reports it,
				// and no checkpoint counts it as received.
				it, ierr := t.log.NewIterator(off)
				if ierr != nil {
					return t.failed(out, errors.Join(err, ierr))
				}
				t.reader.Close()
				t.reader = it
				t.peeked = false
				return t.failed(out, err)
			}
			if due := m.DeliverAt * int64(time.Millisecond); due > now.UnixNano() {
				// Handed over before its time: it and everything after it
				// wait (the engine hands over in deliverAt order, at most
				// its HandoffLead early).
				t.armDueLocked(due, now)
				break
			}
			t.peeked = false
			t.unread--
			attempt = m.Attempt
		}
		if _, dup := t.byID[id]; dup {
			// Another copy of this message (delivered again after a crash)
			// is leased: this one is settled with it.
			continue
		}
		if redelivery {
			t.stats.Redelivered++
		}
		l := &lease{off: off, id: id, attempt: attempt, deadline: deadline, until: until, serial: t.q.serial.Add(1)}
		t.leases[off] = l
		t.byID[id] = l
		heap.Push(&t.heap, l)
		out = append(out, t.message(l, now, m, &arena))
	}
	if len(out) == 0 {
		return nil, t.waitChan(), nil
	}
	t.q.took(t.name, len(out), now)
	t.armLocked()
	return out, nil, nil
}

// cursorLocked is the offset of the next record the reader hands out for
// the first time. t.mu is held.
func (t *topic) cursorLocked() int64 {
	if t.peeked {
		return t.reader.Offset()
	}
	return t.reader.Pos()
}

// settledAheadLocked records that the lease l, taken out of turn ahead
// of the reader, is acked: the reader skips its record. t.mu is held.
func (t *topic) settledAheadLocked(l *lease) {
	if !l.ahead || l.off < t.cursorLocked() {
		return
	}
	i, found := slices.BinarySearch(t.skip, l.off)
	if !found {
		t.skip = slices.Insert(t.skip, i, l.off)
	}
}

// armRateLocked wakes waiting Receives after d, when the topic's rate
// allows another message. t.mu is held.
func (t *topic) armRateLocked(d time.Duration) {
	if t.rateTimer == nil {
		t.rateTimer = time.AfterFunc(d, func() {
			t.mu.Lock()
			t.wake()
			t.mu.Unlock()
		})
		return
	}
	t.rateTimer.Reset(d)
}

// armDueLocked makes sure waiting Receives are woken at due (unix ns), when
// the peeked record becomes receivable. t.mu is held.
func (t *topic) armDueLocked(due int64, now time.Time) {
	if t.dueAt != 0 && t.dueAt <= due {
		return
	}
	t.dueAt = due
	d := time.Duration(due - now.UnixNano())
	if t.dueTimer == nil {
		t.dueTimer = time.AfterFunc(d, func() {
			t.mu.Lock()
			t.dueAt = 0
			t.wake()
			t.mu.Unlock()
		})
		return
	}
	t.dueTimer.Reset(d)
}

// failed ends a receive that hit err: the messages already leased are
// returned, and the error is reported by the next call (the state that
// caused it is kept). t.mu is held.
func (t *topic) failed(out []Message, err error) ([]Message, <-chan struct{}, error) {
	if len(out) == 0 {
		return nil, nil, err
	}
	t.armLocked()
	return out, nil, nil
}

// decode decodes the queue-log record it is on into id and m.
func (t *topic) decode(it *commitlog.Iterator, id *message.ID, m *message.Message) error {
	rec := it.Record()
	if rec.Type != typeMessage {
		return it.Corruption(fmt.Errorf("record type %#x, want %#x", rec.Type, typeMessage))
	}
	if err := decodeMessage(rec.Payload, id, m); err != nil {
		return it.Corruption(err)
	}
	return nil
}

// missing reports that the queue's state names queue-log offset off, which
// the log cannot serve (err says why): the logs contradict each other.
func (t *topic) missing(off int64, err error) error {
	return &segfile.CorruptionError{Path: t.log.Dir(), Offset: -1, Err: fmt.Errorf("offset %d: %w", off, err)}
}

// readAt decodes the queue-log record at off into id and m, whose slices
// alias the log's mapping: the caller copies them before the record's
// segment may be deleted (it is not while the record is outstanding).
func (t *topic) readAt(off int64, id *message.ID, m *message.Message) error {
	it, err := t.log.NewIterator(off)
	if err != nil {
		return t.missing(off, err)
	}
	defer it.Close()
	if !it.Next() {
		err := it.Err()
		if _, ok := errors.AsType[*segfile.CorruptionError](err); ok {
			return err
		}
		if err == nil {
			err = errors.New("no record there")
		}
		return t.missing(off, err)
	}
	if it.Offset() != off {
		return t.missing(off, fmt.Errorf("not a record boundary (next record at %d)", it.Offset()))
	}
	return t.decode(it, id, m)
}

// message builds the Message a consumer gets for l, copying m's bytes
// into *arena, which it replaces with a new chunk when it runs out of room.
func (t *topic) message(l *lease, now time.Time, m *message.Message, arena *[]byte) Message {
	n := len(m.Body)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	if cap(*arena)-len(*arena) < n {
		*arena = make([]byte, 0, max(n, arenaChunk))
	}
	buf := (*arena)[len(*arena):len(*arena)]
	take := func(b []byte) []byte {
		start := len(buf)
		buf = append(buf, b...)
		return buf[start:len(buf):len(buf)]
	}
	var hs []message.Header
	if len(m.Headers) > 0 {
		hs = make([]message.Header, len(m.Headers))
		for i, h := range m.Headers {
			hs[i] = message.Header{Key: take(h.Key), Value: take(h.Value)}
		}
	}
	out := Message{
		ID: l.id, Topic: t.name, Headers: hs, Body: take(m.Body),
		DeliverAt: m.DeliverAt, Attempt: l.attempt, Origin: m.Origin,
		ReceivedAt: now, LeaseUntil: time.Unix(0, l.until), Receipt: formatReceipt(l.id, l.serial), Offset: l.off,
	}
	*arena = (*arena)[:len(*arena)+len(buf)]
	return out
}

// arenaChunk is the size of the chunks received messages' bytes are
// copied into: a Receive of a hundred 256-byte messages makes one.
const arenaChunk = 32 << 10

// maxExpiryLines bounds the lease expiries expire logs one by one; the
// rest of a pass is one line with their number.
const maxExpiryLines = 16

// maybeCheckpointLocked asks for a checkpoint when enough acks or
// deliveries followed the last one. t.mu is held.
func (t *topic) maybeCheckpointLocked() {
	if t.ckptQueued || t.closed {
		return
	}
	outstanding := len(t.leases) + len(t.fifo) + len(t.skip)
	if t.acksSince >= max(t.q.opts.checkpointEvery, outstanding) || t.bytesSince >= t.q.opts.SegmentSize {
		t.ckptQueued = true
		t.q.kick(t)
	}
}

// statsSnapshot returns t's statistics.
func (t *topic) statsSnapshot() TopicStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.stats
	s.Leased = len(t.heap)
	s.Backlog = max(0, t.unread-int64(len(t.skip))) + int64(len(t.fifo))
	s.OldestReady = t.oldestReadyLocked()
	return s
}

// oldestReadyLocked returns TopicStats.OldestReady. It may move the reader
// onto the next record to receive, as a Receive that finds it not yet due
// does. t.mu is held.
func (t *topic) oldestReadyLocked() int64 {
	now := t.q.now().UnixMilli()
	oldest := int64(0)
	consider := func(at int64) {
		if at <= now && (oldest == 0 || at < oldest) {
			oldest = at
		}
	}
	var id message.ID
	if len(t.fifo) > 0 {
		var m message.Message
		if t.readAt(t.fifo[0].off, &id, &m) == nil {
			consider(id.DeliverAt)
		}
	}
	if t.closed || t.reader == nil {
		return oldest
	}
	if !t.peeked && t.unread > int64(len(t.skip)) && t.reader.Next() {
		t.peeked = true
	}
	if t.peeked && (len(t.skip) == 0 || t.skip[0] != t.reader.Offset()) {
		if decodeID(t.reader.Record().Payload, &id) == nil {
			consider(id.DeliverAt)
		}
	}
	return oldest
}

// close stops t's timer, writes a final checkpoint and closes its logs.
func (t *topic) close() error {
	t.mu.Lock()
	if t.timer != nil {
		t.timer.Stop()
	}
	if t.dueTimer != nil {
		t.dueTimer.Stop()
	}
	if t.rateTimer != nil {
		t.rateTimer.Stop()
	}
	t.mu.Unlock()
	err := t.checkpoint()
	t.mu.Lock()
	t.closed = true
	t.wake()
	t.mu.Unlock()
	return errors.Join(err, t.closeLogs())
}

// closeLogs closes the reader and both logs.
func (t *topic) closeLogs() error {
	if t.reader != nil {
		t.reader.Close()
	}
	return errors.Join(t.log.Close(), t.acks.Close())
}
