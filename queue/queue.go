package queue

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/segfile"
)

// Queue is the built-in queue. All methods may be called from any
// goroutine.
type Queue struct {
	opts       Options
	dir        string    // Dir/topics
	origin     time.Time // when Open began, with a monotonic reading: lease deadlines count from it
	openedAt   time.Time // when Open began on the wall clock (Options.Now): flow-key rate buckets fill from it
	reschedule atomic.Pointer[RescheduleFunc]
	serial     atomic.Uint64 // last lease serial handed out
	tokens     tokenKey      // signs List's page tokens (listtoken.go)

	// closing is held shared by every operation while it works (not
	// while a Receive waits) and exclusively by Close.
	closing struct {
		sync.RWMutex
		closed bool
	}
	done chan struct{} // closed by Close

	// mu guards the topics and the slots' fields (topics.go).
	mu struct {
		sync.Mutex
		topics  map[string]*slot
		created chan struct{} // closed (and replaced) when a topic is created
	}
	opened chan struct{} // wakes the sweeper when a topic is opened; capacity 1
	ckpts  ckptQueue     // the topics waiting for a checkpoint

	wg sync.WaitGroup // the checkpointer, the sweeper and dead-letter workers

	health health // failing stages (health.go)

	pol policies // per-topic policies (policy.go)
	// held is closed by ReleaseReceives; nil without Options.HoldReceives.
	held chan struct{}
}

// Message is one received message. Its byte slices are its own: no other
// message's overlap them (those of one Receive share a few allocations).
type Message struct {
	ID        message.ID // the ID the producer was given (for a retry: the retry's own)
	Topic     string
	Headers   []message.Header
	Body      []byte
	DeliverAt int64      // when it was due, UTC epoch milliseconds
	Attempt   uint32     // 0 on the first delivery; raised by each expired lease or Nack
	Origin    message.ID // the first attempt's ID for a retry; zero otherwise
	// ReceivedAt is when this lease began, on the queue's clock.
	ReceivedAt time.Time
	// LeaseUntil is when the lease ends: Ack or Nack before it.
	LeaseUntil time.Time
	// Receipt names this lease; AckReceipt and NackReceipt act on it and
	// fail once the message has been handed out again.
	Receipt string
	// Offset is the message's position in its topic's queue log.
	Offset int64
}

// TopicStats are one topic's counters and gauges. Counters start at zero
// when the queue is opened.
type TopicStats struct {
	Delivered uint64 // messages appended to the topic (Deliver, dead-lettering into it)
	Backlog   int64  // receivable now: never received, or waiting to be received again
	Leased    int    // received and not yet acked, nacked or expired
	Acked     uint64 // Acks that succeeded
	Nacked    uint64 // Nacks that succeeded
	Expired   uint64 // leases that ran out
	// PastExpiry counts messages dead-lettered with ReasonExpired: a
	// Receive reached them past their expiry (message.ExpireAtHeader), or
	// under Expiry.Unacked they were not acked by then; ExpiryDropped
	// those dropped instead (Expiry.Drop).
	PastExpiry    uint64
	ExpiryDropped uint64
	Redelivered   uint64 // messages handed out again (after an expired lease, a Nack without delay, a restart)
	DeadLettered  uint64 // messages moved to <topic>.dlq
	// FreezeMoved counts messages a Receive reached before the time a
	// frozen pause made them due: moved to that time (a new incarnation).
	FreezeMoved uint64
	// OldestReady is the delivery time (UTC epoch ms) of the oldest due
	// message waiting to be received: the older of the next one never
	// received and the first waiting to be received again; 0 if none.
	OldestReady int64
	// FlowHeld is the due messages (counted in Backlog) that wait because
	// their flow key's bound holds them back (Policy.Flow), and
	// FlowKeysHeld the keys holding them.
	FlowHeld     int64
	FlowKeysHeld int
}

