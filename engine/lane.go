package engine

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/message"
)

// laneDepth is how many batches may wait in a lane's channel; more wait in
// its overflow list on the driver.
const laneDepth = 16

// commitDepth is how many delivered batches may wait for their
// done-records; beyond it the lane waits.
const commitDepth = 64

// minBackoff is the first retry backoff for a failing sink; it doubles up
// to Options.MaxSinkBackoff.
const minBackoff = 50 * time.Millisecond

// item is one fired entry in a batch.
type item struct {
	seq       uint64
	bucket    int64
	deliverAt int64
	off       int64 // entry offset in its segment
	p0, p1    int   // its schedule payload in batch.buf
	// expired: past its expiry when the lane took it, so not handed to
	// the sink (which is no ExpiryHandler) and recorded dead-lettered.
	expired bool
}

// reason is the done reason of it once its batch is over.
func (it *item) reason() dispatchlog.Reason {
	if it.expired {
		return dispatchlog.DeadLettered
	}
	return dispatchlog.Delivered
}

// batch is a run of fired entries of one topic, with copies of their
// messages: the lane must not read the segment mappings the driver owns.
type batch struct {
	items []item
	buf   []byte
}

func newBatch() *batch {
	bt := &batch{}
	if p, ok := batchBufs.Get().(*[]byte); ok {
		bt.buf = (*p)[:0]
	}
	if p, ok := itemSlices.Get().(*[]item); ok {
		bt.items = (*p)[:0]
	} else {
		bt.items = make([]item, 0, firstItems)
	}
	if bt.buf == nil {
		bt.buf = make([]byte, 0, firstBatchBuf)
	}
	return bt
}

// A batch made without pooled memory starts with room for firstItems
// messages and firstBatchBuf bytes of them: in a hot second every buffer
// is in flight at once, and new ones grew from nothing.
const (
	firstItems    = 64
	firstBatchBuf = 32 << 10
)

// itemSlices holds the item slices of batches the driver has confirmed or
// requeued (putItems), for new batches: grown from nothing for each batch,
// they were a twentieth of the server's CPU in a hot second.
var itemSlices sync.Pool

// putItems gives items back to itemSlices once nothing reads them.
func putItems(items []item) {
	if cap(items) == 0 || cap(items) > maxPooledItems {
		return
	}
	items = items[:0]
	itemSlices.Put(&items)
}

const maxPooledItems = 4 * defaultFireBatch

// batchBufs holds the buffers of batches whose Sink call is over (a
// Delivery's Message is valid only during the call), so that the next
// batches encode into memory that already has room: grown from nothing,
// each batch of fireBatch messages copied its buffer about ten times over
// (a tenth of the server's CPU in a hot second). Buffers above
// maxPooledBatchBuf are left to the collector.
var batchBufs sync.Pool

const maxPooledBatchBuf = 1 << 20

// release gives bt's buffer back to batchBufs; bt keeps its items.
func (bt *batch) release() {
	if b := bt.buf; cap(b) > 0 && cap(b) <= maxPooledBatchBuf {
		batchBufs.Put(&b)
	}
	bt.buf = nil
}

func (b *batch) add(it item, m *message.Message) {
	it.p0 = len(b.buf)
	b.buf = message.AppendSchedule(b.buf, m)
	it.p1 = len(b.buf)
	b.items = append(b.items, it)
}

// lane delivers one topic's batches in order, retrying a failing sink with
// backoff without holding up other topics.
//
// A lane is two goroutines: one calls the sink, the other records what was
// delivered in the dispatch logs, many batches per fsync, so that the
// sink is never kept waiting for a disk flush. They run until the driver
// closes queue: at Close, or once the lane has been idle for a while.
type lane struct {
	d      *driver
	topic  string
	queue  chan *batch
	commit chan *batch // delivered, awaiting done-records
	// failing is set while the sink fails for this topic: the driver then
	// sends the topic's due entries back to the wheel instead of queueing.
	failing atomic.Bool

	// Owned by the driver goroutine.
	overflow  []*batch // batches waiting for room in queue
	overflowN int      // entries in overflow
	// held counts the entries sent to the lane (in queue or overflow,
	// being delivered or recorded) and not yet confirmed; idleSince is
	// when it last fell to zero, on the engine's clock (UTC ms). A lane
	// that held nothing for Options.LaneIdle is retired (retireLanes).
	held      int
	idleSince int64
}

