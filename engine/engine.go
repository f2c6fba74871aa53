// Package engine wires Hourglass's logs into a delayed-message engine that
// a program can embed: Schedule appends to the commitlog, reput routes into
// the schedule segments, a driver goroutine preloads buckets into the
// wheel shortly before they start, fires due messages to a Sink in
// batches, and records each confirmed delivery in the dispatch log so that
// a restart skips it.
//
// Invariants it holds (DESIGN.md): an answered Schedule or Cancel survives
// a crash (I1, under the always fsync policy); a message whose done-record
// is durable is never delivered again (I3); nothing is handed to the sink
// before its deliverAt on the engine's clock (I4); Cancel answers
// Cancelled (or AlreadyCancelled, for a message an earlier Cancel
// cancelled, also across restarts) only if the message will never be
// delivered (I7).
//
// Get and List (inspect.go) read what is scheduled from the schedule
// segments and dispatch logs, loaded or not, and change nothing.
//
// Faults (docs/DESIGN.md): a damaged schedule entry costs that entry only
// (the loader skips to the next valid one and rebuilds the damaged ones
// from the commitlog while it holds them); a bucket whose dispatch log is
// damaged or missing is held, neither delivered nor dropped, until
// RepairDispatchLogs (`hourglass repair`) is told what to assume; loading
// and recording deliveries retry transient failures and report them
// through Health.
//
// It owns a data directory (commitlog/ and schedule/) and the wheel; it
// imports the logs (commitlog, schedulelog, dispatchlog), reput, message
// and wheel. Sinks, the queue and the server import it, never the
// reverse.
package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglassmq/hourglass/catalog"
	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/reput"
	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/segfile"
)

var (
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("engine: closed")
	// ErrTooFar is wrapped by Schedule's error for a deliverAt beyond MaxDelay.
	ErrTooFar = errors.New("engine: delivery time beyond the maximum delay")
	// ErrInvalid is wrapped by Schedule's error for a malformed message.
	ErrInvalid = errors.New("engine: invalid message")
)

// Request is one message to schedule. Exactly one of Delay and At says
// when: At if it is not zero, else Delay from the engine's clock on arrival.
// A time in the past is due at once.
type Request struct {
	Topic   string
	Headers []message.Header
	Body    []byte
	Delay   time.Duration
	At      time.Time
	// Attempt and Origin are set when a consumer's retry reschedules a
	// message: the attempt number and the first attempt's ID.
	Attempt uint32
	Origin  message.ID
	// IdempotencyKey, if set, makes a retry of this request on the same
	// topic within Options.IdempotencyWindow return the first message's ID
	// instead of scheduling a second message, also across a crash. It is
	// stored as the header IdempotencyHeader; at most MaxIdempotencyKey
	// bytes.
	IdempotencyKey string
	// FlowKey, if set, is the message's flow key (at most
	// message.MaxFlowKey bytes), stored as the header
	// message.FlowKeyHeader: the built-in queue applies the topic's
	// per-key flow policy to it.
	FlowKey string
	// ExpireAt, or TTL after its delivery time, is when the message
	// expires: from then on it is never handed to a consumer (at most one
	// of them; neither: it never expires). It is stored as the header
	// message.ExpireAtHeader and must be after the delivery time.
	ExpireAt time.Time
	TTL      time.Duration
}

// CancelResult is Cancel's answer.
type CancelResult int

const (
	// Unknown: no such message is pending (never scheduled here, or
	// delivered and retired long ago).
	Unknown CancelResult = iota
	// Cancelled: the message will never be delivered.
	Cancelled
	// AlreadyDone: the message was delivered (or is being delivered, or
	// was dead-lettered).
	AlreadyDone
	// AlreadyCancelled: an earlier Cancel cancelled the message; it will
	// never be delivered. Answered before and after a restart.
	AlreadyCancelled
)

func (r CancelResult) String() string {
	switch r {
	case Cancelled:
		return "cancelled"
	case AlreadyDone:
		return "already-delivered"
	case AlreadyCancelled:
		return "already-cancelled"
	}
	return "unknown"
}