// Open opens (or creates) the queue in opts.Dir and recovers and checks
// every topic in it, one at a time: acked messages stay acked, everything
// else delivered is receivable again. A damaged topic makes it fail (see
// the package doc, Damage). Each topic's files are closed again once it
// is recovered (unless Options.IdleTopic is negative), until it is used.
func Open(opts Options) (*Queue, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	q := &Queue{
		opts:   opts,
		origin: time.Now(), openedAt: opts.Now(),
		dir:    filepath.Join(opts.Dir, "topics"),
		done:   make(chan struct{}),
		ckpts:  ckptQueue{wake: make(chan struct{}, 1)},
		opened: make(chan struct{}, 1),
		tokens: newTokenKey(),
	}
	q.mu.topics = map[string]*slot{}
	if opts.HoldReceives {
		q.held = make(chan struct{})
	}
	for _, d := range []string{opts.Dir, q.dir} {
		if err := mkdirSynced(d); err != nil {
			return nil, fmt.Errorf("queue: %w", err)
		}
	}
	ents, err := os.ReadDir(q.dir)
	if err != nil {
		return nil, fmt.Errorf("queue: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if !e.IsDir() || ValidateTopic(name) != nil {
			q.closeTopics()
			return nil, fmt.Errorf("queue: unexpected entry %q in %s: only topic directories belong there", name, q.dir)
		}
		s := &slot{}
		t, err := q.openTopic(s, name, false)
		if err != nil {
			q.closeTopics()
			return nil, err
		}
		s.opened = true
		q.mu.topics[name] = s
		if q.opts.IdleTopic < 0 {
			s.t = t
			continue
		}
		// Recovered and checked: its files close until it is used, so
		// that start-up holds one topic's files at a time, however many
		// topics there are.
		s.past = t.statsSnapshot()
		if err := t.close(); err != nil {
			q.closeTopics()
			return nil, fmt.Errorf("queue: topic %q: %w", name, err)
		}
	}
	for _, s := range q.mu.topics {
		if s.t != nil {
			q.opening(s.t)
		}
	}
	q.wg.Add(1)
	go q.checkpointer()
	if q.opts.IdleTopic > 0 {
		q.wg.Add(1)
		go q.sweeper()
	}
	return q, nil
}

// mkdirSynced creates dir if missing and makes its entry durable.
func mkdirSynced(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return segfile.SyncDir(filepath.Dir(dir))
}

// SetReschedule sets the function Nack with a delay calls: the engine's
// Schedule. It may be called at any time, from any goroutine.
func (q *Queue) SetReschedule(fn RescheduleFunc) {
	if fn == nil {
		q.reschedule.Store(nil)
		return
	}
	q.reschedule.Store(&fn)
}

// now is the wall clock: what a Message shows, and the due check (a
// message is never received before its deliverAt on it).
func (q *Queue) now() time.Time { return q.opts.Now() }

// mono is the lease clock: nanoseconds on the monotonic clock since the
// queue opened. A step of the wall clock does not move it, so it neither
// expires leases early nor keeps them late.
func (q *Queue) mono() int64 { return int64(q.opts.since(q.origin)) }

// enter begins an operation; leave ends it.
func (q *Queue) enter() error {
	q.closing.RLock()
	if q.closing.closed {
		q.closing.RUnlock()
		return ErrClosed
	}
	return nil
}

func (q *Queue) leave() { q.closing.RUnlock() }

// createdChan returns a channel closed when the next topic is created.
func (q *Queue) createdChan() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.created == nil {
		q.mu.created = make(chan struct{})
	}
	return q.mu.created
}

