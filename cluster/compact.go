package cluster

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hourglassmq/hourglass/message"
)

// Compaction bounds a partition's streams. Its owner, on a goroutine of its
// own beside the one that consumes the intake stream (which goes on
// consuming, so that messages stored meanwhile are scheduled, delivered
// and found by Get as at any other time):
//
//  1. picks the snapshot point L0: the last intake sequence it consumed
//     that the stream stored at least keepRecent ago (the duplicate window
//     must find what it deduplicates), and not below the horizon (see
//     compactState); and, while no sink call is between storing its done
//     records and noting them, D0, the done stream's last sequence: every
//     record up to D0 is in its done set;
//  2. reads the intake stream from its first sequence to L0 and stores a
//     copy of each message up to L0 that its local engine holds and that
//     is neither done nor copied yet, packed into intake messages, each
//     carrying its original ID in the idHeader of its schedule payload;
//  3. stores again the done records that must outlive the purge: of the
//     messages whose original intake message is above L0 (kept), and of
//     the cancels whose time is ahead or that the local engine has not
//     fired yet;
//  4. purges the intake stream below L0+1 and the done stream below D0+1;
//  5. forgets the other entries of its done set noted in step 1: they name
//     messages that no intake message kept holds.
//
// A crash between two steps leaves a stream that replays to the same
// messages: originals and copies carry the same IDs, the first wins and the
// done set applies by ID.
//
// What happens meanwhile is above the snapshot points, and so kept: the
// intake messages consumed during a compaction (its copies among them,
// which the consumer skips, as their IDs are taken or done) are above L0,
// and the done records stored during it (a delivery, a cancel or a
// reschedule of a message just copied) are above D0. The done set forgets
// only entries noted in step 1, which no later record can bring back.

// copyOverhead is what a compaction's copy of a message may add to its
// intake message (the ID header and longer lengths): an intake message
// must fit max_payload less this, so that its copy fits max_payload.
const copyOverhead = 64

// compactStats describes one compaction.
type compactStats struct {
	L0, D0        uint64 // the intake and done sequences it kept above
	Held          int    // messages consumed above the last snapshot point before it
	Copied        int    // messages copied
	CopyMsgs      int    // intake messages the copies took
	CopyLast      uint64 // the intake sequence of the last copy
	KeptCancels   int    // cancelled records stored again
	KeptDelivered int    // delivered records stored again (their intake message is kept)
	PrunedDone    int    // done-set entries forgotten
	IntakeBefore  uint64 // intake stream messages before and after
	IntakeAfter   uint64
	DoneBefore    uint64 // done stream messages before and after
	DoneAfter     uint64
	Took          time.Duration
}

// intakeID returns the cluster ID of message idx of the intake message at
// sequence seq of partition p and its headers without the ID header: the
// ID the header carries (a compaction's copy), else the one made from
// (p, seq, idx). A header that is not 16 bytes, names another partition
// or another deliverAt, or appears twice is an error.
func intakeID(p int, seq uint64, idx int, m *message.Message) (message.ID, []message.Header, error) {
	at := -1
	for i, h := range m.Headers {
		if string(h.Key) != idHeader {
			continue
		}
		if at >= 0 {
			return message.ID{}, nil, fmt.Errorf("cluster: header %s twice (headers %d and %d)", idHeader, at, i)
		}
		at = i
	}
	if at < 0 {
		return MakeID(p, seq, idx, m.DeliverAt), m.Headers, nil
	}
	id, ok := idFromBytes(m.Headers[at].Value)
	if !ok {
		return message.ID{}, nil, fmt.Errorf("cluster: header %s of %d bytes; want 16", idHeader, len(m.Headers[at].Value))
	}
	if q, _, _ := SplitID(id); q != p {
		return message.ID{}, nil, fmt.Errorf("cluster: header %s names partition %d in the intake stream of partition %d", idHeader, q, p)
	}
	if id.DeliverAt != m.DeliverAt {
		return message.ID{}, nil, fmt.Errorf("cluster: header %s names deliverAt %d; the message is due at %d", idHeader, id.DeliverAt, m.DeliverAt)
	}
	hs := make([]message.Header, 0, len(m.Headers)-1)
	hs = append(hs, m.Headers[:at]...)
	return id, append(hs, m.Headers[at+1:]...), nil
}

// packer packs messages into intake messages of up to MaxBatch messages
// and about limit bytes, handing each to publish when full: the copies of
// a compaction stream through it, one intake message at a time.
type packer struct {
	limit   int
	ms      []message.Message
	size    int
	buf     []byte
	publish func(data []byte, count int) error
}

func uvarintLen(x int) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], uint64(x))
}

// add appends m (which must stay unchanged until the next flush).
func (k *packer) add(m message.Message) error {
	n := message.ScheduleSize(&m)
	n += uvarintLen(n)
	if len(k.ms) > 0 && (len(k.ms) == MaxBatch || k.size+n > k.limit) {
		if err := k.flush(); err != nil {
			return err
		}
	}
	k.ms = append(k.ms, m)
	k.size += n
	return nil
}

