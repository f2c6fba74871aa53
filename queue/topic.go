package queue

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/segfile"
)

// topic is one queue topic: its two logs and the in-memory state rebuilt
// from them. Memory holds only what is outstanding (leases, messages
// waiting to be received again, acks the reader has not reached after a
// restart); the backlog stays in the queue log.
type topic struct {
	q    *Queue
	slot *slot // the queue's entry for the topic
	name string
	dlq  bool // a dead-letter topic: failures stay here
	log  *commitlog.Log
	acks *commitlog.Log
	// broken: a log failed for good (a write or fsync error is sticky);
	// the next Queue.topic with no one holding t closes and reopens it.
	broken atomic.Bool

	recent  recentIDs // what Deliver drops as delivered again
	appends appender  // appends to the queue log, batched

	// ackMu is held shared while an ack record is appended and applied,
	// and exclusively while a checkpoint is taken and written (not while
	// its fsync runs): a checkpoint therefore reflects every ack record
	// before it, and every ack record after it is applied after it.
	ackMu sync.RWMutex

	mu struct {
		sync.Mutex
		closed bool
		stats  TopicStats // counters
		read   readState  // what is receivable
		leases leaseSet   // what is received and not yet acked
		ck     ckptState  // what the last checkpoint holds, what came since
		flow   flowState  // the flow keys' queues under a flow policy (flow.go)
		// lastErr holds, by queue-log offset, the error a consumer gave
		// with its last Nack of an outstanding message (or "lease
		// expired"), shown if the message is dead-lettered. In memory
		// only: a restart forgets it (a retry scheduled with a delay
		// carries it in LastErrorHeader).
		lastErr map[int64]string
		notify  chan struct{} // closed by wake: Receives wait on it
		// moving counts the messages being moved to the time a freeze
		// made them due (freeze.go), at most maxMoving.
		moving int
		// dueTimer wakes Receives when the peeked record is due, at dueAt
		// (unix ns; 0 if not set); rateTimer when the topic's rate allows
		// more.
		dueTimer  *time.Timer
		dueAt     int64
		rateTimer *time.Timer
		scratch   message.Message // receive's decoding
	}
}

// readState is where a topic's receivable messages are: the records from
// the reader's cursor on, never received yet, and those given back to be
// received again. Guarded by topic.mu.
type readState struct {
	it *commitlog.Iterator // at the cursor: the next never-received record
	// peeked: it is on the record at the cursor (Next returned it) but it
	// is not received yet, because it is not due: the engine may hand
	// messages over before their deliverAt (HandoffLead), and no consumer
	// gets one early (I4).
	peeked bool
	end    int64   // queue-log offset up to which unread counts records
	unread int64   // records in [cursor, end)
	skip   []int64 // acked records at or after the cursor (after a restart), sorted
	fifo   []entry // waiting to be received again, in order
}

// cursor is the offset of the next record it hands out for the first
// time; 0 without a reader (a topic closing: nothing is known received).
func (r *readState) cursor() int64 {
	switch {
	case r.it == nil:
		return 0
	case r.peeked:
		return r.it.Offset()
	}
	return r.it.Pos()
}

// backlog is the number of messages receivable now.
func (r *readState) backlog() int64 {
	return max(0, r.unread-int64(len(r.skip))) + int64(len(r.fifo))
}

// settledAhead records that the lease l, taken out of turn ahead of the
// reader, is acked: the reader skips its record.
func (r *readState) settledAhead(l *lease) {
	if !l.ahead || l.off < r.cursor() {
		return
	}
	i, found := slices.BinarySearch(r.skip, l.off)
	if !found {
		r.skip = slices.Insert(r.skip, i, l.off)
	}
}

// ckptState is what a topic's checkpoints need to know: what came since
// the last one, and what it said (a checkpoint that would say the same is
// not written again: a topic closing with nothing new). Guarded by
// topic.mu.
type ckptState struct {
	acks        int   // acks since the last checkpoint
	bytes       int64 // bytes delivered since the last checkpoint
	queued      bool  // asked for and not written yet
	last        ckKey // the last checkpoint written or recovered
	lastEntries []entry
}

func newTopic(q *Queue, s *slot, name string, qlog, alog *commitlog.Log) *topic {
	t := &topic{q: q, slot: s, name: name, dlq: isDLQ(name), log: qlog, acks: alog}
	t.mu.leases.byOff, t.mu.leases.byID = map[int64]*lease{}, map[message.ID]*lease{}
	return t
}

// waitChan returns a channel closed when messages may have become
// receivable. t.mu is held.
func (t *topic) waitChan() <-chan struct{} {
	if t.mu.notify == nil {
		t.mu.notify = make(chan struct{})
	}
	return t.mu.notify
}

// wake wakes the Receives waiting on t. t.mu is held.
func (t *topic) wake() {
	if t.mu.notify != nil {
		close(t.mu.notify)
		t.mu.notify = nil
	}
}

