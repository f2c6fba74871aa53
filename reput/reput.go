// Package reput routes records from the commitlog into the schedule
// segments: each schedule record becomes an entry of the segment of its
// delivery-time bucket, each cancel a done-record in that segment's
// dispatch log. One goroutine tails the commitlog (woken by the writer, never
// polling) and owns the schedule segment writers.
//
// # Restart without duplicates (I2)
//
// Entries carry the commitlog offset of their record as their seq, and a
// segment's entries are appended in seq order. On start, reput resumes at
// its checkpoint C, a commitlog offset below which everything is durably
// routed, and for every record from C on it opens the target segment (which
// recovers its torn tail) and skips the record if its offset is not above
// the segment's last seq. So whatever a crash left in the segments, each
// record ends up there exactly once. The checkpoint only shortens the
// search: it is written after the segments it covers were synced.
//
// # Retirement is durable (I3)
//
// Retire deletes a bucket whose entries are all done and below the durable
// checkpoint, after appending a record of it, fsynced, to the retired log
// (retired.go): the bucket, the seq its entries were below, and the
// checkpoint at that moment (its floor). Routing never creates a retired
// bucket's entries again, and a lost or damaged checkpoint is recovered from
// the retired log's floor (state.go) instead of replaying delivered
// messages; when neither file can vouch for what was retired, Start refuses
// with a segfile.CorruptionError naming the file, and Repair (the `hourglass
// repair` step) rebuilds one from the other. A fresh directory gets both
// files, so that a missing one is always noticed.
//
// # Faults
//
// A transient failure (Transient: a full disk, too many open files, EIO
// opening a file) is retried with backoff: every writer is closed, routing
// rewinds to the durable checkpoint and goes on from there, which the
// last-seq skip makes idempotent; each failed attempt and the recovery are
// reported through Options.OnStall and OnResume (the engine's health).
// Anything else (damage, EIO from a write or fsync) stops routing, after
// OnStall. Open segment writers never exceed maxOpenWriters: the least
// recently used are synced and closed first.
//
// # Start-up (I5)
//
// Start reads the checkpoint and the retired log and lists the segments by
// name only (one read of the directory); a segment's header is read the
// first time its duration is needed, so a damaged future segment is
// reported when its bucket is needed and stops nothing else. Routing then
// opens only the segments that the records after the checkpoint touch.
//
// # Who may call what
//
// Watch, Retire and Close are served by the routing goroutine and may be
// called from any goroutine. MarkDone may be called from any goroutine.
// The On* callbacks run on the routing goroutine and must not call back
// into Reput or block for long.
//
// It owns the writers of the schedule segments and dispatch logs and its
// checkpoint and retired log in the schedule directory; it imports
// packages commitlog, schedulelog, dispatchlog, message, record and
// segfile; the engine runs it.
package reput

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/hourglassmq/hourglass/catalog"
	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/segfile"
)

var (
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("reput: closed")
	// ErrBusy is returned by Retire for a segment that holds entries the
	// caller has not accounted for, or is being written to.
	ErrBusy = errors.New("reput: segment still in use")
	// ErrNotDurable is returned by Retire for a segment whose entries are not
	// all below the durable checkpoint yet; retry after the next checkpoint.
	ErrNotDurable = errors.New("reput: segment not yet covered by a durable checkpoint")
)

// Entry is a routed schedule entry, as handed to OnEntries.
type Entry struct {
	Bucket    int64  // start of its segment's bucket, UTC epoch ms
	Offset    int64  // its offset in the segment (for schedulelog.Reader.ReadAt)
	Seq       uint64 // the commitlog offset of its record: message.ID.Seq
	DeliverAt int64  // UTC epoch ms
}

