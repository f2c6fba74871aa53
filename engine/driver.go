package engine

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/reput"
	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/wheel"
)

// bucket is a schedule segment loaded into the wheel. Owned by the driver
// goroutine.
type bucket struct {
	start, end int64 // UTC ms
	slot       uint8 // wheel.Ref bucket number
	mr         *schedulelog.MappedReader
	done       dispatchlog.Set // done seqs in the dispatch log when loaded, plus cancels since
	cancelled  dispatchlog.Set // seqs cancelled while loaded, so a repeated Cancel says so
	delivered  seqRuns         // seqs delivered while loaded: only Cancel asks
	ready      bool            // the loader has finished
	entries    uint64          // entries known: loaded from the file plus routed since
	pending    int64           // in the wheel
	inflight   int64           // handed to the sink, not confirmed
	corrupt    bool            // an entry failed to decode: never retire automatically
	retiring   bool
	retryAt    time.Time // earliest next retire attempt
}

type evKind int

const (
	evEntry evKind = iota
	evCancel
	evSegment
	evChunk
	evLoaded
	evConfirm
	evRequeue
	evRetired
	evCall
)

type refAt struct {
	deadline int64
	ref      wheel.Ref
}

type ev struct {
	kind    evKind
	entries []reput.Entry
	bucket  int64
	seq     uint64
	chunk   []refAt
	loaded  *loadResult
	items   []item
	err     error
	call    func()
}

type loadResult struct {
	start   int64
	done    *dispatchlog.Set
	entries uint64
	err     error
}

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

// driver owns the wheel and the loaded buckets; one goroutine runs it and
// everything else talks to it through its event queue.
type driver struct {
	// leadMs is Options.HandoffLead: entries are fired this much early.
	leadMs int64
	e      *Engine
	now    func() int64

	// qmu guards queue; wake is signalled when it becomes non-empty.
	qmu   sync.Mutex
	queue []ev
	wake  chan struct{}

	quit    chan struct{}
	stopped chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	lanesWG sync.WaitGroup

	// Owned by the driver goroutine.
	w        *wheel.Wheel // untracked: cancels are lazy, refs are sparse offsets
	buckets  map[int64]*bucket
	slots    [256]*bucket
	intents  map[uint64]int64 // cancelled seqs -> cancel record offset (-1 until appended)
	inflight map[uint64]struct{}
	lanes    map[string]*lane
	building map[*lane]*batch
	// overflowing counts batches waiting in lanes' overflow lists.
	overflowing int
	later       []laterEntry
	full        []fullBatch
	loading     bool
	// segsDirty says the segment list may hold a bucket to load before
	// nextLoad (a segment was created, a load finished, a bucket left).
	segsDirty bool
	nextLoad  int64
	caught    bool // reput has routed everything present at Open
	startEnd  int64
	m         message.Message

	fired, delivered, retries, corrupt, unconfirmed atomic.Int64
	inflightN                                       atomic.Int64
	pendingN                                        atomic.Int64
	loadedN                                         atomic.Int64
	loops                                           atomic.Int64 // iterations of run's loop, for tests
}

func newDriver(e *Engine) *driver {
	ctx, cancel := context.WithCancel(context.Background())
	return &driver{
		e:         e,
		now:       func() int64 { return e.opts.Now().UnixMilli() },
		leadMs:    e.opts.HandoffLead.Milliseconds(),
		w:         wheel.NewUntracked(),
		segsDirty: true,
		wake:      make(chan struct{}, 1),
		quit:      make(chan struct{}),
		stopped:   make(chan struct{}),
		ctx:       ctx,
		cancel:    cancel,
		buckets:   make(map[int64]*bucket),
		intents:   make(map[uint64]int64),
		inflight:  make(map[uint64]struct{}),
		lanes:     make(map[string]*lane),
		building:  make(map[*lane]*batch),
	}
}

