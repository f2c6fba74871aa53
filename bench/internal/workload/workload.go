// Package workload runs the peer benchmark's four workloads against one
// system: W1 order timeouts, W2 hot second, W3 backlog, W4 crash (W1 with
// the server killed with SIGKILL half way through producing).
package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hourglassmq/hourglass/bench/internal/measure"
	"github.com/hourglassmq/hourglass/bench/internal/peers"
)

// The counts, before Options.Scale.
const (
	W1Messages = 200_000
	W2Messages = 200_000
	W3Messages = 2_000_000
)

// Options are the settings every workload shares.
type Options struct {
	// Scale multiplies the message counts (1 = the issue's).
	Scale float64
	// W2Scale and W3Scale multiply W2's and W3's counts instead of Scale
	// (0: Scale). They may exceed 1: the issue also asks for W2 at
	// 2,000,000 and for W3's per-message figures at 10,000,000.
	W2Scale, W3Scale float64
	// BodySize of every message, bytes (the issue: 256).
	BodySize int
	// RandomBody pads each body with random bytes instead of zeros, so
	// that systems which compress what they store (Redis's RDB, Pebble's
	// blocks) store as much as for a real payload.
	RandomBody bool
	// Producers and Consumers, each with its own connection(s) (issue: 4 and 4).
	Producers, Consumers int
	// Batch is the most messages per produce request.
	Batch int
	// MinDelay, MaxDelay: W1's and W4's delays are uniform over [MinDelay, MaxDelay).
	MinDelay, MaxDelay time.Duration
	// RunTimeout bounds each run from its first produce to its end.
	RunTimeout time.Duration
	// Grace is how long consumers keep going after every message arrived,
	// to catch late duplicates (W1, W2; W4 uses CrashGrace).
	Grace, CrashGrace time.Duration
	// Settle is how long W3 waits after producing before it measures.
	Settle time.Duration
	// WorkDir holds each run's data directory (removed after the run).
	WorkDir string
	// Port the server listens on.
	Port int
	// W5Rate is W5's messages a second; W5Duration how long it produces.
	W5Rate     int
	W5Duration time.Duration
	// Log, if set, is told of progress and errors.
	Log func(format string, args ...any) `json:"-"`
}

func (o Options) n(base int) int { return Count(base, o.Scale) }

// W2Count is W2's message count: W2Messages times W2Scale, or Scale.
func (o Options) W2Count() int {
	if o.W2Scale > 0 {
		return Count(W2Messages, o.W2Scale)
	}
	return o.n(W2Messages)
}

// W3Count is W3's message count: W3Messages times W3Scale, or Scale.
func (o Options) W3Count() int {
	if o.W3Scale > 0 {
		return Count(W3Messages, o.W3Scale)
	}
	return o.n(W3Messages)
}

// body is message id's body, due at at.
func (o Options) body(id uint64, at time.Time) []byte {
	b := measure.EncodeBody(id, at, o.BodySize)
	if o.RandomBody {
		r := rand.NewChaCha8([32]byte{byte(id), byte(id >> 8), byte(id >> 16), byte(id >> 24), byte(id >> 32)})
		r.Read(b[measure.HeaderSize:])
	}
	return b
}

// Count is base scaled, at least 1.
func Count(base int, scale float64) int { return max(1, int(float64(base)*scale+0.5)) }

func (o Options) logf(format string, args ...any) {
	if o.Log != nil {
		o.Log(format, args...)
	}
}