// receive leases up to max messages for lease. With none available it
// returns a channel that is closed when that may have changed.
func (t *topic) receive(max int, leaseDur time.Duration) ([]Message, <-chan struct{}, error) {
	// Messages past their expiry are settled (dead-lettered or dropped)
	// by workers, started once t.mu is released.
	var expired []*lease
	var moves []move
	defer func() {
		for _, mv := range moves {
			t.goSettle(func() { t.moveFrozen(mv.l, mv.due) })
		}
		for _, l := range expired {
			t.goSettle(func() { t.expireOrRequeue(l) })
		}
	}()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.closed {
		return nil, nil, ErrClosed
	}
	now := t.q.now()
	max, wait, flow, freezes := t.q.allow(t.name, max, now)
	t.syncFlowLocked(flow, now)
	if max == 0 {
		if wait > 0 {
			t.armRateLocked(wait)
		}
		return nil, t.waitChan(), nil
	}
	if flow.On() {
		out, err := t.receiveFlowLocked(max, leaseDur, now, &expired)
		if len(out) == 0 {
			if err != nil {
				return nil, nil, err
			}
			return nil, t.waitChan(), nil
		}
		t.q.took(t.name, len(out), now)
		t.armLocked()
		return out, nil, nil
	}
	deadline, until := t.q.mono()+int64(leaseDur), now.Add(leaseDur).UnixNano()
	var id message.ID
	var arena []byte // the received messages' bytes, a few allocations per call
	m := &t.mu.scratch
	rd := &t.mu.read
	// Room for what can be handed out (grown from nothing, a hot second's
	// pushes of 100 copied their messages seven times: a twentieth of the
	// server's CPU). The backlog can lag a record the reader already sees.
	out := make([]Message, 0, min(int64(max), rd.backlog()+1))
	for len(out) < max {
		var off int64
		var attempt uint32
		redelivery := len(rd.fifo) > 0
		if redelivery {
			e := rd.fifo[0]
			rd.fifo = rd.fifo[1:]
			if err := t.readAt(e.off, &id, m); err != nil {
				rd.fifo = append([]entry{e}, rd.fifo...)
				return t.failed(out, err)
			}
			off, attempt = e.off, e.attempt
			if due, _ := freezes.Due(m.DeliverAt, id.Seq, now.UnixMilli()); due > m.DeliverAt && due > now.UnixMilli() {
				// A move that failed, or a message given back after a
				// freeze began: moved to its time, as below.
				moves = t.moveLocked(moves, off, id, attempt, due)
				continue
			}
		} else {
			if !rd.peeked {
				if !rd.it.Next() {
					if err := rd.it.Err(); err != nil {
						return t.failed(out, fmt.Errorf("queue: topic %q: %w", t.name, err))
					}
					break
				}
				rd.peeked = true
			}
			off = rd.it.Offset()
			for len(rd.skip) > 0 && rd.skip[0] < off {
				rd.skip = rd.skip[1:] // cannot happen: skip holds record offsets
			}
			if len(rd.skip) > 0 && rd.skip[0] == off {
				rd.skip = rd.skip[1:]
				rd.peeked = false
				rd.unread--
				continue // acked before a restart
			}
			if err := t.decode(rd.it, &id, m); err != nil {
				return t.failed(out, t.stayAt(off, err))
			}
			if due, _ := freezes.Due(m.DeliverAt, id.Seq, now.UnixMilli()); due > m.DeliverAt && due > now.UnixMilli() {
				// A freeze made it due later: moved to that time, never
				// handed out before it.
				if t.mu.moving >= maxMoving {
					break
				}
				rd.peeked = false
				rd.unread--
				moves = t.moveLocked(moves, off, id, m.Attempt, due)
				continue
			}
			if due := m.DeliverAt * int64(time.Millisecond); due > now.UnixNano() {
				// Handed over before its time: it and everything after it
				// wait (the engine hands over in deliverAt order, at most
				// its HandoffLead early).
				t.armDueLocked(due, now)
				break
			}
			rd.peeked = false
			rd.unread--
			attempt = m.Attempt
		}
		if _, dup := t.mu.leases.byID[id]; dup {
			// Another copy of this message (delivered again after a crash)
			// is leased: this one is settled with it.
			continue
		}
		if message.Expired(m.Headers, now.UnixMilli()) && !t.dlq {
			// Past its expiry: never handed out. Settling, out of the
			// heap, until its worker has ended it.
			expired = append(expired, t.pastExpiryLocked(off, id, attempt))
			continue
		}
		if redelivery {
			t.mu.stats.Redelivered++
		}
		l := &lease{off: off, id: id, attempt: attempt, deadline: deadline, until: until, serial: t.q.serial.Add(1), expireAt: expiryOf(m.Headers)}
		t.mu.leases.add(l)
		out = append(out, t.message(l, now, m, &arena))
	}
	if len(out) == 0 {
		return nil, t.waitChan(), nil
	}
	t.q.took(t.name, len(out), now)
	t.armLocked()
	return out, nil, nil
}

