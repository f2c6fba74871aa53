package engine

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// resultOf is Cancel's answer for a message in state st.
func resultOf(st State) CancelResult {
	switch st {
	case StateDelivering, StateDelivered, StateDeadLettered:
		return AlreadyDone
	case StateCancelled, StateRescheduled:
		return AlreadyCancelled
	}
	return Unknown
}

// tryClaim decides, atomically with firing, whether seq of the bucket at
// start can still be kept from firing; if so it claims it for a record
// with reason why (a cancel or a reschedule) and returns claimed, with
// known false when the bucket is not in memory (its dispatch log must be
// asked). Otherwise st is what became of it; wait, if not nil, is closed
// once another Cancel's claim on it is recorded or dropped, or once a
// retirement of its bucket in flight is over (ask again).
func (d *driver) tryClaim(ctx context.Context, seq uint64, start int64, why dispatchlog.Reason) (st State, ok, known bool, wait <-chan struct{}, err error) {
	err = d.call(ctx, func() {
		if lf, live := d.fates.live[seq]; live && lf.state == claimed {
			if lf.wait == nil {
				lf.wait = make(chan struct{})
				d.fates.live[seq] = lf
			}
			wait = lf.wait
			return
		}
		if wait = d.futureBusy(start); wait != nil {
			// Being retired: once it is over, the bucket is gone or whole.
			return
		}
		st, known = d.fateOf(seq, start)
		if st != StatePending {
			return
		}
		d.claim(seq, start, why)
		ok = true
	})
	return st, ok, known, wait, err
}

func (e *Engine) donePath(start int64) string {
	return filepath.Join(e.schedDir, dispatchlog.Name(start))
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
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.mu.closed {
		return Unknown, ErrClosed
	}
	res, claimed, err := e.claim(ctx, id, dispatchlog.Cancelled)
	if err != nil || !claimed {
		return res, err
	}
	offs, err := e.appendCancel(nil, commitlog.Record{Type: message.TypeCancel, Payload: message.AppendCancel(nil, id)})
	if err != nil {
		e.d.decide(id.Seq, -1)
		return Unknown, err
	}
	e.uncount(id)
	e.d.decide(id.Seq, offs[0])
	e.calls.cancelled.Add(1)
	return Cancelled, nil
}

// uncount takes the cancelled message id off the pending counts: its
// topic and size are read from its segment, which cannot retire while the
// claim on id is undecided.
func (e *Engine) uncount(id message.ID) {
	if !e.CountsPending() {
		return
	}
	seg, ok := e.reput.FindSegment(id.DeliverAt)
	var m message.Message
	var err error
	if ok {
		ok, err = readEntry(filepath.Join(e.schedDir, schedulelog.Name(seg.Start)), id.Seq, &m)
	}
	if err != nil || !ok {
		e.opts.Logger.Warn("engine: a cancelled message's entry is unreadable: the pending counts keep it until a restart without the counts file", "id", id, "err", err)
		return
	}
	e.pending.add(string(m.Topic), -1, -int64(message.ScheduleSize(&m)))
}

// claim decides whether message id can still be kept from firing. If it
// can, it claims it for a record with reason why (which keeps it from
// firing) and reports claimed: the caller appends its record (a cancel, a
// reschedule) and tells the driver the record's offset, or that the
// append failed (decide). Otherwise res is the answer (AlreadyDone,
// AlreadyCancelled, Unknown). e.mu is held shared.
func (e *Engine) claim(ctx context.Context, id message.ID, why dispatchlog.Reason) (res CancelResult, claimed bool, err error) {
	if id.DeliverAt < 0 || int64(id.Seq) >= e.log.EndOffset() || int64(id.Seq) < 0 {
		return Unknown, false, nil
	}
	// Its schedule record must be routed before its segment can be found,
	// and the cancels in the commitlog at Open before a dispatch log can
	// say whether it was cancelled before.
	if err := e.reput.WaitRouted(ctx, max(int64(id.Seq)+1, e.openEnd)); err != nil {
		return Unknown, false, err
	}
	removed := e.reput.Removed()
	seg, ok := e.reput.FindSegment(id.DeliverAt)
	if !ok {
		return Unknown, false, nil
	}
	// The seq must name a message of this time: another time of the same
	// bucket with a real message's seq names no message (as for Get).
	var m message.Message
	if ok, err := readEntry(filepath.Join(e.schedDir, schedulelog.Name(seg.Start)), id.Seq, &m); err != nil || !ok || m.DeliverAt != id.DeliverAt {
		return Unknown, false, err
	}
	if e.afterFind != nil {
		e.afterFind()
	}
	var st State
	var known bool
	for range maxCancelWaits {
		var wait <-chan struct{}
		st, claimed, known, wait, err = e.d.tryClaim(ctx, id.Seq, seg.Start, why)
		if err != nil {
			return Unknown, false, err
		}
		if wait == nil {
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
	switch {
	case !claimed && st == StatePending:
		return Unknown, false, fmt.Errorf("engine: cancel of %s: other Cancels of it kept deciding; try again", id)
	case !claimed:
		return resultOf(st), false, nil
	}
	if !known {
		if gone, err := e.entryGone(id, removed); err != nil || gone {
			// Retired since it was found: every entry of a retired bucket
			// was done, and its dispatch log is gone (a new segment may
			// hold its time now). A retirement is over (the segment out
			// of the list) before the driver unloads the bucket or ends
			// an early one (retirefuture.go), and none starts while this
			// claim is undecided, so a bucket found unloaded is either
			// retired by now or not retired while we read.
			e.d.decide(id.Seq, -1)
			return Unknown, false, err
		}
		// The bucket is not in memory: its dispatch log is the record of
		// what was delivered or cancelled. Deliveries are synced there
		// before they are confirmed, nothing of an unloaded bucket is in
		// flight, and the cancels reput routed there are synced first.
		r, done, err := e.unloadedDone(seg.Start, id.Seq)
		if err != nil {
			e.d.decide(id.Seq, -1)
			return Unknown, false, err
		}
		if done {
			e.d.decide(id.Seq, -1)
			return resultOf(stateOf(r)), false, nil
		}
	}
	if held, err := e.sinkMayHold(ctx, id); err != nil || held {
		// An earlier run may have handed it to the sink without recording
		// it done (a crash, or a Close, between the sink's answer and the
		// done-record): it is delivered again, so it is not cancelled.
		e.d.decide(id.Seq, -1)
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
	return e.doneLogs.reason(e.donePath(start), seq)
}
