package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/recur"
)

// SinkBackoff is the longest wait of a partition's local engine between
// retries of a failing delivery: deliveries that failed while JetStream
// elected a leader resume within about this long once it answers again
// (the engine's default, 30 s, is for sinks that may be down for long).
const SinkBackoff = time.Second

// errLeaseLost fails a sink call of a partition whose lease ran out.
var errLeaseLost = errors.New("cluster: lease of the partition lost; its new owner delivers")

// partition runs one owned partition: a local engine rebuilt from the
// intake and done streams, fed by the intake stream, delivering through
// the node's sink. Its methods may be called from any goroutine.
type partition struct {
	n     *Node
	p     int
	lease *lease
	log   *slog.Logger

	ctx    context.Context
	quit   context.CancelFunc
	ready  chan struct{} // closed once the done set is loaded
	exited chan struct{} // closed when run returns
	err    error         // why run returned; read after exited

	// recMu is held shared by a sink call from storing its done records
	// until they are in done, and exclusively by a compaction while it
	// notes the done stream's last sequence: every record up to that
	// sequence is then in done.
	recMu sync.RWMutex

	// mu guards the partition's state that the reader, the sink, the
	// compaction and the RPCs share.
	mu struct {
		sync.Mutex
		eng       *engine.Engine        // nil until opened
		done      map[message.ID]Reason // delivered or cancelled
		firing    map[message.ID]bool   // in a sink call now
		delivered int64                 // deliveries since taken over
		firstAt   time.Time             // first delivery by this owner
		// taken holds the IDs scheduled into the local engine and not yet
		// handed to the sink successfully (pending, cancelled but not yet
		// fired, or failing): a second copy of one is dropped. The value is
		// the message's ID in the local engine, zero until the local
		// ScheduleBatch that takes it returns.
		taken map[message.ID]message.ID
		// keys maps topic NUL idempotency key to the cluster ID of the newest
		// message of this partition read with that key (the largest intake
		// sequence and index of its original), for Get, Cancel and
		// Reschedule by key.
		keys map[string]message.ID
		// moved maps a rescheduled message to its replacement.
		moved map[message.ID]message.ID
		// consumed is the stream sequence of the last intake message
		// scheduled into the local engine; progress is closed (and replaced)
		// when it moves.
		consumed    uint64
		progress    chan struct{}
		compactions []compactStats // this owner's compactions, oldest first

		// defSeq maps a schedule's name to its latest control item read
		// (recur.go).
		defSeq map[string]defMark
		// written is the largest intake sequence a write of sched stored.
		written uint64
	}

	// sched keeps the recurring schedules of the partition; the local
	// engine's sink (Deliver) hands it what is due.
	sched *recur.Scheduler
	// recurSynced: the local catalog caught up once with the stream
	// (recurStore.WaitRouted).
	recurSynced atomic.Bool
}

func (n *Node) startPartition(l *lease) *partition {
	ctx, cancel := context.WithCancel(n.life.ctx)
	pt := &partition{n: n, p: l.p, lease: l, log: n.log.With("partition", l.p), ctx: ctx, quit: cancel,
		ready: make(chan struct{}), exited: make(chan struct{}),
	}
	pt.mu.done, pt.mu.firing, pt.mu.taken = map[message.ID]Reason{}, map[message.ID]bool{}, map[message.ID]message.ID{}
	pt.mu.keys, pt.mu.moved, pt.mu.progress = map[string]message.ID{}, map[message.ID]message.ID{}, make(chan struct{})
	pt.mu.defSeq = map[string]defMark{}
	// Occurrences due before the partition was taken were missed (their
	// misfire policy applies), as those due before a node started.
	pt.sched = recur.New(sinkOut{pt}, pt.log, n.now())
	go func() {
		defer close(pt.exited)
		pt.err = pt.run()
		if pt.err != nil && ctx.Err() == nil {
			pt.log.Error("cluster: partition stopped", "err", pt.err)
		}
	}()
	return pt
}

// stop ends the partition and waits for it: nothing is delivered for it
// after stop returns.
func (pt *partition) stop() {
	pt.quit()
	<-pt.exited
}

func (pt *partition) run() error {
	n := pt.n
	dir := filepath.Join(n.opts.DataDir, fmt.Sprintf("p%03d", pt.p))
	// The local state is derived from the streams: start from nothing.
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("cluster: wiping %s: %w", dir, err)
	}
	start := time.Now()
	if err := pt.loadDone(); err != nil {
		return err
	}
	eng, err := engine.Open(engine.Options{
		Dir: dir, Fsync: commitlog.SyncNone, Sink: pt, Logger: pt.log, Now: n.opts.Now,
		MaxDelay:             n.opts.MaxDelay + 24*time.Hour,
		SegmentDuration:      n.opts.Engine.SegmentDuration,
		CommitlogSegmentSize: 8 << 20,
		Observer:             n.opts.Engine.Observer,
		MaxSinkBackoff:       SinkBackoff,
	})
	if err != nil {
		return fmt.Errorf("cluster: opening the local engine of partition %d: %w", pt.p, err)
	}
	pt.mu.Lock()
	pt.mu.eng = eng
	pt.mu.Unlock()
	pt.sched.AttachStore(recurStore{pt: pt, eng: eng})
	go pt.sched.Run(pt.ctx)
	close(pt.ready)
	defer eng.Close()
	pt.log.Info("cluster: partition taken", "done_records", len(pt.mu.done), "after", time.Since(start).Round(time.Millisecond))
	return pt.consume(eng)
}

