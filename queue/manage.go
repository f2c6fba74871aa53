package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/segfile"
)

// ListState says which of a topic's messages List returns.
type ListState int

const (
	// ListDue are the messages waiting to be received: never received,
	// or given back (a Nack, an expired lease).
	ListDue ListState = iota + 1
	// ListLeased are the messages received and not yet settled.
	ListLeased
)

// MaxListPage bounds the messages of one List page.
const MaxListPage = 1000

// List returns up to n of topic's messages in state, in queue-log order,
// from the page token after on ("" for the first page), and the token of
// the next page ("" when there is none). It changes nothing: no lease is
// taken and no attempt raised. Due messages include those handed over a
// little before their time (the engine's handoff lead). Message.Receipt
// is empty; Message.LeaseUntil is set for leased ones only. A token List
// did not issue for this topic and state since the queue opened, or one
// whose message is gone from its place, is an error wrapping ErrInvalid
// (listtoken.go).
func (q *Queue) List(ctx context.Context, name string, state ListState, after string, n int) ([]Message, string, error) {
	if err := ValidateTopic(name); err != nil {
		return nil, "", err
	}
	if n < 1 || n > MaxListPage {
		return nil, "", fmt.Errorf("%w: page size %d; from 1 to %d", ErrInvalid, n, MaxListPage)
	}
	if state != ListDue && state != ListLeased {
		return nil, "", fmt.Errorf("%w: list state %d", ErrInvalid, state)
	}
	var from *listToken
	if after != "" {
		tok, err := q.tokens.decode(name, state, after)
		if err != nil {
			return nil, "", err
		}
		from = &tok
	}
	if err := q.enter(); err != nil {
		return nil, "", err
	}
	defer q.leave()
	t, err := q.topic(name, false)
	if err != nil || t == nil {
		if err == nil && from != nil {
			err = staleToken(name) // the topic is gone
		}
		return nil, "", err
	}
	defer q.release(t)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.closed {
		return nil, "", ErrClosed
	}
	if state == ListLeased {
		return t.listLeasedLocked(from, n)
	}
	return t.listDueLocked(from, n)
}

// token is the page token of the message id at off, listed in state.
func (t *topic) token(state ListState, off int64, id message.ID) string {
	return t.q.tokens.encode(t.name, listToken{state: state, off: off, id: id})
}

// listLeasedLocked lists the leases at offsets from on. t.mu is held.
func (t *topic) listLeasedLocked(from *listToken, n int) ([]Message, string, error) {
	ls := make([]*lease, 0, len(t.mu.leases.byOff))
	for _, l := range t.mu.leases.byOff {
		if from == nil || l.off >= from.off {
			ls = append(ls, l)
		}
	}
	slices.SortFunc(ls, func(a, b *lease) int { return cmp.Compare(a.off, b.off) })
	var out []Message
	var id message.ID
	var m message.Message
	var arena []byte
	now := t.q.now()
	for _, l := range ls {
		if len(out) == n {
			return out, t.token(ListLeased, l.off, l.id), nil
		}
		if err := t.readAt(l.off, &id, &m); err != nil {
			return nil, "", err
		}
		msg := t.message(l, now, &m, &arena)
		msg.Receipt, msg.ReceivedAt = "", now
		out = append(out, msg)
	}
	return out, "", nil
}