// flush publishes what was added since the last flush.
func (k *packer) flush() error {
	if len(k.ms) == 0 {
		return nil
	}
	k.buf = AppendIntake(k.buf[:0], k.ms)
	err := k.publish(k.buf, len(k.ms))
	clear(k.ms)
	k.ms = k.ms[:0]
	k.size = 0
	return err
}

// compact runs one compaction with snapshot point l0 (see the comment at
// the top of this file), once the consuming goroutine consumed the intake
// stream up to l0 at least; one at a time.
func (pt *partition) compact(ctx context.Context, st jetstream.Stream, l0 uint64, held int) (compactStats, error) {
	start := time.Now()
	cs := compactStats{L0: l0, Held: held}
	doneSt, err := pt.n.js.Stream(ctx, doneStream(pt.p))
	if err != nil {
		return cs, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return cs, err
	}
	first := info.State.FirstSeq
	cs.IntakeBefore = info.State.Msgs

	// 1. The snapshot point.
	pt.recMu.Lock()
	dinfo, err := doneSt.Info(ctx)
	if err != nil {
		pt.recMu.Unlock()
		return cs, err
	}
	cs.D0, cs.DoneBefore = dinfo.State.LastSeq, dinfo.State.Msgs
	var cancelled []message.ID
	pt.mu.Lock()
	if !pt.lease.valid(pt.n.now()) {
		pt.mu.Unlock()
		pt.recMu.Unlock()
		return cs, errLeaseLost
	}
	// Sized once: the done set holds about as many entries as messages
	// were delivered since the last compaction (10 M in
	// BenchmarkCompaction), and growing by appends would allocate twice
	// that.
	delivered := make([]message.ID, 0, len(pt.mu.done))
	for id, r := range pt.mu.done {
		if r == Delivered {
			delivered = append(delivered, id)
		} else {
			cancelled = append(cancelled, id)
		}
	}
	pt.mu.Unlock()
	pt.recMu.Unlock()
	if err := pt.stage("snapshot"); err != nil {
		return cs, err
	}

	// 2. Copies of what is neither done nor copied, from first to L0.
	limit := int(pt.n.nc.MaxPayload()) - copyOverhead
	pk := &packer{limit: limit, publish: func(data []byte, count int) error {
		msg := nats.NewMsg(inSubject(pt.p))
		msg.Data = data
		pctx, cancel := context.WithTimeout(ctx, publishTimeout)
		defer cancel()
		ack, err := pt.n.js.PublishMsg(pctx, msg, jetstream.WithExpectStream(inStream(pt.p)))
		if err != nil {
			return fmt.Errorf("storing a copy of %d messages: %w", count, err)
		}
		cs.CopyLast = ack.Sequence
		cs.Copied += count
		cs.CopyMsgs++
		return nil
	}}
	if first <= cs.L0 {
		if err := pt.copyPending(ctx, st, first, cs.L0, pk); err != nil {
			return cs, err
		}
	}
	// And of the recurring schedules' definitions up to L0.
	if err := pt.copyDefs(ctx, cs.L0, pk); err != nil {
		return cs, err
	}
	if err := pt.stage("copied"); err != nil {
		return cs, err
	}

	// 3. The done records that must outlive the purge, stored again: of
	// a message whose original intake message is kept (above L0), and of
	// a cancel that the local engine has not fired yet or that is still
	// ahead (a later Cancel of it answers from it). The others name
	// messages in no intake message kept: the done set forgets them.
	now := pt.n.now().UnixMilli()
	// What the done set forgets is gathered in place, at the head of
	// delivered and of cancelled: no third list of the done set's size.
	forgetDelivered, forgetCancelled := delivered[:0], cancelled[:0]
	var rec []byte
	perMsg := limit / DoneRecordSize
	keepRec := func(id message.ID, r Reason) error {
		rec = AppendDone(rec, id, r)
		if len(rec) < perMsg*DoneRecordSize {
			return nil
		}
		err := pt.n.publishDone(ctx, pt.p, rec)
		rec = rec[:0]
		return err
	}
	gone := func(id message.ID) bool {
		_, seq, _ := SplitID(id)
		return seq <= cs.L0
	}
	for _, id := range delivered {
		if gone(id) {
			forgetDelivered = append(forgetDelivered, id)
			continue
		}
		cs.KeptDelivered++
		if err := keepRec(id, Delivered); err != nil {
			return cs, err
		}
	}
	for _, id := range cancelled {
		pt.mu.Lock()
		_, taken := pt.mu.taken[id]
		pt.mu.Unlock()
		if gone(id) && !taken && id.DeliverAt <= now {
			forgetCancelled = append(forgetCancelled, id)
			continue
		}
		cs.KeptCancels++
		if err := keepRec(id, CancelledReason); err != nil {
			return cs, err
		}
	}
	if len(rec) > 0 {
		if err := pt.n.publishDone(ctx, pt.p, rec); err != nil {
			return cs, err
		}
	}

	// 4. The purges: what is kept is what was stored after L0 (the copies
	// among it) and the records stored after D0. An owner that lost its
	// lease leaves the streams to the new one.
	if !pt.lease.valid(pt.n.now()) {
		return cs, errLeaseLost
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSequence(cs.L0+1)); err != nil {
		return cs, fmt.Errorf("purging %s below sequence %d: %w", inStream(pt.p), cs.L0+1, err)
	}
	if err := pt.stage("purged"); err != nil {
		return cs, err
	}
	if !pt.lease.valid(pt.n.now()) {
		return cs, errLeaseLost
	}
	if cs.D0 > 0 {
		if err := doneSt.Purge(ctx, jetstream.WithPurgeSequence(cs.D0+1)); err != nil {
			return cs, fmt.Errorf("purging %s below sequence %d: %w", doneStream(pt.p), cs.D0+1, err)
		}
	}

	// 5. The done set forgets what no stream can bring back.
	pt.mu.Lock()
	for _, forget := range [][]message.ID{forgetDelivered, forgetCancelled} {
		for _, id := range forget {
			delete(pt.mu.done, id)
			cs.PrunedDone++
		}
	}
	if cs.PrunedDone > len(pt.mu.done) {
		// A Go map keeps its tables after deletes: the done set would
		// stay as large as it was at its fullest (10 M delivered
		// entries, about 400 MiB, in BenchmarkCompaction). Made again
		// at its new size, under mu: the entries left are few.
		pt.mu.done = resized(pt.mu.done)
	}
	pt.pruneIndexes()
	pt.forgetDeleted(cs.L0)
	pt.mu.Unlock()

	if info, err := st.Info(ctx); err == nil {
		cs.IntakeAfter = info.State.Msgs
	}
	if info, err := doneSt.Info(ctx); err == nil {
		cs.DoneAfter = info.State.Msgs
	}
	cs.Took = time.Since(start)
	pt.mu.Lock()
	pt.mu.compactions = append(pt.mu.compactions, cs)
	pt.mu.Unlock()
	return cs, nil
}