// Result is one run of one workload on one system. Fields that do not
// apply to the workload are zero.
type Result struct {
	Workload string `json:"workload"`
	System   string `json:"system"`
	Rep      int    `json:"rep"`
	// End is "complete", or why the run stopped early ("timeout", an error).
	End string `json:"end"`
	measure.Result
	// ProduceSeconds from the first produce to the last acknowledgement.
	ProduceSeconds float64 `json:"produce_seconds"`
	ProducePerSec  float64 `json:"produce_per_sec"`
	// ProduceErrors: failed produce requests (retried).
	ProduceErrors int64 `json:"produce_errors"`
	ConsumeErrors int64 `json:"consume_errors"`
	// W2: the hot second's start, drain = last delivery - that start.
	DrainSeconds float64 `json:"drain_seconds"`
	// W2: production ended after the hot second began (drain then includes producing).
	LateProduction bool `json:"late_production"`
	// W3: memory and disk before producing (empty server) and after.
	RSSBefore, RSSAfter, PSSBefore, PSSAfter int64
	// W3: the anonymous part of RSS (heap, not mapped files).
	AnonBefore, AnonAfter int64
	DiskBefore, DiskAfter int64
	// W4: seconds from the kill to the restarted server being ready.
	DowntimeSeconds float64 `json:"downtime_seconds"`
	// W5: the rate produced (messages a second), the seconds from the
	// first produce to the last delivery, the server's CPU seconds (user
	// and system) over them and per 100,000 messages, and the disk's
	// flush requests a second (the machine's: see diskFlushes).
	Rate              int     `json:"rate,omitempty"`
	SteadySeconds     float64 `json:"steady_seconds,omitempty"`
	ServerCPUSeconds  float64 `json:"server_cpu_seconds,omitempty"`
	CPUSecondsPer100k float64 `json:"cpu_seconds_per_100k,omitempty"`
	FlushesPerSec     float64 `json:"flushes_per_sec,omitempty"`
}

// Run runs workload w ("W1" to "W5"; W5 at o.W5Rate) once on sys. rate is the produce rate
// measured for sys in W1 of the same repetition (0 if none), which W2 uses
// to place its hot second just after producing will have ended.
func Run(ctx context.Context, w string, sys peers.System, rep int, o Options, rate float64) (res Result) {
	res = Result{Workload: w, System: sys.Label(), Rep: rep, End: "complete"}
	dir, err := os.MkdirTemp(o.WorkDir, "run-")
	if err != nil {
		res.End = err.Error()
		return res
	}
	os.Chmod(dir, 0o755)
	defer os.RemoveAll(dir)
	srv := sys.NewServer(filepath.Join(dir, "data"), o.Port)
	if sys.Name != "postgresql" { // PostgreSQL's initdb makes its own
		os.MkdirAll(srv.Dir, 0o755)
	}
	if err := srv.Start(ctx); err != nil {
		res.End = err.Error()
		return res
	}
	defer srv.Stop()
	d, err := sys.NewDriver(srv)
	if err != nil {
		res.End = err.Error()
		return res
	}
	defer d.Close()
	if err := d.Setup(ctx); err != nil {
		res.End = "setup: " + err.Error()
		return res
	}
	switch w {
	case "W1":
		runDelayed(ctx, &res, sys, srv, d, o, false)
	case "W2":
		runHot(ctx, &res, d, o, rate)
	case "W3":
		runBacklog(ctx, &res, srv, d, o)
	case "W4":
		runDelayed(ctx, &res, sys, srv, d, o, true)
	case "W5":
		runSteady(ctx, &res, srv, d, o)
	default:
		res.End = fmt.Sprintf("unknown workload %q", w)
	}
	return res
}

// plan makes message i's body and due time when it is produced.
type plan func(i int, now time.Time) time.Time

// produce runs o.Producers producers over n messages, each retrying a failed
// batch until it succeeds or ctx ends; afterAck runs after each acknowledged
// batch. It returns when every producer is done.
func produce(ctx context.Context, d peers.Driver, o Options, n int, tr *measure.Tracker, due plan, errs *atomic.Int64, afterAck func()) error {
	var wg sync.WaitGroup
	var first error
	var mu sync.Mutex
	for p := range o.Producers {
		pr, err := d.NewProducer(ctx)
		if err != nil {
			return fmt.Errorf("new producer: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer pr.Close()
			batch := make([]peers.Msg, 0, o.Batch)
			flush := func() bool {
				for ctx.Err() == nil {
					if err := pr.Produce(ctx, batch); err != nil {
						errs.Add(1)
						if ctx.Err() == nil {
							o.logf("produce: %v", err)
							time.Sleep(100 * time.Millisecond)
						}
						continue
					}
					for _, m := range batch {
						tr.Acked(m.ID)
					}
					if afterAck != nil {
						afterAck()
					}
					batch = batch[:0]
					return true
				}
				mu.Lock()
				if first == nil {
					first = ctx.Err()
				}
				mu.Unlock()
				return false
			}
			for i := p; i < n; i += o.Producers {
				at := due(i, time.Now())
				batch = append(batch, peers.Msg{ID: uint64(i), DeliverAt: at, Body: o.body(uint64(i), at)})
				if len(batch) == o.Batch && !flush() {
					return
				}
			}
			if len(batch) > 0 {
				flush()
			}
		}()
	}
	wg.Wait()
	return first
}

// consumers starts o.Consumers consumers recording into tr; the returned
// stop ends them and waits.
func consumers(ctx context.Context, d peers.Driver, o Options, tr *measure.Tracker, errs *atomic.Int64) (stop func(), err error) {
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var lastLog atomic.Int64
	for range o.Consumers {
		c, err := d.NewConsumer(ctx)
		if err != nil {
			cancel()
			wg.Wait()
			return nil, fmt.Errorf("new consumer: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			c.Run(cctx, func(b []byte) { tr.DeliveredBody(b, time.Now()) }, func(err error) {
				errs.Add(1)
				if now := time.Now().Unix(); lastLog.Swap(now) != now { // at most one line a second
					o.logf("consume: %v", err)
				}
			})
		}()
	}
	return func() { cancel(); wg.Wait() }, nil
}

