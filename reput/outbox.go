package reput

import (
	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// outbox is what routing has to tell the callbacks (OnEntries, OnCancel,
// OnSegment, OnControl), in routing order, until publish hands it over,
// and which buckets are watched. Owned by the routing goroutine.
type outbox struct {
	watched map[int64]*watchState
	events  []event
}

// watchState is what a watched bucket's watcher has been given: entries
// below published were handed to OnEntries (or were below Watch's end),
// entries below queued are handed or in the pending events.
type watchState struct {
	published, queued int64
}

type event struct {
	entry    Entry
	cancel   bool
	why      dispatchlog.Reason // cancel: the done-record's reason
	bucket   int64
	seq      uint64
	segment  *schedulelog.SegmentInfo
	segEvent bool
	control  *message.Control
}

// deliver hands the events to the callbacks in opts: everything queued
// for watchers is published.
func (o *outbox) deliver(opts *Options) {
	var entries []Entry
	flush := func() {
		if len(entries) > 0 && opts.OnEntries != nil {
			opts.OnEntries(entries)
		}
		entries = nil
	}
	for i, ev := range o.events {
		switch {
		case ev.segEvent:
			flush()
			if opts.OnSegment != nil {
				opts.OnSegment(*ev.segment)
			}
		case ev.cancel:
			flush()
			if opts.OnCancel != nil {
				opts.OnCancel(ev.bucket, ev.seq, ev.why)
			}
		case ev.control != nil:
			flush()
			if opts.OnControl != nil {
				opts.OnControl(*ev.control)
			}
		default:
			if entries == nil {
				// Room for the rest: one allocation, not one per doubling
				// (the slice is OnEntries' to keep, so it is new each time).
				entries = make([]Entry, 0, len(o.events)-i)
			}
			entries = append(entries, ev.entry)
		}
	}
	flush()
	clear(o.events)
	o.events = o.events[:0]
	for _, ws := range o.watched {
		ws.published = ws.queued
	}
}

// reset drops the entries not handed over yet (routing goes back to the
// checkpoint and routes them again), keeping cancels and new segments.
func (o *outbox) reset() {
	kept := o.events[:0]
	for _, ev := range o.events {
		if ev.cancel || ev.segEvent {
			kept = append(kept, ev)
		}
	}
	clear(o.events[len(kept):])
	o.events = kept
	for _, ws := range o.watched {
		ws.queued = ws.published
	}
}

// catchUp queues the entries of watched bucket start that its file holds
// beyond what the watcher has (written before a reset dropped their
// events), so that a reopened writer's bucket misses nothing.
func (o *outbox) catchUp(start int64, w *schedulelog.Writer) error {
	ws := o.watched[start]
	if ws == nil || ws.queued >= w.Size() {
		return nil
	}
	rd, err := schedulelog.OpenReader(w.Path())
	if err != nil {
		return err
	}
	defer rd.Close()
	it := rd.IterFrom(max(ws.queued, schedulelog.FirstOffset))
	for it.Next() && it.Offset() < w.Size() {
		o.events = append(o.events, event{entry: Entry{Bucket: start, Offset: it.Offset(), Seq: it.Seq(), DeliverAt: it.Message().DeliverAt}})
	}
	if err := it.Err(); err != nil {
		return err
	}
	ws.queued = w.Size()
	return nil
}