// startAttempt bounds each JetStream request a partition makes while it
// starts (its streams' lookups, a done stream's info, its readers'
// ordered consumers); a failed one is made again (retry) until it is
// answered. A request that reached a stream whose leader had just died,
// or one being elected, is never answered: with the client's default of
// 5 s per request and the partition failing at the first, a partition
// taken during a NATS server's elections started only after a takeover
// round or two (17 s after the kill for one whose streams were elected
// after 6 s, in a crashtest --cluster run).
const startAttempt = time.Second

// startRetry calls f with a context bounded by startAttempt until it
// succeeds or fails with an answer (retry).
func (pt *partition) startRetry(f func(ctx context.Context) error) error {
	return retry(pt.ctx, func() error {
		ctx, cancel := context.WithTimeout(pt.ctx, startAttempt)
		defer cancel()
		return f(ctx)
	})
}

// loadDone reads the done stream up to its last sequence into pt.mu.done.
func (pt *partition) loadDone() error {
	js := pt.n.js
	var st jetstream.Stream
	var info *jetstream.StreamInfo
	err := pt.startRetry(func(ctx context.Context) (err error) {
		if st == nil {
			if st, err = js.Stream(ctx, doneStream(pt.p)); err != nil {
				return err
			}
		}
		info, err = st.Info(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("cluster: done stream of partition %d: %w", pt.p, err)
	}
	if info.State.Msgs == 0 {
		return nil
	}
	last := info.State.LastSeq
	var c jetstream.Consumer
	err = pt.startRetry(func(ctx context.Context) (err error) {
		c, err = st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{MaxResetAttempts: orderedResets})
		return err
	})
	if err != nil {
		return fmt.Errorf("cluster: reading the done stream of partition %d: %w", pt.p, err)
	}
	it, err := c.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(pt.ctx))
		if err != nil {
			return fmt.Errorf("cluster: reading the done stream of partition %d: %w", pt.p, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		if err := DecodeDone(m.Data(), func(r DoneRecord) { pt.mu.done[r.ID] = r.Reason }); err != nil {
			// A record this code did not write: report it and go on (it
			// cannot name a message to skip).
			pt.log.Error("cluster: skipping a done record", "stream", doneStream(pt.p), "seq", md.Sequence.Stream, "err", err)
		}
		if md.Sequence.Stream >= last {
			return nil
		}
	}
}

// deliver, after the partition's Scheduler (see Deliver), publishes what
// is not cancelled to the delivery stream with the cluster ID as
// Nats-Msg-Id, then the done records, and only then returns success.
func (pt *partition) deliver(ctx context.Context, topic string, batch []engine.Delivery) error {
	if !pt.lease.valid(pt.n.now()) {
		return errLeaseLost
	}
	out := make([]engine.Delivery, 0, len(batch))
	msgs := make([]message.Message, len(batch))
	pt.mu.Lock()
	for i, d := range batch {
		id, hs := splitIDHeader(d.Message.Headers)
		if id.IsZero() {
			pt.log.Error("cluster: a local message without its cluster ID; dropping it", "local_id", d.ID)
			continue
		}
		hs = withoutHeader(hs, replacesHeader)
		if _, done := pt.mu.done[id]; done {
			// Cancelled (or a second local copy): the local engine is
			// done with it.
			delete(pt.mu.taken, id)
			continue
		}
		if pt.mu.firing[id] {
			continue
		}
		pt.mu.firing[id] = true
		msgs[i] = *d.Message
		msgs[i].Headers = hs
		msgs[i].DeliverAt = id.DeliverAt
		out = append(out, engine.Delivery{ID: id, Message: &msgs[i]})
	}
	pt.mu.Unlock()
	if len(out) == 0 {
		return nil
	}
	err := pt.n.opts.Sink.Deliver(ctx, topic, out)
	// A compaction waits from here until the records are in done.
	pt.recMu.RLock()
	defer pt.recMu.RUnlock()
	if err == nil {
		rec := make([]byte, 0, len(out)*DoneRecordSize)
		for _, d := range out {
			rec = AppendDone(rec, d.ID, Delivered)
		}
		err = pt.n.publishDone(ctx, pt.p, rec)
	}
	pt.mu.Lock()
	for _, d := range out {
		delete(pt.mu.firing, d.ID)
		if err == nil {
			pt.mu.done[d.ID] = Delivered
			delete(pt.mu.taken, d.ID)
		}
	}
	if err == nil {
		if pt.mu.delivered == 0 {
			pt.mu.firstAt = time.Now()
		}
		pt.mu.delivered += int64(len(out))
	}
	pt.mu.Unlock()
	return err
}

// splitIDHeader returns the cluster ID header's value and the other
// headers.
func splitIDHeader(hs []message.Header) (message.ID, []message.Header) {
	for i, h := range hs {
		if string(h.Key) == idHeader {
			id, _ := idFromBytes(h.Value)
			out := make([]message.Header, 0, len(hs)-1)
			out = append(out, hs[:i]...)
			return id, append(out, hs[i+1:]...)
		}
	}
	return message.ID{}, hs
}

// cancel decides a Cancel of a message of this partition (I7: cancelled
// only if it will never be delivered).
func (pt *partition) cancel(ctx context.Context, id message.ID) (engine.CancelResult, error) {
	select {
	case <-pt.ready:
	case <-pt.exited:
		return engine.Unknown, unavailable("partition %d stopped on this node while cancelling; retry", pt.p)
	case <-ctx.Done():
		return engine.Unknown, ctx.Err()
	}
	// settled answers for a message cancelled, done, being delivered or
	// due. pt.mu is held.
	settled := func() (engine.CancelResult, bool) {
		r, done := pt.mu.done[id]
		switch {
		case done && r == CancelledReason:
			return engine.AlreadyCancelled, true
		case done || pt.mu.firing[id] || id.DeliverAt <= pt.n.now().UnixMilli():
			return engine.AlreadyDone, true
		}
		return 0, false
	}
	pt.mu.Lock()
	res, ok := settled()
	pt.mu.Unlock()
	if ok {
		return res, nil
	}
	_, seq, idx := SplitID(id)
	raw, err := pt.n.inStreams[pt.p].GetMsg(ctx, seq)
	compacted := false
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		if compacted, err = pt.compacted(ctx, seq); err != nil || !compacted {
			return engine.Unknown, err
		}
	} else if err != nil {
		return engine.Unknown, unavailable("reading intake message %d of partition %d: %v", seq, pt.p, err)
	} else {
		// The message at idx must be the original of id, not a copy
		// (which carries another ID).
		ms, err := DecodeIntake(raw.Data, nil)
		if err != nil || idx >= len(ms) {
			return engine.Unknown, nil
		}
		if got, _, err := intakeID(pt.p, seq, idx, &ms[idx]); err != nil || got != id {
			return engine.Unknown, nil
		}
	}
	pt.mu.Lock()
	if res, ok := settled(); ok {
		pt.mu.Unlock()
		return res, nil
	}
	if _, taken := pt.mu.taken[id]; compacted && !taken {
		// Its intake message was compacted away and, the stream read to
		// its end, this owner has no copy of it: it never existed (a
		// delivered one would be due, and is answered above).
		pt.mu.Unlock()
		return engine.Unknown, nil
	}
	// From here the sink drops it, even if the record below fails: the
	// answer is then an error (outcome unknown), which a retry settles.
	pt.mu.done[id] = CancelledReason
	pt.mu.Unlock()
	if err := pt.n.publishDone(ctx, pt.p, AppendDone(nil, id, CancelledReason)); err != nil {
		return engine.Unknown, unavailable("recording the cancel of %s: %v; the outcome is unknown, retry", id, err)
	}
	// A record stored after the lease ran out may be missed by the new
	// owner, which reads the done stream when it takes over.
	if !pt.lease.valid(pt.n.now()) {
		return engine.Unknown, unavailable("partition %d moved while cancelling %s; the outcome is unknown, retry", pt.p, id)
	}
	return engine.Cancelled, nil
}

