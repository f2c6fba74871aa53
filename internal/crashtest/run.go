// Package harness is the crash-recovery harness behind `go run
// ./cmd/crashtest`: it runs the real hourglass binary on 127.0.0.1, loads
// it with producers and consumers that mix its protocols call by call
// (unary Connect on HTTP/1.1, unary gRPC, ScheduleStream bursts and
// Consume streams on HTTP/2), kills it (SIGKILL, sometimes SIGTERM)
// at random moments, optionally tears the tails of its active files or
// damages one file (Config.Damage: damage.go, and damagecheck.go for
// what each restart must then do), restarts it on the same data
// directory, and at the end drains every message and checks each one
// against what the server's RPCs answered
// (Check). It believes nothing the server says about itself except those
// answers, plus the clock skew it measures with the Time RPC.
package crashtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// Run runs the harness. It returns an error only when the harness itself
// could not do its job (build, start); violations are in the Summary.
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	work := cfg.WorkDir
	if work == "" {
		var err error
		if work, err = os.MkdirTemp("", "crashtest-"); err != nil {
			return nil, err
		}
	}
	r := &runner{cfg: cfg, work: work, dataDir: filepath.Join(work, "data"), logPath: filepath.Join(work, "server.log"),
		hist: &History{}, rng: rand.New(rand.NewPCG(cfg.Seed, 0x6372617368)),
		sum: &Summary{Seed: cfg.Seed, MaxAttempts: MaxAttempts, PoisonPercent: max(0, cfg.PoisonPercent), Fsync: cfg.Fsync, SegmentDuration: cfg.SegmentDuration.String(), CorruptTail: cfg.CorruptTail,
			KillMoments: map[string]int{}, CutsByMode: map[string]int{}, Allowed: cfg.Allow}}
	if r.cfg.Bin == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		root, err := ModuleRoot(wd)
		if err != nil {
			return nil, err
		}
		if r.cfg.Bin, err = Build(ctx, root, work, r.cfg.Embedded); err != nil {
			return nil, err
		}
	}
	r.wl = newWorkload(&r.cfg, r.hist)
	if cfg.Damage {
		cwd, _ := os.Getwd()
		r.dmg = &damager{rng: rand.New(rand.NewPCG(cfg.Seed, 0x64616d616765)), cwd: cwd}
		r.sum.Damage = &DamageSummary{}
	}
	var err error
	if cfg.Cluster {
		err = r.runCluster(ctx)
	} else {
		err = r.run(ctx)
	}
	if errors.Is(err, errRestart) {
		err = nil // a violation (start-failed), not a harness error
	}
	r.finish(start)
	if r.sum.Failed || cfg.Keep || err != nil {
		r.sum.WorkDir = work
		if werr := writeEvents(filepath.Join(work, "events.json"), r.hist.Snapshot()); werr != nil && err == nil {
			err = werr
		}
	} else if cfg.WorkDir == "" {
		os.RemoveAll(work)
	}
	return r.sum, err
}

type runner struct {
	cfg                    Config
	work, dataDir, logPath string
	hist                   *History
	rng                    *rand.Rand
	wl                     *workload
	sum                    *Summary
	srv                    *server
	recoveries             []time.Duration
	skew, skewBound        time.Duration
	mustReport             []string // cut commitlog-format files the next start must report
	extra                  []Violation
	natsRest               []time.Duration // --cluster: NATS node restarts, until healthy
	dmg                    *damager        // --damage
}

// checkParams are Check's parameters for this run.
func (r *runner) checkParams() CheckParams {
	return CheckParams{Fsync: r.cfg.Fsync, SkewBound: r.skewBound, Cluster: r.cfg.Cluster, MaxAttempts: MaxAttempts}
}

func (r *runner) progress(format string, a ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, format+"\n", a...)
	}
}

func (r *runner) serverArgs() []string {
	return []string{"--segment-duration", r.cfg.SegmentDuration.String(), "--fsync", r.cfg.Fsync,
		"--delay-levels", delayLevelsFlag, "--max-attempts", fmt.Sprint(MaxAttempts), "--max-delay", "1d",
		"--shutdown-timeout", "5s", "--handoff-lead", HandoffLead.String()}
}

// startServer starts the server on the data directory and measures its
// recovery and clock skew. cycle is the cycle about to run. A start that
// meets a --damage is judged by startAfterDamage.
func (r *runner) startServer(cycle int) error {
	if r.dmg != nil && r.dmg.pending != nil {
		return r.startAfterDamage(cycle)
	}
	return r.startPlain(cycle)
}

