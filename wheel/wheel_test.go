package wheel

import (
	"math"
	"slices"
	"testing"
)

// A step of a scripted test. Each constructor below makes one.
type step struct {
	name  string
	run   func(w *Wheel) (got, want any)
	after bool // check invariants after this step
}

func add(d int64, ref Ref) step {
	return step{name: "Add", run: func(w *Wheel) (any, any) { w.Add(d, ref); return nil, nil }}
}

// expire calls Expire(now) with no limit and expects exactly want, in order.
func expire(now int64, want ...fired) step {
	return expireLimit(now, 0, want...)
}

func expireLimit(now int64, limit int, want ...fired) step {
	return step{name: "Expire", run: func(w *Wheel) (any, any) {
		got := expireN(w, now, limit)
		if got == nil {
			got = []fired{}
		}
		if want == nil {
			want = []fired{}
		}
		return got, want
	}}
}

type nextResult struct {
	d  int64
	ok bool
}

func next(d int64) step {
	return step{name: "Next", run: func(w *Wheel) (any, any) {
		got, ok := w.Next()
		return nextResult{got, ok}, nextResult{d, true}
	}}
}

func nextNone() step {
	return step{name: "Next(empty)", run: func(w *Wheel) (any, any) {
		got, ok := w.Next()
		return nextResult{got, ok}, nextResult{0, false}
	}}
}

func length(n int) step {
	return step{name: "Len", run: func(w *Wheel) (any, any) { return w.Len(), n }}
}

// do runs fn on the wheel, for setup that needs many operations.
func do(name string, fn func(w *Wheel)) step {
	return step{name: name, run: func(w *Wheel) (any, any) { fn(w); return nil, nil }}
}

const (
	t0     = int64(1_767_225_600_000) // 2026-01-01T00:00:00Z
	second = int64(1000)
	minute = 60 * second
	hour   = 60 * minute
	day    = 24 * hour
)

func f(d int64, ref Ref) fired { return fired{d, ref} }

func TestScripts(t *testing.T) {
	// Deadlines that land in different levels and windows relative to t0.
	levels := []int64{t0, t0 + 1, t0 + 63, t0 + 64, t0 + 4095, t0 + 4096, t0 + 5*minute,
		t0 + 3*hour, t0 + 5*hour, t0 + 2*day, t0 + 40*day, t0 + 3*365*day}
	var levelFired []fired
	var levelSteps []step
	for i, d := range slices.Backward(levels) {
		levelSteps = append(levelSteps, add(d, Ref(i)))
	}
	for i, d := range levels {
		levelFired = append(levelFired, f(d, Ref(i)))
		levelSteps = append(levelSteps, next(d), expire(d-1), expire(d, f(d, Ref(i))))
	}

	tests := []struct {
		name  string
		steps []step
	}{
		{"exact_ms", []step{
			add(t0+1000, 1),
			next(t0 + 1000),
			expire(t0 + 999),
			length(1),
			expire(t0+1000, f(t0+1000, 1)),
			length(0),
			nextNone(),
		}},
		{"same_ms_ties_in_insertion_order", []step{
			add(t0+5, 30), add(t0+5, 10), add(t0+5, 20), add(t0+4, 99), add(t0+5, 5),
			expire(t0+5, f(t0+4, 99), f(t0+5, 30), f(t0+5, 10), f(t0+5, 20), f(t0+5, 5)),
		}},
		{"ties_across_opening", []step{
			// 30 is stored while its window is still wide, 31 after Next opened
			// the slots down to the millisecond, 32 after Expire drained a
			// neighbour: they must still come out in insertion order.
			add(t0+10*hour+7, 30),
			add(t0+10*hour+6, 29),
			next(t0 + 10*hour + 6),
			add(t0+10*hour+7, 31),
			expire(t0+10*hour+6, f(t0+10*hour+6, 29)),
			add(t0+10*hour+7, 32),
			expire(t0+11*hour, f(t0+10*hour+7, 30), f(t0+10*hour+7, 31), f(t0+10*hour+7, 32)),
		}},
		{"past_deadline_due_at_next_expire", []step{
			expire(t0),
			add(t0-5*hour, 1),
			add(math.MinInt64, 2),
			add(t0, 3),
			next(math.MinInt64),
			expire(t0, f(math.MinInt64, 2), f(t0-5*hour, 1), f(t0, 3)),
		}},
		{"far_deadlines_crossing_levels", levelSteps},
		{"far_deadlines_one_jump", []step{
			do("add levels", func(w *Wheel) {
				for i, d := range levels {
					w.Add(d, Ref(i))
				}
			}),
			add(math.MaxInt64, 1000),
			expire(t0+10*365*day, levelFired...),
			next(math.MaxInt64),
			expire(math.MaxInt64, f(math.MaxInt64, 1000)),
		}},
		{"same_ref_twice_fires_twice", []step{
			add(t0+10, 1),
			add(t0+20, 1),
			add(t0+10, 1),
			length(3),
			expire(t0+30, f(t0+10, 1), f(t0+10, 1), f(t0+20, 1)),
			length(0),
		}},
		{"batch_limit_leaves_rest_pending", []step{
			add(t0+1, 1), add(t0+1, 2), add(t0+2, 3), add(t0+9, 4),
			expireLimit(t0+5, 2, f(t0+1, 1), f(t0+1, 2)),
			length(2),
			next(t0 + 2),
			expireLimit(t0+5, 2, f(t0+2, 3)),
			next(t0 + 9),
		}},
		{"big_time_jump", []step{
			do("add over 48h", func(w *Wheel) {
				for i := range 48 * 60 {
					w.Add(t0+int64(48*60-1-i)*minute+int64(i%7), Ref(i))
				}
			}),
			length(48 * 60),
			next(t0 + 2), // i = 2879
			step{name: "Expire(+72h)", run: func(w *Wheel) (any, any) {
				got := expireN(w, t0+72*hour, 0)
				sorted := slices.IsSortedFunc(got, func(a, b fired) int { return int(a.d - b.d) })
				return []any{len(got), sorted}, []any{48 * 60, true}
			}},
			length(0),
		}},
		{"backward_now_fires_nothing_new", []step{
			add(t0+100, 1), add(t0+200, 2),
			expire(t0+150, f(t0+100, 1)),
			expire(t0 + 50),
			add(t0+120, 3),
			expire(t0 + 110),
			next(t0 + 120),
			expire(t0+200, f(t0+120, 3), f(t0+200, 2)),
		}},
		{"hot_ms_in_order", []step{
			do("add 100k at one ms", func(w *Wheel) {
				for i := range 100_000 {
					w.Add(t0+7, Ref(i))
				}
			}),
			add(t0+8, 200_000),
			add(t0+6, 300_000),
			next(t0 + 6),
			expireLimit(t0+6, 5, f(t0+6, 300_000)),
			next(t0 + 7),
			step{name: "Expire(+8ms)", run: func(w *Wheel) (any, any) {
				got := expireN(w, t0+8, 0)
				inOrder := len(got) == 100_001 && got[100_000] == f(t0+8, 200_000)
				for i, e := range got[:min(len(got), 100_000)] {
					inOrder = inOrder && e == f(t0+7, Ref(i))
				}
				return inOrder, true
			}},
			nextNone(),
		}},
		{"refs_from_newref", []step{
			add(t0+1, NewRef(255, math.MaxUint32)),
			add(t0+1, NewRef(0, 0)),
			add(t0+1, NewRef(3, 12345)),
			expire(t0+1, f(t0+1, MaxRef), f(t0+1, 0), f(t0+1, 3<<32|12345)),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var w Wheel
			for i, s := range tc.steps {
				got, want := s.run(&w)
				if !equal(got, want) {
					t.Fatalf("step %d %s: got %v, want %v", i, s.name, got, want)
				}
				if _, err := checkInvariants(&w); err != nil {
					t.Fatalf("after step %d %s: %v", i, s.name, err)
				}
			}
		})
	}
}

