package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// The owner's reader of a partition's intake stream: it schedules every
// intake message into the local engine and keeps the indexes Get and the
// lookups by key answer from.

// consume schedules every intake message into the local engine, from the
// stream's first message on, until the partition stops.
func (pt *partition) consume(eng *engine.Engine) error {
	var st jetstream.Stream
	err := pt.startRetry(func(ctx context.Context) (err error) {
		st, err = pt.n.js.Stream(ctx, inStream(pt.p))
		return err
	})
	if err != nil {
		return fmt.Errorf("cluster: intake stream of partition %d: %w", pt.p, err)
	}
	msgs := make(chan jetstream.Msg, 1024)
	go pt.feed(st, msgs)
	// Local batches of about maxBatch messages: an intake message holds
	// up to MaxBatch, and is never split across two local batches.
	const maxBatch = 512
	var b intakeBatch
	b.reqs = make([]engine.Request, 0, maxBatch+MaxBatch)
	tick := time.NewTicker(pt.n.opts.Compaction.Interval)
	defer tick.Stop()
	cst := newCompactState(&pt.n.opts)
	ictx, cancel := context.WithTimeout(pt.ctx, startAttempt)
	if info, err := st.Info(ictx); err == nil {
		cst.horizon, cst.refresh = info.State.LastSeq, false
	}
	cancel()
	defer cst.stop()
	for {
		var m jetstream.Msg
		select {
		case m = <-msgs:
		case <-cst.finished():
			pt.compactionEnded(&cst)
			continue
		case <-tick.C:
			pt.maybeCompact(st, &cst)
			continue
		case <-pt.ctx.Done():
			return nil
		}
		if m == nil { // feed returned: the partition is stopping
			return nil
		}
		b.reset()
		for m != nil {
			pt.requests(m, &b)
			m = nil
			if len(b.reqs) < maxBatch {
				select {
				case m = <-msgs:
				default:
				}
			}
		}
		if len(b.rec) > 0 {
			// Rescheduled messages whose record a crash lost: stored
			// before their replacements can fire, so that every later
			// owner decides as this one did.
			if err := pt.n.publishDone(pt.ctx, pt.p, b.rec); err != nil {
				if pt.ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("cluster: recording %d rescheduled messages of partition %d: %w", len(b.rec)/DoneRecordSize, pt.p, err)
			}
		}
		if len(b.reqs) > 0 || len(b.ctls) > 0 {
			local, err := eng.ScheduleWith(pt.ctx, b.reqs, b.ctls)
			if err != nil {
				if pt.ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("cluster: scheduling %d intake messages of partition %d locally: %w", len(b.reqs), pt.p, err)
			}
			pt.mu.Lock()
			for i, id := range b.ids {
				if _, ok := pt.mu.taken[id]; ok {
					pt.mu.taken[id] = local[i]
				}
			}
			pt.mu.Unlock()
		}
		seq, stored := b.last, b.stored
		pt.log.Debug("cluster: intake scheduled", "up_to_seq", seq, "messages", len(b.reqs))
		pt.mu.Lock()
		if seq > pt.mu.consumed {
			pt.mu.consumed = seq
			close(pt.mu.progress)
			pt.mu.progress = make(chan struct{})
		}
		pt.mu.Unlock()
		if seq > 0 {
			cst.consumed(seq, stored, len(b.decoded), pt.n.now())
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
			// Bounded as a start's requests are; feed makes it again.
			cctx, cancel := context.WithTimeout(pt.ctx, startAttempt)
			c, err := st.OrderedConsumer(cctx, jetstream.OrderedConsumerConfig{
				DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: last + 1, MaxResetAttempts: orderedResets})
			cancel()
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

// intakeBatch is what consume gathers from intake messages for one local
// ScheduleBatch.
type intakeBatch struct {
	reqs    []engine.Request
	ids     []message.ID      // the cluster ID of each of reqs
	ctls    []message.Control // recurring schedules' items (recur.go)
	decoded []message.Message // what reqs alias
	// rec holds done records to store before reqs are scheduled (see
	// requests).
	rec    []byte
	last   uint64    // the largest stream sequence read
	stored time.Time // the latest time the stream stored one
}

func (b *intakeBatch) reset() {
	b.reqs, b.ids, b.decoded, b.rec, b.ctls = b.reqs[:0], b.ids[:0], b.decoded[:0], b.rec[:0], b.ctls[:0]
	b.last, b.stored = 0, time.Time{}
}

// requests adds to b the local engine requests of the messages of one
// intake message that are neither done nor cancelled nor already taken (a
// compaction's copy of a message this owner has). It notes each keyed
// message in the key index, and each replacement (a Reschedule's) in the
// moved index. A replacement whose old message is not done yet is the
// trace of an owner that stopped between storing the replacement and the
// old message's record: the old one is marked cancelled here, and its
// record goes into b.rec. A replacement whose old message was delivered
// (or is being delivered) meanwhile is never delivered: its own cancelled
// record goes into b.rec.
func (pt *partition) requests(m jetstream.Msg, b *intakeBatch) {
	md, err := m.Metadata()
	if err != nil {
		return
	}
	seq := md.Sequence.Stream
	b.last = max(b.last, seq)
	if md.Timestamp.After(b.stored) {
		b.stored = md.Timestamp
	}
	base := len(b.decoded)
	b.decoded, err = DecodeIntake(m.Data(), b.decoded)
	if err != nil {
		pt.log.Error("cluster: skipping an intake message that does not decode", "stream", inStream(pt.p), "seq", seq, "err", err)
		return
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	for i := base; i < len(b.decoded); i++ {
		dm := &b.decoded[i]
		if c, origin, ok, err := itemControl(dm); ok {
			if err != nil {
				pt.log.Error("cluster: skipping a schedule's control item", "stream", inStream(pt.p), "seq", seq, "index", i-base, "err", err)
			} else if pt.noteControl(c, seq, origin) {
				b.ctls = append(b.ctls, c)
			}
			continue
		}
		id, hs, err := intakeID(pt.p, seq, i-base, dm)
		if err != nil {
			pt.log.Error("cluster: skipping a message of an intake message", "stream", inStream(pt.p), "seq", seq, "index", i-base, "err", err)
			continue
		}
		if k := message.HeaderValue(hs, engine.IdempotencyHeader); k != "" {
			pt.noteKey(string(dm.Topic), k, id)
		}
		if old, ok := replaced(hs); ok {
			if _, done := pt.mu.done[id]; !done {
				r, oldDone := pt.mu.done[old]
				switch {
				case (oldDone && r == Delivered) || pt.mu.firing[old]:
					pt.mu.done[id] = CancelledReason
					b.rec = AppendDone(b.rec, id, CancelledReason)
				case !oldDone:
					pt.mu.done[old] = CancelledReason
					b.rec = AppendDone(b.rec, old, CancelledReason)
				}
			}
			// A replacement of a delivered message never took its place.
			if r, done := pt.mu.done[old]; !done || r != Delivered {
				pt.mu.moved[old] = id
			}
		}
		if _, done := pt.mu.done[id]; done {
			continue
		}
		if _, ok := pt.mu.taken[id]; ok {
			continue
		}
		pt.mu.taken[id] = message.ID{}
		hs = append(hs[:len(hs):len(hs)], message.Header{Key: []byte(idHeader), Value: appendIDBytes(nil, id)})
		b.reqs = append(b.reqs, engine.Request{Topic: string(dm.Topic), Headers: hs, Body: dm.Body, At: time.UnixMilli(dm.DeliverAt),
			Attempt: dm.Attempt, Origin: dm.Origin})
		b.ids = append(b.ids, id)
	}
}

// noteKey records id as the message of topic and key if it is newer than
// the one recorded. Called with mu held.
func (pt *partition) noteKey(topic, key string, id message.ID) {
	k := topic + "\x00" + key
	if old, ok := pt.mu.keys[k]; ok {
		_, os, oi := SplitID(old)
		_, ns, ni := SplitID(id)
		if os > ns || (os == ns && oi >= ni) {
			return
		}
	}
	pt.mu.keys[k] = id
}
