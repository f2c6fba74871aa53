package engine

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/message"
)

// cancel states answered by tryCancel.
type cancelState int

const (
	cancelUnknown cancelState = iota
	cancelInflight
	cancelDelivered // delivered (or dead-lettered) while its bucket was loaded
	// cancelDoneBefore: the dispatch log recorded it done before its
	// bucket was loaded; the log's record says why (doneReason).
	cancelDoneBefore
	cancelRegistered
	cancelRegisteredUnloaded
	cancelAgain // an earlier Cancel of the same message cancelled it
	// cancelWait: an earlier Cancel decided on it and its cancel record is
	// not durable yet; ask again once that Cancel is answered.
	cancelWait
)

func (s cancelState) result() CancelResult {
	switch s {
	case cancelInflight, cancelDelivered:
		return AlreadyDone
	case cancelRegistered, cancelRegisteredUnloaded:
		return Cancelled
	case cancelAgain:
		return AlreadyCancelled
	}
	return Unknown
}

// tryCancel decides, atomically with firing, whether seq can still be
// cancelled; if so it registers an intent that keeps it from firing. For
// cancelWait it also returns a channel closed once the pending intent is
// armed or dropped.
func (d *driver) tryCancel(ctx context.Context, seq uint64, start int64) (cancelState, <-chan struct{}, error) {
	var st cancelState
	var wait <-chan struct{}
	err := d.call(ctx, func() {
		if _, ok := d.inflight[seq]; ok {
			st = cancelInflight
			return
		}
		if off, ok := d.intents[seq]; ok {
			st = cancelAgain
			if off < 0 {
				// The first Cancel's record may still fail to append, and
				// then the message is delivered after all (I7).
				st, wait = cancelWait, d.intentChange(seq)
			}
			return
		}
		b := d.buckets[start]
		if b != nil && b.cancelled.Contains(seq) {
			st = cancelAgain
			return
		}
		if b != nil && b.ready && b.delivered.contains(seq) {
			st = cancelDelivered
			return
		}
		if b != nil && b.ready && b.done.Contains(seq) {
			st = cancelDoneBefore
			return
		}
		d.intents[seq] = -1
		st = cancelRegistered
		if b == nil || !b.ready || b.corrupt {
			st = cancelRegisteredUnloaded
		}
	})
	return st, wait, err
}

// intentChange returns a channel closed when the intent of seq is armed
// or dropped. Driver goroutine only.
func (d *driver) intentChange(seq uint64) <-chan struct{} {
	ch := d.intentWait[seq]
	if ch == nil {
		if d.intentWait == nil {
			d.intentWait = map[uint64]chan struct{}{}
		}
		ch = make(chan struct{})
		d.intentWait[seq] = ch
	}
	return ch
}

// intentChanged wakes the Cancels waiting on intentChange(seq). Driver
// goroutine only.
func (d *driver) intentChanged(seq uint64) {
	if ch := d.intentWait[seq]; ch != nil {
		close(ch)
		delete(d.intentWait, seq)
	}
}

func (d *driver) dropIntent(seq uint64) {
	d.call(context.Background(), func() {
		delete(d.intents, seq)
		d.intentChanged(seq)
	})
}

func (d *driver) armIntent(seq uint64, off int64) {
	d.call(context.Background(), func() {
		if _, ok := d.intents[seq]; ok {
			d.intents[seq] = off
		}
		d.intentChanged(seq)
	})
}

// doneReason returns why the dispatch log at path says seq is done, and
// whether it says so at all.
func doneReason(path string, seq uint64) (dispatchlog.Reason, bool, error) {
	recs, err := dispatchlog.Records(path)
	if err != nil {
		return 0, false, err
	}
	for _, r := range recs {
		if r.Seq == seq {
			return r.Reason, true, nil
		}
	}
	return 0, false, nil
}

// doneResult is Cancel's answer for a message whose done-record has
// reason r.
func doneResult(r dispatchlog.Reason) CancelResult {
	if r == dispatchlog.Cancelled || r == dispatchlog.Rescheduled {
		return AlreadyCancelled
	}
	return AlreadyDone
}

func (e *Engine) donePath(start int64) string {
	return filepath.Join(e.schedDir, dispatchlog.Name(start))
}

// pruneIntents forgets cancel intents whose cancel record reput has
// routed: from then on the dispatch log or the bucket's done set has it.
func (d *driver) pruneIntents() {
	if len(d.intents) == 0 {
		return
	}
	pos := d.e.reput.Position()
	for seq, off := range d.intents {
		if off >= 0 && off < pos {
			delete(d.intents, seq)
		}
	}
}

// unarmedIntent reports whether a Cancel is between its decision and its
// durable cancel record.
func (d *driver) unarmedIntent() bool {
	for _, off := range d.intents {
		if off < 0 {
			return true
		}
	}
	return false
}

// DeliveryChecker is implemented by a Sink that can tell whether it holds
// a message: one an earlier run of the engine handed to it without
// recording it done (a crash or a Close between the sink's answer and the
// done-record), which the engine delivers again and a sink like the
// built-in queue drops by ID. It should answer for at least the engine's
// MaxInflight most recent IDs, the most that can be handed over and not
// recorded.
type DeliveryChecker interface {
	// Delivered reports whether the sink was handed the message id.
	Delivered(ctx context.Context, id message.ID) (bool, error)
}