// Options configure Reput.
type Options struct {
	// Log is the commitlog to tail. Required.
	Log *commitlog.Log
	// Dir holds the schedule segments, dispatch logs and the checkpoint.
	// Required; created if missing.
	Dir string
	// SegmentDuration is the bucket length of new segments; default 1 h.
	SegmentDuration time.Duration
	// OnStall is called on the routing goroutine after each failed attempt
	// to route, sync or checkpoint, with the failure. A transient failure
	// (see Transient) is retried with backoff, from the durable checkpoint,
	// until it succeeds, and OnResume is then called once; any other
	// failure stops routing (Err returns it) after its OnStall call.
	OnStall func(err error)
	// OnResume is called once routing has got past what failed.
	OnResume func()
	// OnEntries receives the entries routed to watched buckets, in routing
	// order, once they are readable through a schedulelog.Reader. The
	// slice is the callee's to keep.
	OnEntries func([]Entry)
	// OnCancel receives every done-record routed to a watched bucket (of
	// a cancel or a reschedule record), with its reason.
	OnCancel func(bucket int64, seq uint64, why dispatchlog.Reason)
	// OnSegment is told about each segment reput creates.
	OnSegment func(schedulelog.SegmentInfo)
	// Catalog, if set, receives the key index (the idempotency key of each
	// routed message), the reschedule map and the settings of control
	// records; it is committed before each checkpoint, and swept of the
	// entries of retired segments.
	Catalog *catalog.Catalog
	// KeyWindow keeps a key in the catalog this long after its Schedule
	// arrived although its message's segment is gone (the engine's
	// idempotency window: a retry of the Schedule must find it).
	KeyWindow time.Duration
	// OnControl receives every control record routed, in commitlog order,
	// once the catalog holds it (its slices are its own). A restart routes
	// again the records after the checkpoint: OnControl must be
	// idempotent.
	OnControl func(message.Control)
	// Logger; default slog.Default().
	Logger *slog.Logger

	// The rest is set by tests only; production uses the defaults.

	// checkpointInterval is how often routed data is synced, the
	// checkpoint advanced and the commitlog trimmed; default 1 s.
	checkpointInterval time.Duration
	// checkpointBytes makes a checkpoint due sooner, once routing is this
	// far past the last one; default defaultCheckpointBytes. Either one
	// shorter means less to route again after a crash, at the cost of
	// fsyncs on the routing goroutine.
	checkpointBytes int64
	// maxOpenWriters bounds the open schedule segment writers at all
	// times, and separately the open dispatch log writers: before one past
	// the bound is opened, the least recently used are synced and closed
	// (so the checkpoint only advances over durable data). Default 1,024,
	// or a quarter of the process's descriptor limit if that is less
	// (defaultMaxOpenWriters).
	maxOpenWriters int
	// retryMin and retryMax bound the backoff between retries of a
	// transient failure: the first waits retryMin, each next one twice
	// as long, up to retryMax. Defaults 10 ms and 1 s.
	retryMin, retryMax time.Duration
	// schedule and dispatch configure the segment writers (tests inject
	// fsync counters or failures there).
	schedule schedulelog.Options
	dispatch dispatchlog.Options
	hooks    *testHooks // inject failures
}

// testHooks let tests fail operations of the routing goroutine.
type testHooks struct {
	// open is called before a schedule segment is opened or created.
	open func(bucket int64) error
	// afterRoute is called on the routing goroutine after a step routed
	// records, before it publishes them.
	afterRoute func(r *Reput)
	// beforeRemove is called when Retire deletes a bucket's files.
	beforeRemove func(bucket int64)
}

// Stats are counters for metrics and tests.
type Stats struct {
	Routed    int64 // schedule entries appended
	Skipped   int64 // records already in their segment (a restart's overlap)
	Cancels   int64 // cancel done-records appended
	Orphans   int64 // cancels whose target segment no longer exists
	Malformed int64 // records that decoded but held an invalid payload
	Retired   int64 // retirements recorded since Start
	Stalls    int64 // failed attempts (see Options.OnStall)
	Damaged   int64 // segments found damaged when opened (header or data before its synced length)
	Evicted   int64 // writers closed to stay within the bound on open writers
}

// Reput is the routing task. See the package doc.
type Reput struct {
	opts Options
	log  *slog.Logger

	// Owned by the routing goroutine.
	it      *commitlog.Iterator
	writers segWriters // the schedule segment writers (writers.go)
	out     outbox     // what the callbacks are told, what is watched (outbox.go)
	keys    keyStager  // what routing stages in the catalog (catalog.go)
	// commit is the catalog commit in flight, which covers what was
	// routed below pos: done receives its outcome; nil when none is.
	commit struct {
		done chan error
		pos  int64
	}
	retired  *retiredLog
	stall    *stallState // the current stall, nil while routing works
	dirty    bool        // routed since the last checkpoint
	lastCkpt time.Time

	// Shared with other goroutines; each guards its own.
	segs     segList         // the known segments (segs.go)
	dispatch dispatchWriters // the dispatch log writers (dispatch.go)
	reqs     requests        // Watch, Retire and Close calls (requests.go)
	progress progress        // the positions, and their waiters (progress.go)
	stats    struct{ routed, skipped, cancels, orphans, malformed, retired, stalls atomic.Int64 }

	done      chan struct{}
	abandoned atomic.Bool // tests: stop as a crash would
	err       atomic.Pointer[error]
}

