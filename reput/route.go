package reput

// Routing: each commitlog record becomes schedule entries, done-records
// and catalog rows.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strconv"

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
	r.indexKey(id, p)
	if origin, ok := message.OriginOf(p); ok && !origin.IsZero() && r.opts.Catalog != nil {
		// A retry, reschedule or redrive: the message the producer was
		// given (its origin) is carried by this record from now on.
		r.opts.Catalog.Put(catalog.Moved, catalog.EncodeID(origin), catalog.EncodeID(id))
		r.dirty = true
	}
	// Consecutive records mostly go to one bucket: the last writer first,
	// without the segment list's lock and search.
	sw, bucket, watched := r.last, r.lastStart, r.lastWatched
	if sw == nil || deliverAt < r.lastStart || deliverAt >= r.lastEnd {
		var err error
		if sw, bucket, err = r.writerFor(deliverAt); err != nil {
			return err
		}
		watched = r.watched[bucket] != nil
		r.last, r.lastStart, r.lastEnd, r.lastWatched = sw, bucket, bucket+sw.w.Duration().Milliseconds(), watched
	}
	r.tick++
	sw.used, sw.lastUse = true, r.tick
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
	if watched {
		r.events = append(r.events, event{entry: Entry{Bucket: bucket, Offset: eoff, Seq: seq, DeliverAt: deliverAt}})
		r.watched[bucket].queued = sw.w.Size()
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
	r.events = append(r.events, event{control: &c})
	return nil
}

// indexKey stages the idempotency key of the message id (its schedule
// payload p), if it has one, in the catalog's Keys table.
func (r *Reput) indexKey(id message.ID, p []byte) {
	if r.opts.Catalog == nil || !bytes.Contains(p, keyHeader) {
		return
	}
	if err := message.DecodeSchedule(p, &r.scratch); err != nil {
		return
	}
	var key []byte
	var at int64
	for _, h := range r.scratch.Headers {
		switch {
		case bytes.Equal(h.Key, keyHeader):
			key = h.Value
		case bytes.Equal(h.Key, keyTimeHeader):
			at, _ = strconv.ParseInt(string(h.Value), 10, 64)
		}
	}
	if key != nil {
		r.keyText = append(append(append(r.keyText, r.scratch.Topic...), 0), key...) // catalog.KeyOf's form
		r.keyRefs = append(r.keyRefs, keyRef{end: len(r.keyText), id: id, at: at})
		r.dirty = true
	}
}

// keyRef is where a key indexKey collected ends in keyText, its ID, and
// when its Schedule arrived (UTC ms; 0: unknown).
type keyRef struct {
	end int
	id  message.ID
	at  int64
}

// maxReplayKeys bounds the keys held back while a restart routes again the
// records after the checkpoint (about 70 bytes each).
const maxReplayKeys = 1 << 18

// collectKeys turns the keys indexKey collected in a step into catalog
// pairs (one string holds their text) and stages them with one PutKeys,
// or, while a restart routes again the records after the checkpoint,
// holds them for stageKeys. After a restart, that routing stages every key
// among those records; one Put per key (a lock, four allocations and a
// map grown from empty) was most of what it cost.
func (r *Reput) collectKeys(hold bool) {
	if len(r.keyRefs) == 0 {
		return
	}
	text, start := string(r.keyText), 0
	pairs := r.keyPairs[:0]
	if hold {
		pairs = make([]catalog.KeyID, 0, len(r.keyRefs)) // kept until stageKeys
	}
	for _, k := range r.keyRefs {
		pairs = append(pairs, catalog.KeyID{Key: text[start:k.end], ID: k.id, At: k.at})
		start = k.end
	}
	r.keyText, r.keyRefs = r.keyText[:0], r.keyRefs[:0]
	if hold {
		r.heldKeys = append(r.heldKeys, pairs)
		r.heldN += len(pairs)
		return
	}
	r.opts.Catalog.PutKeys(pairs)
	clear(pairs) // the catalog holds the text now, not this slice
	r.keyPairs = pairs[:0]
}

// stageKeys stages what collectKeys holds (and what indexKey collected
// since) with one PutKeys, into a map made for them all.
func (r *Reput) stageKeys() {
	r.collectKeys(len(r.heldKeys) > 0)
	if len(r.heldKeys) > 0 {
		r.opts.Catalog.PutKeys(r.heldKeys...)
		clear(r.heldKeys)
		r.heldKeys, r.heldN = r.heldKeys[:0], 0
	}
}

// dropKeys forgets the keys collected or held and not staged: routing
// goes back to the checkpoint and collects them again.
func (r *Reput) dropKeys() {
	r.keyText, r.keyRefs = r.keyText[:0], r.keyRefs[:0]
	clear(r.heldKeys)
	r.heldKeys, r.heldN = r.heldKeys[:0], 0
}

// keyHeader is the header an idempotency key travels in (the engine's
// IdempotencyHeader), keyTimeHeader the one its Schedule's arrival time
// does (IdempotencyTimeHeader).
var (
	keyHeader     = []byte("hourglass-idempotency-key")
	keyTimeHeader = []byte("hourglass-idempotency-at")
)

// routeDone appends the done-record of id, for reason, to its segment's
// dispatch log.
func (r *Reput) routeDone(id message.ID, reason dispatchlog.Reason) error {
	if err := r.resolveAt(id.DeliverAt); err != nil {
		return err
	}
	seg, ok := r.FindSegment(id.DeliverAt)
	if !ok {
		// Its segment was retired: every entry in it was done, so this
		// one was delivered or cancelled already.
		r.stats.orphans.Add(1)
		return nil
	}
	// In use (inflight), so that a MarkDone keeping the writers within
	// their bound does not close it meanwhile.
	r.dmu.Lock()
	dw, err := r.dispatchWriterLocked(seg.Start)
	if err != nil {
		r.dmu.Unlock()
		return err
	}
	dw.inflight++
	r.dmu.Unlock()
	err = dw.w.Append(dispatchlog.Done{Seq: id.Seq, Reason: reason})
	r.dmu.Lock()
	dw.inflight--
	dw.dirty = true
	r.dmu.Unlock()
	if err != nil {
		return err
	}
	r.dirty = true
	r.stats.cancels.Add(1)
	if r.watched[seg.Start] != nil {
		r.events = append(r.events, event{cancel: true, why: reason, bucket: seg.Start, seq: id.Seq})
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
