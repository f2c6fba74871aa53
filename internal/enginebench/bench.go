// Package enginebench measures the engine on the machine it runs on:
// `hourglass-bench engine`. It embeds an engine in a temporary data
// directory with a sink that only counts, schedules messages from
// concurrent producers, and reports how fast they were accepted and fired,
// how late they arrived, whether any was early, lost or delivered twice,
// how much heap a pending message costs and how long a restart takes.
//
// Each message body opens with its index (8 bytes, little-endian), so the
// sink can tell every message apart without a map.
//
// Scenarios (t0 is when scheduling starts):
//
//	uniform     due t0 + 1s + N/500000 s + U[0, window)
//	hot-second  due within one whole second, about t0 + 2s + N/500000 s
//	far-future  due t0 + U[1d, 30d); nothing fires; measures heap per pending
//	recovery    due t0 + S + U[0, 5s), S = 10s + 2s per million; restarts the
//	            engine once everything is routed and measures the time to Ready
//	            and the heap per pending message after it
package enginebench

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"runtime"
	"time"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// errTimeout is the cause of the run's context when --timeout ends it.
var errTimeout = errors.New("enginebench: --timeout reached")

// Run runs the benchmark cfg describes and returns its report. A run cut
// short by cfg.Timeout or by ctx still returns a report (its End says so,
// and what was scheduled but not delivered counts as lost). An error with
// no report means the configuration was invalid or the engine failed; an
// error with a report means the engine failed to close at the end.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Scenario == Recovery {
		if err := cfg.checkRecoveryBuckets(time.Now()); err != nil {
			return nil, err
		}
	}
	dir, cleanup, err := prepareDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	ctx, cancel := context.WithTimeoutCause(ctx, cfg.Timeout, errTimeout)
	defer cancel()
	r := &run{cfg: &cfg, dir: dir, start: time.Now(), rep: &Report{
		Scenario:           cfg.Scenario,
		Messages:           cfg.Messages,
		BodySize:           cfg.BodySize,
		Fsync:              cfg.Fsync,
		SegmentSeconds:     cfg.SegmentDuration.Seconds(),
		PreloadLeadSeconds: cfg.preloadLead().Seconds(),
		Producers:          cfg.Producers,
		Batch:              cfg.Batch,
		GOMAXPROCS:         runtime.GOMAXPROCS(0),
	}}
	switch cfg.Scenario {
	case Uniform, HotSecond:
		err = r.firing(ctx)
	case FarFuture:
		err = r.farFuture(ctx)
	case Recovery:
		err = r.recovery(ctx)
	}
	if err != nil {
		return nil, err
	}
	return r.rep, r.closeErr
}

// prepareDir returns the data directory to use and how to clean it up: a
// fresh temporary one that is removed, or dir, which must be empty or
// absent, and is kept.
func prepareDir(dir string) (string, func(), error) {
	if dir == "" {
		tmp, err := os.MkdirTemp("", "hourglass-bench-")
		if err != nil {
			return "", nil, fmt.Errorf("creating a temporary data directory: %w", err)
		}
		return tmp, func() { os.RemoveAll(tmp) }, nil
	}
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", nil, fmt.Errorf("--dir %s: %w", dir, err)
		}
	case err != nil:
		return "", nil, fmt.Errorf("--dir %s cannot be used: %w; give an empty or absent directory", dir, err)
	case len(ents) > 0:
		return "", nil, fmt.Errorf("--dir %s is not empty (it holds %q and %d more); give an empty or absent directory: the benchmark needs a fresh engine and never touches existing data",
			dir, ents[0].Name(), len(ents)-1)
	}
	return dir, func() {}, nil
}

// checkRecoveryBuckets refuses a segment duration with which the recovery
// scenario's messages would fall in a bucket the restarted engine does not
// load before Ready: ready_seconds and the heap per pending message would
// then leave them out. It holds for any duration of an hour or more.
func (c *Config) checkRecoveryBuckets(now time.Time) error {
	last := now.Add(c.lastDue())
	bucket := schedulelog.BucketStart(last.UnixMilli(), c.SegmentDuration)
	if loadAt := time.UnixMilli(bucket).Add(-c.preloadLead()); loadAt.After(now) {
		return fmt.Errorf("--scenario recovery with --segment-duration %v: the messages are due up to %v after scheduling starts, in a bucket the engine loads only %v (its preload lead) before the bucket starts, so it may not be loaded when the restarted engine is ready; use a --segment-duration of an hour or more (the default 1h fits)",
			c.SegmentDuration, c.lastDue().Round(time.Millisecond), c.preloadLead())
	}
	return nil
}

