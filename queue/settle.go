package queue

import (
	"container/heap"
	"context"
	"fmt"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// finder picks the lease an Ack or Nack names. t.mu is held.
type finder func(t *topic) *lease

func byID(id message.ID) finder {
	return func(t *topic) *lease { return t.byID[id] }
}

func byReceipt(id message.ID, serial uint64) finder {
	return func(t *topic) *lease {
		if l := t.byID[id]; l != nil && l.serial == serial {
			return l
		}
		return nil
	}
}

// settle acks (nack false) or nacks the lease find picks.
func (q *Queue) settle(ctx context.Context, name string, find finder, nack bool, delay time.Duration) error {
	if err := ValidateTopic(name); err != nil {
		return err
	}
	if err := q.enter(); err != nil {
		return err
	}
	defer q.leave()
	t, err := q.topic(name, false)
	if err != nil || t == nil {
		return ErrNotLeased
	}
	defer q.release(t)
	t.mu.Lock()
	l := find(t)
	if l == nil || l.state != leased || t.closed {
		t.mu.Unlock()
		return ErrNotLeased
	}
	if q.mono() >= l.deadline {
		// Over, though the timer has not run yet: it will.
		t.mu.Unlock()
		return ErrNotLeased
	}
	heap.Remove(&t.heap, l.hi)
	switch {
	case !nack:
		l.state = settling
		t.mu.Unlock()
		err = t.ack(l, &t.stats.Acked)
	case delay <= 0:
		if !t.failLocked(l) {
			t.stats.Nacked++
			t.mu.Unlock()
			return nil
		}
		t.mu.Unlock()
		err = t.deadLetter(l, &t.stats.Nacked, "nacked")
	case t.exhausted(l):
		l.state = settling
		t.mu.Unlock()
		err = t.deadLetter(l, &t.stats.Nacked, "nacked")
	default:
		l.state = settling
		t.mu.Unlock()
		if err = t.reschedule(ctx, l, delay); err == nil {
			// A crash before the ack is durable leaves both the original
			// and the retry (at least once).
			err = t.ack(l, &t.stats.Nacked)
		}
	}
	if err != nil {
		t.mu.Lock()
		t.restoreLocked(l)
		t.mu.Unlock()
	}
	return err
}

// exhausted reports whether a failure of lease l sends its message to
// the dead-letter topic. t.mu is held.
func (t *topic) exhausted(l *lease) bool {
	return int64(l.attempt)+1 >= int64(t.q.opts.MaxAttempts) && !t.dlq
}

// reschedule schedules the retry of settling lease l through the engine.
func (t *topic) reschedule(ctx context.Context, l *lease, delay time.Duration) error {
	fn := t.q.reschedule.Load()
	if fn == nil {
		return ErrNoReschedule
	}
	var id message.ID
	var m message.Message
	if err := t.copyAt(l.off, &id, &m); err != nil {
		return err
	}
	origin := m.Origin
	if origin.IsZero() {
		origin = id
	}
	_, err := (*fn)(ctx, engine.Request{
		Topic: t.name, Headers: m.Headers, Body: m.Body, Delay: delay, Attempt: l.attempt + 1, Origin: origin,
	})
	if err != nil {
		return fmt.Errorf("queue: reschedule %s: %w", id, err)
	}
	return nil
}

// copyAt reads the message at off into id and m with bytes of its own.
func (t *topic) copyAt(off int64, id *message.ID, m *message.Message) error {
	var tmp message.Message
	if err := t.readAt(off, id, &tmp); err != nil {
		return err
	}
	*m = tmp
	m.Topic = append([]byte(nil), tmp.Topic...)
	m.Body = append([]byte(nil), tmp.Body...)
	m.Headers = make([]message.Header, len(tmp.Headers))
	for i, h := range tmp.Headers {
		m.Headers[i] = message.Header{Key: append([]byte(nil), h.Key...), Value: append([]byte(nil), h.Value...)}
	}
	return nil
}

// ack appends the ack record of settling lease l and, once it is durable,
// forgets l and counts it in counter (a field of t.stats). On error l is
// left settling for the caller to restore or requeue.
func (t *topic) ack(l *lease, counter *uint64) error {
	t.ackMu.RLock()
	defer t.ackMu.RUnlock()
	_, err := t.acks.Append(nil, commitlog.Record{Type: typeAck, Payload: appendAck(make([]byte, 0, 9), l.off)})
	// Reported before t.mu is taken: broke takes Queue.mu.
	if err != nil {
		t.broke(StageAck, err)
	} else {
		t.q.ok(t.name, StageAck)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		return fmt.Errorf("queue: topic %q: ack: %w", t.name, err)
	}
	t.forgetLocked(l)
	*counter++
	t.acksSince++
	t.maybeCheckpointLocked()
	return nil
}

// ackAll is ack for several settling leases: one ack record naming them
// all. On error they are left settling for the caller to restore.
func (t *topic) ackAll(ls []*lease) error {
	offs := make([]int64, len(ls))
	for i, l := range ls {
		offs[i] = l.off
	}
	t.ackMu.RLock()
	defer t.ackMu.RUnlock()
	_, err := t.acks.Append(nil, commitlog.Record{Type: typeAck, Payload: appendAck(make([]byte, 0, 1+8*len(offs)), offs...)})
	// Reported before t.mu is taken: broke takes Queue.mu.
	if err != nil {
		t.broke(StageAck, err)
	} else {
		t.q.ok(t.name, StageAck)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		return fmt.Errorf("queue: topic %q: ack: %w", t.name, err)
	}
	for _, l := range ls {
		t.forgetLocked(l)
	}
	t.stats.Acked += uint64(len(ls))
	t.acksSince += len(ls)
	t.maybeCheckpointLocked()
	return nil
}

// deadLetter moves the message of settling lease l to the dead-letter
// topic, then acks it here, counting it in counter too, and logs it with
// reason (why its last attempt failed). A crash in between leaves it in
// both (at least once). On error l is left settling.
func (t *topic) deadLetter(l *lease, counter *uint64, reason string) error {
	var id message.ID
	var m message.Message
	err := t.copyAt(l.off, &id, &m)
	var d *topic
	if err == nil {
		d, err = t.q.topic(t.name+DLQSuffix, true)
	}
	if err == nil {
		m.Attempt = max(m.Attempt, l.attempt+1)
		err = d.append([][]byte{appendMessage(nil, id, &m)})
		t.q.release(d)
	}
	if err != nil {
		t.q.fail(t.name, StageDeadLetter, err)
		return fmt.Errorf("queue: dead-letter %s to %s: %w", id, t.name+DLQSuffix, err)
	}
	t.q.ok(t.name, StageDeadLetter)
	if err := t.ack(l, counter); err != nil {
		return err
	}
	t.mu.Lock()
	t.stats.DeadLettered++
	t.mu.Unlock()
	t.q.opts.Logger.Warn("queue: message dead-lettered", "topic", t.name, "to", t.name+DLQSuffix, "id", id,
		"attempts", m.Attempt, "reason", reason)
	return nil
}

// deadLetterExpired dead-letters a message whose last lease ran out. On
// failure the message is made receivable again without raising its
// attempt, so that its next failure tries again; nothing waits for it.
func (t *topic) deadLetterExpired(l *lease) {
	var n uint64
	if err := t.deadLetter(l, &n, "lease expired"); err != nil {
		t.q.opts.Logger.Error("queue: dead-lettering failed; the message stays receivable", "topic", t.name, "id", l.id, "err", err)
		t.mu.Lock()
		t.forgetLocked(l)
		t.fifo = append(t.fifo, entry{off: l.off, attempt: l.attempt})
		t.wake()
		t.mu.Unlock()
	}
}
