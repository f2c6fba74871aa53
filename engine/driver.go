package engine

import (
	"context"
	"errors"
	"io/fs"
	"math"
	"os"
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

// The driver's work is split by concern: this file has its goroutine and
// event queue; fire.go hands due entries to the topics' lanes (lane.go);
// load.go preloads buckets into the wheel; retire.go unloads finished
// buckets and stops idle lanes; cancel.go decides Cancel atomically with
// firing.

type evKind int

const (
	evEntry evKind = iota
	evCancel
	evSegment
	evChunk
	evLoaded
	evConfirm
	evRetired
	evFutureChecked
	evCall
)

type ev struct {
	kind    evKind
	entries []reput.Entry
	bucket  int64
	seq     uint64
	why     dispatchlog.Reason // evCancel
	chunk   []refAt
	loaded  *loadResult
	items   []item
	lane    *lane // evConfirm: the lane that had the items
	err     error
	call    func()
}

// driver owns the wheel and the loaded buckets; one goroutine runs it and
// everything else talks to it through its event queue.
type driver struct {
	// leadMs is Options.HandoffLead: entries are fired up to this much
	// early, in steps of half of it (run).
	leadMs int64
	// laneIdleMs is how long a lane with nothing to deliver lives on
	// (Options.LaneIdle); negative: until Close.
	laneIdleMs int64
	e          *Engine
	now        func() int64

	events events

	quit    chan struct{}
	stopped chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	lanesWG sync.WaitGroup // the lanes' goroutines, live and retired

	// Owned by the driver goroutine.
	w       *wheel.Wheel // cancels are lazy: a cancelled entry fires and is skipped
	buckets map[int64]*bucket
	slots   [256]slotRef // what each wheel.Ref slot names (refs.go)
	fates   fates
	future  map[int64]*futureBucket // buckets not started to retire early (retirefuture.go)
	lanes   map[string]*lane        // live lanes by topic; an idle one is retired
	firing  firing
	ld      loadState

	n counters
	// markDone is reput's MarkDone; tests inject failures.
	markDone func(bucket int64, recs ...dispatchlog.Done) error
}

// firing is fire's working state. Owned by the driver goroutine.
type firing struct {
	building map[*lane]*batch
	// overflowing counts batches waiting in lanes' overflow lists.
	overflowing int
	later       []laterEntry
	full        []fullBatch
	m           message.Message
}

// loadState is what the driver knows of loading buckets. Owned by the
// driver goroutine but for noDone.
type loadState struct {
	failed  map[int64]*loadFailure // segments whose opening failed, by bucket start
	loading bool
	// segsDirty says the segment list may hold a bucket to load before
	// nextLoad (a segment was created, a load finished, a bucket left).
	segsDirty bool
	nextLoad  int64
	caught    bool // reput has routed everything present at Open
	// checks counts the start-up checks passed (startcheck.go): the
	// driver fires nothing, and Ready stays open, until all have.
	checks   int
	startEnd int64
	// startCkpt is reput's durable checkpoint before this run started
	// routing (the largest int64 when it has none): a segment whose
	// entries all lie at or above it may have been created just before a
	// crash, before its dispatch log (lostWhy).
	startCkpt int64
	// noDone holds the buckets (int64 starts) whose dispatch log could not
	// be created with their segment in this run: a missing one is not lost.
	// Safe for concurrent use (reput's goroutine stores).
	noDone sync.Map
}

func newDriver(e *Engine) *driver {
	ctx, cancel := context.WithCancel(context.Background())
	startCkpt := int64(math.MaxInt64)
	if pos, ok, err := reput.ReadCheckpoint(e.schedDir); ok && err == nil {
		startCkpt = pos
	}
	return &driver{
		ld:         loadState{startCkpt: startCkpt, segsDirty: true, failed: make(map[int64]*loadFailure)},
		markDone:   func(bucket int64, recs ...dispatchlog.Done) error { return e.reput.MarkDone(bucket, recs...) },
		e:          e,
		now:        func() int64 { return e.opts.Now().UnixMilli() },
		leadMs:     e.opts.HandoffLead.Milliseconds(),
		laneIdleMs: e.opts.LaneIdle.Milliseconds(),
		w:          wheel.New(),
		events:     events{wake: make(chan struct{}, 1)},
		quit:       make(chan struct{}),
		stopped:    make(chan struct{}),
		ctx:        ctx,
		cancel:     cancel,
		buckets:    make(map[int64]*bucket),
		fates:      fates{live: make(map[uint64]liveFate)},
		future:     make(map[int64]*futureBucket),
		lanes:      make(map[string]*lane),
		firing:     firing{building: make(map[*lane]*batch)},
	}
}

// counters are the driver's counters and gauges, read by Stats from any
// goroutine.
type counters struct {
	fired, delivered, retries, corrupt, unconfirmed, expired atomic.Int64
	inflightN                                                atomic.Int64
	pendingN                                                 atomic.Int64
	loadedN                                                  atomic.Int64
	loops                                                    atomic.Int64 // iterations of run's loop, for tests
	// heldN counts loaded buckets held back because their dispatch log is
	// damaged or missing, heldEntries their entries not loaded; rebuiltN
	// the entries rebuilt from the commitlog.
	heldN, heldEntries, rebuiltN atomic.Int64
}

// events is the driver's work queue: any goroutine posts, the driver
// goroutine takes.
type events struct {
	mu    sync.Mutex
	queue []ev          // guarded by mu
	wake  chan struct{} // signalled when queue becomes non-empty
}

func (q *events) post(e ev) {
	q.mu.Lock()
	q.queue = append(q.queue, e)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take removes and returns at most n events, the oldest first.
func (q *events) take(n int) []ev {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.queue
	if len(out) > n {
		q.queue = out[n:]
		return out[:n]
	}
	q.queue = nil
	return out
}

func (q *events) empty() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.queue) == 0
}

