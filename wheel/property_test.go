package wheel

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// harness drives a wheel and the model with the same operations and fails
// at the first difference.
type harness struct {
	t     testing.TB
	w     Wheel
	m     *model
	ops   int
	trace []string // the last operations, for the failure message
}

func newHarness(t testing.TB) *harness { return &harness{t: t, m: newModel()} }

func (h *harness) log(format string, args ...any) {
	h.ops++
	if len(h.trace) == 64 {
		h.trace = h.trace[1:]
	}
	h.trace = append(h.trace, fmt.Sprintf("%d: ", h.ops)+fmt.Sprintf(format, args...))
}

func (h *harness) fail(format string, args ...any) {
	h.t.Helper()
	h.t.Fatalf("%s\nlast operations:\n%s", fmt.Sprintf(format, args...), joinLines(h.trace))
}

func joinLines(s []string) string {
	out := ""
	for _, l := range s {
		out += "  " + l + "\n"
	}
	return out
}

func (h *harness) add(d int64, ref Ref) {
	h.t.Helper()
	h.log("Add(%d, %#x)", d, uint64(ref))
	h.w.Add(d, ref)
	h.m.add(d, ref)
	h.checkLen()
}

func (h *harness) expire(now int64, limit int) {
	h.t.Helper()
	h.log("Expire(%d, limit %d)", now, limit)
	got, want := expireN(&h.w, now, limit), h.m.expire(now, limit)
	if !slices.Equal(got, want) {
		h.fail("Expire(%d, limit %d) handed over\n  %v\nwant\n  %v", now, limit, got, want)
	}
	h.checkLen()
}

func (h *harness) next() {
	h.t.Helper()
	h.log("Next()")
	d, ok := h.w.Next()
	wd, wok := h.m.next()
	if d != wd || ok != wok {
		h.fail("Next() = %d, %v, want %d, %v", d, ok, wd, wok)
	}
}

func (h *harness) checkLen() {
	h.t.Helper()
	if h.w.Len() != h.m.len() {
		h.fail("Len() = %d, want %d", h.w.Len(), h.m.len())
	}
}

func (h *harness) checkInvariants() {
	h.t.Helper()
	stored, err := checkInvariants(&h.w)
	if err != nil {
		h.fail("invariants: %v", err)
	}
	if want := h.m.pending(); !slices.Equal(stored, want) {
		h.fail("the wheel stores\n  %v\nwant\n  %v", stored, want)
	}
}

// pendingDeadline returns the deadline of a pending entry chosen by x.
func (h *harness) pendingDeadline(x uint64) (int64, bool) {
	e, ok := h.m.pick(x)
	return e.d, ok
}

// randomDeadline picks a deadline around now at one of several scales, so
// that entries land at every level, in several windows, in the past, and at
// the extremes.
func randomDeadline(r *rand.Rand, now int64) int64 {
	switch r.IntN(20) {
	case 0, 1, 2, 3:
		return now + r.Int64N(64)
	case 4, 5, 6:
		return now + r.Int64N(4096)
	case 7, 8:
		return now + r.Int64N(300_000)
	case 9, 10:
		return now + r.Int64N(20_000_000) // beyond one window (4.66 h)
	case 11:
		return now + r.Int64N(100*day)
	case 12:
		return now + r.Int64N(20*365*day)
	case 13, 14:
		return now - r.Int64N(10_000) // past
	case 15:
		return now - r.Int64N(100*day)
	case 16:
		switch r.IntN(4) {
		case 0:
			return math.MaxInt64
		case 1:
			return math.MinInt64
		case 2:
			return math.MaxInt64 - r.Int64N(1000)
		}
		return math.MinInt64 + r.Int64N(1000)
	default:
		return now + r.Int64N(8) // hot milliseconds: many ties
	}
}

// randomRef picks from a small set so that refs are reused, also while
// pending, with a few outliers across buckets and at MaxRef.
func randomRef(r *rand.Rand, small int) Ref {
	switch r.IntN(20) {
	case 0:
		return NewRef(uint8(r.IntN(256)), r.Uint32N(8192))
	case 1:
		return MaxRef - Ref(r.IntN(4))
	}
	return Ref(r.IntN(small))
}

func runRandom(t testing.TB, seed uint64, ops int) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	h := newHarness(t)
	now := t0
	small := 64 + r.IntN(2000)
	for range ops {
		switch p := r.IntN(100); {
		case p < 50:
			h.add(randomDeadline(r, now), randomRef(r, small))
		case p < 60:
			// A tie: add at the deadline of a pending entry, which may sit
			// in a run or an opened slot by now.
			if d, ok := h.pendingDeadline(r.Uint64()); ok {
				h.add(d, randomRef(r, small))
			}
		case p < 90:
			switch q := r.IntN(100); {
			case q < 60:
				now += r.Int64N(100)
			case q < 85:
				now += r.Int64N(10_000)
			case q < 92:
				now += r.Int64N(30 * hour) // big jump
			case q < 95:
				now += r.Int64N(400 * day)
			default:
				now -= r.Int64N(100_000) // backward clock
			}
			limit := 0
			if r.IntN(3) == 0 {
				limit = 1 + r.IntN(20)
			}
			h.expire(now, limit)
		default:
			h.next()
		}
		if r.IntN(4) == 0 {
			h.next()
		}
		if r.IntN(500) == 0 {
			h.checkInvariants()
		}
	}
	h.checkInvariants()
	h.expire(math.MaxInt64, 0)
	h.next()
	h.checkInvariants()
}

