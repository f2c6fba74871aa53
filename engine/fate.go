package engine

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"sync"

	"github.com/hourglassmq/hourglass/dispatchlog"
)

// What became of a message (docs/DESIGN.md, "What became of a message") is
// held in one place: the driver's fates. Between two durable states an
// entry is in live (a decision being recorded, a delivery being
// confirmed); once done, its seq and reason are in its loaded bucket's done
// set, whose durable form is the bucket's dispatch log; a bucket not in
// memory is answered from that log (doneLogs). Firing, Cancel, Reschedule,
// Get, List, retirement and loading all ask here.

// liveState is the state of an entry between two durable states.
type liveState uint8

const (
	// claimed: a Cancel or Reschedule decided on the entry and appends its
	// record; the entry must not fire, and fires after all if the append
	// fails.
	claimed liveState = iota + 1
	// recorded: that record is durable at off; reput has not routed it
	// into the dispatch log yet.
	recorded
	// inFlight: handed to the sink, not confirmed.
	inFlight
)

// fates is what the driver holds of the entries between two durable
// states. Owned by the driver goroutine.
type fates struct {
	// live holds them: claimed by a Cancel or Reschedule, recorded, or in
	// flight.
	live map[uint64]liveFate
	// decisions counts those claimed or recorded.
	decisions int
	// settling are the WaitDelivered calls waiting for deliveries in
	// flight (settle.go).
	settling []*settleWait
}

// liveFate is what the driver holds of one entry between two durable
// states.
type liveFate struct {
	state liveState
	// why is the done reason a claim records: Cancelled or Rescheduled.
	why dispatchlog.Reason
	off int64 // recorded: the record's commitlog offset
	// bucket is the start of the claimed entry's bucket: once its record
	// is routed, the FrozenAt bucket may have every entry done
	// (retirefuture.go).
	bucket int64
	// wait is closed when a claim is recorded or dropped, for the Cancels
	// that asked meanwhile; nil until one asks.
	wait chan struct{}
}

// stateOf maps a done reason to the state Get answers.
func stateOf(r dispatchlog.Reason) State {
	switch r {
	case dispatchlog.Cancelled:
		return StateCancelled
	case dispatchlog.Rescheduled:
		return StateRescheduled
	case dispatchlog.DeadLettered:
		return StateDeadLettered
	}
	return StateDelivered
}

// fateOf is what the driver knows of seq in the bucket at start: its live
// state, or its done reason in the loaded bucket. known is false when only
// the bucket's dispatch log can tell (the bucket is not in memory, or not
// loaded yet, or held). It runs on the driver goroutine.
func (d *driver) fateOf(seq uint64, start int64) (st State, known bool) {
	if lf, ok := d.fates.live[seq]; ok {
		switch lf.state {
		case inFlight:
			return StateDelivering, true
		case recorded:
			return stateOf(lf.why), true
		}
		return StatePending, true // claimed: undecided until its record is durable
	}
	b := d.buckets[start]
	if b == nil {
		return StatePending, false
	}
	if r, ok := b.done.Reason(seq); ok {
		return stateOf(r), true
	}
	return StatePending, b.ready && !b.corrupt
}

// decide records the outcome of a claim on seq: recorded at off, or
// dropped (off < 0: its record could not be appended, it fires after all).
// It wakes the Cancels waiting on the claim.
func (d *driver) decide(seq uint64, off int64) {
	d.call(context.Background(), func() {
		lf, ok := d.fates.live[seq]
		if !ok || lf.state != claimed {
			return // routed already, its done-record took its place
		}
		if lf.wait != nil {
			close(lf.wait)
			lf.wait = nil
		}
		if off < 0 {
			d.forget(seq)
			return
		}
		lf.state, lf.off = recorded, off
		d.fates.live[seq] = lf
	})
}

// doneRouted is told, on the driver goroutine, of a done-record reput
// routed to the loaded bucket at start (a cancel or a reschedule): the
// bucket's done set takes it, and a claim of it is over.
func (d *driver) doneRouted(start int64, seq uint64, why dispatchlog.Reason) {
	if b := d.buckets[start]; b != nil {
		b.done.Add(seq, why)
	}
	if lf, ok := d.fates.live[seq]; ok && lf.state != inFlight {
		if lf.wait != nil {
			close(lf.wait)
		}
		d.forget(seq)
	}
}

// claim registers a claim on seq of the bucket at start with the reason
// its record will give.
func (d *driver) claim(seq uint64, start int64, why dispatchlog.Reason) {
	d.fates.live[seq] = liveFate{state: claimed, why: why, bucket: start}
	d.fates.decisions++
}

