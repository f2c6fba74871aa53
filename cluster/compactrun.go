package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// When a partition's owner compacts (compact.go has how): the consuming
// goroutine's memory of what it consumed, the trigger, and the compaction
// it runs beside itself.

// compactState is the consuming goroutine's memory for compactions.
type compactState struct {
	last time.Time // when the last one started
	// horizon is an intake sequence that the snapshot point must reach:
	// the stream's last sequence when the owner took the partition, then
	// the last copy of its last compaction (refresh: unknown, to be read
	// again, after a compaction that failed). Up to there the
	// stream may hold copies of messages that are done (copies by a
	// previous owner, or by this owner's last compaction, of messages
	// delivered since); once they are below the snapshot point, an ID
	// whose original sequence is below it is in no intake message kept.
	horizon uint64
	refresh bool
	// held counts the messages consumed from the intake stream above the
	// last snapshot point (copies and done ones included): about what the
	// stream holds.
	held int
	// recent lists the consumed intake batches stored less than
	// keepRecent ago, oldest first; old is the last sequence of the
	// latest batch older than that.
	recent []consumedBatch
	old    uint64
	keep   time.Duration // keepRecent, unless a test says otherwise
	lastL0 uint64
	// running is the compaction under way, if one is.
	running *compaction
}

// compaction is one compaction running beside the consuming goroutine.
type compaction struct {
	l0      uint64
	pending int
	cancel  context.CancelFunc
	done    chan struct{} // closed when cs and err are set
	cs      compactStats
	err     error
}

// finished is closed when the running compaction ends (nil if none runs:
// a receive from it blocks).
func (c *compactState) finished() <-chan struct{} {
	if c.running == nil {
		return nil
	}
	return c.running.done
}

// stop ends the running compaction, if one runs, and waits for it: the
// partition is stopping.
func (c *compactState) stop() {
	if r := c.running; r != nil {
		r.cancel()
		<-r.done
		c.running = nil
	}
}

func newCompactState(o *Options) compactState {
	c := compactState{refresh: true, keep: keepRecent(o.IdempotencyWindow)}
	if o.hooks != nil && o.hooks.keepRecent != nil {
		c.keep = *o.hooks.keepRecent
	}
	return c
}

type consumedBatch struct {
	seq    uint64    // its last intake sequence
	stored time.Time // when the stream stored that (the server's clock)
	n      int       // messages
}

// keepRecent is how long a compaction keeps intake messages: the
// idempotency window (the intake streams' duplicate window) plus a margin
// for the clock offset between the NATS servers and the node. A keyed
// Schedule retried within the window is answered from its stored intake
// message, which must still be there, and a NATS server that restarts
// rebuilds its duplicate window from the messages stored within it.
func keepRecent(window time.Duration) time.Duration {
	return max(window, 0) + 30*time.Second
}

// consumed notes a batch of n messages up to sequence seq, stored at
// stored, consumed at now.
func (c *compactState) consumed(seq uint64, stored time.Time, n int, now time.Time) {
	c.held += n
	c.recent = append(c.recent, consumedBatch{seq: seq, stored: stored, n: n})
	c.snapshotPoint(now) // recent holds only what is recent
}

// snapshotPoint returns the last consumed sequence stored at least keep
// before now.
func (c *compactState) snapshotPoint(now time.Time) uint64 {
	i := 0
	for i < len(c.recent) && !c.recent[i].stored.After(now.Add(-c.keep)) {
		c.old = c.recent[i].seq
		i++
	}
	c.recent = c.recent[i:]
	return c.old
}

// maybeCompact starts a compaction of the partition if none runs, the
// messages consumed exceed 2 × pending + Compaction.Margin, the last
// compaction started at least Compaction.Interval ago, and the snapshot point
// reached the horizon. It runs on the consuming goroutine; the compaction
// on its own, and compacted takes its result.
func (pt *partition) maybeCompact(st jetstream.Stream, cst *compactState) {
	o := &pt.n.opts
	if cst.running != nil {
		return
	}
	if o.Compaction.Margin < 0 || (!cst.last.IsZero() && time.Since(cst.last) < o.Compaction.Interval) {
		return
	}
	pt.mu.Lock()
	pending := len(pt.mu.taken)
	pt.mu.Unlock()
	if cst.held <= 2*pending+o.Compaction.Margin {
		return
	}
	if cst.refresh {
		info, err := st.Info(pt.ctx)
		if err != nil {
			return
		}
		cst.horizon, cst.refresh = info.State.LastSeq, false
	}
	l0 := cst.snapshotPoint(pt.n.now())
	if o.hooks != nil && o.hooks.capL0 != nil {
		l0 = o.hooks.capL0(l0)
	}
	if l0 < cst.horizon || l0 <= cst.lastL0 {
		return
	}
	if o.hooks != nil && o.hooks.allowCompact != nil && !o.hooks.allowCompact() {
		return
	}
	cst.last = time.Now()
	ctx, cancel := context.WithCancel(pt.ctx)
	r := &compaction{l0: l0, pending: pending, cancel: cancel, done: make(chan struct{})}
	cst.running = r
	held := cst.held
	go func() {
		defer close(r.done)
		r.cs, r.err = pt.compact(ctx, st, l0, held)
	}()
}

// compactionEnded takes the result of the compaction that finished, on the
// consuming goroutine.
func (pt *partition) compactionEnded(cst *compactState) {
	r := cst.running
	<-r.done
	r.cancel()
	cst.running = nil
	cs, err, l0, pending := r.cs, r.err, r.l0, r.pending
	if err != nil {
		// It may have stored copies: the horizon is past them.
		cst.refresh = true
		if pt.ctx.Err() == nil {
			pt.log.Warn("cluster: compaction failed; the streams keep what they hold and the next one starts over", "held", cs.Held, "pending", pending, "err", err)
		}
		return
	}
	cst.lastL0 = l0
	cst.horizon = max(cst.horizon, cs.CopyLast)
	cst.held = 0
	for _, b := range cst.recent {
		cst.held += b.n
	}
	pt.log.Info("cluster: compacted", "held", cs.Held, "pending", pending, "copied", cs.Copied, "copy_msgs", cs.CopyMsgs,
		"kept_cancels", cs.KeptCancels, "kept_delivered", cs.KeptDelivered,
		"intake_msgs", fmt.Sprintf("%d->%d", cs.IntakeBefore, cs.IntakeAfter),
		"done_msgs", fmt.Sprintf("%d->%d", cs.DoneBefore, cs.DoneAfter), "done_entries_pruned", cs.PrunedDone,
		"kept_intake_from", cs.L0+1, "kept_done_from", cs.D0+1, "took", cs.Took.Round(time.Millisecond))
}
