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
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/dispatchlog"
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

	closeMu sync.RWMutex // held shared by Schedule and Cancel, exclusively by Close
	closed  bool

	// appendCancel appends a cancel record: the commitlog's Append, or a
	// failing one in tests.
	appendCancel func(offs []int64, recs ...commitlog.Record) ([]int64, error)

	keys   *keyIndex // nil when Options.IdempotencyWindow is 0
	health *health
	// refused is closed, with refuseErr set, by refuse.
	refused    chan struct{}
	refuseErr  error
	refuseOnce sync.Once
	ready      chan struct{}
	// openEnd is the commitlog's end at Open; opened is when Open began
	// (engine clock), fresh whether the commitlog directory was new.
	openEnd   int64
	opened    time.Time
	fresh     bool
	scheduled atomic.Int64
	cancelled atomic.Int64
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
		health: newHealth(opts.Now, opts.StallAfter), refused: make(chan struct{})}
	if opts.IdempotencyWindow > 0 {
		// Rebuilt in the background: only keyed Schedules wait for it.
		e.keys = newKeyIndex(opts.IdempotencyWindow, opts.Now)
		go e.keys.loadKeys(l, l.EndOffset(), opts.Logger.Warn)
	}
	e.d = newDriver(e)
	e.reput, err = reput.Start(reput.Options{
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
		l.Close()
		return nil, repairHint(err, opts.Dir)
	}
	e.openEnd = l.EndOffset()
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

// Ready is closed once everything in the commitlog at Open is routed and
// the buckets due by then are loaded: the first due message can fire.
func (e *Engine) Ready() <-chan struct{} { return e.ready }

// Now returns the engine's clock.
func (e *Engine) Now() time.Time { return e.opts.Now() }

// ceilMs converts t to epoch milliseconds, rounding up so that a message
// is never due before the instant it asked for.
func ceilMs(t time.Time) int64 {
	ns := t.UnixNano()
	ms := ns / 1e6
	if ns%1e6 > 0 {
		ms++
	}
	return ms
}

// Schedule schedules one message and returns its ID once it is durable
// under the fsync policy.
func (e *Engine) Schedule(ctx context.Context, req Request) (message.ID, error) {
	ids, err := e.ScheduleBatch(ctx, []Request{req})
	if err != nil {
		return message.ID{}, err
	}
	return ids[0], nil
}

// ScheduleBatch schedules reqs atomically: either all are accepted (and
// durable under the fsync policy) or none is. A request whose
// IdempotencyKey was used on its topic within Options.IdempotencyWindow
// is not scheduled again: its ID is the first message's.
func (e *Engine) ScheduleBatch(ctx context.Context, reqs []Request) (_ []message.ID, err error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	now := e.opts.Now()
	nowNs, nowMs := now.UnixNano(), ceilMs(now)
	sc := getScratch(len(reqs))
	defer putScratch(sc)
	msgs := sc.msgs
	keyed := false
	for i := range reqs {
		r := &reqs[i]
		if err := validate(r); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		var ms int64
		if r.At.IsZero() {
			// now.Add(r.Delay), compared with now.Add(MaxDelay) and
			// rounded up to the millisecond, in integers.
			if r.Delay > e.opts.MaxDelay {
				return nil, e.tooFar(i, now, now.Add(r.Delay))
			}
			ms = addCeilMs(nowNs, r.Delay)
		} else {
			if r.At.After(now.Add(e.opts.MaxDelay)) {
				return nil, e.tooFar(i, now, r.At)
			}
			ms = ceilMs(r.At)
		}
		ms = max(ms, nowMs) // a past time is due at once
		// The topic's bytes are only copied by AppendSchedule below.
		msgs[i] = message.Message{DeliverAt: ms, Attempt: r.Attempt, Topic: unsafe.Slice(unsafe.StringData(r.Topic), len(r.Topic)),
			Headers: r.Headers, Body: r.Body, Origin: r.Origin}
		if r.IdempotencyKey != "" {
			keyed = true
			msgs[i].Headers = append(slices.Clip(r.Headers), message.Header{Key: []byte(IdempotencyHeader), Value: []byte(r.IdempotencyKey)},
				message.Header{Key: []byte(IdempotencyTimeHeader), Value: strconv.AppendInt(nil, now.UnixMilli(), 10)})
		}
	}
	ids := make([]message.ID, len(reqs))
	// skip[i]: not appended; its ID is a stored one, or that of an
	// earlier request of the batch with the same key (sameAs).
	var skip []bool
	var sameAs map[int]int
	var claims []keyClaim
	if keyed && e.keys != nil {
		skip = make([]bool, len(reqs))
		sameAs = map[int]int{}
		first := map[string]int{}
		defer func() {
			for _, c := range claims {
				e.keys.settle(c.ik, ids[c.i], err == nil)
			}
		}()
		for i := range reqs {
			if reqs[i].IdempotencyKey == "" {
				continue
			}
			ik := indexKey(reqs[i].Topic, reqs[i].IdempotencyKey)
			if j, ok := first[ik]; ok {
				skip[i], sameAs[i] = true, j
				continue
			}
			first[ik] = i
			id, found, cerr := e.keys.claim(ctx, ik)
			if cerr != nil {
				return nil, cerr
			}
			if found {
				skip[i], ids[i] = true, id
				continue
			}
			claims = append(claims, keyClaim{ik, i})
		}
	}
	size, n := 0, 0
	for i := range msgs {
		if skip == nil || !skip[i] {
			size += message.ScheduleSize(&msgs[i])
			n++
		}
	}
	if n > 0 {
		// One buffer for every payload of the batch: Append copies the
		// records before it returns.
		if cap(sc.buf) < size {
			sc.buf = make([]byte, 0, size)
		}
		buf := sc.buf[:0]
		recs := sc.recs[:0]
		for i := range msgs {
			if skip != nil && skip[i] {
				continue
			}
			start := len(buf)
			buf = message.AppendSchedule(buf, &msgs[i])
			recs = append(recs, commitlog.Record{Type: message.TypeSchedule, Payload: buf[start:len(buf):len(buf)]})
		}
		e.closeMu.RLock()
		defer e.closeMu.RUnlock()
		if e.closed {
			return nil, ErrClosed
		}
		if err := e.health.check(true); err != nil {
			// What is scheduled now could not be delivered: say why and
			// let the producer retry.
			return nil, err
		}
		offs, err := e.log.Append(sc.offs[:0], recs...)
		if err != nil {
			return nil, err
		}
		k := 0
		for i := range reqs {
			if skip != nil && skip[i] {
				continue
			}
			ids[i] = message.ID{DeliverAt: msgs[i].DeliverAt, Seq: uint64(offs[k])}
			k++
		}
		e.scheduled.Add(int64(len(offs)))
	}
	for i, j := range sameAs {
		ids[i] = ids[j]
	}
	return ids, nil
}

// tooFar is ScheduleBatch's error for message i, due at at.
func (e *Engine) tooFar(i int, now, at time.Time) error {
	return fmt.Errorf("message %d: %w: deliverAt %s is %s ahead; the maximum delay is %s",
		i, ErrTooFar, at.UTC().Format(time.RFC3339Nano), fmtDur(at.Sub(now)), fmtDur(e.opts.MaxDelay))
}

// addCeilMs is ceilMs(time.Unix(0, nowNs).Add(d)) without the time
// arithmetic, and without overflowing where nowNs+d would.
func addCeilMs(nowNs int64, d time.Duration) int64 {
	ms := nowNs/1e6 + int64(d)/1e6
	// The remainders: nowNs%1e6 in [0, 1e6) for a time after 1970, d's
	// in (-1e6, 1e6); their sum rounds up to 0, 1 or 2 ms.
	if rem := nowNs%1e6 + int64(d)%1e6; rem > 0 {
		ms += (rem + 1e6 - 1) / 1e6
	} else if rem <= -1e6 {
		ms-- // before 1970 only
	}
	return ms
}

// keyClaim is an idempotency key ScheduleBatch claimed for request i.
type keyClaim struct {
	ik string
	i  int
}

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

func getScratch(n int) *scratch {
	sc := scratchPool.Get().(*scratch)
	if cap(sc.msgs) < n {
		sc.msgs = make([]message.Message, n)
		sc.recs = make([]commitlog.Record, 0, n)
		sc.offs = make([]int64, 0, n)
	}
	sc.msgs = sc.msgs[:n]
	return sc
}

func putScratch(sc *scratch) {
	if cap(sc.buf) > maxPooledBuf {
		return
	}
	// Drop the references to the callers' bodies and topics.
	clear(sc.msgs)
	clear(sc.recs[:cap(sc.recs)])
	scratchPool.Put(sc)
}

func validate(r *Request) error {
	if r.Topic == "" {
		return fmt.Errorf("%w: empty topic", ErrInvalid)
	}
	if len(r.Topic) > message.MaxTopicLen {
		return fmt.Errorf("%w: topic is %d bytes; at most %d", ErrInvalid, len(r.Topic), message.MaxTopicLen)
	}
	if len(r.Headers) > message.MaxHeaders {
		return fmt.Errorf("%w: %d headers; at most %d", ErrInvalid, len(r.Headers), message.MaxHeaders)
	}
	if len(r.IdempotencyKey) > MaxIdempotencyKey {
		return fmt.Errorf("%w: idempotency key of %d bytes; at most %d", ErrInvalid, len(r.IdempotencyKey), MaxIdempotencyKey)
	}
	if r.IdempotencyKey != "" && len(r.Headers) > message.MaxHeaders-2 {
		return fmt.Errorf("%w: %d headers and an idempotency key (stored as two headers, the key and its time); at most %d headers with a key", ErrInvalid, len(r.Headers), message.MaxHeaders-2)
	}
	return nil
}

// fmtDur prints a duration the way people say it: 12y, 3d4h, 90ms.
func fmtDur(d time.Duration) string {
	const day = 24 * time.Hour
	const year = 365 * day
	switch {
	case d >= year:
		return fmt.Sprintf("%.4gy", float64(d)/float64(year))
	case d >= day:
		return fmt.Sprintf("%.4gd", float64(d)/float64(day))
	}
	return d.Round(time.Millisecond).String()
}

// Cancel cancels the message id. Its answer is truthful (I7): Cancelled
// only if the message will never be delivered, including when the cancel
// races with firing; AlreadyCancelled if an earlier Cancel cancelled it
// (also across restarts); AlreadyDone if it was delivered, is being
// delivered or was dead-lettered; Unknown if no such message is pending.
func (e *Engine) Cancel(ctx context.Context, id message.ID) (CancelResult, error) {
	e.closeMu.RLock()
	defer e.closeMu.RUnlock()
	if e.closed {
		return Unknown, ErrClosed
	}
	if id.DeliverAt < 0 || int64(id.Seq) >= e.log.EndOffset() || int64(id.Seq) < 0 {
		return Unknown, nil
	}
	// Its schedule record must be routed before its segment can be found,
	// and the cancels in the commitlog at Open before a dispatch log can
	// say whether it was cancelled before.
	if err := e.reput.WaitRouted(ctx, max(int64(id.Seq)+1, e.openEnd)); err != nil {
		return Unknown, err
	}
	seg, ok := e.reput.FindSegment(id.DeliverAt)
	if !ok {
		return Unknown, nil
	}
	var st cancelState
	for range maxCancelWaits {
		var wait <-chan struct{}
		var err error
		st, wait, err = e.d.tryCancel(ctx, id.Seq, seg.Start)
		if err != nil {
			return Unknown, err
		}
		if st != cancelWait {
			break
		}
		// Another Cancel of it is appending its record: its outcome is ours.
		select {
		case <-wait:
		case <-e.d.stopped:
			return Unknown, ErrClosed
		case <-ctx.Done():
			return Unknown, ctx.Err()
		}
	}
	switch st {
	case cancelWait:
		return Unknown, fmt.Errorf("engine: cancel of %s: other Cancels of it kept deciding; try again", id)
	case cancelDoneBefore:
		// Done before its bucket was loaded: the dispatch log says why.
		r, ok, err := doneReason(e.donePath(seg.Start), id.Seq)
		if err != nil || !ok {
			// In the done set loaded from that file, so done either way;
			// delivered is the safe answer.
			return AlreadyDone, err
		}
		return doneResult(r), nil
	case cancelRegistered, cancelRegisteredUnloaded:
	default:
		return st.result(), nil
	}
	if st == cancelRegisteredUnloaded {
		// The bucket is not in memory: its dispatch log is the record of
		// what was delivered or cancelled. Deliveries are synced there
		// before they are confirmed, nothing of an unloaded bucket is in
		// flight, and the cancels reput routed there are synced first.
		r, done, err := e.unloadedDone(seg.Start, id.Seq)
		if err != nil {
			e.d.dropIntent(id.Seq)
			return Unknown, err
		}
		if done {
			e.d.dropIntent(id.Seq)
			return doneResult(r), nil
		}
	}
	if held, err := e.sinkMayHold(ctx, id); err != nil || held {
		// An earlier run may have handed it to the sink without recording
		// it done (a crash, or a Close, between the sink's answer and the
		// done-record): it is delivered again, so it is not cancelled.
		e.d.dropIntent(id.Seq)
		if err != nil {
			return Unknown, err
		}
		return AlreadyDone, nil
	}
	offs, err := e.appendCancel(nil, commitlog.Record{Type: message.TypeCancel, Payload: message.AppendCancel(nil, id)})
	if err != nil {
		e.d.dropIntent(id.Seq)
		return Unknown, err
	}
	e.d.armIntent(id.Seq, offs[0])
	e.cancelled.Add(1)
	return Cancelled, nil
}

// maxCancelWaits bounds how often Cancel waits for other Cancels of the
// same message to append their records: each wait ends with one of them
// answered, and a new one can take its place only while this one waits.
const maxCancelWaits = 64

// unloadedDone reads from the dispatch log of the bucket at start whether
// seq is done and why.
func (e *Engine) unloadedDone(start int64, seq uint64) (dispatchlog.Reason, bool, error) {
	if err := e.reput.SyncDispatch(start); err != nil {
		return 0, false, err
	}
	return doneReason(e.donePath(start), seq)
}

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
	Rebuilt     int64 // damaged entries rebuilt from the commitlog
	Held        int64 // entries held back because their dispatch log is damaged or missing (`hourglass repair`)
}

// Stats returns a snapshot of the counters.
func (e *Engine) Stats() Stats {
	s := e.d.stats()
	s.Scheduled = e.scheduled.Load()
	s.Cancelled = e.cancelled.Load()
	s.Segments = len(e.reput.Segments())
	s.ReputLag = e.log.WrittenOffset() - e.reput.Position()
	return s
}

// PendingByBucket returns how many messages each segment on disk holds
// that are not done (cancelled ones left out at once, as in Stats.Pending),
// for loaded buckets, keyed by bucket start (UTC ms).
func (e *Engine) PendingByBucket() map[int64]int64 { return e.d.pendingByBucket() }

// Close stops accepting requests, stops firing (messages handed to the
// sink and not confirmed are delivered again after a restart), syncs and
// closes the logs.
func (e *Engine) Close() error {
	e.closeMu.Lock()
	if e.closed {
		e.closeMu.Unlock()
		return ErrClosed
	}
	e.closed = true
	e.closeMu.Unlock()
	e.d.stop()
	err := e.reput.Close()
	if cerr := e.log.Close(); err == nil {
		err = cerr
	}
	return err
}

var _ = schedulelog.Align