// forget drops the claim on seq (claimed or recorded).
func (d *driver) forget(seq uint64) {
	delete(d.fates.live, seq)
	d.fates.decisions--
}

// pruneRecorded forgets recorded claims whose record reput has routed:
// from then on the dispatch log or the bucket's done set has it. The
// bucket of messages frozen on their own is noted, to be retired if that
// was its last entry not done (retirefuture.go).
func (d *driver) pruneRecorded() {
	if d.fates.decisions == 0 {
		return // only deliveries in flight
	}
	pos := d.e.reput.Position()
	for seq, lf := range d.fates.live {
		if lf.state == recorded && lf.off < pos {
			if d.isFrozenBucket(lf.bucket) {
				d.noteFuture(lf.bucket, lf.off)
			}
			d.forget(seq)
		}
	}
}

// claiming reports whether a Cancel or Reschedule is between its decision
// and its durable record.
func (d *driver) claiming() bool {
	if d.fates.decisions == 0 {
		return false
	}
	for _, lf := range d.fates.live {
		if lf.state == claimed {
			return true
		}
	}
	return false
}

// toFire returns how many of b's entries will still fire: those known
// (loaded, routed or rebuilt) that are not done, in flight, held back or
// damaged. A done-record of a seq the bucket does not hold (a Cancel of an
// ID that was never issued) keeps it one low.
func (b *bucket) toFire() int64 {
	return max(int64(b.entries)+int64(len(b.rebuilt))-int64(b.done.Len())-b.inflight-b.held-b.lost, 0)
}

// doneLogs answers what became of an entry of a bucket not in memory (the
// question Cancel, Reschedule and Get ask) from its dispatch log, reading
// each log once and then only what was appended since: asked for every
// entry of a bucket with many done-records, it reads the log once, not
// once per entry. It keeps the logs read last (maxCachedDone), each up to
// maxCachedDoneBytes; a larger one is read whole each time. Safe for
// concurrent use.
type doneLogs struct {
	mu   sync.Mutex
	logs map[string]*doneLog // by path
	tick uint64
}

const (
	maxCachedDone      = 4
	maxCachedDoneBytes = 64 << 20
)

// doneLog is what doneLogs holds of one dispatch log.
type doneLog struct {
	mu   sync.Mutex
	file os.FileInfo // the file read, to notice one made anew under its name
	end  int64       // read up to here
	set  dispatchlog.Set
	tail []dispatchlog.Done // RecordsFrom's buffer
	used uint64             // doneLogs.tick when last asked (under doneLogs.mu)
}

// reason returns why the dispatch log at path says seq is done (its first
// record of seq), and whether it says so at all.
func (c *doneLogs) reason(path string, seq uint64) (dispatchlog.Reason, bool, error) {
	l := c.log(path)
	l.mu.Lock()
	defer l.mu.Unlock()
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if fi.Size() > maxCachedDoneBytes {
		l.reset()
		set, _, err := dispatchlog.Load(path)
		if err != nil {
			return 0, false, err
		}
		r, ok := set.Reason(seq)
		return r, ok, nil
	}
	if l.file == nil || !os.SameFile(l.file, fi) || fi.Size() < l.end {
		l.reset()
	}
	l.file = fi
	if fi.Size() > l.end || l.end == 0 {
		recs, end, err := dispatchlog.RecordsFrom(path, l.end, l.tail[:0])
		if err != nil {
			return 0, false, err
		}
		for _, r := range recs {
			l.set.Add(r.Seq, r.Reason)
		}
		l.tail, l.end = recs, end
	}
	r, ok := l.set.Reason(seq)
	return r, ok, nil
}

// reset forgets what was read. l.mu is held.
func (l *doneLog) reset() { l.file, l.end, l.set, l.tail = nil, 0, dispatchlog.Set{}, nil }

// log returns the entry of path, making room for it.
func (c *doneLogs) log(path string) *doneLog {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.logs == nil {
		c.logs = map[string]*doneLog{}
	}
	c.tick++
	l := c.logs[path]
	if l == nil {
		if len(c.logs) >= maxCachedDone {
			var old string
			for p, x := range c.logs {
				if old == "" || x.used < c.logs[old].used {
					old = p
				}
			}
			delete(c.logs, old)
		}
		l = &doneLog{}
		c.logs[path] = l
	}
	l.used = c.tick
	return l
}