// startPlain starts the server, which must get ready: a restart that does
// not is a violation (start-failed) that ends the run.
func (r *runner) startPlain(cycle int) error {
	t0 := time.Now()
	s, err := startServer(r.cfg.Bin, r.dataDir, r.logPath, r.serverArgs(), time.Minute)
	if err == nil {
		if err = s.waitReady(time.Minute); err != nil {
			s.kill()
		}
	}
	r.hist.AddStart(cycle, t0)
	if err != nil {
		if cycle == 1 {
			return err // the first start: nothing to recover, the harness cannot run
		}
		r.extra = append(r.extra, Violation{Kind: VStartFailed, Cycle: cycle, At: time.Now(), Detail: err.Error()})
		return fmt.Errorf("%w: %v", errRestart, err)
	}
	if cycle > 1 {
		r.recoveries = append(r.recoveries, time.Since(t0))
	}
	r.srv = s
	log := s.logText()
	for _, p := range r.mustReport {
		if !reportsTorn(log, p) {
			r.extra = append(r.extra, Violation{Kind: VUnreported, Cycle: cycle, At: time.Now(),
				Detail: fmt.Sprintf("the server started without reporting the torn tail written to %s", p)})
		}
	}
	r.mustReport = nil
	return r.measureSkew(s.addr)
}

// reportsTorn reports whether a log line about a torn tail names path.
func reportsTorn(log, path string) bool {
	for line := range strings.Lines(log) {
		if strings.Contains(line, "torn tail") && strings.Contains(line, path) {
			return true
		}
	}
	return false
}

// measureSkew asks the server's Time three times and keeps the sample
// with the shortest round trip: skew = server - midpoint, bound = |skew| +
// half the round trip.
func (r *runner) measureSkew(addr string) error {
	c := connectUnary{r.wl.client(addr)}
	best := time.Duration(-1)
	var skew time.Duration
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		t0 := time.Now()
		res, err := c.Time(ctx, &hourglassv1.TimeRequest{})
		t1 := time.Now()
		cancel()
		if err != nil {
			return fmt.Errorf("crashtest: Time: %w", err)
		}
		rtt := t1.Sub(t0)
		if best < 0 || rtt < best {
			best = rtt
			skew = res.Now.AsTime().Sub(t0.Add(rtt / 2))
		}
	}
	r.skew = max(r.skew, skew.Abs())
	r.skewBound = max(r.skewBound, skew.Abs()+best/2)
	return nil
}

func (r *runner) run(ctx context.Context) error {
	if err := os.MkdirAll(r.work, 0o755); err != nil {
		return err
	}
	seg := r.cfg.SegmentDuration
	// Reserve time for the drain: the farthest delivery time is about 6
	// segment durations after the last Schedule, plus nack delays.
	reserve := 8*seg + r.cfg.DrainGrace
	for cycle := 1; cycle <= r.cfg.Cycles; cycle++ {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < reserve+4*seg {
			r.progress("stopping after %d cycles: --duration leaves only the drain's time", cycle-1)
			break
		}
		if err := r.ensureServer(ctx, cycle); err != nil {
			return err
		}
		r.sum.Cycles = cycle
		if err := r.cycle(ctx, cycle); err != nil {
			return err
		}
	}
	if err := r.ensureServer(ctx, r.cfg.Cycles+1); err != nil {
		return err
	}
	return r.drain(ctx)
}

// ensureServer starts the server unless it runs. Under --damage it then
// sends keyed Schedules again (checkKeys) and, before the second cycle,
// seals a commitlog segment (fillSealed).
func (r *runner) ensureServer(ctx context.Context, cycle int) error {
	if r.srv != nil {
		return nil
	}
	if err := r.startServer(cycle); err != nil || r.dmg == nil {
		return err
	}
	r.checkKeys(ctx, cycle)
	if cycle == 2 {
		return r.fillSealed(ctx, cycle)
	}
	return nil
}

