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
// search: it is written after the segments it covers were synced, and a
// missing or damaged one means starting from the oldest commitlog segment.
// Start-up reads the checkpoint, the segment headers and the tails of the
// segments that records after C touch; nothing else.
//
// # Who may call what
//
// Watch, Unwatch, Retire and Close are served by the routing goroutine and
// may be called from any goroutine. MarkDone may be called from any
// goroutine. The On* callbacks run on the routing goroutine and must not
// call back into Reput or block for long.
//
// It owns the writers of the schedule segments and dispatch logs and its
// checkpoint file in the schedule directory; it imports packages
// commitlog, schedulelog, dispatchlog, message and segfile; the engine
// runs it.
package reput

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/schedulelog"
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
	// CheckpointInterval is how often routed data is synced, the
	// checkpoint advanced and the commitlog trimmed; default 1 s. Shorter
	// means a shorter replay after a crash and earlier retention, at the
	// cost of fsyncs on the routing goroutine.
	CheckpointInterval time.Duration
	// MaxOpenWriters bounds open schedule segment writers; idle ones are
	// closed at a checkpoint. Default 64.
	MaxOpenWriters int
	// OnEntries receives the entries routed to watched buckets, in routing
	// order, once they are readable through a schedulelog.Reader. The
	// slice is the callee's to keep.
	OnEntries func([]Entry)
	// OnCancel receives every cancel routed to a watched bucket.
	OnCancel func(bucket int64, seq uint64)
	// OnSegment is told about each segment reput creates.
	OnSegment func(schedulelog.SegmentInfo)
	// Schedule and Dispatch configure the segment writers (tests inject
	// fsync counters or failures there).
	Schedule schedulelog.Options
	Dispatch dispatchlog.Options
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Stats are counters for metrics and tests.
type Stats struct {
	Routed    int64 // schedule entries appended
	Skipped   int64 // records already in their segment (a restart's overlap)
	Cancels   int64 // cancel done-records appended
	Orphans   int64 // cancels whose target segment no longer exists
	Malformed int64 // records that decoded but held an invalid payload
}

// Reput is the routing task. See the package doc.
type Reput struct {
	opts Options
	log  *slog.Logger

	// Owned by the routing goroutine.
	it       *commitlog.Iterator
	writers  map[int64]*segWriter
	watched  map[int64]bool
	events   []event
	dirty    bool // routed since the last checkpoint
	lastCkpt time.Time
	// last is the writer the last schedule record went to, with its
	// bucket [lastStart, lastEnd) and whether it is watched; nil after
	// anything that could change those (a request, a writer closed).
	last               *segWriter
	lastStart, lastEnd int64
	lastWatched        bool

	// segsMu guards segs, the known segments sorted by start.
	segsMu sync.RWMutex
	segs   []schedulelog.SegmentInfo

	// dmu guards dispatch, shared with MarkDone.
	dmu      sync.Mutex
	dispatch map[int64]*dispWriter

	// reqMu guards reqs and wakeWait.
	reqMu    sync.Mutex
	reqs     []request
	wakeWait context.CancelFunc

	position   atomic.Int64 // next commitlog offset to route
	checkpoint atomic.Int64 // durable position
	stats      struct{ routed, skipped, cancels, orphans, malformed atomic.Int64 }

	done      chan struct{}
	stopped   atomic.Bool
	abandoned atomic.Bool // tests: stop as a crash would
	err       atomic.Pointer[error]
	// routedMu/routedCh wake WaitRouted callers when position advances.
	routedMu sync.Mutex
	routedCh chan struct{}
}

type segWriter struct {
	w       *schedulelog.Writer
	lastSeq uint64
	hasLast bool
	dirty   bool // appended since the last sync
	flushed bool // everything appended is flushed
	used    bool // touched since the last checkpoint
}

type dispWriter struct {
	w        *dispatchlog.Writer
	dirty    bool // appended by reput since the last checkpoint
	used     bool // touched since the last checkpoint
	inflight int  // MarkDone calls using w
}

type event struct {
	entry    Entry
	cancel   bool
	bucket   int64
	seq      uint64
	segment  *schedulelog.SegmentInfo
	segEvent bool
}

type reqKind int

