package engine

import (
	"math/rand/v2"
	"testing"
)

func TestSeqRuns(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var s seqRuns
	in := map[uint64]bool{}
	for i := range 100_000 {
		v := r.Uint64N(1 << 30)
		s.add(v)
		in[v] = true
		if i%997 == 0 {
			for range 50 {
				q := r.Uint64N(1 << 30)
				if s.contains(q) != in[q] {
					t.Fatalf("contains(%d) = %v after %d adds", q, !in[q], i)
				}
			}
			for q := range in {
				if !s.contains(q) {
					t.Fatalf("added %d not found", q)
				}
				break
			}
		}
	}
	if len(s.runs) > 20 {
		t.Fatalf("%d runs for 100,000 seqs: runs are not merging", len(s.runs))
	}
}

func BenchmarkSeqRunsAdd(b *testing.B) {
	var s seqRuns
	r := rand.New(rand.NewPCG(1, 2))
	for b.Loop() {
		s.add(r.Uint64())
	}
}
