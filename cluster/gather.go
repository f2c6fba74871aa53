package cluster

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/message"
)

// gather is the group commit of a node's unkeyed single Schedules: one is
// published at once while no publish of them is in flight, and those that
// arrive meanwhile wait and go together in the next intake message (up to
// MaxBatch messages or limit bytes). Its methods may be called from any
// goroutine; one leader goroutine at a time publishes.
//
// One publish in flight gathers the most: with 64 clients making single
// unary Schedules against one node, medians of 3 interleaved runs
// (`CLIENTS=64 NODES=1 bash scripts/bench-cluster.sh 40000 single`,
// bench/results/cluster-gather-2026-12-02.txt) gave 9,293/s with one,
// 8,541/s with two, 7,711/s with four. It is per node, not per partition:
// with one per partition, 64 concurrent Schedules over 8 partitions went
// about two to an intake message.
//
// The leader lingers before each publish after its first, until as many
// Schedules wait as the publish before carried plus those that waited
// already, and at most as long as that publish took (gatherMaxLinger at
// most): the callers a publish answered mostly send their next Schedule
// at once, and without the linger they would go in the next publish but
// one, the callers split in two halves that publish in turn. An R3 publish
// costs the NATS servers about the same CPU whatever it carries, so one
// publish instead of two is what a loaded cluster gains. A caller that
// does not come back costs the others one linger; a lone caller none (it
// is the one waited for).
type gather struct {
	// publish stores ms as one intake message and returns their IDs.
	publish func(ms []message.Message) ([]message.ID, error)
	// limit bounds the encoded size of one intake message's messages.
	limit int

	mu struct {
		sync.Mutex
		leading bool      // a leader goroutine runs
		waiting []*waiter // in arrival order
		// want and full are set while the leader lingers: full is
		// closed once want Schedules wait.
		want int
		full chan struct{}
	}
}

// gatherMaxLinger bounds a leader's linger.
const gatherMaxLinger = 2 * time.Millisecond

type waiter struct {
	m    *message.Message
	size int
	done chan gatherResult // buffered: the leader never blocks on it
}

type gatherResult struct {
	id  message.ID
	err error
}

// gatherBytes bounds the encoded size of one gathered intake message.
const gatherBytes = 256 << 10

// schedule stores m through the group commit and returns its ID.
func (g *gather) schedule(ctx context.Context, m *message.Message) (message.ID, error) {
	w := &waiter{m: m, size: message.ScheduleSize(m) + 4, done: make(chan gatherResult, 1)}
	g.mu.Lock()
	g.mu.waiting = append(g.mu.waiting, w)
	if g.mu.full != nil && len(g.mu.waiting) >= g.mu.want {
		close(g.mu.full)
		g.mu.full = nil
	}
	if !g.mu.leading {
		g.mu.leading = true
		go g.lead()
	}
	g.mu.Unlock()
	select {
	case r := <-w.done:
		return r.id, r.err
	case <-ctx.Done():
		return message.ID{}, status.Errorf(codes.Unavailable,
			"storing 1 message in the cluster's intake streams: %v; whether it was stored is unknown: retry it (with an idempotency key, a retry is not stored twice)", ctx.Err())
	}
}

// lead publishes the waiting Schedules, as many per intake message as
// fit, until none wait.
func (g *gather) lead() {
	var (
		last  int           // Schedules the previous publish carried
		took  time.Duration // how long it took
		timer *time.Timer
		ms    []message.Message
	)
	for {
		g.mu.Lock()
		if want := min(len(g.mu.waiting)+last, MaxBatch); last > 0 && len(g.mu.waiting) < want {
			full := make(chan struct{})
			g.mu.want, g.mu.full = want, full
			g.mu.Unlock()
			linger := min(took, gatherMaxLinger)
			if timer == nil {
				timer = time.NewTimer(linger)
			} else {
				timer.Reset(linger)
			}
			select {
			case <-full:
				timer.Stop()
			case <-timer.C:
			}
			g.mu.Lock()
			g.mu.full = nil
		}
		batch := g.take()
		if len(batch) == 0 {
			g.mu.leading = false
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		ms = ms[:0]
		for _, w := range batch {
			ms = append(ms, *w.m)
		}
		start := time.Now()
		ids, err := g.publish(ms)
		took, last = time.Since(start), len(batch)
		for i, w := range batch {
			if err != nil {
				w.done <- gatherResult{err: err}
			} else {
				w.done <- gatherResult{id: ids[i]}
			}
		}
	}
}

// take removes the first waiters that fit one intake message and returns
// them; g.mu is held.
func (g *gather) take() []*waiter {
	k, size := 0, 0
	for k < len(g.mu.waiting) && k < MaxBatch && (k == 0 || size+g.mu.waiting[k].size <= g.limit) {
		size += g.mu.waiting[k].size
		k++
	}
	batch := g.mu.waiting[:k:k]
	g.mu.waiting = g.mu.waiting[k:]
	if len(g.mu.waiting) == 0 {
		g.mu.waiting = nil
	}
	return batch
}
