package serverbench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hourglassmq/hourglass/internal/enginebench"
)

// consumerSet is the consumers of a lateness or drain run: cfg.Consumers
// goroutines receiving cfg.Topic into one tally, each into its sample.
type consumerSet struct {
	t       *tally
	samples []sample
	stop    context.CancelFunc
	wg      sync.WaitGroup
	failed  chan struct{} // closed when a Consume stream failed for good
	once    sync.Once
	err     error // set before failed is closed
}

// startConsumers starts the consumers: Consume streams (stream), or long
// polls of Receive acked with AckBatch (grpc, connect), whose acks run
// under ctx so that they finish after the set stops.
func startConsumers(ctx context.Context, p *peers, cfg Config, t *tally, skew time.Duration) *consumerSet {
	cs := &consumerSet{t: t, samples: make([]sample, cfg.Consumers), failed: make(chan struct{})}
	t.lastProgress.Store(time.Now().UnixNano())
	cctx, stop := context.WithCancel(ctx)
	cs.stop = stop
	for ci := range cfg.Consumers {
		s := &cs.samples[ci]
		if cfg.Protocol == ProtocolStream {
			cl := p.consumers[p.consumerConn(ci, len(p.consumers))]
			cs.wg.Go(func() {
				if err := streamConsumer(cctx, cl, cfg.Topic, cfg.Credits, t, s, skew); err != nil {
					t.errs.Add(1)
					cs.once.Do(func() { cs.err = fmt.Errorf("consuming: %w", err); close(cs.failed) })
				}
			})
			continue
		}
		pl := p.polls[p.consumerConn(ci, len(p.polls))]
		cs.wg.Go(func() { pollConsumer(ctx, cctx, pl, cfg.Topic, cfg.Credits, t, s, skew) })
	}
	return cs
}

// wait returns once want distinct messages arrived, ctx ended, a
// consumer failed, or grace passed both since lastDue (client clock) and
// since the last new delivery; the last sets r.End to "no-progress".
// With progress it shows a bar of what arrived.
func (cs *consumerSet) wait(ctx context.Context, r *Report, want int64, lastDue time.Time, grace time.Duration, progress *enginebench.Bar) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for cs.t.counts.Distinct() < want {
		select {
		case <-ctx.Done():
			return
		case <-cs.failed:
			return
		case <-tick.C:
		}
		progress.Set(cs.t.counts.Distinct())
		now := time.Now()
		if now.After(lastDue) && now.Sub(time.Unix(0, cs.t.lastProgress.Load())) > grace && now.Sub(lastDue) > grace {
			r.End = "no-progress"
			return
		}
	}
}

// finish stops the consumers, puts what they saw into r, and returns the
// error of a consumer that failed for good, if one did.
func (cs *consumerSet) finish(r *Report) error {
	cs.stop()
	cs.wg.Wait()
	cs.t.report(r, cs.samples)
	select {
	case <-cs.failed:
		return cs.err
	default:
		return nil
	}
}
