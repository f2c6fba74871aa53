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
	return step{name: "Add", run: func(w *Wheel) (any, any) { return w.Add(d, ref), true }}
}

func addDup(d int64, ref Ref) step {
	return step{name: "Add(duplicate)", run: func(w *Wheel) (any, any) { return w.Add(d, ref), false }}
}

func remove(d int64, ref Ref, want bool) step {
	return step{name: "Remove", run: func(w *Wheel) (any, any) { return w.Remove(d, ref), want }}
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
		{"remove_before_expiry", []step{
			add(t0+10, 1), add(t0+10, 2),
			remove(t0+10, 1, true),
			length(1),
			expire(t0+10, f(t0+10, 2)),
		}},
		{"remove_after_expiry_is_false", []step{
			add(t0+10, 1),
			expire(t0+10, f(t0+10, 1)),
			remove(t0+10, 1, false),
		}},
		{"remove_unknown_and_twice", []step{
			remove(t0, 7, false),
			remove(t0, MaxRef+1, false),
			add(t0+10, 7), add(t0+20, 8),
			remove(t0+10, 7, true),
			remove(t0+10, 7, false),
			length(1),
		}},
		{"duplicate_add", []step{
			add(t0+10, 1),
			addDup(t0+20, 1),
			length(1),
			expire(t0+30, f(t0+10, 1)),
			add(t0+40, 1),
			expire(t0+40, f(t0+40, 1)),
		}},
		{"readd_later_after_remove", []step{
			add(t0+10, 1), add(t0+15, 2),
			remove(t0+10, 1, true),
			add(t0+20, 1),
			next(t0 + 15),
			expire(t0+19, f(t0+15, 2)),
			expire(t0+20, f(t0+20, 1)),
		}},
		{"readd_earlier_after_remove", []step{
			add(t0+20, 1), add(t0+30, 2),
			remove(t0+20, 1, true),
			add(t0+10, 1),
			expire(t0+25, f(t0+10, 1)),
			expire(t0+30, f(t0+30, 2)),
		}},
		{"readd_same_ms_after_remove", []step{
			add(t0+10, 1), add(t0+10, 2),
			remove(t0+10, 1, true),
			add(t0+10, 1),
			expire(t0+10, f(t0+10, 2), f(t0+10, 1)),
		}},
		{"remove_readd_remove_readd", []step{
			// The second Remove finds a stale copy already stored and must
			// erase the pending copy in place.
			add(t0+10, 1), add(t0+50, 9),
			remove(t0+10, 1, true),
			add(t0+20, 1),
			remove(t0+20, 1, true),
			add(t0+30, 1),
			remove(t0+30, 1, true),
			add(t0+5*hour, 1),
			length(2),
			next(t0 + 50),
			expire(t0+day, f(t0+50, 9), f(t0+5*hour, 1)),
		}},
		{"second_remove_with_wrong_deadline", []step{
			add(t0+10, 1), add(t0+50, 9),
			remove(t0+10, 1, true),
			add(t0+3*day, 1),
			remove(t0+99, 1, true), // wrong deadline: found by a full scan
			add(t0+40, 1),
			expire(t0+4*day, f(t0+40, 1), f(t0+50, 9)),
		}},
		{"next_after_removing_earliest", []step{
			add(t0+100, 1), add(t0+200, 2), add(t0+10*minute, 3),
			next(t0 + 100),
			remove(t0+100, 1, true),
			next(t0 + 200),
			remove(t0+200, 2, true),
			next(t0 + 10*minute),
			remove(t0+10*minute, 3, true),
			nextNone(),
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
		{"hot_ms_remove_all", []step{
			do("add 100k at one ms", func(w *Wheel) {
				for i := range 100_000 {
					w.Add(t0+7, Ref(i))
				}
			}),
			add(t0+8, 200_000),
			do("remove them", func(w *Wheel) {
				for i := range 100_000 {
					if !w.Remove(t0+7, Ref(i)) {
						panic("remove failed")
					}
				}
			}),
			next(t0 + 8),
			expire(t0+8, f(t0+8, 200_000)),
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
	expireN(&w, t0+10_000*minute, 0)
	if len(w.wins) != 0 || w.refs != (refTable{}) {
		t.Fatalf("after draining: %d windows, ref state left", len(w.wins))
	}
	for i := range 100 {
		w.Add(t0+int64(i), Ref(i))
	}
	for i := range 100 {
		w.Remove(t0+int64(i), Ref(i))
	}
	if len(w.wins) != 0 || w.refs != (refTable{}) {
		t.Fatalf("after removing all: %d windows, ref state left", len(w.wins))
	}

	// With one entry left pending far ahead, the state of the fired refs
	// is freed page by page.
	const last = Ref(1<<32 | 5)
	w.Add(t0+day, last)
	for i := range 3 * pageRefs {
		w.Add(t0+int64(i), Ref(i))
	}
	expireN(&w, t0+3*pageRefs, 0)
	for ti, md := range w.refs.top {
		if md == nil {
			continue
		}
		if ti != 1 || md.used != 1 || md.leaves[0].used != 1 || md.leaves[0].refs[0] != 1 {
			t.Fatalf("after expiring all but ref %#x: directory %d holds more than its page", uint64(last), ti)
		}
	}
	if d, ok := w.Next(); !ok || d != t0+day || w.Len() != 1 {
		t.Fatalf("Next = %d, %v with Len %d; want %d, true with Len 1", d, ok, w.Len(), t0+day)
	}
}
