package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// A frozen pause stops a topic's clock: a message stored before the
// freeze began, and not yet due when it began, is due as much later as
// the freeze lasted. The topic's policy keeps the freezes (Policy.Freezes:
// when each began and ended, and the engine's commitlog position when it
// began), so pausing and resuming write one control record whatever the
// topic holds, and no stored message is rewritten. The queue applies the
// shift when a Receive reaches a message: one whose effective due time
// (Freezes.Due) has not come is moved, through the engine, to that time
// (a new incarnation with the same origin, as a delayed retry is) and
// acked here; one whose time has come is received as any other.

// Freeze is one frozen pause of a topic.
type Freeze struct {
	// At is when it began (UTC ms, the server's clock).
	At int64
	// Until is when it ended (UTC ms); 0 while it lasts.
	Until int64
	// Seq is the engine's commitlog position when it began: a message
	// whose ID's seq is below it was stored before it.
	Seq uint64
}

// Len is how long f lasted, or has lasted by now if it goes on.
func (f Freeze) Len(now int64) int64 {
	if f.Until == 0 {
		return max(0, now-f.At)
	}
	return f.Until - f.At
}

// MaxFreezes bounds the freezes a topic keeps.
const MaxFreezes = 1000

// Freezes is a topic's frozen pauses, oldest first, none overlapping.
// Immutable: a change makes a new one (Policy compares it by pointer).
type Freezes struct {
	list []Freeze
}

// NewFreezes returns the freezes of list (oldest first), nil for none.
func NewFreezes(list []Freeze) *Freezes {
	if len(list) == 0 {
		return nil
	}
	return &Freezes{list: append([]Freeze(nil), list...)}
}

// List returns the freezes, oldest first.
func (f *Freezes) List() []Freeze {
	if f == nil {
		return nil
	}
	return append([]Freeze(nil), f.list...)
}

// Frozen reports whether the last freeze still lasts.
func (f *Freezes) Frozen() bool {
	return f != nil && len(f.list) > 0 && f.list[len(f.list)-1].Until == 0
}

// Begin returns f with a freeze beginning at now (UTC ms) at commitlog
// position seq, less the freezes that can no longer shift a message
// (those whose every message, delayed at most maxDelay when stored, is due
// by now with every later freeze counted).
func (f *Freezes) Begin(now int64, seq uint64, maxDelay time.Duration) (*Freezes, error) {
	if f.Frozen() {
		return f, nil
	}
	var list []Freeze
	if f != nil {
		later := int64(0)
		keep := len(f.list)
		for i := len(f.list) - 1; i >= 0; i-- {
			later += f.list[i].Len(now)
			if f.list[i].At+maxDelay.Milliseconds()+later < now {
				break
			}
			keep = i
		}
		list = append(list, f.list[keep:]...)
	}
	if len(list) >= MaxFreezes {
		return f, fmt.Errorf("%w: the topic keeps %d frozen pauses, each of which still shifts messages stored before it; at most %d (a plain pause, freeze false, keeps no record)", ErrInvalid, len(list), MaxFreezes)
	}
	return &Freezes{list: append(list, Freeze{At: now, Seq: seq})}, nil
}

// End returns f with its last freeze ended at now (UTC ms); f if none
// lasts.
func (f *Freezes) End(now int64) *Freezes {
	if !f.Frozen() {
		return f
	}
	list := append([]Freeze(nil), f.list...)
	last := &list[len(list)-1]
	last.Until = max(now, last.At)
	return &Freezes{list: list}
}

// Due returns when a message is due, its topic's freezes counted: its
// deliverAt (UTC ms) later by every freeze that began after it was stored
// (seq below the freeze's) and before it was due, the freezes before
// counted. frozen is set when such a freeze still lasts: due then counts
// it up to now, as if it ended now.
func (f *Freezes) Due(deliverAt int64, seq uint64, now int64) (due int64, frozen bool) {
	due = deliverAt
	if f == nil {
		return due, false
	}
	for _, z := range f.list {
		if seq >= z.Seq || z.At >= due {
			continue
		}
		if z.Until == 0 {
			frozen = true
		}
		due += z.Len(now)
	}
	return due, frozen
}

// moveFrozen moves the message of settling lease l, reached before due
// (its effective due time, UTC ms), to due through the engine: a new
// message with its topic, headers, body, attempt and origin (the first
// ID), then acks it here. A crash between the two leaves both (at least
// once, as a delayed retry). On failure the message is left to the next
// Receive, which finds it again.
func (t *topic) moveFrozen(l *lease, due int64) {
	err := t.move(l, due)
	if err == nil {
		var n uint64
		err = t.ack(l, &n)
	}
	t.mu.Lock()
	t.mu.moving--
	if err == nil {
		t.mu.stats.FreezeMoved++
	} else {
		t.mu.leases.forget(l)
		t.mu.read.fifo = append(t.mu.read.fifo, entry{off: l.off, attempt: l.attempt})
	}
	t.wake()
	t.mu.Unlock()
	if err != nil {
		t.q.opts.Logger.Error("queue: moving a message its topic's freeze made due later failed; the next Receive tries again", "topic", t.name, "id", l.id, "err", err)
	}
}

// move schedules the message of l again at due (UTC ms).
func (t *topic) move(l *lease, due int64) error {
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
	_, err := (*fn)(context.Background(), engine.Request{
		Topic: t.name, Headers: m.Headers, Body: m.Body, At: time.UnixMilli(due), Attempt: l.attempt, Origin: origin,
	})
	if err != nil {
		return fmt.Errorf("queue: move %s to %s: %w", id, time.UnixMilli(due).UTC().Format(time.RFC3339Nano), err)
	}
	return nil
}

// maxMoving bounds the moves of a topic under way at once; a Receive
// that meets more messages to move leaves them for the next.
const maxMoving = 1024

// Due returns when the message id of topic (deliverAt in its ID) is due,
// the topic's freezes counted, and whether one of them still lasts.
func (q *Queue) Due(topic string, id message.ID) (time.Time, bool) {
	due, frozen := q.Policy(topic).Freezes.Due(id.DeliverAt, id.Seq, q.now().UnixMilli())
	return time.UnixMilli(due), frozen
}

// move is a message a Receive reached before its effective due time.
type move struct {
	l   *lease
	due int64 // UTC ms
}

// moveLocked takes the message at off as a settling lease, out of the
// heap, to be moved to due once t.mu is released, and adds it to moves.
// Another copy of it leased (delivered again after a crash) settles this
// one with it. t.mu is held.
func (t *topic) moveLocked(moves []move, off int64, id message.ID, attempt uint32, due int64) []move {
	if _, dup := t.mu.leases.byID[id]; dup {
		return moves
	}
	l := &lease{off: off, id: id, attempt: attempt, state: settling, hi: -1, serial: t.q.serial.Add(1)}
	t.mu.leases.byOff[off], t.mu.leases.byID[id] = l, l
	t.mu.moving++
	return append(moves, move{l: l, due: due})
}