func (pt *partition) stats() (engine.Stats, bool) {
	pt.mu.Lock()
	eng := pt.mu.eng
	pt.mu.Unlock()
	if eng == nil {
		return engine.Stats{}, false
	}
	return eng.Stats(), true
}

// health is the partition's local engine's Health, nil without one.
func (pt *partition) health() error {
	pt.mu.Lock()
	eng := pt.mu.eng
	pt.mu.Unlock()
	if eng == nil {
		return nil
	}
	return eng.Health()
}

func unavailable(format string, args ...any) error {
	return status.Errorf(codes.Unavailable, format, args...)
}

// DonePublishTimeout bounds one attempt to store done records (the sink
// call fails and the engine retries it, 50 ms later and doubling). A
// publish that a stream's leader took and died before acknowledging is
// never answered: with the lease TTL (10 s) as the bound, a NATS kill held
// a partition's deliveries for 10 s (docs/BENCHMARKS.md "Cluster mode").
// Storing a done record twice is harmless.
const DonePublishTimeout = 2 * time.Second

// publishDone stores done records of partition p, waiting for the PubAck
// up to DonePublishTimeout (or the lease TTL, if shorter).
func (n *Node) publishDone(ctx context.Context, p int, rec []byte) error {
	msg := nats.NewMsg(doneSubject(p))
	msg.Data = rec
	ctx, cancel := context.WithTimeout(ctx, min(n.opts.LeaseTTL, n.doneTimeout))
	defer cancel()
	_, err := n.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(doneStream(p)))
	if err != nil {
		return fmt.Errorf("cluster: storing %d done records of partition %d: %w", len(rec)/DoneRecordSize, p, err)
	}
	return nil
}
