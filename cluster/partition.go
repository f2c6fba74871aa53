package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
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

	mu        sync.Mutex
	eng       *engine.Engine        // guarded by mu; nil until opened
	done      map[message.ID]Reason // guarded by mu: delivered or cancelled
	firing    map[message.ID]bool   // guarded by mu: in a sink call now
	delivered int64                 // guarded by mu: deliveries since taken over
	firstAt   time.Time             // guarded by mu: first delivery by this owner
	// taken holds the IDs scheduled into the local engine and not yet
	// handed to the sink successfully (pending, cancelled but not yet
	// fired, or failing): a second copy of one is dropped. Guarded by mu.
	taken map[message.ID]bool
	// consumed is the stream sequence of the last intake message
	// scheduled into the local engine; progress is closed (and replaced)
	// when it moves. Guarded by mu.
	consumed    uint64
	progress    chan struct{}
	compactions []compactStats // guarded by mu: this owner's compactions, oldest first
}

func (n *Node) startPartition(l *lease) *partition {
	ctx, cancel := context.WithCancel(n.ctx)
	pt := &partition{n: n, p: l.p, lease: l, log: n.log.With("partition", l.p), ctx: ctx, quit: cancel,
		ready: make(chan struct{}), exited: make(chan struct{}),
		done: map[message.ID]Reason{}, firing: map[message.ID]bool{}, taken: map[message.ID]bool{}, progress: make(chan struct{})}
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
		SegmentDuration:      n.opts.SegmentDuration,
		CommitlogSegmentSize: 8 << 20,
		Observer:             n.opts.Observer,
		MaxSinkBackoff:       SinkBackoff,
	})
	if err != nil {
		return fmt.Errorf("cluster: opening the local engine of partition %d: %w", pt.p, err)
	}
	pt.mu.Lock()
	pt.eng = eng
	pt.mu.Unlock()
	close(pt.ready)
	defer eng.Close()
	pt.log.Info("cluster: partition taken", "done_records", len(pt.done), "after", time.Since(start).Round(time.Millisecond))
	return pt.consume(eng)
}

// loadDone reads the done stream up to its last sequence into pt.done.
func (pt *partition) loadDone() error {
	js := pt.n.js
	st, err := js.Stream(pt.ctx, doneStream(pt.p))
	if err != nil {
		return fmt.Errorf("cluster: done stream of partition %d: %w", pt.p, err)
	}
	info, err := st.Info(pt.ctx)
	if err != nil {
		return fmt.Errorf("cluster: done stream of partition %d: %w", pt.p, err)
	}
	if info.State.Msgs == 0 {
		return nil
	}
	last := info.State.LastSeq
	c, err := st.OrderedConsumer(pt.ctx, jetstream.OrderedConsumerConfig{MaxResetAttempts: orderedResets})
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
		if err := DecodeDone(m.Data(), func(r DoneRecord) { pt.done[r.ID] = r.Reason }); err != nil {
			// A record this code did not write: report it and go on (it
			// cannot name a message to skip).
			pt.log.Error("cluster: skipping a done record", "stream", doneStream(pt.p), "seq", md.Sequence.Stream, "err", err)
		}
		if md.Sequence.Stream >= last {
			return nil
		}
	}
}

// consume schedules every intake message into the local engine, from the
// stream's first message on, until the partition stops.
func (pt *partition) consume(eng *engine.Engine) error {
	st, err := pt.n.js.Stream(pt.ctx, inStream(pt.p))
	if err != nil {
		return fmt.Errorf("cluster: intake stream of partition %d: %w", pt.p, err)
	}
	msgs := make(chan jetstream.Msg, 1024)
	go pt.feed(st, msgs)
	// Local batches of about maxBatch messages: an intake message holds
	// up to MaxBatch, and is never split across two local batches.
	const maxBatch = 512
	reqs := make([]engine.Request, 0, maxBatch+MaxBatch)
	var decoded []message.Message
	tick := time.NewTicker(pt.n.opts.CompactInterval)
	defer tick.Stop()
	cst := newCompactState(&pt.n.opts)
	if info, err := st.Info(pt.ctx); err == nil {
		cst.horizon, cst.refresh = info.State.LastSeq, false
	}
	for {
		var m jetstream.Msg
		select {
		case m = <-msgs:
		case <-tick.C:
			pt.maybeCompact(st, &cst)
			continue
		case <-pt.ctx.Done():
			return nil
		}
		if m == nil { // feed returned: the partition is stopping
			return nil
		}
		reqs = reqs[:0]
		decoded = decoded[:0]
		var seq uint64
		var stored time.Time
		for m != nil {
			reqs, decoded, seq, stored = pt.requests(m, reqs, decoded, seq, stored)
			m = nil
			if len(reqs) < maxBatch {
				select {
				case m = <-msgs:
				default:
				}
			}
		}
		if len(reqs) > 0 {
			if _, err := eng.ScheduleBatch(pt.ctx, reqs); err != nil {
				if pt.ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("cluster: scheduling %d intake messages of partition %d locally: %w", len(reqs), pt.p, err)
			}
		}
		pt.log.Debug("cluster: intake scheduled", "up_to_seq", seq, "messages", len(reqs))
		pt.mu.Lock()
		if seq > pt.consumed {
			pt.consumed = seq
			close(pt.progress)
			pt.progress = make(chan struct{})
		}
		pt.mu.Unlock()
		if seq > 0 {
			cst.consumed(seq, stored, len(decoded), pt.n.now())
		}
		pt.maybeCompact(st, &cst)
	}
}