// waitAll waits until every message was delivered, then grace more, or
// until deadline; it says how it ended.
func waitAll(ctx context.Context, tr *measure.Tracker, deadline time.Time, grace time.Duration) string {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-tr.AllDelivered():
	case <-t.C:
		return "timeout"
	case <-ctx.Done():
		return "interrupted"
	}
	select {
	case <-time.After(grace):
	case <-ctx.Done():
	}
	return "complete"
}

// crashEnd says how a W4 run that reached its deadline with messages
// undelivered ended. A lost message never arrives, so such a run is
// complete, and its lost count says what is missing; unless the system
// was still delivering first deliveries within grace of the deadline:
// then the undelivered messages may be behind its backlog, not lost, and
// the run says so.
func crashEnd(lastDelivery, deadline time.Time, grace time.Duration) string {
	if !lastDelivery.IsZero() && deadline.Sub(lastDelivery) < grace {
		return "timeout while still delivering: lost may count a backlog"
	}
	return "complete"
}

// producing is a run's n messages, the tracker of what became of them,
// and the producers' errors.
type producing struct {
	n    int
	tr   *measure.Tracker
	perr atomic.Int64
}

func newProducing(n int) *producing { return &producing{n: n, tr: measure.NewTracker(n)} }

// produce produces the messages, due at due, and puts in res how long
// that took since start.
func (r *producing) produce(ctx context.Context, res *Result, d peers.Driver, o Options, start time.Time, due plan, afterAck func()) error {
	err := produce(ctx, d, o, r.n, r.tr, due, &r.perr, afterAck)
	res.ProduceSeconds = time.Since(start).Seconds()
	// Acknowledged messages, not planned ones: a run cut short by its
	// bound produced fewer.
	res.ProducePerSec = float64(r.tr.AckedCount()) / res.ProduceSeconds
	return err
}

// delivering is a run of W1, W2 or W4 under way: producing, with
// consumers filling the tracker.
type delivering struct {
	*producing
	cerr atomic.Int64
	stop func() // stops the consumers
}

// startDelivering starts o's consumers for n messages; on error it says
// why in res.End and returns nil.
func startDelivering(ctx context.Context, res *Result, d peers.Driver, o Options, n int) *delivering {
	r := &delivering{producing: newProducing(n)}
	stop, err := consumers(ctx, d, o, r.tr, &r.cerr)
	if err != nil {
		res.End = err.Error()
		return nil
	}
	r.stop = stop
	return r
}

// finish stops the consumers and puts what the run saw in res.
func (r *delivering) finish(res *Result) {
	r.stop()
	res.Result = r.tr.Result()
	res.ProduceErrors, res.ConsumeErrors = r.perr.Load(), r.cerr.Load()
}

