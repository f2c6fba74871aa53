package dispatchlog

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkAppendSync measures durable done-records with real fsyncs, from
// one goroutine (one fsync per record: the disk's fsync rate is the limit)
// and from 64 (group commit: one fsync covers every record appended while
// the previous one ran, so fsyncs/op falls well below 1). It reports
// fsyncs per record and records per second.
func BenchmarkAppendSync(b *testing.B) {
	for _, goroutines := range []int{1, 64} {
		b.Run(fmt.Sprintf("goroutines=%d", goroutines), func(b *testing.B) {
			var fsyncs atomic.Int64
			count := func(f *os.File) error { fsyncs.Add(1); return f.Sync() }
			w, _ := openLog(b, b.TempDir(), Options{SyncFile: count})
			defer w.Close()
			b.SetBytes(RecordSize)
			var next atomic.Int64
			base := fsyncs.Load()
			b.ResetTimer()
			var wg sync.WaitGroup
			for range goroutines {
				wg.Go(func() {
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						if err := w.AppendSync(Done{Seq: uint64(i), Reason: Delivered}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			n := fsyncs.Load() - base
			b.ReportMetric(float64(n)/float64(b.N), "fsyncs/op")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
