package engine

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/hourglassmq/hourglass/catalog"
	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// ErrNoKey is returned for a key no message of the topic was scheduled
// with (or whose message is gone: its bucket was delivered and deleted).
var ErrNoKey = errors.New("engine: no message has this key")

// Lookup returns the ID of the message scheduled on topic with the
// idempotency key, for the message's whole life: after a Reschedule, the
// replacement's. Keys are kept in the catalog (package catalog), not in
// memory, so their number does not cost memory.
func (e *Engine) Lookup(ctx context.Context, topic, key string) (message.ID, bool, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.mu.closed {
		return message.ID{}, false, ErrClosed
	}
	// Everything appended so far must be routed: a Schedule answered
	// before this call is in the catalog then.
	if err := e.reput.WaitRouted(ctx, e.log.EndOffset()); err != nil {
		return message.ID{}, false, err
	}
	id, ok, err := e.cat.LookupID(catalog.Keys, catalog.KeyOf(topic, key))
	if err != nil || !ok {
		return message.ID{}, false, err
	}
	if _, live := e.reput.FindSegment(id.DeliverAt); !live {
		// Its bucket was delivered and deleted; the sweep removes the
		// key at a later checkpoint.
		return message.ID{}, false, nil
	}
	return id, true, nil
}

// LookupKept is Lookup that also answers a key whose message's bucket is
// gone (every message of it done: Get then answers not found): the
// catalog keeps a key while its message's bucket exists and for the
// idempotency window after its Schedule arrived (after its delivery time
// for a key without an arrival time, such as a recurring schedule's
// occurrence's). Backfill asks it whether an occurrence had its message.
func (e *Engine) LookupKept(ctx context.Context, topic, key string) (message.ID, bool, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.mu.closed {
		return message.ID{}, false, ErrClosed
	}
	if err := e.reput.WaitRouted(ctx, e.log.EndOffset()); err != nil {
		return message.ID{}, false, err
	}
	return e.cat.LookupID(catalog.Keys, catalog.KeyOf(topic, key))
}

// maxHops bounds the Moved entries Current follows from one to the next:
// a directory written before origins named their latest incarnation holds
// chains of reschedules.
const maxHops = 16

// Current returns what carries the message id now, as Get says it: id
// itself, or the latest incarnation of the message it names (a retry by a
// Nack with a delay or a backoff, a Reschedule, a redrive), each of which
// has the first ID as its origin. So the ID a producer was given, or any
// later one, names the message for its whole life, while the bucket of its
// latest incarnation exists.
func (e *Engine) Current(ctx context.Context, id message.ID) (Found, error) {
	f, err := e.Get(ctx, id)
	if err != nil {
		return Found{}, err
	}
	switch f.State {
	case StatePending, StateDelivering, StateCancelled:
		// Nothing carries it on: a retry is made of a delivered message,
		// a replacement of a rescheduled one, a redrive of a dead one.
		return f, nil
	}
	origin := id
	if f.State != StateNotFound && !f.Message.Origin.IsZero() {
		origin = f.Message.Origin
	}
	// Everything answered before the call is routed: the catalog holds
	// its latest incarnation.
	if err := e.reput.WaitRouted(ctx, e.log.EndOffset()); err != nil {
		return Found{}, err
	}
	cur := id
	// later returns the incarnation the Moved table names for from, if
	// it is later than cur: a later incarnation's record follows its
	// predecessor's in the commitlog, and an older entry (of an old
	// directory's chain) is not taken.
	later := func(from message.ID) (message.ID, bool, error) {
		next, ok, err := e.cat.LookupID(catalog.Moved, catalog.EncodeID(from))
		return next, ok && next.Seq > cur.Seq, err
	}
	next, ok, err := later(origin)
	if err == nil && !ok && origin != id {
		next, ok, err = later(id) // an old directory's chain from id
	}
	for hops := 0; ; hops++ {
		if err != nil {
			return Found{}, err
		}
		if !ok || hops == maxHops {
			break
		}
		cur = next
		next, ok, err = later(cur)
	}
	if cur == id {
		return f, nil
	}
	return e.Get(ctx, cur)
}

// RescheduleResult is what Reschedule did.
type RescheduleResult int

// Reschedule results.
const (
	// RescheduleUnknown: no such message is pending here; nothing changed.
	RescheduleUnknown RescheduleResult = iota
	// Rescheduled: the old time will never fire; the replacement will.
	Rescheduled
	// RescheduleTooLate: it was delivered or is being delivered.
	RescheduleTooLate
	// RescheduleCancelled: it was cancelled or rescheduled before.
	RescheduleCancelled
)

// String returns the result's name.
func (r RescheduleResult) String() string {
	return [...]string{"unknown", "rescheduled", "already-delivered", "already-cancelled"}[r]
}