func (d *driver) post(e ev) {
	d.qmu.Lock()
	d.queue = append(d.queue, e)
	d.qmu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Callbacks from reput, on its goroutine: queue and return.
func (d *driver) onEntries(ens []reput.Entry) { d.post(ev{kind: evEntry, entries: ens}) }
func (d *driver) onCancel(b int64, seq uint64) {
	d.post(ev{kind: evCancel, bucket: b, seq: seq})
}
func (d *driver) onSegment(schedulelog.SegmentInfo) { d.post(ev{kind: evSegment}) }

// call runs fn on the driver goroutine and waits for it.
func (d *driver) call(ctx context.Context, fn func()) error {
	done := make(chan struct{})
	d.post(ev{kind: evCall, call: func() { fn(); close(done) }})
	select {
	case <-done:
		return nil
	case <-d.stopped:
		select {
		case <-done:
			return nil
		default:
		}
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
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

func (d *driver) stats() Stats {
	return Stats{
		Fired: d.fired.Load(), Delivered: d.delivered.Load(), Retries: d.retries.Load(),
		Pending: d.pendingN.Load(), Inflight: d.inflightN.Load(), Loaded: int(d.loadedN.Load()),
		Corrupt: d.corrupt.Load(), Unconfirmed: d.unconfirmed.Load(),
	}
}

func (d *driver) pendingByBucket() map[int64]int64 {
	out := map[int64]int64{}
	d.call(context.Background(), func() {
		for s, b := range d.buckets {
			out[s] = b.pending + b.inflight
		}
	})
	return out
}

func (d *driver) stop() {
	close(d.quit)
	<-d.stopped
}

// run is the driver goroutine.
func (d *driver) run(startEnd int64) {
	defer close(d.stopped)
	d.startEnd = startEnd
	go func() {
		// Until everything in the commitlog at Open is routed, a durable
		// cancel may not be in any dispatch log yet: load nothing before.
		err := d.e.reput.WaitRouted(d.ctx, startEnd)
		d.post(ev{kind: evCall, call: func() {
			if err == nil {
				d.caught = true
			}
		}})
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d.loops.Add(1)
		d.drain()
		now := d.now()
		waiting := d.pushOverflow()
		d.fire(now, now+d.leadMs)
		next := d.maintain(now)
		d.pruneIntents()
		// At MaxInflight fire takes nothing, so an overdue wheel entry
		// must not set the wait to zero: the loop would spin until the
		// sink confirms (it did, at half the server's CPU while a hot
		// second drained into a busy queue). Room comes back only with a
		// confirm or requeue event, and posting one wakes the loop.
		if n, ok := d.w.Next(); ok && n-d.leadMs < next && d.inflightN.Load() < int64(d.e.opts.MaxInflight) {
			next = n - d.leadMs
		}
		if waiting {
			next = min(next, now+1) // a lane is busy: look again in a millisecond
		}
		d.pendingN.Store(int64(d.w.Len()))
		if d.hasQueued() {
			continue
		}
		wait := time.Duration(min(next-d.now(), maxSleepMs)) * time.Millisecond
		if wait <= 0 {
			continue
		}
		timer.Reset(wait)
		select {
		case <-d.quit:
			d.shutdown()
			return
		case <-d.wake:
		case <-timer.C:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

func (d *driver) hasQueued() bool {
	d.qmu.Lock()
	defer d.qmu.Unlock()
	return len(d.queue) > 0
}

func (d *driver) shutdown() {
	d.cancel()
	for _, l := range d.lanes {
		close(l.queue)
	}
	d.lanesWG.Wait()
	for _, b := range d.buckets {
		if b.mr != nil {
			b.mr.Close()
		}
	}
}

// drainBatch bounds the events handled between two looks at the wheel, so
// that a flood of routed entries cannot hold up firing.
const drainBatch = 256

// drain handles queued events, at most drainBatch of them.
func (d *driver) drain() {
	d.qmu.Lock()
	q := d.queue
	if len(q) > drainBatch {
		d.queue = q[drainBatch:]
		q = q[:drainBatch]
	} else {
		d.queue = nil
	}
	d.qmu.Unlock()
	for i := range q {
		d.handle(&q[i])
		q[i] = ev{}
	}
}

func (d *driver) handle(e *ev) {
	switch e.kind {
	case evEntry:
		var b *bucket
		for _, en := range e.entries {
			if b == nil || b.start != en.Bucket {
				if b = d.buckets[en.Bucket]; b == nil {
					continue // unwatched meanwhile; it is in the file for the next load
				}
			}
			b.entries++
			d.add(b, en.DeliverAt, en.Offset)
		}
	case evCancel:
		if b := d.buckets[e.bucket]; b != nil {
			b.done.Add(e.seq)
			b.cancelled.Add(e.seq)
		}
	case evSegment:
		d.segsDirty = true
	case evChunk:
		b := d.buckets[e.bucket]
		if b == nil {
			return
		}
		for _, ra := range e.chunk {
			if d.w.Add(ra.deadline, ra.ref) {
				b.pending++
			}
		}
	case evLoaded:
		d.loaded(e.loaded)
	case evConfirm:
		for _, it := range e.items {
			delete(d.inflight, it.seq)
			if b := d.buckets[it.bucket]; b != nil {
				b.inflight--
				if e.err == nil {
					b.delivered.add(it.seq)
				}
			}
		}
		d.inflightN.Add(-int64(len(e.items)))
		if e.err == nil {
			d.delivered.Add(int64(len(e.items)))
		}
	case evRequeue:
		now := d.now()
		for _, it := range e.items {
			delete(d.inflight, it.seq)
			if b := d.buckets[it.bucket]; b != nil {
				b.inflight--
				d.add(b, max(it.deliverAt, now+d.leadMs+requeueDelayMs), it.off)
			}
		}
		d.inflightN.Add(-int64(len(e.items)))
	case evRetired:
		b := d.buckets[e.bucket]
		if b == nil {
			return
		}
		b.retiring = false
		if e.err != nil {
			b.retryAt = time.Now().Add(time.Second)
			if !errors.Is(e.err, reput.ErrNotDurable) && !errors.Is(e.err, reput.ErrBusy) {
				d.e.opts.Logger.Warn("engine: retiring a segment failed", "bucket", fmtMs(b.start), "err", e.err)
			}
			return
		}
		d.unload(b)
	case evCall:
		e.call()
	}
}

// maxSleepMs bounds one sleep of the driver (nothing is lost by waking).
const maxSleepMs = 3600_000

// requeueDelayMs is how long entries wait in the wheel when their topic's
// sink is failing.
const requeueDelayMs = 200

func (d *driver) add(b *bucket, deadline, off int64) {
	idx := off / schedulelog.Align
	if idx > int64(^uint32(0)) {
		d.e.opts.Logger.Error("engine: entry beyond 32 GiB into its segment cannot be scheduled", "bucket", fmtMs(b.start), "offset", off)
		return
	}
	if d.w.Add(deadline, wheel.NewRef(b.slot, uint32(idx))) {
		b.pending++
	}
}

// fire hands every due entry to its topic's lane.
// fire hands over what is due by horizon (now plus the handoff lead).
func (d *driver) fire(now, horizon int64) {
	if d.inflightN.Load() >= int64(d.e.opts.MaxInflight) {
		return
	}
	d.w.Expire(horizon, func(deadline int64, ref wheel.Ref) bool {
		b := d.slots[ref.Bucket()]
		if b == nil {
			return true
		}
		b.pending--
		off := int64(ref.Index()) * schedulelog.Align
		seq, err := b.mr.Entry(off, &d.m)
		if err != nil {
			d.corrupt.Add(1)
			b.corrupt = true
			d.e.opts.Logger.Error("engine: damaged schedule entry not delivered", "bucket", fmtMs(b.start), "offset", off, "err", err)
			return true
		}
		if b.done.Contains(seq) {
			return true
		}
		if coff, ok := d.intents[seq]; ok {
			if coff < 0 {
				// A Cancel decided on it but its cancel record is not
				// durable yet: hold it back a moment, so that it fires
				// after all if that append fails.
				d.later = append(d.later, laterEntry{b, horizon + 1, off})
			}
			return true // cancelled; reput writes its done-record
		}
		if d.m.DeliverAt > horizon { // cannot happen: the wheel never hands early
			d.later = append(d.later, laterEntry{b, d.m.DeliverAt, off})
			return true
		}
		l := d.lane(d.m.Topic)
		bt := d.building[l]
		if bt == nil {
			bt = newBatch()
			d.building[l] = bt
		}
		bt.add(item{seq: seq, bucket: b.start, deliverAt: d.m.DeliverAt, off: off}, &d.m)
		d.inflight[seq] = struct{}{}
		b.inflight++
		d.fired.Add(1)
		d.e.opts.Observer.Fired(l.topic, time.Duration(now-d.m.DeliverAt)*time.Millisecond)
		if len(bt.items) >= d.e.opts.FireBatch {
			// Sent after Expire returns: sending may put entries back
			// into the wheel, which Expire's callback must not do.
			d.full = append(d.full, fullBatch{l, bt})
			delete(d.building, l)
		}
		return d.inflightN.Add(1) < int64(d.e.opts.MaxInflight)
	})
	for _, fb := range d.full {
		d.send(fb.l, fb.bt)
	}
	clear(d.full)
	d.full = d.full[:0]
	for l, bt := range d.building {
		d.send(l, bt)
		delete(d.building, l)
	}
	for _, le := range d.later {
		d.add(le.b, le.deadline, le.off)
	}
	clear(d.later)
	d.later = d.later[:0]
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
		d.handle(&ev{kind: evRequeue, items: bt.items})
		return
	}
	if len(l.overflow) == 0 {
		select {
		case l.queue <- bt:
			return
		default:
		}
	}
	l.overflow = append(l.overflow, bt)
	l.overflowN += len(bt.items)
	d.overflowing++
}

// pushOverflow moves waiting batches into lanes that have room, and
// reports whether any are still waiting.
func (d *driver) pushOverflow() bool {
	if d.overflowing == 0 {
		return false
	}
	for _, l := range d.lanes {
		for len(l.overflow) > 0 {
			select {
			case l.queue <- l.overflow[0]:
				l.overflowN -= len(l.overflow[0].items)
				l.overflow[0] = nil
				l.overflow = l.overflow[1:]
				d.overflowing--
				continue
			default:
			}
			break
		}
	}
	return d.overflowing > 0
}

func (d *driver) lane(topic []byte) *lane {
	if l, ok := d.lanes[string(topic)]; ok {
		return l
	}
	l := newLane(d, string(topic))
	d.lanes[l.topic] = l
	d.lanesWG.Add(1)
	go l.run()
	return l
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

// maintain loads and retires buckets, and returns when it next needs to run.
func (d *driver) maintain(now int64) int64 {
	next := int64(1<<62 - 1)
	lead := d.e.opts.PreloadLead.Milliseconds()
	// Retire buckets that are over and fully done. Not while a Cancel is
	// between its decision and its durable cancel record: the entry it
	// keeps from firing would vanish with its segment if that append then
	// failed.
	unarmed := false
	for _, off := range d.intents {
		if off < 0 {
			unarmed = true
			break
		}
	}
	for _, b := range d.buckets {
		if unarmed {
			next = min(next, now+1)
			break
		}
		if !b.ready || b.retiring || b.end > now {
			if b.end > now {
				next = min(next, b.end)
			}
			continue
		}
		if b.pending > 0 || b.inflight > 0 || b.corrupt {
			continue
		}
		if time.Now().Before(b.retryAt) {
			next = min(next, now+time.Until(b.retryAt).Milliseconds()+1)
			continue
		}
		b.retiring = true
		start, entries := b.start, b.entries
		go func() {
			err := d.e.reput.Retire(start, entries)
			d.post(ev{kind: evRetired, bucket: start, err: err})
		}()
	}
	if !d.caught {
		return next
	}
	if d.loading {
		return next
	}
	// Load the oldest segment in the window that is not loaded, unless an
	// overdue bucket is still draining: backlogs load one bucket at a time,
	// oldest first, so memory stays bounded and delivery stays in order.
	for _, b := range d.buckets {
		if b.end <= now && (b.pending > 0 || b.inflight > 0 || !b.ready) {
			return next
		}
	}
	if !d.segsDirty && now < d.nextLoad {
		return min(next, d.nextLoad)
	}
	d.segsDirty, d.nextLoad = false, 1<<62
	for _, s := range d.e.reput.Segments() {
		if _, ok := d.buckets[s.Start]; ok {
			continue
		}
		if s.Start-lead > now {
			d.nextLoad = s.Start - lead
			next = min(next, d.nextLoad)
			break
		}
		d.startLoad(s)
		d.segsDirty = true
		return next
	}
	if !isClosed(d.e.ready) {
		close(d.e.ready)
	}
	return next
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (d *driver) startLoad(s schedulelog.SegmentInfo) {
	var slot int = -1
	for i, b := range d.slots {
		if b == nil {
			slot = i
			break
		}
	}
	if slot < 0 {
		d.e.opts.Logger.Error("engine: 256 buckets loaded; not loading more", "bucket", fmtMs(s.Start))
		return
	}
	mr, err := schedulelog.OpenMapped(filepath.Join(d.e.schedDir, s.Name))
	if err != nil {
		d.e.opts.Logger.Error("engine: cannot open a segment to load it", "bucket", fmtMs(s.Start), "err", err)
		return
	}
	b := &bucket{start: s.Start, end: s.End(), slot: uint8(slot), mr: mr}
	d.buckets[s.Start] = b
	d.slots[slot] = b
	d.loadedN.Add(1)
	d.loading = true
	go d.load(b.start, b.slot)
}

// load runs on its own goroutine: it watches the bucket, reads its done set
// and its entries below the watch point, and sends them to the driver.
func (d *driver) load(start int64, slot uint8) {
	res := &loadResult{start: start}
	defer func() { d.post(ev{kind: evLoaded, loaded: res}) }()
	end, err := d.e.reput.Watch(start)
	if err != nil {
		res.err = err
		return
	}
	dir := d.e.schedDir
	res.done, _, err = dispatchlog.Load(filepath.Join(dir, dispatchlog.Name(start)))
	if err != nil {
		res.err = err
		return
	}
	rd, err := schedulelog.OpenReader(filepath.Join(dir, schedulelog.Name(start)))
	if err != nil {
		res.err = err
		return
	}
	defer rd.Close()
	const chunkSize = 1 << 15
	chunk := make([]refAt, 0, chunkSize)
	it := rd.Iter()
	for it.Next() && it.Offset() < end {
		res.entries++
		if res.done.Contains(it.Seq()) {
			continue
		}
		chunk = append(chunk, refAt{it.Message().DeliverAt, wheel.NewRef(slot, uint32(it.Offset()/schedulelog.Align))})
		if len(chunk) == chunkSize {
			d.post(ev{kind: evChunk, bucket: start, chunk: chunk})
			chunk = make([]refAt, 0, chunkSize)
		}
	}
	if err := it.Err(); err != nil {
		res.err = err
		return
	}
	if len(chunk) > 0 {
		d.post(ev{kind: evChunk, bucket: start, chunk: chunk})
	}
}

// loaded finishes a load on the driver goroutine.
func (d *driver) loaded(res *loadResult) {
	d.loading = false
	b := d.buckets[res.start]
	if b == nil {
		return
	}
	if res.err != nil {
		// Entries already in the wheel stay: they fire, and the bucket
		// is never retired (its entry count is unknown). Reloading would
		// add them twice.
		d.e.opts.Logger.Error("engine: loading a bucket failed; its remaining messages are not delivered until a restart",
			"bucket", fmtMs(res.start), "err", res.err)
		b.corrupt = true
		b.ready = true
		return
	}
	// Merge what arrived while loading (cancels, deliveries) into the
	// file's done set.
	for seq := range b.done.All() {
		res.done.Add(seq)
	}
	b.done = *res.done
	b.entries += res.entries
	b.ready = true
}

func (d *driver) unload(b *bucket) {
	d.segsDirty = true
	if b.mr != nil {
		b.mr.Close()
	}
	delete(d.buckets, b.start)
	d.slots[b.slot] = nil
	d.loadedN.Add(-1)
}

func fmtMs(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) }