func (d *driver) post(e ev) { d.events.post(e) }

// Callbacks from reput, on its goroutine: queue and return.
func (d *driver) onEntries(ens []reput.Entry) { d.post(ev{kind: evEntry, entries: ens}) }

func (d *driver) onCancel(b int64, seq uint64, why dispatchlog.Reason) {
	d.post(ev{kind: evCancel, bucket: b, seq: seq, why: why})
}

// onSegment is told of each segment reput creates, before any entry of
// it is published or covered by a checkpoint. It creates the segment's
// dispatch log at once, so that a segment whose dispatch log is missing
// later has lost it (load.go, lostWhy). Reput itself opens the log
// only on its goroutine, which is running this, so the two never write it
// at the same time.
func (d *driver) onSegment(s schedulelog.SegmentInfo) {
	path := filepath.Join(d.e.schedDir, dispatchlog.Name(s.Start))
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) && s.Duration > 0 {
		w, _, err := dispatchlog.Open(d.e.schedDir, s.Start, s.Duration, dispatchlog.Options{Logger: d.e.opts.Logger})
		if err == nil {
			err = w.Close()
		}
		if err != nil {
			d.e.opts.Logger.Warn("engine: creating the dispatch log of a new segment failed; it is created at the first delivery", "bucket", fmtMs(s.Start), "err", err)
			d.ld.noDone.Store(s.Start, true)
		}
	}
	d.post(ev{kind: evSegment})
}

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

func (d *driver) stats() Stats {
	return Stats{
		Fired: d.n.fired.Load(), Delivered: d.n.delivered.Load(), Retries: d.n.retries.Load(),
		Pending: d.n.pendingN.Load(), Inflight: d.n.inflightN.Load(), Loaded: int(d.n.loadedN.Load()),
		Corrupt: d.n.corrupt.Load(), Unconfirmed: d.n.unconfirmed.Load(), Expired: d.n.expired.Load(),
		Rebuilt: d.n.rebuiltN.Load(), Held: d.n.heldEntries.Load(),
	}
}

func (d *driver) pendingByBucket() map[int64]int64 {
	out := map[int64]int64{}
	d.call(context.Background(), func() {
		for s, b := range d.buckets {
			out[s] = b.toFire() + b.inflight
		}
	})
	return out
}

// toFire returns how many entries of the loaded buckets will still fire.
func (d *driver) toFire() int64 {
	var n int64
	for _, b := range d.buckets {
		n += b.toFire()
	}
	return n
}

func (d *driver) stop() {
	close(d.quit)
	<-d.stopped
}