func newLane(d *driver, topic string) *lane {
	return &lane{d: d, topic: topic, queue: make(chan *batch, laneDepth), commit: make(chan *batch, commitDepth)}
}

func (l *lane) run() {
	defer l.d.lanesWG.Done()
	committed := make(chan struct{})
	go func() {
		defer close(committed)
		l.committer()
	}()
	l.deliverer()
	close(l.commit)
	<-committed
}

func (l *lane) deliverer() {
	e := l.d.e
	var msgs []message.Message
	var dels []Delivery
	var bts []*batch
	var carry *batch // taken from the queue, for the next call
	for {
		bt := carry
		carry = nil
		if bt == nil {
			var ok bool
			if bt, ok = <-l.queue; !ok {
				return
			}
		}
		// Deliver what waits in one Sink call (one fsync in the built-in
		// queue), up to SinkBatch messages: while the sink is busy, small
		// batches pile up here, and taking them one at a time would cap
		// delivery at one small batch per sink round trip.
		bts = append(bts[:0], bt)
		n, size := len(bt.items), len(bt.buf)
	more:
		for n < e.opts.SinkBatch && size < MaxSinkBatchBytes {
			select {
			case b, ok := <-l.queue:
				if !ok {
					break more
				}
				if n+len(b.items) > e.opts.SinkBatch || size+len(b.buf) > MaxSinkBatchBytes {
					carry = b
					break more
				}
				bts = append(bts, b)
				n += len(b.items)
				size += len(b.buf)
			default:
				break more
			}
		}
		msgs = msgs[:0]
		dels = dels[:0]
		for _, bt := range bts {
			for _, it := range bt.items {
				// DecodeSchedule sets every field, and reuses the
				// element's Headers from an earlier call.
				if len(msgs) < cap(msgs) {
					msgs = msgs[:len(msgs)+1]
				} else {
					msgs = append(msgs, message.Message{})
				}
				if err := message.DecodeSchedule(bt.buf[it.p0:it.p1], &msgs[len(msgs)-1]); err != nil {
					panic("engine: a message the engine encoded does not decode: " + err.Error())
				}
			}
		}
		h, ok := e.opts.Sink.(ExpiryHandler)
		sinkExpires := ok && h.HandlesExpiry()
		backoff := min(minBackoff, e.opts.MaxSinkBackoff)
		var err error
		for {
			// Each attempt hands over only what is not past its expiry
			// now (never delivered after it); the rest is recorded
			// dead-lettered.
			dels = dels[:0]
			nowMs := e.opts.Now().UnixMilli()
			i := 0
			for _, bt := range bts {
				for k := range bt.items {
					it := &bt.items[k]
					if !it.expired && !sinkExpires && message.Expired(msgs[i].Headers, nowMs) {
						it.expired = true
						l.d.n.expired.Add(1)
					}
					if !it.expired {
						dels = append(dels, Delivery{ID: message.ID{DeliverAt: it.deliverAt, Seq: it.seq}, Message: &msgs[i]})
					}
					i++
				}
			}
			if len(dels) == 0 {
				break
			}
			err = e.opts.Sink.Deliver(l.d.ctx, l.topic, dels)
			if err == nil || l.d.ctx.Err() != nil {
				l.failing.Store(false)
				break
			}
			l.failing.Store(true)
			l.d.n.retries.Add(1)
			e.opts.Observer.Retried(l.topic, len(dels), err)
			e.opts.Logger.Warn("engine: sink failed; retrying", "topic", l.topic, "messages", len(dels), "backoff", backoff, "err", err)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-l.d.ctx.Done():
				t.Stop()
			}
			backoff = min(2*backoff, e.opts.MaxSinkBackoff)
		}
		// The sink is done with the messages: their buffers go back for
		// new batches (the items stay for the done-records; msgs still
		// point into the buffers, but are decoded again before any read).
		for _, bt := range bts {
			bt.release()
		}
		for _, bt := range bts {
			if err != nil {
				// Stopping: not delivered, so not done; a restart delivers it.
				l.d.post(ev{kind: evConfirm, lane: l, items: bt.items, err: err})
				continue
			}
			l.commit <- bt
		}
	}
}