// Reschedule moves the pending message id to at (a time in the past is
// due at once: "promote"), atomically: one commitlog record cancels it and
// schedules its replacement, which has its own ID (at, the record's
// offset) and the first attempt's ID as its origin, the same topic,
// headers, body and attempt (a frozen message is thawed: Freeze). Its
// answer is truthful like Cancel's (I7): Rescheduled only if the old time
// will never fire.
func (e *Engine) Reschedule(ctx context.Context, id message.ID, at time.Time) (RescheduleResult, message.ID, error) {
	now := e.opts.Now()
	if at.After(now.Add(e.opts.MaxDelay)) {
		return RescheduleUnknown, message.ID{}, e.tooFar(0, now, at)
	}
	ms := max(ceilMs(at), ceilMs(now))
	return e.replace(ctx, id, func(m *message.Message) error {
		m.DeliverAt = ms
		// A frozen message given a time is thawed to it.
		m.Headers = unfrozen(m.Headers)
		return nil
	})
}

// replace puts a new incarnation of the pending message id in its place,
// atomically: change makes the replacement from a copy of the message (its
// origin already set to the first ID); one reschedule record then cancels
// id and schedules the replacement, whose ID is its deliverAt and the
// record's offset. Rescheduled only if id will never fire; an error of
// change leaves id pending. Reschedule and Edit are this.
func (e *Engine) replace(ctx context.Context, id message.ID, change func(m *message.Message) error) (RescheduleResult, message.ID, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.mu.closed {
		return RescheduleUnknown, message.ID{}, ErrClosed
	}
	if id.DeliverAt < 0 || int64(id.Seq) >= e.log.EndOffset() || int64(id.Seq) < 0 {
		return RescheduleUnknown, message.ID{}, nil
	}
	if err := e.reput.WaitRouted(ctx, max(int64(id.Seq)+1, e.openEnd)); err != nil {
		return RescheduleUnknown, message.ID{}, err
	}
	seg, ok := e.reput.FindSegment(id.DeliverAt)
	if !ok {
		return RescheduleUnknown, message.ID{}, nil
	}
	var m message.Message
	ok, err := readEntry(filepath.Join(e.schedDir, schedulelog.Name(seg.Start)), id.Seq, &m)
	if err != nil || !ok || m.DeliverAt != id.DeliverAt {
		return RescheduleUnknown, message.ID{}, err
	}
	if m.Origin.IsZero() {
		m.Origin = id
	}
	oldSize := message.ScheduleSize(&m)
	if err := change(&m); err != nil {
		return RescheduleUnknown, message.ID{}, err
	}
	res, claimed, err := e.claim(ctx, id, dispatchlog.Rescheduled)
	if err != nil || !claimed {
		switch res {
		case AlreadyDone:
			return RescheduleTooLate, message.ID{}, err
		case AlreadyCancelled:
			return RescheduleCancelled, message.ID{}, err
		}
		return RescheduleUnknown, message.ID{}, err
	}
	offs, err := e.appendCancel(nil, commitlog.Record{Type: message.TypeReschedule, Payload: message.AppendReschedule(nil, id, &m)})
	if err != nil {
		e.d.decide(id.Seq, -1)
		return RescheduleUnknown, message.ID{}, err
	}
	e.d.decide(id.Seq, offs[0])
	if e.CountsPending() {
		e.pending.add(string(m.Topic), 0, int64(message.ScheduleSize(&m)-oldSize))
	}
	nid := message.ID{DeliverAt: m.DeliverAt, Seq: uint64(offs[0])}
	if e.keys != nil {
		e.keys.moved(string(m.Topic), m.Headers, nid)
	}
	return Rescheduled, nid, nil
}

// Control appends a control record (a durable setting: a topic's policy,
// a recurring schedule, a calendar) and returns once it is durable and routed: the
// catalog holds it and Options.OnControl has been told.
func (e *Engine) Control(ctx context.Context, c message.Control) error {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.mu.closed {
		return ErrClosed
	}
	if err := e.health.check(true); err != nil {
		return err
	}
	offs, err := e.log.Append(nil, commitlog.Record{Type: message.TypeControl, Payload: message.AppendControl(nil, c)})
	if err != nil {
		return fmt.Errorf("engine: control record: %w", err)
	}
	return e.reput.WaitRouted(ctx, offs[0]+1)
}

// Settings returns the entries of a settings table of the catalog
// (catalog.Policies, catalog.Schedules, catalog.Calendars) by name, as
// control records set them.
func (e *Engine) Settings(t catalog.Table) (map[string][]byte, error) {
	out := map[string][]byte{}
	var after []byte
	for {
		next, err := e.cat.Scan(t, after, 1024, func(k, v []byte) { out[string(k)] = v })
		if err != nil || next == nil {
			return out, err
		}
		after = next
	}
}

// Setting returns one entry of a settings table.
func (e *Engine) Setting(t catalog.Table, name string) ([]byte, bool, error) {
	return e.cat.Get(t, []byte(name))
}

// ScanSettings pages through a settings table in name order (see
// catalog.Catalog.Scan).
func (e *Engine) ScanSettings(t catalog.Table, after []byte, n int, fn func(name, value []byte)) ([]byte, error) {
	return e.cat.Scan(t, after, n, fn)
}

// WaitRouted returns once everything appended to the commitlog before the
// call is routed: the schedule segments, dispatch logs and catalog hold
// it.
func (e *Engine) WaitRouted(ctx context.Context) error {
	return e.reput.WaitRouted(ctx, e.log.EndOffset())
}
