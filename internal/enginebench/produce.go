package enginebench

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglassmq/hourglass/engine"
)

// topic is the one topic the benchmark uses: the engine delivers a topic
// from one goroutine at a time, so the sink sees batches in order.
const topic = "bench"

// dueFunc returns the delivery time of message i, drawn with rng.
type dueFunc func(rng *rand.Rand, i int) time.Time

// spreadDue returns a dueFunc drawing uniformly from [from, from+spread).
func spreadDue(from time.Time, spread time.Duration) dueFunc {
	return func(rng *rand.Rand, _ int) time.Time {
		return from.Add(time.Duration(rng.Int64N(int64(spread))))
	}
}

// scheduleResult is how scheduling went.
type scheduleResult struct {
	scheduled int           // messages accepted
	elapsed   time.Duration // from the first call to the last answer
}

// schedule schedules cfg.Messages messages on e from cfg.Producers
// goroutines, cfg.Batch per call, each body opening with the message
// index. It stops early, without error, when ctx is done; it stops at the
// first error and returns it.
func schedule(ctx context.Context, cfg *Config, e *engine.Engine, tr *tracker, due dueFunc, bar *Bar) (scheduleResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := cfg.Messages
	var (
		next      atomic.Int64 // first index of the next batch to take
		scheduled atomic.Int64
		errOnce   sync.Once
		firstErr  error
		wg        sync.WaitGroup
	)
	seed := uint64(time.Now().UnixNano())
	start := time.Now()
	for p := range cfg.Producers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(p)))
			reqs := make([]engine.Request, cfg.Batch)
			// The engine copies bodies into its record before
			// ScheduleBatch returns, so the buffer is reused.
			bodies := make([]byte, cfg.Batch*cfg.BodySize)
			for ctx.Err() == nil {
				lo := int(next.Add(int64(cfg.Batch))) - cfg.Batch
				if lo >= n {
					return
				}
				hi := min(lo+cfg.Batch, n)
				rs := reqs[:hi-lo]
				for j := range rs {
					body := bodies[j*cfg.BodySize : (j+1)*cfg.BodySize : (j+1)*cfg.BodySize]
					binary.LittleEndian.PutUint64(body, uint64(lo+j))
					rs[j] = engine.Request{Topic: topic, Body: body, At: due(rng, lo+j)}
				}
				// Marked before the call: a message due at once may be
				// delivered before ScheduleBatch returns.
				tr.markScheduled(lo, hi, true)
				if _, err := e.ScheduleBatch(ctx, rs); err != nil {
					tr.markScheduled(lo, hi, false) // a batch is all or nothing
					errOnce.Do(func() { firstErr = fmt.Errorf("scheduling messages %d to %d: %w", lo, hi-1, err) })
					cancel()
					return
				}
				scheduled.Add(int64(hi - lo))
				bar.Add(hi - lo)
			}
		})
	}
	wg.Wait()
	res := scheduleResult{scheduled: int(scheduled.Load()), elapsed: time.Since(start)}
	return res, firstErr
}
