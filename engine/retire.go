package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/hourglassmq/hourglass/catalog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/reput"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// DefaultLaneIdle is Options.LaneIdle's default: how long a topic's lane
// with nothing to deliver keeps its goroutines.
const DefaultLaneIdle = time.Minute

// retireBuckets retires the buckets that are over and fully done (reput
// deletes their segment and dispatch log), and returns when it next needs
// to run. Not while a Cancel is between its decision and its durable
// cancel record: the entry it keeps from firing would vanish with its
// segment if that append then failed. Nor before the start-up checks have
// passed (startcheck.go): a start that refuses leaves the buckets' files
// as it found them.
func (d *driver) retireBuckets(now int64) int64 {
	next := never
	if !d.started() {
		return next // passed() wakes the loop
	}
	unarmed := d.claiming()
	for _, b := range d.buckets {
		if unarmed {
			next = min(next, now+1)
			break
		}
		if !b.ready || b.retire.busy || b.end > now {
			if b.end > now {
				next = min(next, b.end)
			}
			continue
		}
		if b.pending > 0 || b.inflight > 0 || b.corrupt {
			continue
		}
		if time.Now().Before(b.retire.next) {
			next = min(next, now+time.Until(b.retire.next).Milliseconds()+1)
			continue
		}
		b.retire.busy = true
		start, entries, topics, prior := b.start, b.entries, b.topics.list(), b.topics.prior
		go func() {
			if prior {
				topics = d.e.segmentTopics(start, topics)
			}
			err := d.e.reput.Retire(start, entries, topics...)
			d.post(ev{kind: evRetired, bucket: start, err: err})
		}()
	}
	return next
}

// retired finishes the retirement of the bucket at start: it is unloaded,
// or, if reput refused or failed, tried again a second later.
func (d *driver) retired(start int64, err error) {
	b := d.buckets[start]
	if b == nil {
		return
	}
	b.retire.busy = false
	if err != nil {
		b.retire.next = time.Now().Add(time.Second)
		// After routing stopped (reput closed) every retry fails alike;
		// the stall on /readyz already says why.
		if !errors.Is(err, reput.ErrNotDurable) && !errors.Is(err, reput.ErrBusy) && !errors.Is(err, reput.ErrClosed) {
			d.e.opts.Logger.Warn("engine: retiring a segment failed", "bucket", fmtMs(b.start), "err", err)
		}
		return
	}
	d.unload(b)
}

func (d *driver) unload(b *bucket) {
	d.ld.segsDirty = true
	if b.mr != nil {
		b.mr.Close()
	}
	delete(d.buckets, b.start)
	d.freeSlots(b)
	d.n.loadedN.Add(-1)
}

// retireLanes stops the lanes that have held nothing for laneIdleMs, so
// that a topic no longer fired to keeps no goroutines, and returns when
// the next idle lane is due to retire. A lane holds nothing once every
// entry sent to it is confirmed: its goroutines are waiting for work, and
// closing its queue ends them. The next entry fired for the topic starts
// a new lane (driver.lane); both happen on the driver goroutine, so an
// entry goes either to the old lane before it retires or to the new one.
func (d *driver) retireLanes(now int64) int64 {
	next := never
	if d.laneIdleMs < 0 {
		return next
	}
	for topic, l := range d.lanes {
		if l.held > 0 {
			continue
		}
		if at := l.idleSince + d.laneIdleMs; at > now {
			next = min(next, at)
			continue
		}
		delete(d.lanes, topic)
		close(l.queue)
	}
	return next
}

// topicSet is the set of topics a bucket's messages were delivered to, for
// catalog.Delivered when it retires. Owned by the driver goroutine.
type topicSet struct {
	set  map[string]struct{}
	last *lane // the lane of the last entry noted: most entries in a row go to one
	// prior is set when an earlier run delivered some of the bucket's
	// messages: its topics are read from the segment at retirement.
	prior bool
}

func (s *topicSet) note(l *lane) {
	if l == s.last {
		return
	}
	s.last = l
	if s.set == nil {
		s.set = map[string]struct{}{}
	}
	if len(s.set) <= catalog.MaxDeliveredTopics {
		s.set[l.topic] = struct{}{}
	}
}

func (s *topicSet) list() []string { return slices.Sorted(maps.Keys(s.set)) }

// segmentTopics adds to topics those of every entry of the segment at
// start (read once, at its retirement, when an earlier run delivered some
// of it).
func (e *Engine) segmentTopics(start int64, topics []string) []string {
	set := map[string]struct{}{}
	for _, t := range topics {
		set[t] = struct{}{}
	}
	r, err := schedulelog.OpenReader(filepath.Join(e.schedDir, schedulelog.Name(start)))
	if err != nil {
		return topics // retiring fails on it too, and is tried again
	}
	defer r.Close()
	it := r.Iter()
	for it.Next() && len(set) <= catalog.MaxDeliveredTopics {
		if t := it.Message().Topic; len(t) > 0 {
			if _, ok := set[string(t)]; !ok {
				set[string(t)] = struct{}{}
			}
		}
	}
	if len(set) > catalog.MaxDeliveredTopics {
		return nil
	}
	return slices.Sorted(maps.Keys(set))
}

// DeliveredTo returns the topics the messages of id's bucket went to, once
// that bucket is retired (its segment deleted): the built-in queue may
// still hold the message, under one of them or its dead-letter topic.
func (e *Engine) DeliveredTo(ctx context.Context, id message.ID) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	k, v, ok, err := e.cat.Floor(catalog.Delivered, catalog.BucketKey(id.DeliverAt))
	if err != nil || !ok {
		return nil, err
	}
	d, topics, ok := catalog.DecodeDelivered(v)
	if start := int64(binary.BigEndian.Uint64(k)); !ok || id.DeliverAt >= start+d.Milliseconds() {
		return nil, nil
	}
	return topics, nil
}