// cycle loads the server, stops it at a random moment and damages it if
// asked; the next cycle (or the drain) restarts it. Its error is the
// harness's (no gRPC client).
func (r *runner) cycle(ctx context.Context, cycle int) error {
	seg := r.cfg.SegmentDuration
	lead := seg / 6 // the server's default --preload-lead for short segments
	// Producers share one HTTP/2 connection and consumers another: a kill
	// lands with many gRPC calls and streams of one connection in flight,
	// besides the Connect calls on their HTTP/1.1 connections.
	var conns [2]*grpc.ClientConn
	var prod, cons lanes
	var err error
	for i, l := range []*lanes{&prod, &cons} {
		if *l, conns[i], err = r.wl.dialLanes(r.srv.addr); err != nil {
			r.srv.kill()
			return fmt.Errorf("crashtest: a gRPC client of %s: %w", r.srv.addr, err)
		}
		defer conns[i].Close()
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	for i := range r.cfg.Producers {
		rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(cycle)<<16|uint64(i)))
		wg.Go(func() { r.wl.produce(wctx, prod, cycle, i, rng) })
	}
	for i := range r.cfg.Consumers {
		rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(cycle)<<16|0x8000|uint64(i)))
		wg.Go(func() { r.wl.consume(wctx, cons, cycle, i, rng, false) })
	}
	r.wl.operators(wctx, &wg, prod, cycle)
	r.wl.startSide(wctx, &wg, prod, cons, cycle)

	// When to stop: anywhere, or aimed at a bucket boundary (rotation,
	// firing of everything scheduled on the edge, retention of the bucket
	// before) or at a preload (lead before a boundary), at the firing of
	// the recurring schedules' occurrences (whole seconds: handed over up
	// to HandoffLead early, their next occurrence armed a few ms later),
	// or in the middle of a ScheduleStream burst (killBurst).
	now := time.Now()
	segMs := seg.Milliseconds()
	min := now.Add(seg / 2)
	nextEdge := func(from time.Time) time.Time {
		return time.UnixMilli((from.UnixMilli()/segMs + 1) * segMs)
	}
	var when time.Time
	moment := ""
	jitter := time.Duration(r.rng.IntN(61)-30) * time.Millisecond
	switch k := r.rng.IntN(10); {
	case k < 3:
		moment = "anywhere"
		when = min.Add(time.Duration(r.rng.Int64N(int64(2 * seg))))
	case k < 6:
		moment = "bucket-boundary"
		when = nextEdge(min.Add(time.Duration(r.rng.Int64N(int64(seg))))).Add(jitter)
	case k < 8:
		moment = "preload"
		when = nextEdge(min.Add(lead).Add(time.Duration(r.rng.Int64N(int64(seg))))).Add(-lead + jitter)
	case k < 9:
		moment = "occurrence"
		when = min.Add(time.Duration(r.rng.Int64N(int64(2 * seg)))).Truncate(time.Second).Add(time.Second)
		when = when.Add(time.Duration(r.rng.IntN(31)-25) * time.Millisecond)
	default:
		moment = "in-stream"
		when = min.Add(time.Duration(r.rng.Int64N(int64(2 * seg))))
	}
	term := r.rng.IntN(5) == 0
	sleep(ctx, time.Until(when))
	r.sum.KillMoments[moment]++
	sig := "SIGKILL"
	stopServer := func() {
		if term {
			r.sum.Terms++
			if err := r.srv.terminate(20 * time.Second); err != nil {
				r.extra = append(r.extra, Violation{Kind: VUncleanStop, Cycle: cycle, At: time.Now(), Detail: err.Error()})
			}
		} else {
			r.sum.Kills++
			r.srv.kill()
		}
	}
	if term {
		sig = "SIGTERM"
	}
	if moment == "in-stream" {
		// Its own generator: the runner's draws stay the same whatever
		// the stream answers.
		brng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(cycle)<<16|0x4000))
		r.wl.killBurst(wctx, prod, cycle, r.cfg.Producers, brng, stopServer)
	} else {
		stopServer()
	}
	r.wl.sideStopped()
	ranLog := r.srv.logText()
	r.srv = nil
	stop()
	wg.Wait()
	if err := r.answerHolds(cycle+1, ranLog); err != nil {
		return err
	}
	cuts := ""
	switch {
	case r.cfg.CorruptTail && !term:
		cuts = r.corrupt(cycle)
	case r.dmg != nil:
		cuts = r.damage(cycle)
	}
	ev := r.hist.Snapshot()
	r.progress("cycle %d/%d: %s at %s (%s)%s; %d scheduled, %d deliveries so far",
		cycle, r.cfg.Cycles, sig, time.Since(now).Round(time.Millisecond), moment, cuts, len(ev.Schedules), len(ev.Deliveries))
	return nil
}