func equal(a, b any) bool {
	switch a := a.(type) {
	case []fired:
		return slices.Equal(a, b.([]fired))
	case []any:
		return slices.Equal(a, b.([]any))
	}
	return a == b
}

func TestRefFields(t *testing.T) {
	r := NewRef(7, 0xdeadbeef)
	if r.Bucket() != 7 || r.Index() != 0xdeadbeef || r > MaxRef {
		t.Fatalf("NewRef(7, 0xdeadbeef) = %#x: bucket %d index %#x", uint64(r), r.Bucket(), r.Index())
	}
}

func TestAddPanicsOnRefTooLarge(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Add(MaxRef+1) did not panic")
		}
	}()
	var w Wheel
	w.Add(t0, MaxRef+1)
}

func TestExpireNeverEarly(t *testing.T) {
	// Every millisecond from t0 holds one entry; Expire is called at every
	// millisecond, then the clock jumps back and forth.
	var w Wheel
	const n = 5000
	for i := range n {
		w.Add(t0+int64(i), Ref(i))
	}
	for now := t0 - 10; now < t0+n; now++ {
		for _, e := range expireN(&w, now, 0) {
			if e.d > now {
				t.Fatalf("Expire(%d) handed over deadline %d", now, e.d)
			}
			if e.d != now && now >= t0 {
				t.Fatalf("Expire(%d) handed over %d late", now, e.d)
			}
		}
		if got := expireN(&w, now-1000, 0); len(got) != 0 {
			t.Fatalf("Expire(%d) after Expire(%d) handed over %v", now-1000, now, got)
		}
	}
	if w.Len() != 0 {
		t.Fatalf("Len = %d after all expired", w.Len())
	}
}

func TestDrainedWheelReleasesState(t *testing.T) {
	var w Wheel
	for i := range 10_000 {
		w.Add(t0+int64(i)*minute, Ref(i))
	}
	w.Next()
	expireN(&w, t0+10_000*minute, 0)
	if len(w.wins) != 0 || w.last != nil {
		t.Fatalf("after draining: %d windows left", len(w.wins))
	}
	for i := range 100 {
		w.Add(t0+int64(i), Ref(i))
	}
	if got := expireN(&w, t0+99, 0); len(got) != 100 || len(w.wins) != 0 || w.Len() != 0 {
		t.Fatalf("after refilling and draining: %d handed over, %d windows and Len %d left", len(got), len(w.wins), w.Len())
	}
}