// Deliver appends batch to topic, creating the topic on first use, and
// returns nil only once every message of the batch is durable in the queue
// (under the always fsync policy): the engine then records them done.
// Concurrent calls share fsyncs. It implements engine.Sink. Either the
// whole batch is appended or, on error, none of it; ctx is not consulted.
// A message keeps its ID; delivering the same ID again while a copy is
// leased drops the second copy when it is reached.
func (q *Queue) Deliver(ctx context.Context, topic string, batch []engine.Delivery) error {
	if len(batch) == 0 {
		return nil
	}
	if err := ValidateTopic(topic); err != nil {
		return err
	}
	if err := q.enter(); err != nil {
		return err
	}
	defer q.leave()
	t, err := q.topic(topic, true)
	if err != nil {
		return err
	}
	defer q.release(t)
	if batch = t.dropRedelivered(batch); len(batch) == 0 {
		return nil
	}
	size := 0
	for i := range batch {
		size += messageSize(batch[i].Message)
	}
	sc := getDeliverScratch()
	defer putDeliverScratch(sc)
	sc.recs = slices.Grow(sc.recs[:0], len(batch))[:len(batch)]
	buf := slices.Grow(sc.buf[:0], size)
	limit := q.opts.maxMessagePayload()
	for i, d := range batch {
		start := len(buf)
		buf = appendMessage(buf, d.ID, d.Message)
		sc.recs[i] = buf[start:len(buf):len(buf)]
		if len(sc.recs[i]) > limit {
			return fmt.Errorf("%w: message %s is %d bytes encoded; the queue's segments hold %d (Options.SegmentSize)", ErrTooLarge, d.ID, len(sc.recs[i]), limit)
		}
	}
	sc.buf = buf
	return t.append(sc.recs)
}

// Receive returns up to max due messages of topic name, each leased to the
// caller for lease (Options.DefaultLease if 0): until then no other
// Receive gets it. Messages whose lease ran out or that were nacked
// without delay come first, then never-received ones in delivery order.
// With none available it waits up to wait for one (long poll; woken by
// Deliver, lease expiry and Nack, not by polling) and returns an empty
// slice if none came. A topic that does not exist yet is waited for, not
// created.
func (q *Queue) Receive(ctx context.Context, name string, max int, wait, lease time.Duration) ([]Message, error) {
	if err := ValidateTopic(name); err != nil {
		return nil, err
	}
	if max < 1 || max > MaxReceive {
		return nil, fmt.Errorf("%w: max %d messages; from 1 to %d", ErrInvalid, max, MaxReceive)
	}
	if wait < 0 {
		return nil, fmt.Errorf("%w: wait %v is negative", ErrInvalid, wait)
	}
	if lease == 0 {
		lease = q.Effective(name).Lease
	}
	if lease < 0 || lease > q.opts.maxLease {
		return nil, fmt.Errorf("%w: lease %v; from 1ns to %v", ErrInvalid, lease, q.opts.maxLease)
	}
	if q.held != nil {
		select {
		case <-q.held:
		default:
			if wait == 0 {
				return nil, nil
			}
			tm := time.NewTimer(wait)
			defer tm.Stop()
			select {
			case <-q.held:
			case <-tm.C:
				return nil, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-q.done:
				return nil, ErrClosed
			}
		}
	}
	// t is held from when the topic is found until Receive returns: a
	// topic with a Receive waiting is not retired.
	var t *topic
	defer func() { q.release(t) }()
	var timeout <-chan time.Time
	for {
		if err := q.enter(); err != nil {
			return nil, err
		}
		var out []Message
		var ch <-chan struct{}
		var err error
		if t == nil {
			t, err = q.topic(name, false)
			if err == nil && t == nil {
				ch = q.createdChan()
				// The topic may have been created before the channel was taken.
				t, err = q.topic(name, false)
			}
		}
		if t != nil {
			out, ch, err = t.receive(max, lease)
		}
		q.leave()
		if err != nil || len(out) > 0 || wait == 0 {
			return out, err
		}
		if timeout == nil {
			tm := time.NewTimer(wait)
			defer tm.Stop()
			timeout = tm.C
		}
		select {
		case <-ch:
		case <-timeout:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-q.done:
			return nil, ErrClosed
		}
	}
}

