package reput

// Routing: each commitlog record becomes schedule entries, done-records
// and catalog rows.

import (
	"bytes"
	"encoding/binary"
	"errors"

	"github.com/hourglassmq/hourglass/catalog"
	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// route handles one commitlog record.
func (r *Reput) route(off int64, typ uint8, p []byte) error {
	switch typ {
	case message.TypeSchedule:
		return r.routeSchedule(off, p)
	case message.TypeCancel:
		return r.routeCancel(p)
	case message.TypeReschedule:
		return r.routeReschedule(off, p)
	case message.TypeControl:
		return r.routeControl(off, p)
	default:
		r.stats.malformed.Add(1)
		r.log.Error("reput: unknown commitlog record type; skipped", "offset", off, "type", typ)
		return nil
	}
}

func (r *Reput) routeSchedule(off int64, p []byte) error {
	deliverAt, ok := deliverAtOf(p)
	if !ok {
		r.stats.malformed.Add(1)
		r.log.Error("reput: malformed schedule record; skipped", "offset", off)
		return nil
	}
	seq := uint64(off)
	if r.retired.st.covers(deliverAt, seq) {
		// Its bucket was delivered and deleted: routing it again would
		// deliver it again (only after a lost checkpoint).
		r.stats.skipped.Add(1)
		return nil
	}
	id := message.ID{DeliverAt: deliverAt, Seq: seq}
	if r.keys.indexKey(id, p) {
		r.dirty = true
	}
	if origin, ok := message.OriginOf(p); ok && !origin.IsZero() && r.opts.Catalog != nil {
		// A retry, reschedule or redrive: the message the producer was
		// given (its origin) is carried by this record from now on.
		r.opts.Catalog.Put(catalog.Moved, catalog.EncodeID(origin), catalog.EncodeID(id))
		r.dirty = true
	}
	// Consecutive records mostly go to one bucket: the last writer first,
	// without the segment list's lock and search.
	last := &r.writers.last
	if last.w == nil || deliverAt < last.start || deliverAt >= last.end {
		sw, bucket, err := r.writerFor(deliverAt)
		if err != nil {
			return err
		}
		*last = lastWriter{w: sw, start: bucket, end: bucket + sw.w.Duration().Milliseconds(), watched: r.out.watched[bucket] != nil}
	}
	sw, bucket := last.w, last.start
	r.writers.touch(sw)
	if sw.hasLast && seq <= sw.lastSeq {
		r.stats.skipped.Add(1) // routed before a restart
		return nil
	}
	eoff, err := sw.w.Append(seq, p)
	if errors.Is(err, schedulelog.ErrBadPayload) {
		r.stats.malformed.Add(1)
		r.log.Error("reput: malformed schedule record; skipped", "offset", off, "err", err)
		return nil
	}
	if err != nil {
		return err
	}
	sw.lastSeq, sw.hasLast, sw.dirty, sw.flushed = seq, true, true, false
	r.dirty = true
	r.stats.routed.Add(1)
	if last.watched {
		r.out.events = append(r.out.events, event{entry: Entry{Bucket: bucket, Offset: eoff, Seq: seq, DeliverAt: deliverAt}})
		r.out.watched[bucket].queued = sw.w.Size()
	}
	return nil
}

func (r *Reput) routeCancel(p []byte) error {
	id, err := message.DecodeCancel(p)
	if err != nil {
		r.stats.malformed.Add(1)
		r.log.Error("reput: malformed cancel record; skipped", "err", err)
		return nil
	}
	return r.routeDone(id, dispatchlog.Cancelled)
}

// routeReschedule routes a reschedule record: its replacement like a
// schedule record (an entry whose seq is the record's offset, which names
// it in the catalog's Moved table as its origin's latest), then the old
// message's done-record.
func (r *Reput) routeReschedule(off int64, p []byte) error {
	old, sched, err := message.SplitReschedule(p)
	if err != nil {
		r.stats.malformed.Add(1)
		r.log.Error("reput: malformed reschedule record; skipped", "offset", off, "err", err)
		return nil
	}
	if err := r.routeSchedule(off, sched); err != nil {
		return err
	}
	return r.routeDone(old, dispatchlog.Rescheduled)
}

// routeControl stages a control record's setting in the catalog and
// queues it for OnControl.
func (r *Reput) routeControl(off int64, p []byte) error {
	c, err := message.DecodeControl(p)
	if err != nil {
		r.stats.malformed.Add(1)
		r.log.Error("reput: malformed control record; skipped", "offset", off, "err", err)
		return nil
	}
	var t catalog.Table
	switch c.Kind {
	case message.ControlPolicy:
		t = catalog.Policies
	case message.ControlSchedule, message.ControlScheduleDelete:
		t = catalog.Schedules
	case message.ControlCalendar:
		t = catalog.Calendars
	default:
		r.stats.malformed.Add(1)
		r.log.Error("reput: control record of an unknown kind; skipped", "offset", off, "kind", c.Kind)
		return nil
	}
	if r.opts.Catalog != nil {
		if len(c.Value) == 0 || c.Kind == message.ControlScheduleDelete {
			r.opts.Catalog.Delete(t, c.Name)
		} else {
			r.opts.Catalog.Put(t, c.Name, c.Value)
		}
		r.dirty = true
	}
	c.Name, c.Value = bytes.Clone(c.Name), bytes.Clone(c.Value)
	r.out.events = append(r.out.events, event{control: &c})
	return nil
}

// routeDone appends the done-record of id, for reason, to its segment's
// dispatch log.
func (r *Reput) routeDone(id message.ID, reason dispatchlog.Reason) error {
	if err := r.segs.resolveAt(id.DeliverAt); err != nil {
		return err
	}
	seg, ok := r.segs.find(id.DeliverAt)
	if !ok {
		// Its segment was retired: every entry in it was done, so this
		// one was delivered or cancelled already.
		r.stats.orphans.Add(1)
		return nil
	}
	dw, err := r.dispatch.hold(seg.Start, true)
	if err != nil {
		return err
	}
	err = dw.w.Append(dispatchlog.Done{Seq: id.Seq, Reason: reason})
	r.dispatch.release(true, dw)
	if err != nil {
		return err
	}
	r.dirty = true
	r.stats.cancels.Add(1)
	if r.out.watched[seg.Start] != nil {
		r.out.events = append(r.out.events, event{cancel: true, why: reason, bucket: seg.Start, seq: id.Seq})
	}
	return nil
}

// deliverAtOf reads the delivery time of a schedule record's payload.
func deliverAtOf(p []byte) (int64, bool) {
	if len(p) < 9 {
		return 0, false
	}
	return int64(binary.LittleEndian.Uint64(p[1:9])), true
}