// resized returns a map with m's entries, sized for them alone (maps.Clone
// keeps m's tables).
func resized[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// copyPending reads the intake stream from first to last and adds to pk
// each message that the local engine holds and that is not done, once.
func (pt *partition) copyPending(ctx context.Context, st jetstream.Stream, first, last uint64, pk *packer) error {
	c, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: first, MaxResetAttempts: orderedResets})
	if err != nil {
		return fmt.Errorf("reading %s to compact it: %w", inStream(pt.p), err)
	}
	it, err := c.Messages(jetstream.PullMaxMessages(256))
	if err != nil {
		return err
	}
	defer it.Stop()
	copied := map[message.ID]struct{}{} // struct{}: 16-byte slots, not 24 with a bool
	var ms []message.Message
	for {
		nctx, cancel := context.WithTimeout(ctx, publishTimeout)
		m, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		if err != nil {
			return fmt.Errorf("reading %s to compact it: %w", inStream(pt.p), err)
		}
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		seq := md.Sequence.Stream
		if seq > last {
			break
		}
		ms, err = DecodeIntake(m.Data(), ms[:0])
		if err == nil { // one that does not decode was skipped when consumed
			for i := range ms {
				id, hs, err := intakeID(pt.p, seq, i, &ms[i])
				if _, dup := copied[id]; err != nil || dup {
					continue
				}
				pt.mu.Lock()
				_, done := pt.mu.done[id]
				_, taken := pt.mu.taken[id]
				keep := taken && !done
				pt.mu.Unlock()
				if !keep {
					continue
				}
				copied[id] = struct{}{}
				cm := ms[i]
				cm.Headers = append(hs[:len(hs):len(hs)], message.Header{Key: []byte(idHeader), Value: appendIDBytes(nil, id)})
				if err := pk.add(cm); err != nil {
					return err
				}
			}
		}
		if seq >= last || md.NumPending == 0 {
			break
		}
	}
	return pk.flush()
}

func (pt *partition) stage(name string) error {
	if h := pt.n.opts.hooks; h != nil && h.compactStage != nil {
		return h.compactStage(pt.p, name)
	}
	return nil
}

// compacted reports whether intake sequence seq of the partition was
// compacted away (it is below the stream's first sequence), after waiting
// until this owner consumed the whole stream as it is now, copies
// included: its taken set then holds every pending message of the
// partition.
func (pt *partition) compacted(ctx context.Context, seq uint64) (bool, error) {
	info, err := pt.n.inStreams[pt.p].Info(ctx)
	if err != nil {
		return false, unavailable("reading the state of %s: %v", inStream(pt.p), err)
	}
	if seq >= info.State.FirstSeq {
		return false, nil
	}
	target := info.State.LastSeq
	timer := time.NewTimer(publishTimeout)
	defer timer.Stop()
	for {
		pt.mu.Lock()
		at, ch := pt.mu.consumed, pt.mu.progress
		pt.mu.Unlock()
		if at >= target {
			return true, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false, ctx.Err()
		case <-pt.exited:
			return false, unavailable("partition %d stopped on this node while cancelling; retry", pt.p)
		case <-timer.C:
			return false, unavailable("partition %d is still reading its intake stream (at sequence %d of %d); retry", pt.p, at, target)
		}
	}
}