// run is the driver goroutine.
func (d *driver) run(startEnd int64) {
	defer close(d.stopped)
	d.ld.startEnd = startEnd
	if d.e.opts.CountPending && !isClosed(d.e.pending.counted) && !d.countAtStart(startEnd) {
		d.shutdown()
		return
	}
	go func() {
		// Until everything in the commitlog at Open is routed, a durable
		// cancel may not be in any dispatch log yet: check and load
		// nothing before.
		if d.e.reput.WaitRouted(d.ctx, startEnd) != nil {
			return
		}
		if d.checkDispatchLogs() {
			d.passed()
		}
		// The bucket of messages frozen on their own may have every entry
		// done (thawed before a crash that lost the check, or a
		// retirement cut short): check it once (retirefuture.go).
		frozen, ok := d.e.reput.FindSegment(FrozenAt)
		d.post(ev{kind: evCall, call: func() {
			d.ld.caught = true
			if ok {
				d.noteFuture(frozen.Start, -1)
			}
		}})
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d.n.loops.Add(1)
		d.drain()
		now := d.now()
		waiting := d.pushOverflow()
		if n, ok := d.w.Next(); ok && n <= now+d.leadMs/2 {
			// With a handoff lead the driver hands over in steps: once the
			// earliest entry is within half the lead, everything within the
			// whole lead goes. At a steady rate a hand-over (a queue fsync
			// and a dispatch-log fsync) then carries half a lead's worth of
			// messages, not a millisecond's, and each is still handed over
			// at least half the lead before it is due.
			d.fire(now, now+d.leadMs)
		}
		next := d.maintain(now)
		d.pruneRecorded()
		// At MaxInflight fire takes nothing, so an overdue wheel entry
		// must not set the wait to zero: the loop would spin until the
		// sink confirms (it did, at half the server's CPU while a hot
		// second drained into a busy queue). Room comes back only with a
		// confirm or requeue event, and posting one wakes the loop; so
		// does the last start-up check passing, before which fire takes
		// nothing either.
		if n, ok := d.w.Next(); ok && n-d.leadMs/2 < next && d.started() && d.n.inflightN.Load() < int64(d.e.opts.MaxInflight) {
			next = n - d.leadMs/2
		}
		if waiting {
			next = min(next, now+1) // a lane is busy: look again in a millisecond
		}
		d.n.pendingN.Store(d.toFire())
		if !d.events.empty() {
			continue
		}
		wait := time.Duration(min(next-d.now(), maxSleepMs)) * time.Millisecond
		if wait <= 0 {
			continue
		}
		if d.warm(now) {
			continue // pages left to map in: again after a look at the wheel
		}
		timer.Reset(wait)
		select {
		case <-d.quit:
			d.shutdown()
			return
		case <-d.events.wake:
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
	q := d.events.take(drainBatch)
	for i := range q {
		d.handle(&q[i])
		q[i] = ev{}
	}
}

func (d *driver) handle(e *ev) {
	switch e.kind {
	case evEntry:
		d.routed(e.entries)
	case evCancel:
		d.doneRouted(e.bucket, e.seq, e.why)
	case evSegment:
		d.ld.segsDirty = true
	case evChunk:
		d.chunkLoaded(e.bucket, e.chunk)
	case evLoaded:
		d.loaded(e.loaded)
	case evConfirm:
		d.confirmed(e.lane, e.items, e.err)
	case evRetired:
		d.retired(e.bucket, e.err)
	case evFutureChecked:
		d.futureChecked(e.bucket, e.err)
	case evCall:
		e.call()
	}
}

// maxSleepMs bounds one sleep of the driver. Sleeping is on the monotonic
// clock, the due check on the wall clock (Options.Now): waking at least
// once a second makes a forward step of the wall clock fire what it made
// due within a second, and costs one pass over the loaded buckets per
// second when idle.
const maxSleepMs = 1000

// never is a deadline that does not come.
const never = int64(1<<62 - 1)

// maintain retires finished buckets, buckets not started whose every entry
// is done, and idle lanes, loads the next bucket, and returns when it next
// needs to run.
func (d *driver) maintain(now int64) int64 {
	next := d.retireBuckets(now)
	next = min(next, d.retireFuture(now))
	next = min(next, d.retireLanes(now))
	return min(next, d.loadNext(now))
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func fmtMs(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) }