// committer appends done-records for delivered batches: everything waiting,
// grouped by bucket, one group-committed append per bucket.
func (l *lane) committer() {
	e := l.d.e
	done := map[int64][]dispatchlog.Done{}
	var bts []*batch
	for bt := range l.commit {
		bts = append(bts[:0], bt)
	more:
		for len(bts) < commitDepth {
			select {
			case b, ok := <-l.commit:
				if !ok {
					break more
				}
				bts = append(bts, b)
			default:
				break more
			}
		}
		for b, recs := range done { // keep each bucket's slice for the next round
			if len(recs) == 0 {
				delete(done, b)
			} else {
				done[b] = recs[:0]
			}
		}
		n := 0
		for _, bt := range bts {
			for _, it := range bt.items {
				done[it.bucket] = append(done[it.bucket], dispatchlog.Done{Seq: it.seq, Reason: it.reason()})
			}
			n += len(bt.items)
		}
		var err error
		for b, recs := range done {
			if len(recs) == 0 {
				continue
			}
			if merr := l.markDone(b, recs); merr != nil {
				// Delivered but not recorded: a restart delivers it again.
				l.d.n.unconfirmed.Add(int64(len(recs)))
				e.opts.Logger.Error("engine: recording deliveries failed", "topic", l.topic, "messages", len(recs), "err", merr)
				err = merr
			}
		}
		if err == nil {
			e.opts.Observer.Done(l.topic, n)
		}
		if e.CountsPending() {
			// Done in this run either way (not recorded: delivered again
			// after a restart, which counts it again).
			var size int64
			for _, bt := range bts {
				for _, it := range bt.items {
					size += int64(it.p1 - it.p0)
				}
			}
			e.pending.add(l.topic, -int64(n), -size)
		}
		for _, bt := range bts {
			l.d.post(ev{kind: evConfirm, lane: l, items: bt.items, err: err})
		}
	}
}

// markDone records recs done in bucket's dispatch log. A failure (a full
// disk, too many open files, a failing device) is retried with backoff,
// 50 ms doubling to 5 s, and reported to the health registry (StageFire)
// until it works: the messages were delivered, and a done-record that is
// never written delivers them again after a restart. Meanwhile the lane's
// queue fills and firing for the topic waits. It gives up only when the
// engine stops.
func (l *lane) markDone(bucket int64, recs []dispatchlog.Done) error {
	e := l.d.e
	backoff := minBackoff
	for attempt := 1; ; attempt++ {
		err := l.d.markDone(bucket, recs...)
		if err == nil {
			if attempt > 1 {
				e.health.ok(StageFire)
				e.opts.Logger.Info("engine: recording deliveries works again", "topic", l.topic, "attempts", attempt)
			}
			return nil
		}
		if l.d.ctx.Err() != nil {
			return err
		}
		e.health.fail(StageFire, fmt.Errorf("recording %d deliveries of topic %s in bucket %s: %w", len(recs), l.topic, fmtMs(bucket), err))
		if attempt == 1 || attempt%20 == 0 {
			e.opts.Logger.Warn("engine: recording deliveries failed; retrying", "topic", l.topic, "messages", len(recs),
				"attempts", attempt, "backoff", backoff, "err", err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-l.d.ctx.Done():
			t.Stop()
			return err
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}