// stayAt puts the reader back at the damaged record at off, whose
// decoding failed with err, and returns err: every Receive reports it,
// and no checkpoint counts it as received. t.mu is held.
func (t *topic) stayAt(off int64, err error) error {
	it, ierr := t.log.NewIterator(off)
	if ierr != nil {
		return errors.Join(err, ierr)
	}
	t.mu.read.it.Close()
	t.mu.read.it = it
	t.mu.read.peeked = false
	return err
}

// armRateLocked wakes waiting Receives after d, when the topic's rate
// allows another message. t.mu is held.
func (t *topic) armRateLocked(d time.Duration) {
	if t.mu.rateTimer == nil {
		t.mu.rateTimer = time.AfterFunc(d, func() {
			t.mu.Lock()
			t.wake()
			t.mu.Unlock()
		})
		return
	}
	t.mu.rateTimer.Reset(d)
}

// armDueLocked makes sure waiting Receives are woken at due (unix ns), when
// the peeked record becomes receivable. t.mu is held.
func (t *topic) armDueLocked(due int64, now time.Time) {
	if t.mu.dueAt != 0 && t.mu.dueAt <= due {
		return
	}
	t.mu.dueAt = due
	d := time.Duration(due - now.UnixNano())
	if t.mu.dueTimer == nil {
		t.mu.dueTimer = time.AfterFunc(d, func() {
			t.mu.Lock()
			t.mu.dueAt = 0
			t.wake()
			t.mu.Unlock()
		})
		return
	}
	t.mu.dueTimer.Reset(d)
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
		size := arenaChunk
		if *arena == nil {
			size = arenaFirst
		}
		*arena = make([]byte, 0, max(n, size))
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
// copied into: a Receive of a hundred 256-byte messages makes two. A
// call's first chunk is arenaFirst: at a steady rate most calls take one
// message or a few, and a 32 KiB chunk for each (allocated and cleared)
// was a twelfth of the server's CPU at 2,000 messages a second.
const (
	arenaFirst = 2 << 10
	arenaChunk = 32 << 10
)

// maxExpiryLines bounds the lease expiries expire logs one by one; the
// rest of a pass is one line with their number.
const maxExpiryLines = 16

// maybeCheckpointLocked asks for a checkpoint when enough acks or
// deliveries followed the last one. t.mu is held.
func (t *topic) maybeCheckpointLocked() {
	if t.mu.ck.queued || t.mu.closed {
		return
	}
	outstanding := len(t.mu.leases.byOff) + len(t.mu.read.fifo) + len(t.mu.read.skip) + int(t.mu.flow.held)
	if t.mu.ck.acks >= max(t.q.opts.checkpointEvery, outstanding) || t.mu.ck.bytes >= t.q.opts.SegmentSize {
		t.mu.ck.queued = true
		t.q.ckpts.push(t)
	}
}

// statsSnapshot returns t's statistics.
func (t *topic) statsSnapshot() TopicStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.mu.stats
	s.Leased = len(t.mu.leases.heap)
	s.Backlog = t.mu.read.backlog() + t.mu.flow.held
	s.OldestReady = t.oldestReadyLocked()
	s.FlowHeld, s.FlowKeysHeld, _ = t.flowStatsLocked(0)
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
	rd := &t.mu.read
	if len(rd.fifo) > 0 {
		var m message.Message
		if t.readAt(rd.fifo[0].off, &id, &m) == nil {
			consider(id.DeliverAt)
		}
	}
	if first := int64(-1); t.mu.flow.held > 0 {
		for _, k := range t.mu.flow.keys {
			if len(k.wait) > 0 && (first < 0 || k.wait[0].off < first) {
				first = k.wait[0].off
			}
		}
		var m message.Message
		if first >= 0 && t.readAt(first, &id, &m) == nil {
			consider(id.DeliverAt)
		}
	}
	if t.mu.closed || rd.it == nil {
		return oldest
	}
	if !rd.peeked && rd.unread > int64(len(rd.skip)) && rd.it.Next() {
		rd.peeked = true
	}
	if rd.peeked && (len(rd.skip) == 0 || rd.skip[0] != rd.it.Offset()) {
		if decodeID(rd.it.Record().Payload, &id) == nil {
			consider(id.DeliverAt)
		}
	}
	return oldest
}

// close stops t's timer, writes a final checkpoint and closes its logs.
func (t *topic) close() error {
	t.mu.Lock()
	if t.mu.leases.timer != nil {
		t.mu.leases.timer.Stop()
	}
	if t.mu.dueTimer != nil {
		t.mu.dueTimer.Stop()
	}
	if t.mu.rateTimer != nil {
		t.mu.rateTimer.Stop()
	}
	t.mu.Unlock()
	err := t.checkpoint()
	t.mu.Lock()
	t.mu.closed = true
	t.wake()
	t.mu.Unlock()
	return errors.Join(err, t.closeLogs())
}

// closeLogs closes the reader and both logs.
func (t *topic) closeLogs() error {
	if t.mu.read.it != nil {
		t.mu.read.it.Close()
	}
	return errors.Join(t.log.Close(), t.acks.Close())
}