// MaxAckBatch bounds the receipts of one AckBatch.
const MaxAckBatch = MaxReceive

// ReleaseReceives lets Receives hand out messages (Options.HoldReceives).
func (q *Queue) ReleaseReceives() {
	if q.held != nil {
		select {
		case <-q.held:
		default:
			close(q.held)
		}
	}
}

// Stats returns every topic's statistics, by topic name: those open and
// those retired while idle, whose counters are kept.
func (q *Queue) Stats() map[string]TopicStats {
	type open struct {
		t    *topic
		past TopicStats
	}
	out := map[string]TopicStats{}
	var ts []open
	q.mu.Lock()
	for name, s := range q.mu.topics {
		switch {
		case s.t != nil:
			ts = append(ts, open{s.t, s.past})
		case s.opened:
			out[name] = s.past
		}
	}
	q.mu.Unlock()
	for _, o := range ts {
		out[o.t.name] = o.past.plus(o.t.statsSnapshot())
	}
	return out
}

// Close stops the queue: waiting Receives return ErrClosed, lease timers
// stop, and each topic writes a final checkpoint and closes its logs.
// Messages leased at Close are receivable again after the next Open,
// with the attempt count they had.
func (q *Queue) Close() error {
	q.closing.Lock()
	if q.closing.closed {
		q.closing.Unlock()
		return ErrClosed
	}
	q.closing.closed = true
	close(q.done)
	q.closing.Unlock()
	q.wg.Wait()
	return q.closeTopics()
}

