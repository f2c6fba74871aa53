package cluster

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/internal/natstest"
	"github.com/hourglassmq/hourglass/message"
)

var (
	compactPending = flag.Int("compact-pending", 100_000, "pending messages of the partition BenchmarkCompaction compacts (10000000 for issue 25)")
	compactTimeout = flag.Duration("compact-timeout", 30*time.Minute, "BenchmarkCompaction: the longest wait for each of its phases (filling, draining, the compaction)")
	compactProfile = flag.String("compact-heapprofile", "", "BenchmarkCompaction: write heap profiles of the live heap to this path + .before, .copied (the compaction stored its copies; the GC it takes lengthens the compaction) and .after")
)

// Sizes of BenchmarkCompaction's load.
const (
	benchBody       = 64                    // bytes of every message's body
	benchBatch      = 1000                  // messages per ScheduleBatch while filling
	benchFillers    = 4                     // concurrent ScheduleBatch callers while filling
	benchProbeBatch = 100                   // messages per ScheduleBatch of the producer that runs through the compaction
	benchProbeEvery = 20 * time.Millisecond // its pace: at most 5,000 messages a second
	benchTimed      = 6000                  // messages in the local engine, due one after the other through the compaction
	benchBaseline   = 5 * time.Second       // the producer's run before the compaction may start
	benchAhead      = 100_000               // due messages scheduled and not yet delivered, at most
)

// benchSink counts bulk deliveries and notes when each probe and timed
// message reached it.
type benchSink struct {
	bulk  atomic.Int64
	mu    sync.Mutex
	probe []lateness // guarded by mu
	timed []lateness // guarded by mu
}

type lateness struct {
	due  time.Time     // the message's deliverAt
	late time.Duration // how long after it the sink got it
}

func (s *benchSink) Deliver(_ context.Context, topic string, b []engine.Delivery) error {
	now := time.Now()
	var into *[]lateness
	switch topic {
	case "probe":
		into = &s.probe
	case "timed":
		into = &s.timed
	default:
		s.bulk.Add(int64(len(b)))
		return nil
	}
	s.mu.Lock()
	for _, d := range b {
		due := time.UnixMilli(d.Message.DeliverAt)
		*into = append(*into, lateness{due: due, late: now.Sub(due)})
	}
	s.mu.Unlock()
	return nil
}

