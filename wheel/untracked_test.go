package wheel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestUntrackedAgainstModel runs adds of refs not pending, expiries and
// Next on a wheel from NewUntracked, against the sorted reference.
func TestUntrackedAgainstModel(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 99} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 5))
			h := newHarness(t)
			h.w = *NewUntracked()
			now := t0
			for range 20_000 {
				switch p := r.IntN(100); {
				case p < 55:
					ref := randomRef(r, 1<<20)
					if _, pending := h.m.pos[ref]; !pending {
						h.add(randomDeadline(r, now), ref)
					}
				case p < 90:
					now += r.Int64N(10_000)
					if r.IntN(20) == 0 {
						now -= r.Int64N(50_000)
					}
					h.expire(now, r.IntN(3)*r.IntN(30))
				default:
					h.next()
				}
			}
			h.expire(math.MaxInt64, 0)
			h.next()
		})
	}
}

func TestUntrackedRemovePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Remove on an untracked wheel did not panic")
		}
	}()
	w := NewUntracked()
	w.Add(1, 1)
	w.Remove(1, 1)
}

// TestUntrackedSparseRefsMemory: refs 21 apart (entry offsets / 8 of
// ~170-byte entries) cost a tracked wheel its per-ref bits for every ref in
// between; an untracked wheel stays at about 8 bytes per entry.
func TestUntrackedSparseRefsMemory(t *testing.T) {
	const n = 1_000_000
	measure := func(w *Wheel) float64 {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := range n {
			w.Add(t0+int64(i%3_600_000), NewRef(1, uint32(i*21)))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(w)
		return float64(after.HeapAlloc-before.HeapAlloc) / n
	}
	tracked, untracked := measure(&Wheel{}), measure(NewUntracked())
	t.Logf("sparse refs: tracked %.1f B/entry, untracked %.1f B/entry", tracked, untracked)
	if untracked > 12 {
		t.Fatalf("untracked wheel costs %.1f B/entry with sparse refs; want about 8", untracked)
	}
}