// runDelayed is W1, and W4 when crash is set.
func runDelayed(ctx context.Context, res *Result, sys peers.System, srv *peers.Server, d peers.Driver, o Options, crash bool) {
	run := startDelivering(ctx, res, d, o, o.n(W1Messages))
	if run == nil {
		return
	}
	n := run.n
	start := time.Now()
	deadline := start.Add(o.RunTimeout)
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	seed := uint64(start.UnixNano())
	due := func(i int, now time.Time) time.Time {
		r := rand.New(rand.NewPCG(seed, uint64(i)))
		return now.Add(o.MinDelay + time.Duration(r.Int64N(int64(o.MaxDelay-o.MinDelay))))
	}
	var afterAck func()
	var crashDone chan struct{}
	if crash {
		var acked atomic.Int64
		var once sync.Once
		crashDone = make(chan struct{})
		afterAck = func() {
			if acked.Add(int64(o.Batch)) < int64(n/2) {
				return
			}
			once.Do(func() {
				go func() {
					defer close(crashDone)
					killed := time.Now()
					pids := srv.PIDs()
					if err := srv.Kill(); err != nil {
						o.logf("kill: %v", err)
					}
					o.logf("%s: killed %v with SIGKILL after %d acknowledged", sys.Label(), pids, acked.Load())
					if err := srv.Start(rctx); err != nil {
						o.logf("restart: %v", err)
						res.End = "restart failed: " + err.Error()
						return
					}
					res.DowntimeSeconds = time.Since(killed).Seconds()
					o.logf("%s: restarted in %.2f s", sys.Label(), res.DowntimeSeconds)
				}()
			})
		}
	}
	err := run.produce(rctx, res, d, o, start, due, afterAck)
	if crashDone != nil {
		<-crashDone
	}
	if err != nil {
		res.End = "producing: " + err.Error()
	} else {
		grace := o.Grace
		if crash {
			grace = o.CrashGrace
		}
		res.End = waitAll(ctx, run.tr, deadline, grace)
		if crash && res.End == "timeout" {
			res.End = crashEnd(run.tr.Result().LastDelivery, deadline, grace)
		}
	}
	run.finish(res)
}

// runHot is W2: every message due within one whole second that starts
// after producing is expected to be done.
func runHot(ctx context.Context, res *Result, d peers.Driver, o Options, rate float64) {
	run := startDelivering(ctx, res, d, o, o.W2Count())
	if run == nil {
		return
	}
	defer run.stop()
	n := run.n
	if rate <= 0 {
		rate = 2000
	}
	start := time.Now()
	lead := 2*time.Second + time.Duration(float64(n)/(0.8*rate)*float64(time.Second))
	lead = min(lead, o.RunTimeout/2)
	second := start.Add(lead).Truncate(time.Second).Add(time.Second)
	deadline := second.Add(o.RunTimeout / 2)
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	seed := uint64(start.UnixNano())
	due := func(i int, _ time.Time) time.Time {
		r := rand.New(rand.NewPCG(seed, uint64(i)))
		return second.Add(time.Duration(r.Int64N(int64(time.Second))))
	}
	err := run.produce(rctx, res, d, o, start, due, nil)
	res.LateProduction = time.Now().After(second)
	if err != nil {
		res.End = "producing: " + err.Error()
	} else {
		res.End = waitAll(ctx, run.tr, deadline, o.Grace)
	}
	run.finish(res)
	if !res.LastDelivery.IsZero() {
		res.DrainSeconds = res.LastDelivery.Sub(second).Seconds()
	}
}

// runBacklog is W3: messages due 1 to 30 days ahead, no consumers; memory
// and disk before and after.
func runBacklog(ctx context.Context, res *Result, srv *peers.Server, d peers.Driver, o Options) {
	run := newProducing(o.W3Count())
	if m, err := srv.Memory(); err == nil {
		res.RSSBefore, res.PSSBefore, res.AnonBefore = m.RSS, m.PSS, m.Anon
	}
	res.DiskBefore, _ = peers.DiskUsage(srv.Dir)
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, o.RunTimeout)
	defer cancel()
	seed := uint64(start.UnixNano())
	due := func(i int, now time.Time) time.Time {
		r := rand.New(rand.NewPCG(seed, uint64(i)))
		return now.Add(24*time.Hour + time.Duration(r.Int64N(int64(29*24*time.Hour))))
	}
	err := run.produce(rctx, res, d, o, start, due, nil)
	if err != nil {
		res.End = "producing: " + err.Error()
	}
	select {
	case <-time.After(o.Settle):
	case <-ctx.Done():
	}
	m, err := srv.Memory()
	if err != nil && !errors.Is(err, context.Canceled) {
		res.End = "memory: " + err.Error()
	}
	res.RSSAfter, res.PSSAfter, res.AnonAfter = m.RSS, m.PSS, m.Anon
	res.DiskAfter, _ = peers.DiskUsage(srv.Dir)
	res.Result = run.tr.Result()
	res.ProduceErrors = run.perr.Load()
}
