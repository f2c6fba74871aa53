package engine

import "context"

// cancel states answered by tryCancel.
type cancelState int

const (
	cancelUnknown cancelState = iota
	cancelInflight
	cancelDone
	cancelRegistered
	cancelRegisteredUnloaded
	cancelAgain // an earlier cancel of the same message is pending
)

func (s cancelState) result() CancelResult {
	switch s {
	case cancelInflight, cancelDone:
		return AlreadyDone
	case cancelRegistered, cancelRegisteredUnloaded, cancelAgain:
		return Cancelled
	}
	return Unknown
}

// tryCancel decides, atomically with firing, whether seq can still be
// cancelled; if so it registers an intent that keeps it from firing.
func (d *driver) tryCancel(ctx context.Context, seq uint64, start int64) (cancelState, error) {
	var st cancelState
	err := d.call(ctx, func() {
		if _, ok := d.inflight[seq]; ok {
			st = cancelInflight
			return
		}
		if _, ok := d.intents[seq]; ok {
			st = cancelAgain
			return
		}
		b := d.buckets[start]
		if b != nil && b.cancelled.Contains(seq) {
			st = cancelAgain
			return
		}
		if b != nil && b.ready && (b.done.Contains(seq) || b.delivered.contains(seq)) {
			st = cancelDone
			return
		}
		d.intents[seq] = -1
		st = cancelRegistered
		if b == nil || !b.ready || b.corrupt {
			st = cancelRegisteredUnloaded
		}
	})
	if err == nil && st == cancelAgain {
		return cancelAgain, nil
	}
	return st, err
}

func (d *driver) dropIntent(seq uint64) {
	d.call(context.Background(), func() { delete(d.intents, seq) })
}

func (d *driver) armIntent(seq uint64, off int64) {
	d.call(context.Background(), func() {
		if _, ok := d.intents[seq]; ok {
			d.intents[seq] = off
		}
	})
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