const (
	reqWatch reqKind = iota
	reqUnwatch
	reqRetire
	reqClose
)

type request struct {
	kind   reqKind
	bucket int64
	known  uint64
	reply  chan reply
}

type reply struct {
	end int64
	err error
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
	if opts.CheckpointInterval <= 0 {
		opts.CheckpointInterval = time.Second
	}
	if opts.MaxOpenWriters <= 0 {
		opts.MaxOpenWriters = 64
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Schedule.Logger == nil {
		opts.Schedule.Logger = opts.Logger
	}
	if opts.Dispatch.Logger == nil {
		opts.Dispatch.Logger = opts.Logger
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	if _, err := schedulelog.RemoveTemp(opts.Dir); err != nil {
		return nil, err
	}
	segs, err := schedulelog.List(opts.Dir)
	if err != nil {
		return nil, err
	}
	r := &Reput{
		opts:     opts,
		log:      opts.Logger,
		writers:  make(map[int64]*segWriter),
		watched:  make(map[int64]bool),
		dispatch: make(map[int64]*dispWriter),
		segs:     segs,
		done:     make(chan struct{}),
		routedCh: make(chan struct{}),
		lastCkpt: time.Now(),
	}
	first, end := opts.Log.FirstOffset(), opts.Log.EndOffset()
	pos, ok, err := readCheckpoint(opts.Dir)
	switch {
	case err != nil:
		r.log.Warn("reput: ignoring checkpoint; resuming from the oldest commitlog segment", "err", err)
		pos = first
	case !ok || pos < first:
		pos = first
	case pos > end:
		// Only possible if the commitlog lost acknowledged data (fsync
		// policy none and a machine crash).
		r.log.Error("reput: checkpoint is beyond the end of the commitlog; the commitlog lost records",
			"checkpoint", pos, "commitlog_end", end)
		pos = end
	}
	r.it, err = opts.Log.NewIterator(pos)
	if err != nil {
		return nil, err
	}
	r.position.Store(pos)
	r.checkpoint.Store(pos)
	go r.run()
	return r, nil
}

// Position returns the commitlog offset of the next record to route.
func (r *Reput) Position() int64 { return r.position.Load() }

// Checkpoint returns the durable position: every record below it is
// durably in the schedule segments and dispatch logs.
func (r *Reput) Checkpoint() int64 { return r.checkpoint.Load() }

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
	}
}

// Segments returns a snapshot of the known schedule segments, sorted by
// bucket start.
func (r *Reput) Segments() []schedulelog.SegmentInfo {
	r.segsMu.RLock()
	defer r.segsMu.RUnlock()
	return append([]schedulelog.SegmentInfo(nil), r.segs...)
}

// FindSegment returns the segment whose bucket holds deliverAtMs.
func (r *Reput) FindSegment(deliverAtMs int64) (schedulelog.SegmentInfo, bool) {
	r.segsMu.RLock()
	defer r.segsMu.RUnlock()
	i, ok := schedulelog.Find(r.segs, deliverAtMs)
	if !ok {
		return schedulelog.SegmentInfo{}, false
	}
	return r.segs[i], true
}