// lockedWriter lets the benchmark read the node's log while it writes.
type lockedWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func (w *lockedWriter) lines(substr string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for l := range strings.Lines(w.buf.String()) {
		if strings.Contains(l, substr) {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out
}

// memSample is the process's memory at one instant.
type memSample struct {
	at      time.Time
	objects uint64 // heap bytes in objects, live or not yet swept
	live    uint64 // the live heap as of the last GC
	rss     uint64
}

// sampleMem samples the memory every 20 ms until stop is closed.
func sampleMem(stop <-chan struct{}) <-chan []memSample {
	out := make(chan []memSample, 1)
	go func() {
		ms := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}
		var samples []memSample
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(ms)
			samples = append(samples, memSample{at: time.Now(), objects: ms[0].Value.Uint64(), live: ms[1].Value.Uint64(), rss: rss()})
			select {
			case <-stop:
				out <- samples
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// rss is the process's resident set in bytes, 0 where /proc does not say.
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	var size, res uint64
	if _, err := fmt.Sscan(string(b), &size, &res); err != nil {
		return 0
	}
	return res * uint64(os.Getpagesize())
}

// heapProfile writes a profile of the live heap to -compact-heapprofile
// + "." + name, if that flag is set.
func heapProfile(name string) error {
	if *compactProfile == "" {
		return nil
	}
	runtime.GC()
	f, err := os.Create(*compactProfile + "." + name)
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// quantiles returns the p50, p99 and max of ds (zeros if empty).
func quantiles(ds []time.Duration) (p50, p99, mx time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	q := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return q(0.5), q(0.99), ds[len(ds)-1]
}

// BenchmarkCompaction measures one compaction of a partition holding
// -compact-pending messages, started by the owner's own trigger (consumed
// > 2 × pending + the default margin, checked after each consumed batch):
// one node, one partition, an in-process nats-server with file storage
// (R1). It schedules the pending messages (64-byte bodies, due a day
// ahead, in ScheduleBatch calls of 1,000), then as many due at once as
// it takes to pass the trigger, waits until those are delivered (a
// counting sink), and schedules 6,000 messages due one after the other
// over -compact-timeout. Then a producer sends ScheduleBatch calls of 100
// messages due at once every 20 ms, for 5 s with the compaction held back
// (the test hook allowCompact: the baseline), and on through the
// compaction, which keeps no recent intake (hook keepRecent = 0, where
// production keeps the idempotency window + 30 s).
//
// It reports the compaction's time, the heap (live before and after, the
// peak during it; the nats-server shares the process), the intake and
// done streams before and after, the producer's ScheduleBatch latency
// before and during it, and how late due messages reached the sink during
// it: the producer's (consumption stops during a compaction) and the
// timed ones (already in the local engine).
//
//	go test ./cluster -run '^$' -bench BenchmarkCompaction -benchtime 1x -compact-pending 100000
func BenchmarkCompaction(b *testing.B) {
	for range b.N {
		benchCompaction(b, *compactPending, *compactTimeout)
	}
}

func benchCompaction(b *testing.B, pending int, timeout time.Duration) {
	ns := natstest.Start(b)
	sink := &benchSink{}
	logs := &lockedWriter{}
	var allow atomic.Bool
	var js jetstream.JetStream
	var inBefore, doneBefore jetstream.StreamState // set by allowCompact before started
	var started atomic.Int64                       // unix ns when the compaction started
	var none time.Duration
	hooks := &testHooks{
		keepRecent: &none,
		allowCompact: func() bool {
			if !allow.Load() {
				return false
			}
			if started.Load() == 0 {
				// The streams as the compaction finds them (this runs on
				// the consuming goroutine, just before it starts).
				inBefore, doneBefore = streamState(b, js, inStream(0)), streamState(b, js, doneStream(0))
				started.Store(time.Now().UnixNano())
			}
			return true
		},
		compactStage: func(_ int, stage string) error {
			if stage == "copied" {
				return heapProfile("copied")
			}
			return nil
		},
	}
	ctx := context.Background()
	n, err := Open(ctx, Options{IdempotencyWindow: 10 * time.Minute, URL: ns.ClientURL(), NodeID: "a", Advertise: "http://127.0.0.1:1", Partitions: 1, Replicas: 1,
		DataDir: b.TempDir(), Sink: sink, Logger: slog.New(slog.NewTextHandler(logs, nil)), hooks: hooks})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	deadline := time.Now().Add(10 * time.Second)
	for len(n.Owned()) != 1 {
		if time.Now().After(deadline) {
			b.Fatal("the node never owned the partition")
		}
		time.Sleep(10 * time.Millisecond)
	}
	js = jsConnect(b, ns.ClientURL())
	body := bytes.Repeat([]byte{'x'}, benchBody)

	// fill schedules total messages of topic in batches of benchBatch
	// from benchFillers goroutines, message i due at(i), keeping at most
	// ahead messages scheduled beyond those the sink got (0: no bound).
	fill := func(topic string, total int, at func(i int) time.Time, ahead int) time.Duration {
		start := time.Now()
		stop := start.Add(timeout)
		var next atomic.Int64
		var wg sync.WaitGroup
		for range benchFillers {
			wg.Go(func() {
				reqs := make([]engine.Request, 0, benchBatch)
				for {
					from := int(next.Add(benchBatch)) - benchBatch
					if from >= total || time.Now().After(stop) {
						return
					}
					for ahead > 0 && from-int(sink.bulk.Load()) > ahead && time.Now().Before(stop) {
						time.Sleep(5 * time.Millisecond)
					}
					reqs = reqs[:0]
					for i := from; i < min(from+benchBatch, total); i++ {
						reqs = append(reqs, engine.Request{Topic: topic, Body: body, At: at(i)})
					}
					if _, err := n.ScheduleBatch(ctx, reqs); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if b.Failed() || time.Since(start) > timeout {
			b.Fatalf("filling %d %s messages: failed or over %v", total, topic, timeout)
		}
		return time.Since(start)
	}

	// 1. The pending messages, due over an hour a day ahead.
	far := time.Now().Add(24 * time.Hour)
	farTook := fill("far", pending, func(i int) time.Time { return far.Add(time.Duration(i) * time.Hour / time.Duration(pending)) }, 0)
	// 2. Enough messages due at once to pass the trigger once they are
	// delivered: consumed (pending + due) > 2 × (pending + timed) + margin.
	// At most benchAhead of them undelivered at a time, so that the owner's
	// taken set (whose map never shrinks) is not sized for twice the pending.
	due := pending + DefaultCompactMargin + 2*benchTimed + 2*benchBatch
	now := time.Now()
	dueTook := fill("bulk", due, func(int) time.Time { return now }, benchAhead)
	deadline = time.Now().Add(timeout)
	for sink.bulk.Load() < int64(due) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d due messages delivered after %v", sink.bulk.Load(), due, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	drained := time.Since(now)
	// 3. Messages in the local engine, due one after the other from the
	// baseline on.
	timedFrom := time.Now().Add(time.Second)
	every := timeout / benchTimed
	for i := 0; i < benchTimed; i += benchBatch {
		reqs := make([]engine.Request, 0, benchBatch)
		for j := i; j < min(i+benchBatch, benchTimed); j++ {
			reqs = append(reqs, engine.Request{Topic: "timed", Body: body, At: timedFrom.Add(time.Duration(j) * every)})
		}
		if _, err := n.ScheduleBatch(ctx, reqs); err != nil {
			b.Fatal(err)
		}
	}
	deadline = time.Now().Add(timeout)
	for {
		pt := n.partition(0)
		pt.mu.Lock()
		taken := len(pt.mu.taken)
		pt.mu.Unlock()
		if taken >= pending+benchTimed-1 { // the first timed one may be delivered already
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d messages taken after %v; want %d", taken, timeout, pending+benchTimed)
		}
		time.Sleep(10 * time.Millisecond)
	}

	heapBefore := liveHeap()
	if err := heapProfile("before"); err != nil {
		b.Fatal(err)
	}
	stopMem := make(chan struct{})
	memOut := sampleMem(stopMem)

	// 4. The producer, through the baseline and the compaction.
	type call struct {
		at   time.Time
		took time.Duration
	}
	var calls []call
	var probed atomic.Int64
	var lastProbe atomic.Value // message.ID: the last message the producer scheduled
	stopProbe := make(chan struct{})
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		t := time.NewTicker(benchProbeEvery)
		defer t.Stop()
		reqs := make([]engine.Request, benchProbeBatch)
		for i := range reqs {
			reqs[i] = engine.Request{Topic: "probe", Body: body}
		}
		end := time.Now().Add(2 * timeout)
		for time.Now().Before(end) {
			select {
			case <-stopProbe:
				return
			case <-t.C:
			}
			at := time.Now()
			ids, err := n.ScheduleBatch(ctx, reqs)
			if err != nil {
				b.Error(err)
				return
			}
			calls = append(calls, call{at, time.Since(at)})
			lastProbe.Store(ids[len(ids)-1])
			probed.Add(benchProbeBatch)
		}
	}()
	time.Sleep(benchBaseline) // the baseline: the producer runs, the compaction is held back
	// A Get of the producer's last message every half second from here
	// on: its owner first reads the intake stream up to it.
	type get struct {
		at   time.Time
		took time.Duration
		err  error
	}
	var gets []get
	stopGets := make(chan struct{})
	getsDone := make(chan struct{})
	go func() {
		defer close(getsDone)
		for range int(2 * timeout / (500 * time.Millisecond)) {
			at := time.Now()
			_, _, err := n.Get(ctx, lastProbe.Load().(message.ID), false)
			gets = append(gets, get{at, time.Since(at), err})
			select {
			case <-stopGets:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	allowedAt := time.Now()
	allow.Store(true)
	deadline = time.Now().Add(timeout)
	for len(compactions(n)) == 0 {
		if time.Now().After(deadline) {
			b.Fatalf("no compaction %v after it was allowed; the log: %q", timeout, logs.lines("compact"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	inAfter := streamState(b, js, inStream(0))
	doneAfter := streamState(b, js, doneStream(0))
	cs := compactions(n)[0]
	start := time.Unix(0, started.Load())
	end := start.Add(cs.Took)
	time.Sleep(3 * time.Second) // the producer after it
	close(stopProbe)
	<-probeDone
	close(stopGets)
	<-getsDone
	close(stopMem)
	mem := <-memOut
	deadline = time.Now().Add(timeout)
	for {
		sink.mu.Lock()
		got := len(sink.probe)
		sink.mu.Unlock()
		if int64(got) >= probed.Load() {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d producer messages delivered %v after it stopped", got, probed.Load(), timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	heapAfter := liveHeap()
	if err := heapProfile("after"); err != nil {
		b.Fatal(err)
	}

	// Split what was measured into before the compaction (the baseline,
	// from the producer's start to the compaction's) and during it.
	var schedBefore, schedDuring []time.Duration
	for _, c := range calls {
		switch {
		case c.at.Before(start):
			schedBefore = append(schedBefore, c.took)
		case c.at.Before(end):
			schedDuring = append(schedDuring, c.took)
		}
	}
	var getDuring []time.Duration
	getFailed := 0
	for _, g := range gets {
		if !g.at.Before(start) && g.at.Before(end) {
			getDuring = append(getDuring, g.took)
			if g.err != nil {
				getFailed++
			}
		}
	}
	split := func(ls []lateness) (before, during []time.Duration) {
		for _, l := range ls {
			switch {
			case l.due.Before(start):
				before = append(before, l.late)
			case l.due.Before(end):
				during = append(during, l.late)
			}
		}
		return before, during
	}
	sink.mu.Lock()
	probeBefore, probeDuring := split(sink.probe)
	timedBefore, timedDuring := split(sink.timed)
	sink.mu.Unlock()
	var peak, livePeak, rssPeak uint64
	for _, s := range mem {
		if !s.at.Before(start) && !s.at.After(end) {
			peak, livePeak, rssPeak = max(peak, s.objects), max(livePeak, s.live), max(rssPeak, s.rss)
		}
	}

	const mib = 1 << 20
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	b.Logf("pending %d: filled in %v (%.0f msgs/s); %d due at once filled in %v (%.0f msgs/s, at most %d undelivered), delivered %v after the first",
		pending, farTook.Round(time.Millisecond), float64(pending)/farTook.Seconds(), due, dueTook.Round(time.Millisecond), float64(due)/dueTook.Seconds(), benchAhead, drained.Round(time.Millisecond))
	b.Logf("compaction %+v; started %v after it was allowed", cs, start.Sub(allowedAt).Round(time.Millisecond))
	for _, l := range logs.lines("compact") {
		b.Log(l)
	}
	b.Logf("intake stream: %d msgs %d B when it started, %d msgs %d B just after; done stream: %d msgs %d B before, %d msgs %d B after",
		inBefore.Msgs, inBefore.Bytes, inAfter.Msgs, inAfter.Bytes, doneBefore.Msgs, doneBefore.Bytes, doneAfter.Msgs, doneAfter.Bytes)
	b.Logf("heap: live %.1f MiB before, %.1f MiB after; during: objects peak %.1f MiB, live peak %.1f MiB, RSS peak %.1f MiB (%d samples)",
		float64(heapBefore)/mib, float64(heapAfter)/mib, float64(peak)/mib, float64(livePeak)/mib, float64(rssPeak)/mib, len(mem))
	for _, row := range []struct {
		name         string
		before, durg []time.Duration
	}{{"ScheduleBatch of 100", schedBefore, schedDuring}, {"producer's due messages, lateness", probeBefore, probeDuring}, {"timed messages, lateness", timedBefore, timedDuring}} {
		p50b, p99b, maxb := quantiles(row.before)
		p50d, p99d, maxd := quantiles(row.durg)
		b.Logf("%s: before (%d) p50 %v p99 %v max %v; during (%d) p50 %v p99 %v max %v", row.name,
			len(row.before), p50b, p99b, maxb, len(row.durg), p50d, p99d, maxd)
	}

	_, _, mx := quantiles(getDuring)
	b.Logf("Get of the producer's last message during it: %d calls, %d failed, the longest %v", len(getDuring), getFailed, mx)
	for _, g := range gets {
		if g.err != nil && !g.at.Before(start) && g.at.Before(end) {
			b.Logf("a failed Get: %v", g.err)
			break
		}
	}

	b.ReportMetric(float64(pending), "pending")
	b.ReportMetric(cs.Took.Seconds(), "compact-s")
	b.ReportMetric(float64(cs.Copied), "copied")
	b.ReportMetric(float64(inBefore.Msgs), "in-msgs-before")
	b.ReportMetric(float64(inAfter.Msgs), "in-msgs-after")
	b.ReportMetric(float64(inBefore.Bytes)/mib, "in-MiB-before")
	b.ReportMetric(float64(inAfter.Bytes)/mib, "in-MiB-after")
	b.ReportMetric(float64(doneBefore.Msgs), "done-msgs-before")
	b.ReportMetric(float64(doneAfter.Msgs), "done-msgs-after")
	b.ReportMetric(float64(doneBefore.Bytes)/mib, "done-MiB-before")
	b.ReportMetric(float64(doneAfter.Bytes)/mib, "done-MiB-after")
	b.ReportMetric(float64(heapBefore)/mib, "heap-live-before-MiB")
	b.ReportMetric(float64(livePeak)/mib, "heap-live-peak-MiB")
	b.ReportMetric(float64(peak)/mib, "heap-peak-MiB")
	b.ReportMetric(float64(heapAfter)/mib, "heap-live-after-MiB")
	b.ReportMetric(float64(rssPeak)/mib, "rss-peak-MiB")
	b.ReportMetric(float64(getFailed), "get-during-failed")
	b.ReportMetric(ms(mx), "get-during-max-ms")
	p50, p99, mx := quantiles(schedBefore)
	b.ReportMetric(ms(p50), "sched-before-p50-ms")
	b.ReportMetric(ms(p99), "sched-before-p99-ms")
	b.ReportMetric(ms(mx), "sched-before-max-ms")
	p50, p99, mx = quantiles(schedDuring)
	b.ReportMetric(ms(p50), "sched-during-p50-ms")
	b.ReportMetric(ms(p99), "sched-during-p99-ms")
	b.ReportMetric(ms(mx), "sched-during-max-ms")
	_, p99, mx = quantiles(probeBefore)
	b.ReportMetric(ms(p99), "late-before-p99-ms")
	b.ReportMetric(ms(mx), "late-before-max-ms")
	p50, _, mx = quantiles(probeDuring)
	b.ReportMetric(ms(p50), "held-p50-ms")
	b.ReportMetric(ms(mx), "held-max-ms")
	_, _, mx = quantiles(timedDuring)
	b.ReportMetric(ms(mx), "timed-late-during-max-ms")
}