// sinkMayHold reports whether an earlier run may have handed id to the
// sink without recording it done: Cancel must not answer Cancelled for
// such a message (I7). Only a message due by the time this run opened
// (plus the handoff lead) can be one. For those it asks the sink if it is
// a DeliveryChecker; otherwise it assumes the sink holds it, so that a
// Cancel of a message already overdue when the engine started answers
// AlreadyDone, and the message is delivered, until its bucket has loaded
// (the entries an earlier run handed over are then in flight or done
// again). A clock that stepped back across the restart by more than the
// handoff lead escapes this check.
func (e *Engine) sinkMayHold(ctx context.Context, id message.ID) (bool, error) {
	if id.DeliverAt > e.opened.UnixMilli()+e.opts.HandoffLead.Milliseconds() {
		return false, nil
	}
	c, ok := e.opts.Sink.(DeliveryChecker)
	if !ok {
		return true, nil
	}
	return c.Delivered(ctx, id)
}

// Cancel cancels the message id. Its answer is truthful (I7): Cancelled
// only if the message will never be delivered, including when the cancel
// races with firing; AlreadyCancelled if an earlier Cancel (or a
// Reschedule) made it so (also across restarts); AlreadyDone if it was
// delivered, is being delivered or was dead-lettered; Unknown if no such
// message is pending.
func (e *Engine) Cancel(ctx context.Context, id message.ID) (CancelResult, error) {
	e.closeMu.RLock()
	defer e.closeMu.RUnlock()
	if e.closed {
		return Unknown, ErrClosed
	}
	res, claimed, err := e.claim(ctx, id)
	if err != nil || !claimed {
		return res, err
	}
	offs, err := e.appendCancel(nil, commitlog.Record{Type: message.TypeCancel, Payload: message.AppendCancel(nil, id)})
	if err != nil {
		e.d.dropIntent(id.Seq)
		return Unknown, err
	}
	e.d.armIntent(id.Seq, offs[0])
	e.cancelled.Add(1)
	return Cancelled, nil
}

// claim decides whether message id can still be kept from firing. If it
// can, it registers an intent that keeps it from firing and reports
// claimed: the caller appends its record (a cancel, a reschedule) and arms
// the intent with the record's offset, or drops it if the append fails.
// Otherwise res is the answer (AlreadyDone, AlreadyCancelled, Unknown).
// e.closeMu is held shared.
func (e *Engine) claim(ctx context.Context, id message.ID) (res CancelResult, claimed bool, err error) {
	if id.DeliverAt < 0 || int64(id.Seq) >= e.log.EndOffset() || int64(id.Seq) < 0 {
		return Unknown, false, nil
	}
	// Its schedule record must be routed before its segment can be found,
	// and the cancels in the commitlog at Open before a dispatch log can
	// say whether it was cancelled before.
	if err := e.reput.WaitRouted(ctx, max(int64(id.Seq)+1, e.openEnd)); err != nil {
		return Unknown, false, err
	}
	seg, ok := e.reput.FindSegment(id.DeliverAt)
	if !ok {
		return Unknown, false, nil
	}
	if e.afterFind != nil {
		e.afterFind()
	}
	var st cancelState
	for range maxCancelWaits {
		var wait <-chan struct{}
		st, wait, err = e.d.tryCancel(ctx, id.Seq, seg.Start)
		if err != nil {
			return Unknown, false, err
		}
		if st != cancelWait {
			break
		}
		// Another Cancel of it is appending its record: its outcome is ours.
		select {
		case <-wait:
		case <-e.d.stopped:
			return Unknown, false, ErrClosed
		case <-ctx.Done():
			return Unknown, false, ctx.Err()
		}
	}
	switch st {
	case cancelWait:
		return Unknown, false, fmt.Errorf("engine: cancel of %s: other Cancels of it kept deciding; try again", id)
	case cancelDoneBefore:
		// Done before its bucket was loaded: the dispatch log says why.
		r, ok, err := e.doneCache.reason(e.donePath(seg.Start), id.Seq)
		if err != nil || !ok {
			// In the done set loaded from that file, so done either way;
			// delivered is the safe answer.
			return AlreadyDone, false, err
		}
		return doneResult(r), false, nil
	case cancelRegistered, cancelRegisteredUnloaded:
	default:
		return st.result(), false, nil
	}
	if st == cancelRegisteredUnloaded {
		if _, ok := e.reput.FindSegment(id.DeliverAt); !ok {
			// Retired since it was found: every entry of a retired bucket
			// was done, and its dispatch log is gone. A retirement is
			// over (the segment out of the list) before the driver
			// unloads the bucket, and none starts while this Cancel's
			// intent is unarmed, so a bucket tryCancel found unloaded is
			// either retired by now or not retired while we read.
			e.d.dropIntent(id.Seq)
			return Unknown, false, nil
		}
		// The bucket is not in memory: its dispatch log is the record of
		// what was delivered or cancelled. Deliveries are synced there
		// before they are confirmed, nothing of an unloaded bucket is in
		// flight, and the cancels reput routed there are synced first.
		r, done, err := e.unloadedDone(seg.Start, id.Seq)
		if err != nil {
			e.d.dropIntent(id.Seq)
			return Unknown, false, err
		}
		if done {
			e.d.dropIntent(id.Seq)
			return doneResult(r), false, nil
		}
	}
	if held, err := e.sinkMayHold(ctx, id); err != nil || held {
		// An earlier run may have handed it to the sink without recording
		// it done (a crash, or a Close, between the sink's answer and the
		// done-record): it is delivered again, so it is not cancelled.
		e.d.dropIntent(id.Seq)
		if err != nil {
			return Unknown, false, err
		}
		return AlreadyDone, false, nil
	}
	return Cancelled, true, nil
}

// unloadedDone reads from the dispatch log of the bucket at start whether
// seq is done and why.
func (e *Engine) unloadedDone(start int64, seq uint64) (dispatchlog.Reason, bool, error) {
	if err := e.reput.SyncDispatch(start); err != nil {
		return 0, false, err
	}
	return e.doneCache.reason(e.donePath(start), seq)
}