// corrupt damages the active files after a SIGKILL.
func (r *runner) corrupt(cycle int) string {
	targets, err := findTargets(r.dataDir)
	if err != nil {
		r.progress("cycle %d: listing the data directory: %v", cycle, err)
		return ""
	}
	var done []string
	for i, tg := range targets {
		if i > 0 && r.rng.IntN(2) == 0 { // the engine's commitlog always, the rest by chance
			continue
		}
		c, err := damage(tg, r.rng, r.cfg.Fsync != "always")
		if err != nil {
			r.progress("cycle %d: damaging %s: %v", cycle, tg.path, err)
			continue
		}
		if c.Mode == "" {
			continue
		}
		c.Cycle, c.At = cycle, time.Now()
		r.hist.AddCut(c)
		r.sum.Cuts++
		r.sum.CutBytes += c.Bytes
		r.sum.CutsByMode[c.Mode]++
		if tg.prealloc && c.Torn {
			r.mustReport = append(r.mustReport, tg.path)
		}
		rel, _ := filepath.Rel(r.dataDir, tg.path)
		done = append(done, fmt.Sprintf("%s %s %dB", c.Mode, rel, c.Bytes))
	}
	if len(done) == 0 {
		return ""
	}
	return "; " + strings.Join(done, ", ")
}

// drain restarts nothing: it runs consumers that ack everything until
// every acknowledged message is delivered and acked, or the deadline.
func (r *runner) drain(ctx context.Context) error {
	if r.srv == nil {
		return errors.New("crashtest: no server to drain")
	}
	t0 := time.Now()
	cons, conn, err := r.wl.dialLanes(r.srv.addr)
	if err != nil {
		r.srv.kill()
		return fmt.Errorf("crashtest: a gRPC client of %s: %w", r.srv.addr, err)
	}
	defer func() { conn.Close() }()
	if r.dmg != nil {
		r.resumeLost()
	}
	r.wl.settleOperations(ctx, cons)
	r.hist.SetDrainFrom(time.Now())
	last := lastDue(r.hist.Snapshot())
	// The grace counts from the later of the last due time and now: the
	// restarts and repairs before the drain may have taken longer than it.
	deadline := laterOf(last, time.Now()).Add(r.cfg.SegmentDuration + r.cfg.DrainGrace)
	r.progress("draining: last delivery time in %v, deadline in %v", time.Until(last).Round(time.Millisecond), time.Until(deadline).Round(time.Millisecond))
	complete := false
	for {
		if !r.drainRun(ctx, cons, last, deadline, &complete) {
			break
		}
		// The server held messages back and asked for hourglass repair:
		// stop it, answer as an operator does, start it again and go on
		// draining; the deadline moves by the time that took.
		t1 := time.Now()
		ranLog := r.srv.logText()
		if err := r.srv.terminate(20 * time.Second); err != nil {
			r.extra = append(r.extra, Violation{Kind: VUncleanStop, Cycle: r.cfg.Cycles + 1, At: time.Now(), Detail: "stop for a repair: " + err.Error()})
		}
		r.wl.sideStopped()
		r.srv = nil
		conn.Close()
		if err := r.answerHolds(r.cfg.Cycles+1, ranLog); err != nil {
			return err
		}
		if err := r.startPlain(r.cfg.Cycles + 1); err != nil {
			return err
		}
		if cons, conn, err = r.wl.dialLanes(r.srv.addr); err != nil {
			r.srv.kill()
			return fmt.Errorf("crashtest: a gRPC client of %s: %w", r.srv.addr, err)
		}
		deadline = deadline.Add(time.Since(t1))
	}
	r.sum.DrainComplete = complete
	r.sum.DrainMs = ms(time.Since(t0))
	if err := r.srv.terminate(20 * time.Second); err != nil {
		r.extra = append(r.extra, Violation{Kind: VUncleanStop, Cycle: r.cfg.Cycles + 1, At: time.Now(), Detail: "final stop: " + err.Error()})
	}
	return nil
}

// lastDue is the latest time a message of ev may be due: the latest
// NotBefore of a Schedule or of a Reschedule not refused.
func lastDue(ev Events) time.Time {
	var last time.Time
	for _, s := range ev.Schedules {
		if s.NotBefore.After(last) {
			last = s.NotBefore
		}
	}
	for _, x := range ev.Reschedules {
		if x.Outcome != Rejected && x.NotBefore.After(last) {
			last = x.NotBefore
		}
	}
	return last
}