// Engine is a running delayed-message engine. All methods may be called
// from any goroutine.
type Engine struct {
	opts     Options
	log      *commitlog.Log
	reput    *reput.Reput
	schedDir string
	d        *driver

	// mu is held shared by the calls that write (Schedule, Cancel...),
	// exclusively by Close.
	mu struct {
		sync.RWMutex
		closed bool
	}

	// appendCancel appends a cancel record: the commitlog's Append, or a
	// failing one in tests.
	appendCancel func(offs []int64, recs ...commitlog.Record) ([]int64, error)

	keys *keyIndex // nil when Options.IdempotencyWindow is 0 (set before Open returns)
	// cat holds the key index, reschedules and durable settings that
	// reput routes (package catalog).
	cat *catalog.Catalog
	// doneLogs answers Cancel, Reschedule and Get of buckets not in
	// memory from their dispatch logs (fate.go).
	doneLogs doneLogs
	// afterFind, if set (tests), runs between finding a message's
	// segment and deciding on the driver (claim), or reading its state
	// (Get).
	afterFind func()
	// beforeEarlyRetire, if set (tests), runs when a check found every
	// entry of a bucket not started done, before reput retires it
	// (retirefuture.go).
	beforeEarlyRetire func()
	health            *health
	// refusal.ch is closed, with refusal.err set, by refuse.
	refusal struct {
		ch   chan struct{}
		err  error
		once sync.Once
	}
	ready chan struct{}
	// openEnd is the commitlog's end at Open; opened is when Open began
	// (engine clock), fresh whether the commitlog directory was new.
	openEnd int64
	opened  time.Time
	fresh   bool
	// calls counts Schedules accepted and Cancel calls answered
	// Cancelled.
	calls struct{ scheduled, cancelled atomic.Int64 }
	// pending counts what each topic holds pending (pending.go).
	pending *pendingCounts
}

// Open opens (or creates) the data directory, recovers it, and starts
// routing and firing. It returns once the commitlog and the schedule
// segments are recovered; Ready says when the due buckets are loaded.
func Open(opts Options) (*Engine, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	// The reput checkpoint names a commitlog position: a log that
	// recovers to an end below it is damaged, not torn (reput.Start
	// reports a damaged checkpoint itself).
	opened := opts.Now()
	_, statErr := os.Stat(filepath.Join(opts.Dir, "commitlog"))
	fresh := errors.Is(statErr, fs.ErrNotExist)
	schedDir := filepath.Join(opts.Dir, "schedule")
	minEnd, _, _ := reput.ReadCheckpoint(schedDir)
	minEndFrom := "the reput checkpoint " + filepath.Join(schedDir, reput.CheckpointName)
	// Every retirement records the checkpoint it was made under: with the
	// checkpoint lost, the highest of those still names a position.
	if ret, ok, err := reput.ReadRetired(schedDir); err == nil && ok {
		for _, r := range ret.Records {
			if r.Floor > minEnd {
				minEnd, minEndFrom = r.Floor, "the retired log "+filepath.Join(schedDir, "reput.retired")
			}
		}
	}
	l, rec, err := commitlog.Open(commitlog.Options{
		MinEnd:     minEnd,
		MinEndFrom: minEndFrom,
		// Without fsync per append a power loss may take records reput
		// routed already: they are in the schedule segments, and the skip
		// keeps their offsets (message IDs) from being used again.
		PadToMinEnd: opts.Fsync != commitlog.SyncAlways,
		Dir:         filepath.Join(opts.Dir, "commitlog"),
		Sync:        opts.Fsync,
		SegmentSize: opts.CommitlogSegmentSize,
		Logger:      opts.Logger,
		OnSync:      opts.OnFsync,
	})
	if err != nil {
		return nil, repairHint(err, opts.Dir)
	}
	if rec.Truncated {
		opts.Logger.Warn("engine: commitlog torn tail truncated", "offset", rec.DroppedFrom, "bytes", rec.DroppedBytes)
	}
	e := &Engine{opts: opts, opened: opened, fresh: fresh, log: l, schedDir: filepath.Join(opts.Dir, "schedule"), ready: make(chan struct{}), appendCancel: l.Append,
		health: newHealth(opts.Now, DefaultStallAfter), pending: newPendingCounts()}
	e.refusal.ch = make(chan struct{})
	e.d = newDriver(e)
	if err := os.MkdirAll(e.schedDir, 0o755); err != nil {
		l.Close()
		return nil, err
	}
	if e.cat, err = catalog.Open(filepath.Join(e.schedDir, catalog.FileName)); err != nil {
		l.Close()
		return nil, repairHint(err, opts.Dir)
	}
	if err := upgradeCatalog(e.cat, opts.Dir, e.schedDir, opened, opts.Logger); err != nil {
		e.cat.Close()
		l.Close()
		return nil, repairHint(err, opts.Dir)
	}
	e.reput, err = reput.Start(reput.Options{
		Catalog:         e.cat,
		KeyWindow:       opts.IdempotencyWindow,
		OnControl:       opts.OnControl,
		Log:             l,
		Dir:             e.schedDir,
		SegmentDuration: opts.SegmentDuration,
		Logger:          opts.Logger,
		OnEntries:       e.d.onEntries,
		OnCancel:        e.d.onCancel,
		OnSegment:       e.d.onSegment,
		// Routing retries transient failures by itself; health makes a
		// long stall visible (/readyz, Schedule's error).
		OnStall:  func(err error) { e.health.fail(StageRoute, err) },
		OnResume: func() { e.health.ok(StageRoute) },
	})
	if err != nil {
		e.cat.Close()
		l.Close()
		return nil, repairHint(err, opts.Dir)
	}
	e.openEnd = l.EndOffset()
	if opts.IdempotencyWindow > 0 {
		e.keys = newKeyIndex(opts.IdempotencyWindow, opts.Now, opened, e.openEnd, storeOf(e.cat, e.reput))
	}
	if e.takePendingFile(e.openEnd) {
		close(e.pending.counted)
	}
	// A start-up check, beside routing and loading (startcheck.go).
	go e.checkRetained(e.openEnd)
	go e.d.run(e.openEnd)
	return e, nil
}

