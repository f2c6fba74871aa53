package commitlog

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edsrzf/mmap-go"
)

// Benchmarks write real segment files under the test's temp directory
// (set TMPDIR to put them on the disk under test). Compare:
//   - SyncNone against the disk's sequential write rate (dd ... conv=fdatasync),
//   - SyncAlways with one appender against the raw fsync rate of a 4 KiB
//     append into preallocated space (see docs/BENCHMARKS.md).

func benchAppend(b *testing.B, pol SyncPolicy, size, appenders int) {
	var syncs atomic.Int64
	var syncTime atomic.Int64
	l, _, err := Open(Options{Dir: b.TempDir(), Sync: pol, OnSync: func(d time.Duration) {
		syncs.Add(1)
		syncTime.Add(int64(d))
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	p := make([]byte, size)
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	per := b.N / appenders
	for w := range appenders {
		n := per
		if w == 0 {
			n += b.N % appenders
		}
		wg.Go(func() {
			var offs []int64
			for range n {
				var err error
				if offs, err = l.Append(offs[:0], Record{Type: 1, Payload: p}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "records/s")
	if n := syncs.Load(); n > 0 && pol == SyncAlways {
		b.ReportMetric(float64(b.N)/float64(n), "records/fsync")
		b.ReportMetric(float64(syncTime.Load())/float64(n)/1e3, "µs/fsync")
	}
}

func BenchmarkAppend(b *testing.B) {
	for _, pol := range []SyncPolicy{SyncNone, SyncInterval, SyncAlways} {
		for _, size := range []int{128, 1024} {
			b.Run(fmt.Sprintf("%s/%dB/1", pol, size), func(b *testing.B) { benchAppend(b, pol, size, 1) })
		}
	}
	for _, n := range []int{16, 128} {
		b.Run(fmt.Sprintf("always/128B/%d", n), func(b *testing.B) { benchAppend(b, SyncAlways, 128, n) })
	}
}

func BenchmarkIterate(b *testing.B) {
	l, _, err := Open(Options{Dir: b.TempDir(), Sync: SyncNone})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	p := make([]byte, 128)
	for range 200_000 {
		l.Append(nil, Record{Type: 1, Payload: p})
	}
	b.SetBytes(128)
	b.ResetTimer()
	var it *Iterator
	for i := 0; i < b.N; i++ {
		if it == nil || !it.Next() {
			if it != nil {
				it.Close()
			}
			it, _ = l.NewIterator(0)
			it.Next()
		}
	}
	it.Close()
}

// BenchmarkRawFsync measures the disk's own limit that SyncAlways is held
// to: one 4 KiB write plus fdatasync per op, into a growing file, into
// preallocated (zero-written) space with pwrite, into space reserved with
// fallocate (unwritten extents, converted by the fsync), and the same as
// overwrite through a shared mapping. It uses only allocRange of the
// commitlog's code, the allocation a new segment gets.
func BenchmarkRawFsync(b *testing.B) {
	for _, mode := range []string{"append", "overwrite", "fallocated", "mmap-overwrite"} {
		b.Run(mode, func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "raw"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			const size = 256 << 20
			if mode != "append" {
				if err := f.Truncate(size); err != nil {
					b.Fatal(err)
				}
				if err := allocRange(f, 0, size, mode != "fallocated"); err != nil {
					b.Fatal(err)
				}
				if err := fdatasync(f); err != nil {
					b.Fatal(err)
				}
			}
			var m mmap.MMap
			if mode == "mmap-overwrite" {
				if m, err = mmap.Map(f, mmap.RDWR, 0); err != nil {
					b.Fatal(err)
				}
				defer m.Unmap()
			}
			buf := make([]byte, 4096)
			buf[0] = 1
			b.SetBytes(4096)
			i := 0
			for b.Loop() {
				off := int64(i%(size/4096-1)+1) * 4096
				if m != nil {
					copy(m[off:], buf)
				} else if _, err := f.WriteAt(buf, off); err != nil {
					b.Fatal(err)
				}
				if err := fdatasync(f); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "fsyncs/s")
		})
	}
}
