package dispatchlog

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSetMatchesModel compares Set with a map under random Adds, including
// the merges of its tail into the sorted part: each seq keeps the reason
// it was first added with.
func TestSetMatchesModel(t *testing.T) {
	tests := []struct {
		name  string
		n     int
		space uint64 // seqs are drawn from [0, space)
		base  []uint64
	}{
		{"empty_base_few", 50, 100, nil},
		{"empty_base_many", 20_000, 1 << 40, nil},
		{"dense_with_dups", 20_000, 5_000, nil},
		{"loaded_base", 5_000, 100_000, []uint64{1, 5, 99, 1000, 50_000}},
		{"extremes", 10, 3, []uint64{0, 1<<61 - 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(tt.n)))
			s := &Set{}
			model := map[uint64]Reason{}
			for _, v := range tt.base {
				s.sorted = append(s.sorted, pack(v, Delivered))
				model[v] = Delivered
			}
			for range tt.n {
				v := rng.Uint64N(tt.space)
				r := []Reason{Delivered, Cancelled, DeadLettered, Rescheduled}[rng.IntN(4)]
				_, had := model[v]
				if added := s.Add(v, r); added == had {
					t.Fatalf("Add(%d) = %v with the seq already present: %v", v, added, had)
				}
				if !had {
					model[v] = r
				}
				if got, ok := s.Reason(v); !ok || got != model[v] {
					t.Fatalf("Reason(%d) = %v, %v right after Add; want %v (its first)", v, got, ok, model[v])
				}
			}
			if s.Len() != len(model) {
				t.Fatalf("Len = %d, want %d", s.Len(), len(model))
			}
			got := slices.Collect(s.Seqs())
			if !slices.IsSorted(got) || len(got) != len(model) {
				t.Fatalf("Seqs yields %d seqs, sorted %v", len(got), slices.IsSorted(got))
			}
			for v, r := range s.All() {
				if want, ok := model[v]; !ok || want != r {
					t.Fatalf("All yields %d with %v; the model has %v, %v", v, r, want, ok)
				}
			}
			for range 1000 {
				v := rng.Uint64N(tt.space)
				if _, want := model[v]; s.Contains(v) != want {
					t.Fatalf("Contains(%d) = %v", v, !want)
				}
			}
			// Compact: about 8 bytes per seq, never a map or boxed values.
			if c := cap(s.sorted) + cap(s.tail); s.Len() > 1000 && c > 2*s.Len()+tailLimit(s.Len()) {
				t.Fatalf("%d seqs hold %d slots", s.Len(), c)
			}
		})
	}
}

func TestSetZeroValue(t *testing.T) {
	var s Set
	if s.Contains(0) || s.Len() != 0 {
		t.Fatal("zero Set is not empty")
	}
	for range s.All() {
		t.Fatal("zero Set yields a seq")
	}
	if !s.Add(0, Cancelled) || s.Add(0, Delivered) || !s.Contains(0) || s.Len() != 1 {
		t.Fatal("Add on a zero Set")
	}
}

func BenchmarkSetContains(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	seqs := make([]uint64, 1_000_000)
	packed := make([]uint64, len(seqs))
	for i := range seqs {
		seqs[i] = rng.Uint64N(1 << 61)
		packed[i] = pack(seqs[i], Delivered)
	}
	s := setOf(packed)
	i := 0
	for b.Loop() {
		i++
		s.Contains(seqs[i%len(seqs)])
	}
}
