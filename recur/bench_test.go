package recur

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

var (
	benchSchedules = flag.Int("schedules", 1_000_000, "schedules BenchmarkSchedules creates")
	benchHot       = flag.Int("hot", 100_000, "of them, how many fire in the same second")
)

// latencySink records how late each occurrence reached it.
type latencySink struct {
	mu   sync.Mutex
	late []time.Duration
	n    atomic.Int64
}

func (s *latencySink) Deliver(_ context.Context, _ string, batch []engine.Delivery) error {
	now := time.Now()
	s.mu.Lock()
	for _, d := range batch {
		at, err := time.Parse(time.RFC3339Nano, message.HeaderValue(d.Message.Headers, OccurrenceHeader))
		if err == nil {
			s.late = append(s.late, now.Sub(at))
		}
	}
	s.mu.Unlock()
	s.n.Add(int64(len(batch)))
	return nil
}

// BenchmarkSchedules creates -schedules recurring schedules (@every 1h,
// and -hot of them on a cron spec that fires them all in one second about
// a minute ahead), restarts the engine, and reports: the heap after the
// restart, the restart's time to ready, and how late the hot second's
// occurrences reached the sink (p50, p99, max) and how long they took to
// drain. Run it alone: go test ./recur -run '^$' -bench BenchmarkSchedules -benchtime 1x
func BenchmarkSchedules(b *testing.B) {
	for b.Loop() {
		benchSchedulesOnce(b, *benchSchedules, *benchHot)
	}
}

func benchSchedulesOnce(b *testing.B, total, hot int) {
	dir := b.TempDir()
	quiet := slog.New(slog.DiscardHandler)
	out := &latencySink{}
	open := func() (*engine.Engine, *Scheduler) {
		sch := New(out, quiet, time.Now())
		eng, err := engine.Open(engine.Options{Dir: dir, Sink: sch, Fsync: commitlog.SyncInterval, PreloadLead: 2 * time.Minute,
			Logger: quiet, SinkBatch: 4096})
		if err != nil {
			b.Fatal(err)
		}
		sch.Attach(eng)
		<-eng.Ready()
		return eng, sch
	}
	eng, sch := open()
	created := time.Now()
	create := func(from, to int, spec string) {
		var next atomic.Int64
		next.Store(int64(from))
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= to {
						return
					}
					if _, err := sch.Create(context.Background(), &Def{Name: fmt.Sprintf("s%07d", i), Topic: "t", Spec: spec}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	create(hot, total, "@every 1h")
	// The hot second: a minute ahead, on a whole second.
	fire := time.Now().Add(60 * time.Second).Truncate(time.Second)
	create(0, hot, fmt.Sprintf("%d %d * * * *", fire.Second(), fire.Minute()))
	createTook := time.Since(created)
	if err := eng.Close(); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	t0 := time.Now()
	eng, _ = open()
	readyTook := time.Since(t0)
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if time.Now().After(fire) {
		b.Fatalf("creating %d schedules took %v: past the hot second", total, createTook)
	}
	deadline := fire.Add(2 * time.Minute)
	for out.n.Load() < int64(hot) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	drained := time.Since(fire)
	eng.Close()
	out.mu.Lock()
	late := slices.Clone(out.late)
	out.mu.Unlock()
	if len(late) < hot {
		b.Fatalf("%d of %d hot occurrences delivered", len(late), hot)
	}
	slices.Sort(late)
	q := func(p float64) float64 { return float64(late[min(len(late)-1, int(p*float64(len(late))))]) / 1e6 }
	b.ReportMetric(float64(total)/createTook.Seconds(), "creates/s")
	b.ReportMetric(float64(readyTook)/1e6, "restart-ready-ms")
	b.ReportMetric(float64(after.HeapAlloc)/(1<<20), "heap-after-restart-MiB")
	b.ReportMetric(q(0.5), "hot-lateness-p50-ms")
	b.ReportMetric(q(0.99), "hot-lateness-p99-ms")
	b.ReportMetric(float64(late[len(late)-1])/1e6, "hot-lateness-max-ms")
	b.ReportMetric(float64(drained)/1e6, "hot-drain-ms")
}
