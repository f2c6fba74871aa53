package pebbledelay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// The key layout. Part of the store's format: do not change.
const (
	// keyLen is the length of every key: deliverAt then seq.
	keyLen = 16
	// idemBit is set in the seq of a message scheduled with an
	// idempotency key, and never in a counter's.
	idemBit = 1 << 63
)

// ErrCorrupt is wrapped by errors about stored bytes that do not decode.
var ErrCorrupt = errors.New("pebbledelay: corrupt store")

// appendKey appends the key of a message due at at (Unix ns, at least 0).
func appendKey(dst []byte, at int64, seq uint64) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(at))
	return binary.BigEndian.AppendUint64(dst, seq)
}

// parseKey is appendKey's inverse.
func parseKey(k []byte) (at int64, seq uint64, err error) {
	if len(k) != keyLen {
		return 0, 0, fmt.Errorf("%w: key of %d bytes, want %d", ErrCorrupt, len(k), keyLen)
	}
	u := binary.BigEndian.Uint64(k)
	if u > math.MaxInt64 {
		return 0, 0, fmt.Errorf("%w: key %x: delivery time out of range", ErrCorrupt, k)
	}
	return int64(u), binary.BigEndian.Uint64(k[8:]), nil
}

// timeBound is the smallest key of the messages due after at: every key of
// a message due at or before at sorts below it.
func timeBound(at int64) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(at)+1)
}

// Options configure Open. The zero value of each field but Dir is its
// default.
type Options struct {
	// Dir is Pebble's data directory, created if missing.
	Dir string
	// Sync commits every write with pebble.Sync: answers wait for the WAL
	// fsync. False commits with pebble.NoSync and syncs the WAL every
	// SyncInterval.
	Sync bool
	// SyncInterval is how often the WAL is synced when Sync is false;
	// default 1s.
	SyncInterval time.Duration
	// MaxReady is the most due messages held in memory and not leased; the
	// scan waits while there are this many. Default 10,000.
	MaxReady int
	// DefaultLease is the lease of a Consume that asks for none; default
	// 30s.
	DefaultLease time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// scanChunk is the most keys one Tick loads, so that writers and
// consumers get the lock between chunks.
const scanChunk = 1000

// Queue is the store and its due scan. Its methods may be called from any
// goroutine; Open starts the goroutines that scan and (without Sync) sync
// the WAL, Close stops them.
type Queue struct {
	db    *pebble.DB
	wopts *pebble.WriteOptions
	opts  Options
	log   *slog.Logger
	// boot prefixes receipts, so that a receipt from before a restart
	// names no lease after it.
	boot    string
	seq     atomic.Uint64 // the next counter seq
	wake    chan struct{} // wakes the loop; capacity 1
	closing chan struct{}
	wg      sync.WaitGroup

	mu sync.Mutex
	// err is the first failed write (mu): the store refuses writes after it.
	err error
	// cursor is the last key the scan loaded (mu); nil before the first.
	cursor []byte
	// inflight counts the writers of each key between their commit's start
	// and their return to mu (mu): the scan leaves such keys to them.
	inflight map[string]int
	// mem holds every message in memory, ready or leased, by key (mu).
	mem map[string]*msg
	// leases holds the leased messages by receipt (mu); expiry orders
	// them by lease end.
	leases map[string]*msg
	expiry leaseHeap
	topics map[string]*topic
	// nReady counts ready messages over all topics (mu); stalled is set
	// while the scan waits for it to drop below MaxReady.
	nReady  int
	stalled bool
	// wakeAt is when the loop will next tick by itself (mu).
	wakeAt time.Time
	leaseN uint64
}

// Open opens the store in o.Dir and starts its loops.
func Open(o Options) (*Queue, error) {
	q, err := open(o)
	if err != nil {
		return nil, err
	}
	q.wg.Add(1)
	go q.loop()
	if !o.Sync {
		q.wg.Add(1)
		go q.syncLoop()
	}
	return q, nil
}

// open opens the store without starting its loops (tests call Tick).
func open(o Options) (*Queue, error) {
	if o.SyncInterval <= 0 {
		o.SyncInterval = time.Second
	}
	if o.MaxReady <= 0 {
		o.MaxReady = 10_000
	}
	if o.DefaultLease <= 0 {
		o.DefaultLease = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	db, err := pebble.Open(o.Dir, &pebble.Options{Logger: pebbleLogger{o.Logger}})
	if err != nil {
		return nil, fmt.Errorf("pebbledelay: open %s: %w", o.Dir, err)
	}
	start := time.Now().UnixNano()
	q := &Queue{
		db: db, wopts: pebble.NoSync, opts: o, log: o.Logger,
		boot: strconv.FormatInt(start, 36) + ".", wake: make(chan struct{}, 1), closing: make(chan struct{}),
		inflight: map[string]int{}, mem: map[string]*msg{}, leases: map[string]*msg{}, topics: map[string]*topic{},
	}
	if o.Sync {
		q.wopts = pebble.Sync
	}
	q.seq.Store(uint64(start) &^ idemBit)
	return q, nil
}

// Close stops the loops, syncs the WAL and closes the store.
func (q *Queue) Close() error {
	close(q.closing)
	q.wg.Wait()
	err := q.db.LogData(nil, pebble.Sync)
	return errors.Join(err, q.db.Close())
}

// poke wakes the loop if it sleeps.
func (q *Queue) poke() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// loop ticks when the next message is due or lease ends, or when poked.
func (q *Queue) loop() {
	defer q.wg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-q.closing:
			return
		case <-q.wake:
		case <-t.C:
		}
		next := q.Tick(time.Now())
		t.Reset(time.Until(next))
	}
}

