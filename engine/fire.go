package engine

import (
	"time"

	"github.com/hourglassmq/hourglass/wheel"
)

// requeueDelayMs is how long entries wait in the wheel when their topic's
// sink is failing.
const requeueDelayMs = 200

// add puts the entry at off of b (see entryRef) into the wheel.
func (d *driver) add(b *bucket, deadline, off int64) {
	ref, err := d.entryRef(b, off)
	if err != nil {
		// It stays in its segment, which is then never retired: a
		// restart loads it.
		b.corrupt = true
		d.e.opts.Logger.Error("engine: a loaded entry cannot be referenced; it is delivered after a restart", "bucket", fmtMs(b.start), "offset", off, "err", err)
		return
	}
	d.w.Add(deadline, ref)
	b.pending++
}

// fire hands over what is due by horizon (now plus the handoff lead) to the
// topics' lanes, once every start-up check has passed (startcheck.go).
func (d *driver) fire(now, horizon int64) {
	if !d.started() || d.n.inflightN.Load() >= int64(d.e.opts.MaxInflight) {
		return
	}
	d.w.Expire(horizon, func(deadline int64, ref wheel.Ref) bool {
		b, off := d.resolve(ref)
		if b == nil {
			return true
		}
		b.pending--
		seq, err := b.entry(off, &d.firing.m)
		if err != nil {
			d.n.corrupt.Add(1)
			b.corrupt = true
			b.lost++
			d.e.opts.Logger.Error("engine: damaged schedule entry not delivered", "bucket", fmtMs(b.start), "offset", off, "err", err)
			return true
		}
		if b.done.Contains(seq) {
			return true // cancelled (cancels are lazy), or a duplicate
		}
		if lf, ok := d.fates.live[seq]; ok {
			if lf.state == claimed {
				// A Cancel decided on it but its record is not durable
				// yet: hold it back a moment, so that it fires after all
				// if that append fails.
				d.firing.later = append(d.firing.later, laterEntry{b, horizon + 1, off})
			}
			return true // recorded: cancelled; reput writes its done-record
		}
		if d.firing.m.DeliverAt > horizon { // cannot happen: the wheel never hands early
			d.firing.later = append(d.firing.later, laterEntry{b, d.firing.m.DeliverAt, off})
			return true
		}
		l := d.lane(d.firing.m.Topic)
		b.topics.note(l)
		bt := d.firing.building[l]
		if bt == nil {
			bt = newBatch()
			d.firing.building[l] = bt
		}
		bt.add(item{seq: seq, bucket: b.start, deliverAt: d.firing.m.DeliverAt, off: off}, &d.firing.m)
		d.fates.live[seq] = liveFate{state: inFlight}
		b.inflight++
		d.n.fired.Add(1)
		d.e.opts.Observer.Fired(l.topic, time.Duration(now-d.firing.m.DeliverAt)*time.Millisecond)
		if len(bt.items) >= d.e.opts.fireBatch {
			// Sent after Expire returns: sending may put entries back
			// into the wheel, which Expire's callback must not do.
			d.firing.full = append(d.firing.full, fullBatch{l, bt})
			delete(d.firing.building, l)
		}
		return d.n.inflightN.Add(1) < int64(d.e.opts.MaxInflight)
	})
	for _, fb := range d.firing.full {
		d.send(fb.l, fb.bt)
	}
	clear(d.firing.full)
	d.firing.full = d.firing.full[:0]
	for l, bt := range d.firing.building {
		d.send(l, bt)
		delete(d.firing.building, l)
	}
	for _, le := range d.firing.later {
		d.add(le.b, le.deadline, le.off)
	}
	clear(d.firing.later)
	d.firing.later = d.firing.later[:0]
}

type fullBatch struct {
	l  *lane
	bt *batch
}

// laterEntry is an entry Expire handed over that goes back into the wheel
// (the wheel may not be changed from inside Expire).
type laterEntry struct {
	b        *bucket
	deadline int64
	off      int64
}

// send hands a batch to its lane. When the lane is busy the batch waits in
// the lane's overflow, in order (MaxInflight bounds the total). A lane
// whose sink is failing sends its entries back to the wheel for a while
// instead, so that it cannot take all of MaxInflight from other topics.
func (d *driver) send(l *lane, bt *batch) {
	if l.failing.Load() {
		d.requeue(bt.items)
		return
	}
	l.held += len(bt.items)
	if len(l.overflow) == 0 {
		select {
		case l.queue <- bt:
			return
		default:
		}
	}
	l.overflow = append(l.overflow, bt)
	l.overflowN += len(bt.items)
	d.firing.overflowing++
}

// pushOverflow moves waiting batches into lanes that have room, and
// reports whether any are still waiting.
func (d *driver) pushOverflow() bool {
	if d.firing.overflowing == 0 {
		return false
	}
	for _, l := range d.lanes {
		for len(l.overflow) > 0 {
			select {
			case l.queue <- l.overflow[0]:
				l.overflowN -= len(l.overflow[0].items)
				l.overflow[0] = nil
				l.overflow = l.overflow[1:]
				d.firing.overflowing--
				continue
			default:
			}
			break
		}
	}
	return d.firing.overflowing > 0
}

// lane returns the live lane of topic, starting one if there is none (the
// first entry fired for the topic, or the first since its lane retired).
func (d *driver) lane(topic []byte) *lane {
	if l, ok := d.lanes[string(topic)]; ok {
		return l
	}
	l := newLane(d, string(topic))
	l.idleSince = d.now()
	d.lanes[l.topic] = l
	d.lanesWG.Add(1)
	go l.run()
	return l
}

// confirmed handles the end of items handed to lane l: delivered and
// recorded done (err nil), or not delivered because the engine is
// stopping.
func (d *driver) confirmed(l *lane, items []item, err error) {
	for _, it := range items {
		delete(d.fates.live, it.seq)
		d.fates.settled(it.seq)
		if b := d.buckets[it.bucket]; b != nil {
			b.inflight--
			if err == nil {
				b.done.Add(it.seq, it.reason())
			}
		}
	}
	d.n.inflightN.Add(-int64(len(items)))
	if err == nil {
		d.n.delivered.Add(int64(len(items)))
	}
	if l.held -= len(items); l.held == 0 {
		l.idleSince = d.now()
	}
	putItems(items)
}

// requeue puts fired items back into the wheel, a moment later, because
// their topic's sink is failing.
func (d *driver) requeue(items []item) {
	now := d.now()
	for _, it := range items {
		delete(d.fates.live, it.seq)
		d.fates.settled(it.seq)
		if b := d.buckets[it.bucket]; b != nil {
			b.inflight--
			d.add(b, max(it.deliverAt, now+d.leadMs+requeueDelayMs), it.off)
		}
	}
	d.n.inflightN.Add(-int64(len(items)))
	putItems(items)
}
