package queue

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/segfile"
)

// checkpoint writes t's state to its ack log, then deletes what that makes
// unnecessary: ack-log segments before it, and queue-log segments below
// the low-water mark (every record in them is acked).
func (t *topic) checkpoint() error {
	t.ackMu.Lock()
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		t.ackMu.Unlock()
		return nil
	}
	ck := t.snapshotLocked()
	t.mu.ck.acks, t.mu.ck.bytes, t.mu.ck.queued = 0, 0, false
	same := t.mu.ck.last == ck.key() && slices.EqualFunc(ck.entries, t.mu.ck.lastEntries, func(a, b entry) bool { return a == b })
	t.mu.Unlock()
	if same {
		t.ackMu.Unlock()
		return nil
	}
	// Only the write happens under ackMu: ack records appended after it
	// follow the checkpoint in the log, so replay applies them after it,
	// and acks need not wait for its fsync to append theirs (they share
	// the next one). Retention waits for it below.
	offs, end, err := t.acks.AppendNoWait(nil, encodeCheckpoint(&ck, t.q.opts.entriesPerRecord())...)
	if err == nil {
		t.mu.Lock()
		t.mu.ck.last, t.mu.ck.lastEntries = ck.key(), ck.entries
		t.mu.Unlock()
	}
	t.ackMu.Unlock()
	if err == nil && t.q.opts.Fsync == commitlog.SyncAlways {
		err = t.acks.WaitVisible(end)
	}
	if err != nil {
		return fmt.Errorf("queue: topic %q: checkpoint: %w", t.name, err)
	}
	_, aerr := t.acks.DeleteBefore(offs[0])
	_, lerr := t.log.DeleteBefore(t.retainFrom(ck.lwm))
	if err := errors.Join(aerr, lerr); err != nil {
		return fmt.Errorf("queue: topic %q: retention: %w", t.name, err)
	}
	return nil
}

// ckKey summarises a checkpoint without entries, to skip writing the same
// one twice.
type ckKey struct{ lwm, cursor, end, unread int64 }

func (ck *checkpoint) key() ckKey { return ckKey{ck.lwm, ck.cursor, ck.end, ck.unread} }

// snapshotLocked returns t's state as a checkpoint: everything outstanding
// below the cursor with its attempt, and the acks the reader has not
// reached. t.mu is held.
func (t *topic) snapshotLocked() checkpoint {
	ck := checkpoint{cursor: t.mu.read.cursor(), end: t.mu.read.end, unread: t.mu.read.unread}
	if ck.cursor > ck.end {
		// The reader is ahead of an append still in flight: unread is
		// minus the records in [end, cursor), so this says the same.
		ck.end, ck.unread = ck.cursor, 0
	}
	ents := make([]entry, 0, len(t.mu.leases.byOff)+len(t.mu.read.fifo)+len(t.mu.read.skip))
	for _, l := range t.mu.leases.byOff {
		if l.off >= ck.cursor {
			// Taken out of turn (Take) and not reached by the reader: an
			// entry there would say acked; left out, it is unread.
			continue
		}
		ents = append(ents, entry{off: l.off, attempt: l.attempt})
	}
	ents = append(ents, t.mu.read.fifo...)
	ents = t.mu.flow.entries(ents)
	slices.SortFunc(ents, func(a, b entry) int { return cmp.Compare(a.off, b.off) })
	ck.lwm = ck.cursor
	if len(ents) > 0 {
		ck.lwm = min(ck.lwm, ents[0].off)
	}
	for _, off := range t.mu.read.skip {
		ents = append(ents, entry{off: off})
	}
	ck.entries = ents
	return ck
}

// replayAcks reads an ack log from its first retained
// record: the last complete checkpoint and the acks after it.
func replayAcks(acks *commitlog.Log) (replayer, error) {
	var r replayer
	it, err := acks.NewIterator(acks.FirstOffset())
	if err != nil {
		return r, err
	}
	r.at, r.head = -1, -1
	bases := acks.SegmentBases()
	prev := int64(-1)
	for it.Next() {
		rec := it.Record()
		if off := it.Offset(); prev >= 0 && off != prev {
			if _, atBase := slices.BinarySearch(bases, off); !atBase {
				r.skipped() // a span repair covered, not a sealed segment's unused tail
			}
		}
		prev = it.Pos()
		if rec.Type == typeCheckpoint {
			r.head = it.Offset()
		}
		if err := r.add(rec.Type, rec.Payload); err != nil {
			err = it.Corruption(err)
			it.Close()
			return r, err
		}
		if r.have && r.pend == nil && (rec.Type == typeCheckpoint || rec.Type == typeEntries) && r.head >= 0 {
			r.at, r.head = r.head, -1 // the checkpoint headed there is complete
		}
	}
	err = it.Err()
	it.Close()
	if err != nil {
		return r, err
	}
	if err := r.finish(); err != nil {
		return r, &segfile.CorruptionError{Path: acks.Dir(), Offset: -1, Err: err}
	}
	if first := acks.FirstOffset(); first > 0 && !r.have {
		// Ack-log segments are deleted only behind a durable checkpoint,
		// which stays: without one, what the deleted segments held is lost.
		return r, &segfile.CorruptionError{Path: acks.Dir(), Offset: -1, Err: fmt.Errorf(
			"the ack log starts at offset %d (older segments were deleted behind a checkpoint) but holds no complete checkpoint: the checkpoint is damaged or gone", first)}
	}
	return r, nil
}