// listDueLocked lists the messages waiting to be received at offsets from
// on: those given back (below the cursor), then the never-received ones
// from the cursor. The token names the next message to look at. A token
// at or past the cursor must name the record it was issued for: the
// listing reads on from there. t.mu is held.
func (t *topic) listDueLocked(from *listToken, n int) ([]Message, string, error) {
	var out []Message
	var id message.ID
	var m message.Message
	var arena []byte
	now := t.q.now()
	add := func(off int64, attempt uint32) {
		l := &lease{off: off, id: id, attempt: attempt}
		msg := t.message(l, now, &m, &arena)
		msg.Receipt, msg.ReceivedAt, msg.LeaseUntil = "", now, now
		out = append(out, msg)
	}
	start := int64(0)
	if from != nil {
		start = from.off
	}
	fifo := t.mu.flow.entries(slices.Clone(t.mu.read.fifo))
	slices.SortFunc(fifo, func(a, b entry) int { return cmp.Compare(a.off, b.off) })
	for _, e := range fifo {
		if e.off < start {
			continue
		}
		if err := t.readAt(e.off, &id, &m); err != nil {
			return nil, "", err
		}
		if len(out) == n {
			return out, t.token(ListDue, e.off, id), nil
		}
		add(e.off, e.attempt)
	}
	cursor := t.mu.read.cursor()
	verify := from != nil && from.off >= cursor
	it, err := t.log.NewIterator(max(start, cursor))
	if err != nil {
		if verify {
			return nil, "", staleToken(t.name)
		}
		return nil, "", t.missing(max(start, cursor), err)
	}
	defer it.Close()
	for it.Next() {
		if verify {
			// The token's record, read before anything is trusted of it.
			verify = false
			if it.Offset() != from.off || t.decodeID(it, &id) != nil || id != from.id {
				return nil, "", staleToken(t.name)
			}
		}
		if _, acked := slices.BinarySearch(t.mu.read.skip, it.Offset()); acked {
			continue
		}
		if len(out) == n {
			if err := t.decodeID(it, &id); err != nil {
				return nil, "", err
			}
			return out, t.token(ListDue, it.Offset(), id), nil
		}
		if err := t.decode(it, &id, &m); err != nil {
			return nil, "", err
		}
		add(it.Offset(), m.Attempt)
	}
	if verify {
		// Nothing at the token's offset (or it is not a record there).
		return nil, "", staleToken(t.name)
	}
	return out, "", it.Err()
}

// decodeID decodes the ID of the queue-log record it is on.
func (t *topic) decodeID(it *commitlog.Iterator, id *message.ID) error {
	rec := it.Record()
	if rec.Type != typeMessage {
		return it.Corruption(fmt.Errorf("record type %#x, want %#x", rec.Type, typeMessage))
	}
	if err := decodeID(rec.Payload, id); err != nil {
		return it.Corruption(err)
	}
	return nil
}

// PurgeDue removes every message of topic that waits to be received (as
// if each were received and acked; leased ones are left to their
// consumers) and returns how many. The purge is durable when it returns
// (a checkpoint records it).
func (q *Queue) PurgeDue(ctx context.Context, name string) (int64, error) {
	if err := ValidateTopic(name); err != nil {
		return 0, err
	}
	if err := q.enter(); err != nil {
		return 0, err
	}
	defer q.leave()
	t, err := q.topic(name, false)
	if err != nil || t == nil {
		return 0, err
	}
	defer q.release(t)
	rd := &t.mu.read
	t.ackMu.Lock()
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		t.ackMu.Unlock()
		return 0, ErrClosed
	}
	it, err := t.log.NewIterator(rd.end)
	if err != nil {
		t.mu.Unlock()
		t.ackMu.Unlock()
		return 0, t.missing(rd.end, err)
	}
	purged := rd.backlog() + t.mu.flow.held
	for _, e := range t.mu.flow.entries(rd.fifo) {
		delete(t.mu.lastErr, e.off)
	}
	t.mu.flow.clear()
	rd.fifo, rd.skip = nil, nil
	rd.it.Close()
	rd.it, rd.peeked, rd.unread = it, false, 0
	t.mu.stats.Acked += uint64(purged)
	t.mu.Unlock()
	t.ackMu.Unlock()
	if err := t.checkpoint(); err != nil {
		return 0, err
	}
	q.opts.Logger.Info("queue: topic purged", "topic", name, "messages", purged)
	return purged, nil
}

// DeleteTopic removes topic: its logs, its messages in every state
// (leased ones included: their Acks then fail) and its policy. The
// dead-letter topic "<topic>.dlq" is a topic of its own. It returns how
// many messages the topic held (waiting and leased), and reports whether
// the topic existed.
func (q *Queue) DeleteTopic(ctx context.Context, name string) (int64, bool, error) {
	if err := ValidateTopic(name); err != nil {
		return 0, false, err
	}
	if err := q.enter(); err != nil {
		return 0, false, err
	}
	defer q.leave()
	q.mu.Lock()
	s := q.mu.topics[name]
	for s != nil && s.busy != nil {
		busy := s.busy
		q.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return 0, false, ctx.Err()
		}
		q.mu.Lock()
		s = q.mu.topics[name]
	}
	dir := filepath.Join(q.dir, name)
	if s == nil {
		q.mu.Unlock()
		return 0, false, nil
	}
	t := s.t
	busy := make(chan struct{})
	s.t, s.busy = nil, busy
	q.mu.Unlock()
	held := int64(0)
	var cerr error
	if t != nil {
		st := t.statsSnapshot()
		held = st.Backlog + int64(st.Leased)
		cerr = t.close()
	}
	err := os.RemoveAll(dir)
	if err == nil {
		err = segfile.SyncDir(q.dir)
	}
	q.mu.Lock()
	if q.mu.topics[name] == s {
		delete(q.mu.topics, name)
	}
	s.busy = nil
	q.mu.Unlock()
	close(busy)
	q.pol.mu.Lock()
	delete(q.pol.set, name)
	delete(q.pol.lim, name)
	q.pol.mu.Unlock()
	if err != nil {
		return held, true, fmt.Errorf("queue: delete topic %q: %w", name, errors.Join(err, cerr))
	}
	q.opts.Logger.Info("queue: topic deleted", "topic", name, "messages", held)
	return held, true, nil
}