// Start opens the routing state in opts.Dir and starts the routing
// goroutine at the checkpoint.
func Start(opts Options) (*Reput, error) {
	if opts.Log == nil || opts.Dir == "" {
		return nil, errors.New("reput: Options.Log and Options.Dir are required")
	}
	if opts.SegmentDuration == 0 {
		opts.SegmentDuration = time.Hour
	}
	if err := schedulelog.ValidateDuration(opts.SegmentDuration); err != nil {
		return nil, err
	}
	if opts.checkpointInterval <= 0 {
		opts.checkpointInterval = time.Second
	}
	if opts.checkpointBytes <= 0 {
		opts.checkpointBytes = defaultCheckpointBytes
	}
	if opts.maxOpenWriters <= 0 {
		opts.maxOpenWriters = defaultMaxOpenWriters()
	}
	if opts.schedule.BufferSize <= 0 {
		// With up to a thousand writers busy at once (a month of
		// buckets), segfile's 256 KiB buffers would hold 256 MiB.
		opts.schedule.BufferSize = scheduleBufferSize
	}
	if opts.retryMin <= 0 {
		opts.retryMin = 10 * time.Millisecond
	}
	if opts.retryMax < opts.retryMin {
		opts.retryMax = max(time.Second, opts.retryMin)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.schedule.Logger == nil {
		opts.schedule.Logger = opts.Logger
	}
	if opts.dispatch.Logger == nil {
		opts.dispatch.Logger = opts.Logger
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	// Names only, in one read of the directory (which also removes what
	// a crashed Create left): a future segment's header is read when it
	// is first needed (I5), so its damage is found then and stops
	// nothing else.
	segs, _, err := schedulelog.ListNamesRemoveTemp(opts.Dir)
	if err != nil {
		return nil, err
	}
	r := &Reput{
		opts:     opts,
		log:      opts.Logger,
		writers:  segWriters{open: make(map[int64]*segWriter), max: opts.maxOpenWriters, limit: opts.maxOpenWriters},
		out:      outbox{watched: make(map[int64]*watchState)},
		done:     make(chan struct{}),
		lastCkpt: time.Now(),
	}
	r.segs.dir, r.segs.log, r.segs.mu.list = opts.Dir, opts.Logger, segs
	r.dispatch.opts, r.dispatch.segs, r.dispatch.mu.open = &r.opts, &r.segs, make(map[int64]*dispWriter)
	r.keys = keyStager{cat: opts.Catalog, opts: &r.opts, segs: &r.segs}
	r.progress.mu.advanced = make(chan struct{})
	first, end := opts.Log.FirstOffset(), opts.Log.EndOffset()
	pos, ok, rewrite, err := r.recoverState(len(segs) > 0, end)
	if err != nil {
		return nil, err
	}
	switch {
	case !ok || pos < first:
		pos = first
	case pos > end:
		// The commitlog lost data that was routed (damage, a deleted
		// segment; the engine's commitlog.Open already refuses that, as
		// Options.MinEnd). Routing on from end would give new records
		// offsets that the schedule segments already hold: refuse.
		return nil, &segfile.CorruptionError{Path: opts.Log.Dir(), Offset: -1,
			Err: fmt.Errorf("reput: the checkpoint (%s) is at offset %d, beyond the end of the commitlog at offset %d: offsets %d..%d (%d bytes) are lost from the commitlog; run `hourglass repair`",
				filepath.Join(opts.Dir, checkpointName), pos, end, end, pos, pos-end)}
	}
	if n, err := r.retired.compact(first); err != nil {
		return nil, err
	} else if n > 0 {
		r.log.Info("reput: retired log compacted", "dropped", n, "kept", len(r.retired.st.recs))
	}
	if rewrite {
		// The checkpoint was missing or damaged: put a good one back, so
		// that its loss stays detectable.
		if err := writeCheckpoint(opts.Dir, pos, r.retired.st.count()); err != nil {
			return nil, fmt.Errorf("reput: rewrite the checkpoint: %w", err)
		}
	}
	r.it, err = opts.Log.NewIterator(pos)
	if err != nil {
		return nil, err
	}
	r.progress.routed.Store(pos)
	r.progress.keys.Store(pos) // below the checkpoint the catalog holds every key
	r.progress.checkpoint.Store(pos)
	r.keys.replayEnd = opts.Log.EndOffset()
	go r.run()
	return r, nil
}

// Position returns the commitlog offset of the next record to route.
func (r *Reput) Position() int64 { return r.progress.routed.Load() }

// Checkpoint returns the durable position: every record below it is
// durably in the schedule segments and dispatch logs.
func (r *Reput) Checkpoint() int64 { return r.progress.checkpoint.Load() }

// Err returns the error that stopped routing, if any.
func (r *Reput) Err() error {
	if p := r.err.Load(); p != nil {
		return *p
	}
	return nil
}

// Stats returns the routing counters.
func (r *Reput) Stats() Stats {
	return Stats{
		Routed: r.stats.routed.Load(), Skipped: r.stats.skipped.Load(), Cancels: r.stats.cancels.Load(),
		Orphans: r.stats.orphans.Load(), Malformed: r.stats.malformed.Load(),
		Retired: r.stats.retired.Load(), Stalls: r.stats.stalls.Load(), Damaged: r.segs.damagedCount(),
		Evicted: r.writers.evicted.Load() + r.dispatch.evicted.Load(),
	}
}

// Segments returns a snapshot of the known schedule segments, sorted by
// bucket start. Name and Start are always set; Duration is 0 for a
// segment whose header has not been needed yet (start-up reads only the
// names): a caller that needs the bucket's end reads it from the segment
// (schedulelog.Reader.Duration).
func (r *Reput) Segments() []schedulelog.SegmentInfo { return r.segs.snapshot() }

// FindSegment returns the segment whose bucket holds deliverAtMs. A
// segment whose header cannot be read is reported (logged, counted in
// Stats.Damaged) and not found.
func (r *Reput) FindSegment(deliverAtMs int64) (schedulelog.SegmentInfo, bool) {
	return r.segs.find(deliverAtMs)
}

// Watch starts handing entries and cancels routed to bucket to OnEntries and
// OnCancel, and returns the segment's readable end at that moment: the
// caller loads entries below it from the file and receives every later one
// through OnEntries, with no gap and no overlap. The end is 0 when the
// segment does not exist yet. retired are the retired buckets overlapping
// the segment's time: the commitlog records they cover were never routed
// to it (a caller rebuilding damaged entries from the commitlog skips them).
func (r *Reput) Watch(bucket int64) (end int64, retired Retired, err error) {
	rep, err := r.send(request{kind: reqWatch, bucket: bucket})
	return rep.end, rep.retired, err
}

// Retire deletes bucket's schedule segment and dispatch log. The caller
// asserts that the entries it knows of, entries in all, are done. Retire
// refuses with ErrBusy if the segment holds more entries than that, and
// with ErrNotDurable while any entry is not below the durable checkpoint,
// because a restart would route it again into a new segment and deliver it
// twice. A missing segment is not an error. topics are those its messages
// were delivered to: the catalog keeps them (catalog.Delivered), durably
// before anything is deleted, so that the queue can be asked for a
// message of the bucket after it is gone.
func (r *Reput) Retire(bucket int64, entries uint64, topics ...string) error {
	_, err := r.send(request{kind: reqRetire, bucket: bucket, known: entries, topics: topics})
	return err
}

func (r *Reput) send(req request) (reply, error) {
	req.reply = make(chan reply, 1)
	if !r.reqs.push(req) {
		return reply{}, ErrClosed
	}
	select {
	case rep := <-req.reply:
		return rep, rep.err
	case <-r.done:
		select {
		case rep := <-req.reply:
			return rep, rep.err
		default:
		}
		if err := r.Err(); err != nil {
			return reply{}, err
		}
		return reply{}, ErrClosed
	}
}

// Close stops routing after syncing what was routed and writing a final
// checkpoint.
func (r *Reput) Close() error {
	_, err := r.send(request{kind: reqClose})
	<-r.done
	if errors.Is(err, ErrClosed) {
		err = nil
	}
	if e := r.Err(); e != nil && err == nil {
		err = e
	}
	return err
}

// abandon stops the routing goroutine without syncing, checkpointing or
// closing anything, as a crash would. For tests.
func (r *Reput) abandon() {
	r.abandoned.Store(true)
	r.Close()
}
