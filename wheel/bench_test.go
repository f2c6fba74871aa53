package wheel

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

// The memory target of docs DESIGN.md ("Memory"): at most 16 bytes per
// pending entry, wheel overhead included; 8 is the stretch.
const maxBytesPerEntry = 16

// memoryLayouts are the ways the engine fills a wheel, each adding n entries.
var memoryLayouts = []struct {
	name string
	fill func(w *Wheel, n int)
}{
	// Two loaded one-hour buckets, each entry's deadline anywhere in its
	// bucket, refs in segment order.
	{"two_buckets_1h", func(w *Wheel, n int) {
		r := rand.New(rand.NewPCG(1, 2))
		for i := range n {
			b := i * 2 / n
			w.Add(t0+int64(b)*hour+r.Int64N(hour), NewRef(uint8(b), uint32(i)))
		}
	}},
	// The same, after the driver's first Next has opened the front slots.
	{"two_buckets_1h_after_next", func(w *Wheel, n int) {
		r := rand.New(rand.NewPCG(1, 2))
		for i := range n {
			b := i * 2 / n
			w.Add(t0+int64(b)*hour+r.Int64N(hour), NewRef(uint8(b), uint32(i)))
		}
		w.Next()
	}},
	// Two loaded 24-hour buckets.
	{"two_buckets_24h", func(w *Wheel, n int) {
		r := rand.New(rand.NewPCG(3, 4))
		for i := range n {
			b := i * 2 / n
			w.Add(t0+int64(b)*day+r.Int64N(day), NewRef(uint8(b), uint32(i)))
		}
	}},
	// A campaign: every entry due in the same millisecond.
	{"hot_ms", func(w *Wheel, n int) {
		for i := range n {
			w.Add(t0+9*hour, Ref(i))
		}
		w.Next()
	}},
}

// heapPerEntry fills a new wheel with n entries and returns the heap it
// holds afterwards, per entry.
func heapPerEntry(fill func(*Wheel, int), n int) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	w := new(Wheel)
	fill(w, n)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if w.Len() != n {
		panic(fmt.Sprintf("wheel holds %d entries, want %d", w.Len(), n))
	}
	runtime.KeepAlive(w)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
}

func TestMemoryPerEntry(t *testing.T) {
	const n = 1_000_000
	for _, l := range memoryLayouts {
		t.Run(l.name, func(t *testing.T) {
			got := heapPerEntry(l.fill, n)
			t.Logf("%.2f bytes/entry with %d entries", got, n)
			if got > maxBytesPerEntry {
				t.Errorf("%.2f bytes/entry with %d entries, want at most %d", got, n, maxBytesPerEntry)
			}
		})
	}
}

// TestSparseRefsMemory: refs 21 apart (entry offsets / 8 of ~170-byte
// entries) cost the wheel nothing beyond the entries: about 8 bytes each.
func TestSparseRefsMemory(t *testing.T) {
	const n = 1_000_000
	got := heapPerEntry(func(w *Wheel, n int) {
		for i := range n {
			w.Add(t0+int64(i%3_600_000), NewRef(1, uint32(i*21)))
		}
	}, n)
	t.Logf("sparse refs: %.2f bytes/entry with %d entries", got, n)
	if got > 12 {
		t.Fatalf("the wheel costs %.2f bytes/entry with sparse refs; want about 8", got)
	}
}

// BenchmarkMemory10M measures the heap a wheel holds per pending entry with
// 10 million entries, against the 16-byte target (8 is the stretch). Run it
// once: go test ./wheel -bench Memory10M -run '^$' -benchtime 1x
func BenchmarkMemory10M(b *testing.B) {
	const n = 10_000_000
	for _, l := range memoryLayouts {
		b.Run(l.name, func(b *testing.B) {
			var got float64
			for range b.N {
				got = heapPerEntry(l.fill, n)
			}
			b.ReportMetric(got, "bytes/entry")
			b.ReportMetric(0, "ns/op")
			if got > maxBytesPerEntry {
				b.Errorf("%.2f bytes/entry, want at most %d", got, maxBytesPerEntry)
			}
		})
	}
}

// spread returns the deadline of entry i of a benchmark: pseudo-random within
// span ms from t0, computed rather than loaded so that the benchmark itself
// does not add cache misses.
func spread(i int, span int64) int64 {
	x := uint64(i) * 0x9e3779b97f4a7c15
	x ^= x >> 29
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 32
	return t0 + int64(x%uint64(span))
}

// BenchmarkAdd measures Add with deadlines spread over two hours (the loaded
// window) and over one millisecond (a campaign). ns/op is per Add.
func BenchmarkAdd(b *testing.B) {
	const batch = benchBatch
	for _, bc := range []struct {
		name string
		span int64
	}{{"spread_2h", 2 * hour}, {"one_ms", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			w := new(Wheel)
			for i := range b.N {
				j := i % batch
				if j == 0 && i > 0 {
					b.StopTimer()
					w = new(Wheel)
					b.StartTimer()
				}
				w.Add(spread(j, bc.span), Ref(j))
			}
		})
	}
}

// benchBatch is the number of entries a benchmark keeps in one wheel: it
// refills or replaces the wheel, untimed, every benchBatch operations.
const benchBatch = 1 << 20

// BenchmarkExpire measures taking entries out of a wheel of benchBatch
// entries (refs in adding order, deadlines at random) as a driver would:
// wake at the next deadline, or at every step ms, and Expire. ns/op is per
// entry handed over, including the moves down the levels that Next and
// Expire do. "in_ref_order" has deadlines ascending with refs, sparing the
// cache misses of random refs.
func BenchmarkExpire(b *testing.B) {
	for _, bc := range []struct {
		name   string
		perMs  int64 // entries per millisecond on average
		step   int64 // 0: a single Expire call
		sorted bool
	}{
		{"1_per_ms_step_1ms", 1, 1, false},
		{"100_per_ms_step_1ms", 100, 1, false},
		{"1_per_ms_one_call", 1, 0, false},
		{"1_per_ms_one_call_in_ref_order", 1, 0, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			n := 0
			count := func(int64, Ref) bool { n++; return true }
			w := new(Wheel)
			for done := 0; done < b.N; done += benchBatch {
				b.StopTimer()
				size := min(benchBatch, b.N-done)
				span := max(int64(size)/bc.perMs, 1)
				for i := range size {
					d := spread(i, span)
					if bc.sorted {
						d = t0 + int64(i)*span/int64(size)
					}
					w.Add(d, Ref(i))
				}
				b.StartTimer()
				if bc.step == 0 {
					w.Expire(t0+span, count)
				} else {
					for now := t0; w.Len() > 0; now += bc.step {
						if d, ok := w.Next(); ok && d <= now {
							w.Expire(now, count)
						}
					}
				}
			}
			if n != b.N {
				b.Fatalf("expired %d of %d", n, b.N)
			}
		})
	}
}