// syncLoop syncs the WAL every SyncInterval (when Sync is false).
func (q *Queue) syncLoop() {
	defer q.wg.Done()
	t := time.NewTicker(q.opts.SyncInterval)
	defer t.Stop()
	for {
		select {
		case <-q.closing:
			return
		case <-t.C:
			if err := q.db.LogData(nil, pebble.Sync); err != nil {
				q.fail(err)
			}
		}
	}
}

// fail makes err the store's sticky write error.
func (q *Queue) fail(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err == nil {
		q.err = fmt.Errorf("pebbledelay: write failed, refusing writes: %w", err)
		q.log.Error("write failed; the store refuses writes from now on", "err", err)
	}
}

// invalidError is a request's mistake (codes.InvalidArgument).
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return "pebbledelay: " + e.msg }

func invalidf(format string, a ...any) error {
	return &invalidError{fmt.Sprintf(format, a...)}
}

// maxBody is the largest body accepted, Hourglass's default --max-body.
const maxBody = 1 << 20

// Schedule stores reqs atomically, all or none, and returns their IDs and
// delivery times. delay_ms counts from now.
func (q *Queue) Schedule(reqs []*hourglassv1.ScheduleRequest, now time.Time) ([]*hourglassv1.ScheduleResponse, error) {
	ms := make([]*msg, len(reqs))
	out := make([]*hourglassv1.ScheduleResponse, len(reqs))
	for i, r := range reqs {
		if n := len(r.Topic); n < 1 || n > 200 {
			return nil, invalidf("messages[%d]: topic of %d bytes; want 1 to 200", i, n)
		}
		if len(r.Body) > maxBody {
			return nil, invalidf("messages[%d]: body of %d bytes; at most %d", i, len(r.Body), maxBody)
		}
		at := now
		switch w := r.When.(type) {
		case nil:
		case *hourglassv1.ScheduleRequest_DeliverAt:
			at = w.DeliverAt.AsTime()
		case *hourglassv1.ScheduleRequest_DelayMs:
			if w.DelayMs < 0 {
				return nil, invalidf("messages[%d]: delay_ms %d is negative", i, w.DelayMs)
			}
			at = now.Add(time.Duration(w.DelayMs) * time.Millisecond)
		default:
			return nil, invalidf("messages[%d]: delay_level is not supported here; give deliver_at or delay_ms", i)
		}
		// A time before 1970 is due at once, as 1970 is.
		ns := max(at.UnixNano(), 0)
		seq := q.seq.Add(1)
		if r.IdempotencyKey != "" {
			h := fnv.New64a()
			h.Write([]byte(r.Topic))
			h.Write([]byte{0})
			h.Write([]byte(r.IdempotencyKey))
			seq = h.Sum64() | idemBit
		}
		stored := &hourglassv1.ScheduleRequest{
			Topic: r.Topic, Body: r.Body, Headers: r.Headers, IdempotencyKey: r.IdempotencyKey,
			When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamp(ns)},
		}
		ms[i] = newMsg(appendKey(nil, ns, seq), ns, stored)
		out[i] = &hourglassv1.ScheduleResponse{Id: ms[i].id, DeliverAt: stored.GetDeliverAt()}
	}
	if err := q.write(ms, nil); err != nil {
		return nil, err
	}
	return out, nil
}

// write stores puts and deletes dels in one batch under the store's
// durability, then makes the puts due at or before the cursor ready.
func (q *Queue) write(puts []*msg, dels []string) error {
	b := q.db.NewBatch()
	defer b.Close()
	for _, m := range puts {
		v, err := m.req.MarshalVT()
		if err != nil {
			return fmt.Errorf("pebbledelay: encode %s: %w", m.id, err)
		}
		if err := b.Set([]byte(m.key), v, nil); err != nil {
			return fmt.Errorf("pebbledelay: batch: %w", err)
		}
	}
	for _, k := range dels {
		if err := b.Delete([]byte(k), nil); err != nil {
			return fmt.Errorf("pebbledelay: batch: %w", err)
		}
	}

	q.mu.Lock()
	if q.err != nil {
		q.mu.Unlock()
		return q.err
	}
	for _, m := range puts {
		q.inflight[m.key]++
	}
	q.mu.Unlock()
	err := b.Commit(q.wopts)
	if err != nil {
		q.fail(err)
	}

	q.mu.Lock()
	defer q.mu.Unlock()
	for _, m := range puts {
		if q.inflight[m.key]--; q.inflight[m.key] == 0 {
			delete(q.inflight, m.key)
		}
		if err != nil {
			continue
		}
		switch {
		case m.key <= string(q.cursor):
			// The scan has passed it (or passes it while this writer
			// holds it in inflight): it is this writer's to add.
			if q.mem[m.key] == nil {
				q.ready(m, false)
			}
		case time.Unix(0, m.at).Before(q.wakeAt):
			q.poke()
		}
	}
	if err != nil {
		return q.err
	}
	return nil
}

// pebbleLogger passes Pebble's log lines to slog: its routine reports
// (WAL replay, flushes, compactions) at debug level.
type pebbleLogger struct{ log *slog.Logger }

func (l pebbleLogger) Infof(format string, args ...any) { l.log.Debug(fmt.Sprintf(format, args...)) }

func (l pebbleLogger) Errorf(format string, args ...any) { l.log.Error(fmt.Sprintf(format, args...)) }

// Fatalf logs and exits, as Pebble's own logger does.
func (l pebbleLogger) Fatalf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...))
	os.Exit(1)
}