func TestAgainstModel(t *testing.T) {
	ops := 30_000
	if testing.Short() {
		ops = 5_000
	}
	for _, seed := range []uint64{1, 2, 3, 4, 5, 6, 7, 8, 42, 1234567} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			runRandom(t, seed, ops)
		})
	}
}

// TestAgainstModelSparseRefs runs adds, expiries and Next with refs drawn
// from a million, as entry offsets within a segment are, against the model.
func TestAgainstModelSparseRefs(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 99} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 5))
			h := newHarness(t)
			now := t0
			for range 20_000 {
				switch p := r.IntN(100); {
				case p < 55:
					h.add(randomDeadline(r, now), randomRef(r, 1<<20))
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
			h.checkInvariants()
			h.expire(math.MaxInt64, 0)
			h.next()
		})
	}
}

// TestAgainstModelBulk keeps thousands of entries pending, so that windows
// open by size and slots hold many entries when they are opened.
func TestAgainstModelBulk(t *testing.T) {
	r := rand.New(rand.NewPCG(99, 100))
	h := newHarness(t)
	now := t0
	for round := range 20 {
		for range 3000 {
			h.add(now+r.Int64N(6*hour), Ref(r.IntN(1<<16)))
		}
		for range 500 {
			if d, ok := h.pendingDeadline(r.Uint64()); ok {
				h.add(d+r.Int64N(3)-1, Ref(r.IntN(1<<16)))
			}
		}
		h.checkInvariants()
		for range 50 {
			now += r.Int64N(int64(round+1) * 10 * second)
			h.expire(now, 0)
			h.next()
		}
	}
	h.expire(math.MaxInt64, 0)
	h.checkInvariants()
}

// FuzzWheel reads the input as a program of operations on a wheel and the
// model:
//
//	op&3 == 0: Add      ref byte, deadline delta (int16, scaled by op>>5)
//	op&3 == 1: Add tie  selector byte: ref and the pending entry whose
//	                    deadline it takes (or now, if op&4)
//	op&3 == 2: Expire   time delta (int16, scaled by op>>5), limit byte
//	op&3 == 3: Next
func FuzzWheel(f *testing.F) {
	f.Add([]byte{0, 1, 5, 0, 0, 2, 5, 0, 2, 10, 0, 0, 3})
	f.Add([]byte{0, 1, 5, 0, 0, 1, 5, 0, 0, 2, 5, 0, 1, 0, 0, 1, 6, 0, 1, 0, 2, 255, 127, 0, 3})
	f.Add([]byte{0xe0, 1, 0, 1, 0xc0, 2, 0, 1, 0xa0, 3, 0, 1, 3, 0xe2, 255, 127, 0, 3, 0xe2, 255, 127, 0})
	f.Add([]byte{0, 9, 1, 0, 1, 0, 0, 9, 2, 0, 1, 0, 0x80, 9, 3, 0, 0xe5, 9, 3, 2, 0, 0, 0})
	f.Fuzz(runProgram)
}

// runProgram runs a FuzzWheel program; see FuzzWheel for the encoding.
func runProgram(t *testing.T, prog []byte) {
	{
		h := newHarness(t)
		now := t0
		scale := func(op byte) int64 {
			return []int64{1, 7, 64, 4096, 1 << 18, 1 << 24, 1 << 30, 1 << 40}[op>>5]
		}
		i := 0
		next := func() byte {
			if i >= len(prog) {
				return 0
			}
			i++
			return prog[i-1]
		}
		delta := func() int64 { return int64(int16(binary.LittleEndian.Uint16([]byte{next(), next()}))) }
		for i < len(prog) {
			op := next()
			switch op & 3 {
			case 0:
				ref := Ref(next())
				h.add(now+delta()*scale(op), ref)
			case 1:
				sel := next()
				if op&4 != 0 {
					h.add(now, Ref(sel))
				} else if d, ok := h.pendingDeadline(uint64(sel)); ok {
					h.add(d, Ref(sel))
				}
			case 2:
				now += delta() * scale(op)
				h.expire(now, int(next()))
			case 3:
				h.next()
			}
		}
		h.checkInvariants()
		h.expire(math.MaxInt64, 0)
		h.checkInvariants()
	}
}

// TestRunsAndOpening checks order and ties when a slot goes through every
// form: wide entries, a sorted run that takes inserts, and a run that
// overflows maxRun and is opened into a node.
func TestRunsAndOpening(t *testing.T) {
	tests := []struct {
		name   string
		spread int64 // deadlines in [base, base+spread)
		adds   int   // per phase
	}{
		{"one_ms", 1, 50},
		{"three_ms", 3, 60},
		{"level1_slot", 64, 70},
		{"level2_slot", 4096, 90},
		{"root_slot", 1 << 18, 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(tc.spread), 1))
			h := newHarness(t)
			base := t0 + 10*hour
			ref := Ref(0)
			phase := func() {
				for range tc.adds {
					h.add(base+r.Int64N(tc.spread), ref)
					ref++
				}
				// Ties with entries already stored, and refs added again
				// while pending, so that runs take equal offsets.
				for range tc.adds / 10 {
					if d, ok := h.pendingDeadline(r.Uint64()); ok {
						h.add(d, ref)
						h.add(base+r.Int64N(tc.spread), ref)
						ref++
					}
				}
				h.next()
				h.checkInvariants()
			}
			for range 4 {
				phase()
			}
			now := base
			for phases := 0; h.m.len() > 0; {
				h.expire(now, 7)
				h.next()
				now += r.Int64N(tc.spread/16 + 2)
				if phases < 8 && r.IntN(3) == 0 {
					phase()
					phases++
				}
			}
			h.checkInvariants()
		})
	}
}