// run is one benchmark run, driven by one goroutine.
type run struct {
	cfg   *Config
	dir   string
	start time.Time
	tr    *tracker
	rep   *Report

	closeErr error // from closing the engine at the end of the run
}

// open opens the engine, giving up when ctx ends (an engine that opens
// later is closed at once).
func (r *run) open(ctx context.Context) (*engine.Engine, error) {
	type opened struct {
		e   *engine.Engine
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		e, err := engine.Open(engine.Options{
			Dir:             r.dir,
			Sink:            r.tr,
			SegmentDuration: r.cfg.SegmentDuration,
			PreloadLead:     r.cfg.preloadLead(),
			Fsync:           r.cfg.syncPolicy(),
			Logger:          r.cfg.Logger,
		})
		ch <- opened{e, err}
	}()
	select {
	case o := <-ch:
		if o.err != nil {
			return nil, fmt.Errorf("opening the engine in %s: %w", r.dir, o.err)
		}
		return o.e, nil
	case <-ctx.Done():
		go func() {
			if o := <-ch; o.e != nil {
				o.e.Close()
			}
		}()
		return nil, fmt.Errorf("opening the engine in %s: %w", r.dir, context.Cause(ctx))
	}
}

// openReady opens the engine and waits until it is ready.
func (r *run) openReady(ctx context.Context) (*engine.Engine, error) {
	e, err := r.open(ctx)
	if err != nil {
		return nil, err
	}
	if err := waitReady(ctx, e); err != nil {
		closeEngine(e)
		return nil, err
	}
	return e, nil
}

// scheduleAll schedules the scenario's messages on e, due from t0+offset
// (t0 being now) for spread, and returns when the last one is due.
func (r *run) scheduleAll(ctx context.Context, e *engine.Engine) (lastDue time.Time, err error) {
	offset, spread := r.cfg.dueSpan()
	t0 := time.Now()
	from := t0.Add(offset)
	if r.cfg.Scenario == HotSecond {
		from = from.Truncate(time.Second) // one whole second of the clock
	}
	r.rep.DueFromSeconds = round3(from.Sub(t0).Seconds())
	r.rep.DueToSeconds = round3(from.Add(spread).Sub(t0).Seconds())
	b := NewBar(r.cfg.Progress, r.cfg.Messages, "scheduling")
	res, err := schedule(ctx, r.cfg, e, r.tr, spreadDue(from, spread), b)
	b.Done()
	r.rep.Scheduled = res.scheduled
	r.rep.ScheduleSeconds = round3(res.elapsed.Seconds())
	if res.scheduled > 0 && res.elapsed > 0 {
		r.rep.SchedulePerSec = round1(float64(res.scheduled) / res.elapsed.Seconds())
	}
	return from.Add(spread), err
}

// waitRouted waits until everything scheduled is routed, and reports how
// long that took after scheduling ended.
func (r *run) waitRouted(ctx context.Context, e *engine.Engine) error {
	start := time.Now()
	err := waitRouted(ctx, e, r.tr)
	if err == nil {
		r.rep.RouteSeconds = round3(time.Since(start).Seconds())
	}
	return err
}

// awaitDeliveries waits for every scheduled message to be delivered (or
// for the timeout or the grace after lastDue) and returns why it stopped.
func (r *run) awaitDeliveries(ctx context.Context, lastDue time.Time) string {
	want := int64(r.rep.Scheduled)
	b := NewBar(r.cfg.Progress, r.rep.Scheduled, "delivering")
	end := waitDelivered(ctx, r.tr, want, lastDue, r.cfg.Grace, b)
	b.Done()
	return end
}