// Take leases the waiting message at queue-log offset off of topic (as
// List shows it), out of turn, as Receive would lease it: Ack or Nack it
// with its Receipt. It returns ErrNotWaiting if no message waits there.
func (q *Queue) Take(ctx context.Context, name string, off int64, dur time.Duration) (Message, error) {
	if err := ValidateTopic(name); err != nil {
		return Message{}, err
	}
	if dur <= 0 || dur > q.opts.maxLease {
		return Message{}, fmt.Errorf("%w: lease %v; from 1ns to %v", ErrInvalid, dur, q.opts.maxLease)
	}
	if err := q.enter(); err != nil {
		return Message{}, err
	}
	defer q.leave()
	t, err := q.topic(name, false)
	if err != nil || t == nil {
		return Message{}, errors.Join(ErrNotWaiting, err)
	}
	defer q.release(t)
	var past *lease // past its expiry: ended by a worker once t.mu is released
	defer func() {
		if past != nil {
			t.goSettle(func() { t.expireOrRequeue(past) })
		}
	}()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.closed {
		return Message{}, ErrClosed
	}
	if _, leased := t.mu.leases.byOff[off]; leased {
		return Message{}, ErrNotWaiting
	}
	attempt, waiting := uint32(0), false
	for i, e := range t.mu.read.fifo {
		if e.off == off {
			attempt, waiting = e.attempt, true
			t.mu.read.fifo = slices.Delete(t.mu.read.fifo, i, i+1)
			break
		}
	}
	var key *flowKey
	if !waiting {
		if e, k := t.mu.flow.take(off); k != nil {
			// Held by its flow key: taken by name, it counts against the
			// key's bounds as it is leased.
			attempt, waiting, key = e.attempt, true, k
		}
	}
	if _, acked := slices.BinarySearch(t.mu.read.skip, off); !waiting && (off < t.mu.read.cursor() || acked) {
		return Message{}, ErrNotWaiting
	}
	var id message.ID
	var m message.Message
	if err := t.readAt(off, &id, &m); err != nil {
		if waiting {
			t.mu.read.fifo = append(t.mu.read.fifo, entry{off: off, attempt: attempt})
		}
		if key != nil {
			t.ringLocked(key)
		}
		return Message{}, errors.Join(ErrNotWaiting, err)
	}
	if !waiting {
		attempt = m.Attempt
	}
	if _, dup := t.mu.leases.byID[id]; dup {
		if key != nil {
			t.ringLocked(key)
		}
		return Message{}, ErrNotWaiting
	}
	now := t.q.now()
	if message.Expired(m.Headers, now.UnixMilli()) && !t.dlq {
		// Never handed out past its expiry: ended as expired, as a
		// Receive that reached it would.
		if key != nil {
			t.ringLocked(key)
		}
		past = t.pastExpiryLocked(off, id, attempt)
		past.ahead = !waiting
		return Message{}, fmt.Errorf("%w: %s is past its expiry (it is being ended as expired, as the topic's policy says)", ErrNotWaiting, id)
	}
	l := &lease{off: off, id: id, attempt: attempt, deadline: t.q.mono() + int64(dur), until: now.Add(dur).UnixNano(),
		serial: t.q.serial.Add(1), ahead: !waiting, key: key, expireAt: expiryOf(m.Headers)}
	if key != nil {
		key.leased++
		t.ringLocked(key)
	}
	t.mu.leases.add(l)
	t.armLocked()
	var arena []byte
	return t.message(l, now, &m, &arena), nil
}