// closeTopics checkpoints and closes every open topic, in name order.
func (q *Queue) closeTopics() error {
	q.mu.Lock()
	var ts []*topic
	for _, s := range q.mu.topics {
		if s.t != nil {
			ts = append(ts, s.t)
		}
	}
	q.mu.Unlock()
	sort.Slice(ts, func(i, j int) bool { return ts[i].name < ts[j].name })
	var errs []error
	for _, t := range ts {
		if err := t.close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ckptQueue is the topics waiting for a checkpoint, which the checkpointer
// goroutine writes off their callers' paths. Any goroutine may push.
type ckptQueue struct {
	mu struct {
		sync.Mutex
		topics []*topic
	}
	wake chan struct{} // wakes the checkpointer; capacity 1
}

// push queues t for a checkpoint. t.mu.ck.queued was set under t.mu.
func (c *ckptQueue) push(t *topic) {
	c.mu.Lock()
	c.mu.topics = append(c.mu.topics, t)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// take returns the topics queued, and leaves none.
func (c *ckptQueue) take() []*topic {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := c.mu.topics
	c.mu.topics = nil
	return ts
}

// checkpointer writes the checkpoints topics ask for, off their callers'
// paths.
func (q *Queue) checkpointer() {
	defer q.wg.Done()
	for {
		select {
		case <-q.done:
			return
		case <-q.ckpts.wake:
		}
		for _, t := range q.ckpts.take() {
			if !q.hold(t) {
				continue // retired: it wrote a checkpoint as it closed
			}
			if err := t.checkpoint(); err != nil {
				q.opts.Logger.Error("queue: checkpoint failed; retrying", "topic", t.name, "err", err)
				t.broke(StageCheckpoint, err)
				q.checkpointLater(t)
			} else {
				q.ok(t.name, StageCheckpoint)
			}
			q.release(t)
		}
	}
}

// Allocation steps of a topic's logs: a topic claims disk as it fills, so
// that one holding a message costs tens of KiB, not a segment.
const (
	queueAllocStep = 64 << 10
	ackAllocStep   = 16 << 10
)

// openTopic opens the logs of topic name, for slot s, and recovers its
// state. With create it makes the directories first, durably.
func (q *Queue) openTopic(s *slot, name string, create bool) (*topic, error) {
	dir := filepath.Join(q.dir, name)
	if create {
		for _, d := range []string{dir, filepath.Join(dir, "log"), filepath.Join(dir, "acks")} {
			if err := mkdirSynced(d); err != nil {
				return nil, fmt.Errorf("queue: create topic %q: %w", name, err)
			}
		}
	}
	// The ack log first: its checkpoints and acks name queue-log offsets,
	// so they say how far the queue log must reach (MinEnd): a queue log
	// that ends below that lost records, and is not truncated to match.
	hadAcks, err := hasSegments(filepath.Join(dir, "acks"))
	if err != nil {
		return nil, damage(name, dir, err)
	}
	alog, arec, err := commitlog.Open(commitlog.Options{
		Dir: filepath.Join(dir, "acks"), SegmentSize: q.opts.AckSegmentSize, AllocStep: ackAllocStep, Sync: q.opts.Fsync, Logger: q.opts.Logger, FallocateFirst: true,
		OnSync: q.opts.onAckSync, SyncInterval: q.opts.syncInterval,
	})
	if err != nil {
		return nil, damage(name, dir, err)
	}
	if arec.Truncated {
		// A write cut short by a crash, whose caller was not answered; or
		// damage to the last record, which nothing else can tell apart.
		q.opts.Logger.Warn("queue: the ack log's last record was unreadable and dropped as a torn write; "+
			"if the server did not crash while writing it, an ack it held is lost and its message is handed out again",
			"topic", name, "segment", arec.Segment, "offset", arec.DroppedFrom, "bytes", arec.DroppedBytes)
	}
	r, err := replayAcks(alog)
	if err != nil {
		alog.Close()
		return nil, damage(name, dir, err)
	}
	if min := r.minEnd(); min > 0 {
		if has, err := hasSegments(filepath.Join(dir, "log")); err == nil && !has {
			alog.Close()
			return nil, damage(name, dir, &segfile.CorruptionError{Path: filepath.Join(dir, "log"), Offset: -1, Err: fmt.Errorf(
				"the queue log has no segment files but the ack log names offset %d: the messages delivered to the topic are gone", min)})
		}
	}
	// Consumers see only what the queue log holds durably. Under
	// SyncInterval its next fsync was up to the interval away, and every
	// message handed over waited that long to be seen; so the queue log
	// takes each hand-over with an fsync of its own (shared by the
	// hand-overs meanwhile, as under SyncAlways). The Schedules' commitlog
	// and the ack logs keep the interval.
	qsync := q.opts.Fsync
	if qsync == commitlog.SyncInterval {
		qsync = commitlog.SyncAlways
	}
	qlog, _, err := commitlog.Open(commitlog.Options{
		Dir: filepath.Join(dir, "log"), SegmentSize: q.opts.SegmentSize, AllocStep: queueAllocStep, Sync: qsync, Logger: q.opts.Logger, FallocateFirst: true,
		SyncInterval: q.opts.syncInterval, MinEnd: r.minEnd(),
		// Without fsync per append a power loss may take messages the ack
		// log names (the policy's allowed loss); the skip keeps their
		// offsets from being used again, which acks would then cover.
		PadToMinEnd: qsync != commitlog.SyncAlways,
	})
	if err != nil {
		alog.Close()
		return nil, damage(name, dir, err)
	}
	if !hadAcks && qlog.EndOffset() > 0 {
		// The ack log is made before the queue log and never deleted
		// whole: its acks and checkpoints are gone.
		err := &segfile.CorruptionError{Path: alog.Dir(), Offset: -1, Err: fmt.Errorf(
			"the ack log has no segment files but the queue log holds records up to offset %d: the ack log was deleted", qlog.EndOffset())}
		qlog.Close()
		alog.Close()
		return nil, damage(name, dir, err)
	}
	t := newTopic(q, s, name, qlog, alog)
	if err := t.recover(&r); err != nil {
		t.closeLogs()
		return nil, damage(name, dir, err)
	}
	return t, nil
}