// repairHint adds to a corruption error the command that repairs dir.
func repairHint(err error, dir string) error {
	var ce *segfile.CorruptionError
	if !errors.As(err, &ce) {
		return err
	}
	return fmt.Errorf("%w\nthe server cannot start on damaged data: with it stopped, run `hourglass repair --data-dir %s` (it keeps a copy of everything it changes under %s)",
		err, dir, filepath.Join(dir, "quarantine"))
}

// Ready is closed once the start-up checks have passed (the dispatch logs
// of the buckets due at start, every record the commitlog retains: a
// failure closes Refused instead), everything in the commitlog at Open is
// routed and the buckets due by then are loaded. Nothing is handed to the
// sink before the checks have passed; due messages fire from then on,
// before Ready.
func (e *Engine) Ready() <-chan struct{} { return e.ready }

// Now returns the engine's clock.
func (e *Engine) Now() time.Time { return e.opts.Now() }

// Position returns the commitlog position past every record appended so
// far: every message answered before the call has an ID whose seq is
// below it (a frozen pause records it to tell the messages stored before
// it).
func (e *Engine) Position() uint64 { return uint64(e.log.WrittenOffset()) }

// scratch is ScheduleBatch's working memory, pooled: a call makes one
// allocation (the IDs it returns) where it made six.
type scratch struct {
	msgs []message.Message
	recs []commitlog.Record
	offs []int64
	buf  []byte // the encoded payloads
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// maxPooledBuf bounds the encoding buffer a pooled scratch keeps.
const maxPooledBuf = 1 << 20

// maxCancelWaits bounds how often Cancel waits for other Cancels of the
// same message to append their records: each wait ends with one of them
// answered, and a new one can take its place only while this one waits.
const maxCancelWaits = 64

// Stats are the engine's counters.
type Stats struct {
	Scheduled   int64 // messages accepted by Schedule since Open
	Cancelled   int64 // Cancel calls answered Cancelled since Open
	Fired       int64 // messages handed to the sink
	Delivered   int64 // messages whose done-record is durable
	Retries     int64 // failed sink calls retried
	Pending     int64 // messages in the wheel (loaded buckets) that will fire: cancelled ones are left out at once
	Inflight    int64 // handed to the sink, not yet confirmed
	Loaded      int   // buckets in memory
	Segments    int   // schedule segments on disk
	ReputLag    int64 // commitlog bytes appended and not yet routed
	Corrupt     int64 // damaged schedule entries or regions found when loading or firing, and unreadable segments
	Unconfirmed int64 // done-records that failed to be written
	Expired     int64 // messages past their expiry at hand-over, recorded dead-lettered instead (a Sink that is no ExpiryHandler)
	Rebuilt     int64 // damaged entries rebuilt from the commitlog
	Held        int64 // entries held back because their dispatch log is damaged or missing (`hourglass repair`)
}

// Stats returns a snapshot of the counters.
func (e *Engine) Stats() Stats {
	s := e.d.stats()
	s.Scheduled = e.calls.scheduled.Load()
	s.Cancelled = e.calls.cancelled.Load()
	s.Segments = len(e.reput.Segments())
	s.ReputLag = e.log.WrittenOffset() - e.reput.Position()
	return s
}

// Segments returns the schedule segments on disk, sorted by bucket start:
// the list reput keeps as it creates and retires them, with no directory
// read. Name and Start are set; Duration and the synced-length hint only
// once reput has read the segment's header (see reput.Reput.Segments).
func (e *Engine) Segments() []schedulelog.SegmentInfo { return e.reput.Segments() }

// CopyCatalog writes a consistent copy of the catalog, as last committed,
// to path (for a backup of the running engine: internal/backup).
func (e *Engine) CopyCatalog(path string) error { return e.cat.CopyTo(path) }

// PendingByBucket returns how many messages each segment on disk holds
// that are not done (cancelled ones left out at once, as in Stats.Pending),
// for loaded buckets, keyed by bucket start (UTC ms).
func (e *Engine) PendingByBucket() map[int64]int64 { return e.d.pendingByBucket() }

// Close stops accepting requests, stops firing (messages handed to the
// sink and not confirmed are delivered again after a restart), syncs and
// closes the logs.
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.mu.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	e.mu.closed = true
	e.mu.Unlock()
	e.d.stop()
	err := e.reput.Close()
	if perr := e.writePendingFile(); err == nil {
		err = perr
	}
	if cerr := e.cat.Close(); err == nil {
		err = cerr
	}
	if cerr := e.log.Close(); err == nil {
		err = cerr
	}
	return err
}

var _ = schedulelog.Align