// openAndSchedule opens an engine and schedules the scenario's messages
// on it (scheduleAll). On error the engine is closed.
func (r *run) openAndSchedule(ctx context.Context) (*engine.Engine, time.Time, error) {
	e, err := r.openReady(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	lastDue, err := r.scheduleAll(ctx, e)
	if err != nil {
		closeEngine(e)
		return nil, time.Time{}, err
	}
	return e, lastDue, nil
}

// closeAndFinish closes e and fills the report (finish) with its last
// counters and end, why the run ended.
func (r *run) closeAndFinish(e *engine.Engine, end string) {
	st := e.Stats()
	r.closeErr = closeEngine(e)
	r.finish(end, st)
}

// firing runs uniform and hot-second: schedule, wait for every delivery.
func (r *run) firing(ctx context.Context) error {
	r.tr = newTracker(r.cfg.Messages, true)
	e, lastDue, err := r.openAndSchedule(ctx)
	if err != nil {
		return err
	}
	r.closeAndFinish(e, r.awaitDeliveries(ctx, lastDue))
	return nil
}

// farFuture schedules messages days ahead and measures the live heap they
// cost once routed. Nothing is due during the run.
func (r *run) farFuture(ctx context.Context) error {
	r.tr = newTracker(r.cfg.Messages, false)
	base := liveHeap()
	e, _, err := r.openAndSchedule(ctx)
	if err != nil {
		return err
	}
	end := endComplete
	if err := r.waitRouted(ctx, e); err != nil {
		if ctx.Err() == nil {
			closeEngine(e)
			return err
		}
		end = ctxEnd(ctx)
	} else if ctx.Err() != nil {
		end = ctxEnd(ctx)
	} else {
		r.heapPerPending(base, liveHeap(), int64(r.rep.Scheduled))
	}
	r.closeAndFinish(e, end)
	return nil
}

// recovery schedules messages due shortly, restarts the engine once they
// are routed, and measures the restart and the heap the loaded messages
// cost; then it waits for every delivery.
func (r *run) recovery(ctx context.Context) error {
	r.tr = newTracker(r.cfg.Messages, true)
	e, lastDue, err := r.openAndSchedule(ctx)
	if err != nil {
		return err
	}
	if err := r.waitRouted(ctx, e); err != nil && ctx.Err() == nil {
		closeEngine(e)
		return err
	}
	if ctx.Err() != nil {
		r.closeAndFinish(e, ctxEnd(ctx))
		return nil
	}
	if err := closeEngine(e); err != nil {
		return fmt.Errorf("before the restart: %w", err)
	}
	before := r.tr.counts.Distinct()
	r.rep.DeliveredBeforeRestart = before

	base := liveHeap()
	start := time.Now()
	e, err = r.openReady(ctx)
	if err != nil {
		return fmt.Errorf("after the restart: %w", err)
	}
	r.rep.ReadySeconds = round3(time.Since(start).Seconds())
	r.rep.PendingAtReady = e.Stats().Pending
	r.heapPerPending(base, liveHeap(), int64(r.rep.Scheduled)-before)
	r.closeAndFinish(e, r.awaitDeliveries(ctx, lastDue))
	return nil
}

func (r *run) heapPerPending(before, after uint64, pending int64) {
	growth := int64(after) - int64(before)
	r.rep.HeapGrowthBytes = growth
	if pending > 0 {
		r.rep.HeapBytesPerPending = round1(float64(growth) / float64(pending))
	}
}

// finish fills the report from what the tracker saw and the engine's last
// counters. Call it once the engine is closed.
func (r *run) finish(end string, st engine.Stats) {
	t := r.tr.tally()
	rep := r.rep
	rep.End = end
	rep.Delivered = t.Delivered
	rep.Early = t.Early
	rep.Duplicates = t.Duplicates
	rep.Lost = t.Lost
	rep.Segments = st.Segments
	rep.EngineFired = st.Fired
	rep.EngineRetries = st.Retries
	rep.SinkSeconds = round3(time.Duration(r.tr.busyNs.Load()).Seconds())
	rep.Anomalies = t.Unknown + t.UnackedDelivered + st.Corrupt + st.Unconfirmed
	if r.cfg.Scenario == FarFuture {
		rep.Lost = 0 // pending, not lost: nothing is due during the run
		rep.Anomalies += t.Deliveries
		rep.Note = fmt.Sprintf("nothing is due during the run: %s messages stay pending on disk (%d schedule segments, one of them the routing marker's); lost and lateness do not apply",
			Group(int64(rep.Scheduled)), st.Segments)
	}
	if all := t.Deliveries + t.Unknown; all >= 2 && t.last.Sub(t.first) > 0 {
		rep.FirePerSec = round1(float64(all) / t.last.Sub(t.first).Seconds())
	}
	rep.SetLateness(r.tr.latencies())
	what := "what was scheduled and not delivered counts as lost"
	if r.cfg.Scenario == FarFuture {
		what = "the heap was not measured"
	}
	switch end {
	case endTimeout:
		rep.Note = fmt.Sprintf("stopped by --timeout %v; %s", r.cfg.Timeout, what)
	case endInterrupted:
		rep.Note = "interrupted; " + what
	case endNoProgress:
		rep.Note = fmt.Sprintf("no delivery for --grace %v after the last message was due; the rest counts as lost", r.cfg.Grace)
	}
}