// WaitRouted blocks until every record below offset has been routed (its
// entry is readable and, for a watched bucket, handed to OnEntries), the
// context ends, or routing stops.
func (r *Reput) WaitRouted(ctx context.Context, offset int64) error {
	for {
		r.routedMu.Lock()
		ch := r.routedCh
		r.routedMu.Unlock()
		if r.position.Load() >= offset {
			return nil
		}
		if err := r.Err(); err != nil {
			return err
		}
		if r.stopped.Load() {
			return ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (r *Reput) wakeRouted() {
	r.routedMu.Lock()
	close(r.routedCh)
	r.routedCh = make(chan struct{})
	r.routedMu.Unlock()
}

// Watch starts handing entries and cancels routed to bucket to OnEntries and
// OnCancel, and returns the segment's readable end at that moment: the
// caller loads entries below it from the file and receives every later one
// through OnEntries, with no gap and no overlap. The end is 0 when the
// segment does not exist yet.
func (r *Reput) Watch(bucket int64) (int64, error) {
	rep, err := r.call(reqWatch, bucket)
	return rep.end, err
}

// Unwatch stops handing bucket's entries to OnEntries.
func (r *Reput) Unwatch(bucket int64) {
	r.call(reqUnwatch, bucket)
}

// Retire deletes bucket's schedule segment and dispatch log. The caller
// asserts that the entries it knows of, entries in all, are done. Retire
// refuses with ErrBusy if the segment holds more entries than that, and
// with ErrNotDurable while any entry is not below the durable checkpoint,
// because a restart would route it again into a new segment and deliver it
// twice. A missing segment is not an error.
func (r *Reput) Retire(bucket int64, entries uint64) error {
	_, err := r.callKnown(reqRetire, bucket, entries)
	return err
}

func (r *Reput) call(kind reqKind, bucket int64) (reply, error) {
	return r.callKnown(kind, bucket, 0)
}

func (r *Reput) callKnown(kind reqKind, bucket int64, known uint64) (reply, error) {
	req := request{kind: kind, bucket: bucket, known: known, reply: make(chan reply, 1)}
	r.reqMu.Lock()
	if r.stopped.Load() {
		r.reqMu.Unlock()
		return reply{}, ErrClosed
	}
	r.reqs = append(r.reqs, req)
	if r.wakeWait != nil {
		r.wakeWait()
	}
	r.reqMu.Unlock()
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
	_, err := r.call(reqClose, 0)
	<-r.done
	if errors.Is(err, ErrClosed) {
		err = nil
	}
	if e := r.Err(); e != nil && err == nil {
		err = e
	}
	return err
}

// MarkDone durably appends done-records to bucket's dispatch log (group
// committed with concurrent callers). It is how the engine records a
// delivery.
func (r *Reput) MarkDone(bucket int64, recs ...dispatchlog.Done) error {
	r.dmu.Lock()
	dw, err := r.dispatchWriterLocked(bucket)
	if err != nil {
		r.dmu.Unlock()
		return err
	}
	dw.inflight++
	r.dmu.Unlock()
	err = dw.w.AppendSync(recs...)
	r.dmu.Lock()
	dw.inflight--
	r.dmu.Unlock()
	return err
}

// dispatchWriter returns the open dispatch log writer for bucket, opening
// it if needed. The segment must exist.
func (r *Reput) dispatchWriter(bucket int64) (*dispatchlog.Writer, error) {
	r.dmu.Lock()
	defer r.dmu.Unlock()
	dw, err := r.dispatchWriterLocked(bucket)
	if err != nil {
		return nil, err
	}
	return dw.w, nil
}

func (r *Reput) dispatchWriterLocked(bucket int64) (*dispWriter, error) {
	if dw, ok := r.dispatch[bucket]; ok {
		dw.used = true
		return dw, nil
	}
	seg, ok := r.segment(bucket)
	if !ok {
		return nil, fmt.Errorf("reput: no schedule segment starts at %s", time.UnixMilli(bucket).UTC().Format(time.RFC3339))
	}
	w, rec, err := dispatchlog.Open(r.opts.Dir, bucket, seg.Duration, r.opts.Dispatch)
	if err != nil {
		return nil, err
	}
	if rec.Truncated {
		r.log.Warn("reput: dispatch log torn tail truncated", "recovery", rec.String())
	}
	dw := &dispWriter{w: w, used: true}
	r.dispatch[bucket] = dw
	return dw, nil
}

func (r *Reput) segment(bucket int64) (schedulelog.SegmentInfo, bool) {
	r.segsMu.RLock()
	defer r.segsMu.RUnlock()
	i := sort.Search(len(r.segs), func(i int) bool { return r.segs[i].Start >= bucket })
	if i < len(r.segs) && r.segs[i].Start == bucket {
		return r.segs[i], true
	}
	return schedulelog.SegmentInfo{}, false
}

func deliverAtOf(p []byte) (int64, bool) {
	if len(p) < 9 {
		return 0, false
	}
	return int64(binary.LittleEndian.Uint64(p[1:9])), true
}

var _ = message.TypeSchedule

// abandon stops the routing goroutine without syncing, checkpointing or
// closing anything, as a crash would. For tests.
func (r *Reput) abandon() {
	r.abandoned.Store(true)
	r.Close()
}
