package queue

import (
	"context"
	"slices"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

// Held says whether and how a topic holds a message.
type Held int

// What Lookup answers.
const (
	// NotHeld: the topic's retained queue log does not hold the message:
	// it was never delivered to the topic, or it was acked and the
	// segment holding it deleted (the queue keeps no record of acks
	// below its low-water mark).
	NotHeld Held = iota
	// Waiting: in the queue log, waiting to be received (first time or
	// again).
	Waiting
	// Leased: received, its lease running (or its ack being written).
	Leased
	// Acked: in the retained queue log and acked (or moved on: retried
	// under a new ID by a Nack with a delay, or dead-lettered).
	Acked
)

// Lookup is what a topic holds of one message.
type Lookup struct {
	Held Held
	// Attempt is the failed attempts so far (Waiting, Leased).
	Attempt uint32
	// LeaseUntil is when the lease ends on the wall clock (Leased).
	LeaseUntil time.Time
	// FlowWait says why a Waiting message waits for its flow key (its
	// key's bound holds it back, Policy.Flow); "" when it does not.
	FlowWait string
	// Message is the topic's copy of the message, the caller's to keep
	// (not set for NotHeld): in a dead-letter topic its headers say why it
	// died (DeadLetterReasonHeader and the others).
	Message message.Message
}

// Lookup says what topic holds of the message id, without receiving,
// leasing or changing it (a topic retired while idle is opened again, as
// any use does). A leased message is found in memory; otherwise Lookup
// reads the topic's retained queue log for the ID, so its cost grows with
// that log (the backlog and what is not yet deleted), its memory does
// not. A topic that does not exist holds nothing.
func (q *Queue) Lookup(ctx context.Context, topic string, id message.ID) (Lookup, error) {
	if err := ValidateTopic(topic); err != nil {
		return Lookup{}, err
	}
	if err := q.enter(); err != nil {
		return Lookup{}, err
	}
	defer q.leave()
	t, err := q.topic(topic, false)
	if err != nil || t == nil {
		return Lookup{}, err
	}
	defer q.release(t)
	if l, off, ok := t.leasedLookup(id); ok {
		return l, t.messageAt(off, &l)
	}
	it, err := t.log.NewIterator(t.log.FirstOffset())
	if err != nil {
		return Lookup{}, err
	}
	defer it.Close()
	var got message.ID
	for n := 0; it.Next(); n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return Lookup{}, err
			}
		}
		rec := it.Record()
		if rec.Type != typeMessage || decodeID(rec.Payload, &got) != nil || got != id {
			continue
		}
		l := t.stateAt(it.Offset(), id)
		return l, t.messageAt(it.Offset(), &l)
	}
	return Lookup{}, it.Err()
}

// messageAt sets l.Message to a copy of the message of the record at off.
func (t *topic) messageAt(off int64, l *Lookup) error {
	var id message.ID
	return t.copyAt(off, &id, &l.Message)
}

// leasedLookup returns the lease of id and its record's offset, if it has
// one.
func (t *topic) leasedLookup(id message.ID) (Lookup, int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.mu.leases.byID[id]
	if l == nil {
		return Lookup{}, 0, false
	}
	return Lookup{Held: Leased, Attempt: l.attempt, LeaseUntil: time.Unix(0, l.until).UTC()}, l.off, true
}

// stateAt says what the queue-log record at off (the message id) is now.
func (t *topic) stateAt(off int64, id message.ID) Lookup {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.mu.leases.byID[id]; l != nil {
		return Lookup{Held: Leased, Attempt: l.attempt, LeaseUntil: time.Unix(0, l.until).UTC()}
	}
	for _, e := range t.mu.read.fifo {
		if e.off == off {
			return Lookup{Held: Waiting, Attempt: e.attempt}
		}
	}
	if t.mu.flow.held > 0 {
		var rid message.ID
		var m message.Message
		if t.readAt(off, &rid, &m) == nil {
			key := string(flowKeyOf(m.Headers))
			if e, ok := t.mu.flow.find(off, key); ok {
				return Lookup{Held: Waiting, Attempt: e.attempt, FlowWait: t.flowWaitLocked(off, key)}
			}
		}
	}
	if off >= t.mu.read.cursor() {
		if _, acked := slices.BinarySearch(t.mu.read.skip, off); !acked {
			return Lookup{Held: Waiting}
		}
	}
	return Lookup{Held: Acked}
}

// Settled reports whether topic is done with the message id it was handed:
// acked, dead-lettered, retried under another ID by a Nack with a delay,
// or no longer in its retained log (the queue deletes what is acked). One
// waiting or leased is not. The overlap policies of recurring schedules
// ask it (recur.Settler) about an occurrence the engine delivered, which
// the topic therefore holds or held; it costs what Lookup costs.
func (q *Queue) Settled(ctx context.Context, topic string, id message.ID) (bool, error) {
	l, err := q.Lookup(ctx, topic, id)
	if err != nil {
		return false, err
	}
	return l.Held != Waiting && l.Held != Leased, nil
}