// outstanding returns what the replayed state holds besides the cursor:
// the records below the cursor to hand out again (not acked since the
// checkpoint), and the acked records at or past it, sorted.
func (r *replayer) outstanding() (fifo []entry, skip []int64) {
	ck := &r.ck
	acks := slices.Compact(slices.Sorted(slices.Values(r.acks)))
	for _, e := range ck.entries {
		if e.off >= ck.cursor {
			skip = append(skip, e.off)
		} else if _, acked := slices.BinarySearch(acks, e.off); !acked {
			fifo = append(fifo, e)
		}
	}
	for _, a := range acks {
		if a >= ck.cursor {
			skip = append(skip, a)
		}
	}
	slices.Sort(skip)
	return fifo, slices.Compact(skip)
}

// recover rebuilds t's state from its logs: the last complete checkpoint
// in the ack log and the acks after it (r, from replayAcks), and a count of the queue-log records
// appended after it. Records the checkpoint lists below its cursor and not
// acked since are receivable again first, with the attempt they had;
// records past the cursor are read again as never received, except those
// acked since.
func (t *topic) recover(r *replayer) error {
	first, endOff := t.log.FirstOffset(), t.log.EndOffset()
	ck := r.ck
	if !r.have {
		ck = checkpoint{lwm: first, cursor: first, end: first}
	}
	if ck.lwm < first {
		return &segfile.CorruptionError{Path: t.log.Dir(), Offset: -1, Err: fmt.Errorf(
			"the last checkpoint has unacked records from offset %d but the queue log starts at %d: segments are missing", ck.lwm, first)}
	}
	if ck.end > endOff {
		return &segfile.CorruptionError{Path: t.log.Dir(), Offset: -1, Err: fmt.Errorf(
			"the last checkpoint covers the queue log up to offset %d but it ends at %d: durable data is gone", ck.end, endOff)}
	}
	r.ck = ck
	t.mu.read.fifo, t.mu.read.skip = r.outstanding()

	// Count what was appended after the checkpoint: at most about one
	// segment, since appending a segment's worth asks for a checkpoint.
	cit, err := t.log.NewIterator(ck.end)
	if err != nil {
		return t.missing(ck.end, err)
	}
	n := int64(0)
	for cit.Next() {
		n++
	}
	err = cit.Err()
	t.mu.read.end = cit.Pos()
	cit.Close()
	if err != nil {
		return err // openTopic names the topic and what is at stake
	}
	t.mu.read.unread = ck.unread + n
	if t.mu.read.it, err = t.log.NewIterator(ck.cursor); err != nil {
		return t.missing(ck.cursor, err)
	}
	t.mu.ck.last, t.mu.ck.lastEntries = ck.key(), ck.entries
	if err := t.loadRecent(); err != nil {
		return err
	}
	if r.have {
		if _, err := t.log.DeleteBefore(t.retainFrom(ck.lwm)); err != nil {
			return fmt.Errorf("queue: topic %q: retention: %w", t.name, err)
		}
	}
	if len(r.acks) > 0 || n > 0 || r.discarded > 0 {
		t.mu.ck.queued = true // asked for once the topic is open (Queue.opening)
	}
	return nil
}

// retainFrom is where retention may cut the queue log given the low-water
// mark lwm: never into the newest sealed segment, so that a restart finds
// at least one segment of recent records to deduplicate against
// (loadRecent).
func (t *topic) retainFrom(lwm int64) int64 {
	if b := t.log.SegmentBases(); len(b) >= 2 {
		return min(lwm, b[len(b)-2])
	}
	return lwm
}

// loadRecent collects the IDs of the last Options.dedupWindow records of
// the queue log (as far as retention kept them) into t.recent, scanning
// whole segments from the newest back. The engine records a delivery done
// only after Deliver returned, so a crash in between makes it deliver the
// same messages again after the restart: Deliver drops those whose IDs are
// here. The engine never has more than its MaxInflight messages delivered
// and not yet recorded, so a window at least that large catches them all.
func (t *topic) loadRecent() error {
	window := t.q.opts.dedupWindow
	if window <= 0 {
		return nil
	}
	bases := t.log.SegmentBases()
	end := t.log.EndOffset()
	var ids []message.ID // newest segment first, each in log order
	n := 0
	for i := len(bases) - 1; i >= 0 && n < window; i-- {
		from, to := max(bases[i], t.log.FirstOffset()), end
		if i+1 < len(bases) {
			to = bases[i+1]
		}
		it, err := t.log.NewIterator(from)
		if err != nil {
			return t.missing(from, err)
		}
		var seg []message.ID
		for it.Next() {
			if it.Offset() >= to {
				break
			}
			var id message.ID
			if err := decodeID(it.Record().Payload, &id); err == nil {
				seg = append(seg, id)
			}
		}
		err = it.Err()
		it.Close()
		if err != nil {
			return err // openTopic names the topic and what is at stake
		}
		n += len(seg)
		ids = append(seg, ids...)
	}
	if len(ids) > window {
		ids = ids[len(ids)-window:]
	}
	if len(ids) == 0 {
		return nil
	}
	recent := make(map[message.ID]struct{}, len(ids))
	for _, id := range ids {
		recent[id] = struct{}{}
	}
	t.recent.mu.Lock()
	t.recent.mu.ids = recent
	t.recent.mu.Unlock()
	return nil
}