// feed sends the intake stream's messages, from its first on, to msgs
// until the partition stops. A consumer that fails (its stream electing a
// leader after a NATS node died, say) is made again from the next sequence.
func (pt *partition) feed(st jetstream.Stream, msgs chan<- jetstream.Msg) {
	defer close(msgs)
	var last uint64
	idle := feedIdleCheck
	if h := pt.n.opts.hooks; h != nil && h.feedIdle > 0 {
		idle = h.feedIdle
	}
	for pt.ctx.Err() == nil {
		err := func() error {
			c, err := st.OrderedConsumer(pt.ctx, jetstream.OrderedConsumerConfig{
				DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: last + 1, MaxResetAttempts: orderedResets})
			if err != nil {
				return err
			}
			it, err := c.Messages(jetstream.PullMaxMessages(1024))
			if err != nil {
				return err
			}
			defer it.Stop()
			silent := false // a test made this reader stall
			for {
				nctx, ncancel := context.WithTimeout(pt.ctx, idle)
				m, err := it.Next(jetstream.NextContext(nctx))
				ncancel()
				if err != nil && errors.Is(err, context.DeadlineExceeded) && pt.ctx.Err() == nil {
					if serr := pt.idlePause(st, last); serr != nil {
						return serr
					}
					continue
				}
				if err != nil {
					return err
				}
				md, err := m.Metadata()
				if err != nil {
					return err
				}
				if h := pt.n.opts.hooks; h != nil && h.stallFeed != nil && (silent || h.stallFeed(pt.p, md.Sequence.Stream)) {
					silent = true
					continue
				}
				last = md.Sequence.Stream
				select {
				case msgs <- m:
				case <-pt.ctx.Done():
					return nil
				}
			}
		}()
		if pt.ctx.Err() != nil {
			return
		}
		pt.log.Warn("cluster: reading the intake stream; resuming", "stream", inStream(pt.p), "next_seq", last+1, "err", err)
		select {
		case <-pt.ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// orderedResets bounds how many times an ordered consumer tries to make
// its server-side consumer again after an error (a stream electing a
// leader after a NATS node died, say), with a backoff of 1 s doubling up
// to 10 s. nats.go's default is no bound, and such a retry runs inside the
// iterator's Next, deaf to Next's context: a reader then hung for minutes
// without an error or a message (the e2e test's own reader did, 17:23
// UTC on 2026-11-30, stack in its goroutine dump), and the stall check
// below never ran. Bounded, Next returns the error and feed makes the
// consumer again from the next sequence.
const orderedResets = 3

// feedIdleCheck is how long feed waits for the next intake message before
// it asks the stream whether it holds more.
const feedIdleCheck = 2 * time.Second

// idlePause runs when the intake reader has waited feedIdleCheck for a
// message: if the node's budget of stall checks allows, it asks whether
// the reader has stalled (see stalled).
func (pt *partition) idlePause(st jetstream.Stream, last uint64) error {
	h := pt.n.opts.hooks
	if h != nil && h.idle != nil {
		h.idle(pt.p)
	}
	if pt.n.stallChecks == nil || !pt.n.stallChecks.AllowN(pt.n.now(), 1) {
		return nil
	}
	err := pt.stalled(st, last)
	if h != nil && h.stallChecked != nil {
		h.stallChecked(pt.p, err != nil)
	}
	return err
}

// stalled reports, as an error, an intake consumer that has given nothing
// for feedIdleCheck while the stream holds messages after last: an ordered
// consumer can stay silent after the NATS node serving it was killed,
// without an error that would make feed create it again (suspected in
// TestClusterKill9 runs where two acknowledged batches, stored just after
// the streams' leader election, were never delivered). It returns nil when
// the stream holds nothing new or cannot say.
func (pt *partition) stalled(st jetstream.Stream, last uint64) error {
	ctx, cancel := context.WithTimeout(pt.ctx, 5*time.Second)
	defer cancel()
	info, err := st.Info(ctx)
	if err != nil || info.State.LastSeq <= last {
		return nil
	}
	return fmt.Errorf("the consumer gave nothing for %v while the stream holds sequences %d to %d", feedIdleCheck, last+1, info.State.LastSeq)
}

// requests appends to reqs the local engine requests of the messages of
// one intake message that are neither done nor cancelled nor already
// taken (a compaction's copy of a message this owner has), decoding them
// into decoded (which the requests alias). It returns the larger of last
// and the intake message's stream sequence, and the later of stored and
// the time the stream stored it.
func (pt *partition) requests(m jetstream.Msg, reqs []engine.Request, decoded []message.Message, last uint64, stored time.Time) ([]engine.Request, []message.Message, uint64, time.Time) {
	md, err := m.Metadata()
	if err != nil {
		return reqs, decoded, last, stored
	}
	seq := md.Sequence.Stream
	last = max(last, seq)
	if md.Timestamp.After(stored) {
		stored = md.Timestamp
	}
	base := len(decoded)
	decoded, err = DecodeIntake(m.Data(), decoded)
	if err != nil {
		pt.log.Error("cluster: skipping an intake message that does not decode", "stream", inStream(pt.p), "seq", seq, "err", err)
		return reqs, decoded, last, stored
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	for i := base; i < len(decoded); i++ {
		dm := &decoded[i]
		id, hs, err := intakeID(pt.p, seq, i-base, dm)
		if err != nil {
			pt.log.Error("cluster: skipping a message of an intake message", "stream", inStream(pt.p), "seq", seq, "index", i-base, "err", err)
			continue
		}
		if _, done := pt.done[id]; done || pt.taken[id] {
			continue
		}
		pt.taken[id] = true
		hs = append(hs[:len(hs):len(hs)], message.Header{Key: []byte(idHeader), Value: appendIDBytes(nil, id)})
		reqs = append(reqs, engine.Request{Topic: string(dm.Topic), Headers: hs, Body: dm.Body, At: time.UnixMilli(dm.DeliverAt),
			Attempt: dm.Attempt, Origin: dm.Origin})
	}
	return reqs, decoded, last, stored
}

// Deliver implements engine.Sink for the local engine: it publishes what
// is not cancelled to the delivery stream with the cluster ID as
// Nats-Msg-Id, then the done records, and only then returns success.
func (pt *partition) Deliver(ctx context.Context, topic string, batch []engine.Delivery) error {
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
		if _, done := pt.done[id]; done {
			// Cancelled (or a second local copy): the local engine is
			// done with it.
			delete(pt.taken, id)
			continue
		}
		if pt.firing[id] {
			continue
		}
		pt.firing[id] = true
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
		delete(pt.firing, d.ID)
		if err == nil {
			pt.done[d.ID] = Delivered
			delete(pt.taken, d.ID)
		}
	}
	if err == nil {
		if pt.delivered == 0 {
			pt.firstAt = time.Now()
		}
		pt.delivered += int64(len(out))
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
	pt.mu.Lock()
	_, done := pt.done[id]
	firing := pt.firing[id]
	pt.mu.Unlock()
	if done || firing || id.DeliverAt <= pt.n.now().UnixMilli() {
		return engine.AlreadyDone, nil
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
	if _, done := pt.done[id]; done || pt.firing[id] {
		pt.mu.Unlock()
		return engine.AlreadyDone, nil
	}
	if compacted && !pt.taken[id] {
		// Its intake message was compacted away and, the stream read to
		// its end, this owner has no copy of it: it never existed (a
		// delivered one would be due, and is answered above).
		pt.mu.Unlock()
		return engine.Unknown, nil
	}
	// From here the sink drops it, even if the record below fails: the
	// answer is then an error (outcome unknown), which a retry settles.
	pt.done[id] = CancelledReason
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
	eng := pt.eng
	pt.mu.Unlock()
	if eng == nil {
		return engine.Stats{}, false
	}
	return eng.Stats(), true
}

// health is the partition's local engine's Health, nil without one.
func (pt *partition) health() error {
	pt.mu.Lock()
	eng := pt.eng
	pt.mu.Unlock()
	if eng == nil {
		return nil
	}
	return eng.Health()
}

func unavailable(format string, args ...any) error {
	return status.Errorf(codes.Unavailable, format, args...)
}

// publishDone stores done records of partition p, waiting for the PubAck.
func (n *Node) publishDone(ctx context.Context, p int, rec []byte) error {
	msg := nats.NewMsg(doneSubject(p))
	msg.Data = rec
	ctx, cancel := context.WithTimeout(ctx, n.opts.LeaseTTL)
	defer cancel()
	_, err := n.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(doneStream(p)))
	if err != nil {
		return fmt.Errorf("cluster: storing %d done records of partition %d: %w", len(rec)/DoneRecordSize, p, err)
	}
	return nil
}