// drainRun runs the drain's consumers on one server until every
// acknowledged message is delivered and acked (it sets *complete), the
// deadline, or (held) the server holds messages back for an operator.
func (r *runner) drainRun(ctx context.Context, cons lanes, last, deadline time.Time, complete *bool) (held bool) {
	dctx, stop := context.WithDeadline(ctx, deadline)
	defer stop()
	var wg sync.WaitGroup
	for i := range r.cfg.Consumers {
		rng := rand.New(rand.NewPCG(r.cfg.Seed, 0xd0000|uint64(i)))
		wg.Go(func() { r.wl.consume(dctx, cons, r.cfg.Cycles+1, i, rng, true) })
	}
	last = r.wl.drainSide(dctx, &wg, cons, last)
	defer wg.Wait()
	defer stop()
	for dctx.Err() == nil {
		sleep(dctx, 250*time.Millisecond)
		if r.dmg != nil && len(holdRequests(r.srv.logText())) > 0 {
			return true
		}
		if time.Now().Before(last) {
			continue
		}
		ev := r.hist.Snapshot()
		res := Check(ev, r.checkParams())
		if r.owed(ev, res) == 0 && r.wl.sideOwed(r.skewBound) == 0 {
			*complete = true
			r.hist.SetDrainEnd(time.Now())
			// A short quiet period lets late duplicates show themselves.
			sleep(dctx, time.Second)
			return false
		}
	}
	return false
}

func (r *runner) finish(start time.Time) {
	ev := r.hist.Snapshot()
	res := Check(ev, r.checkParams())
	if r.sum.Cluster != nil {
		r.finishCluster(ev, res)
	}
	if r.dmg != nil {
		r.extra = append(r.extra, r.finishDamage(ev, res.Violations)...)
	}
	s := r.sum
	s.Counts = res.Counts
	all := append(res.Violations, r.extra...)
	all = append(all, r.wl.sideVerdict(r.skewBound, r.progress)...)
	slices.SortStableFunc(all, func(a, b Violation) int { return a.At.Compare(b.At) })
	// A restart that failed ends the run: the messages it strands are
	// reported as lost too, but the failed start is what to look at first.
	if i := slices.IndexFunc(all, func(v Violation) bool { return v.Kind == VStartFailed }); i > 0 {
		v := all[i]
		all = slices.Insert(slices.Delete(all, i, i+1), 0, v)
	}
	counting := 0
	for i, v := range all {
		if slices.Contains(r.cfg.Allow, v.Kind) {
			all[i].Allowed = true
		} else if v.counts(r.cfg.Fsync) {
			counting++
		}
	}
	if r.dmg != nil {
		noTarget := s.Damage.NoTarget
		scheds := map[string]*Schedule{}
		for i := range ev.Schedules {
			scheds[ev.Schedules[i].Key] = &ev.Schedules[i]
		}
		s.Damage = summarizeDamage(r.dmg.events, all, r.cfg.Fsync, r.dmg.repair == 1, scheds, r.cfg.SegmentDuration)
		s.Damage.NoTarget, s.Damage.Keys = noTarget, r.dmg.keys
	}
	s.ViolationCount = len(all)
	s.ViolationsByKind = map[string]int{}
	for _, v := range all {
		s.ViolationsByKind[v.Kind]++
	}
	s.Failed = counting > 0
	s.Violations = all[:min(len(all), 50)]
	if len(r.recoveries) > 0 {
		d := slices.Clone(r.recoveries)
		slices.Sort(d)
		s.RecoveryMedian, s.RecoveryMax = ms(d[len(d)/2]), ms(d[len(d)-1])
	}
	s.Restarts = len(r.recoveries)
	s.SkewMs, s.SkewBoundMs = ms(r.skew), ms(r.skewBound)
	s.Ops = r.wl.ops.snapshot()
	s.Operations = r.wl.operating.names()
	s.WallSeconds = time.Since(start).Seconds()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// FirstViolation returns the earliest violation that fails the run.
func (s *Summary) FirstViolation() (Violation, bool) {
	for _, v := range s.Violations {
		if v.counts(s.Fsync) {
			return v, true
		}
	}
	return Violation{}, false
}
