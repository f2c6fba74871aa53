package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/message"
)

// BenchmarkReschedule measures Reschedule: b.N messages of 256 bytes in a
// bucket an hour ahead (not loaded), each moved another hour ahead by one
// of 64 goroutines, under --fsync always (each answer waits for the fsync
// that covers its record; concurrent ones share it). It reports
// reschedules/s; the limit to compare with is the disk's group-committed
// fsync rate.
func BenchmarkReschedule(b *testing.B) {
	e, err := Open(Options{Dir: b.TempDir(), Sink: SinkFunc(func(context.Context, string, []Delivery) error { return nil }),
		Fsync: commitlog.SyncAlways})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	<-e.Ready()
	body := make([]byte, 256)
	ids := make([]message.ID, 0, b.N)
	for len(ids) < b.N {
		reqs := make([]Request, min(1000, b.N-len(ids)))
		for i := range reqs {
			reqs[i] = Request{Topic: "bench", Body: body, Delay: time.Hour}
		}
		got, err := e.ScheduleBatch(context.Background(), reqs)
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, got...)
	}
	if err := e.WaitRouted(context.Background()); err != nil {
		b.Fatal(err)
	}
	at := time.Now().Add(2 * time.Hour)
	var next atomic.Int64
	var failed atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(ids)) {
					return
				}
				if r, _, err := e.Reschedule(context.Background(), ids[i], at); err != nil || r != Rescheduled {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d reschedules failed", n, len(ids))
	}
	b.ReportMetric(float64(len(ids))/time.Since(start).Seconds(), "reschedules/s")
}
