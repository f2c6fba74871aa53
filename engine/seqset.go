package engine

import (
	"slices"
)

// seqRuns is a set of seqs built for many adds and few lookups: the seqs of
// deliveries, asked about only when a Cancel names a message of a loaded
// bucket. Adds go to a small unsorted buffer; a full buffer becomes a
// sorted run, and runs of similar length merge, so an add costs O(log n)
// amortized moves and a lookup a binary search per run (O(log² n)).
// Memory is 8 bytes per seq. Owned by the driver goroutine.
type seqRuns struct {
	buf  []uint64   // unsorted, at most runBuf
	runs [][]uint64 // each sorted; lengths strictly decreasing by at least half
}

const runBuf = 256

func (s *seqRuns) add(seq uint64) {
	s.buf = append(s.buf, seq)
	if len(s.buf) < runBuf {
		return
	}
	run := slices.Clone(s.buf)
	slices.Sort(run)
	s.buf = s.buf[:0]
	for n := len(s.runs); n > 0 && len(s.runs[n-1]) <= 2*len(run); n = len(s.runs) {
		run = mergeSorted(s.runs[n-1], run)
		s.runs = s.runs[:n-1]
	}
	s.runs = append(s.runs, run)
}

func (s *seqRuns) contains(seq uint64) bool {
	if slices.Contains(s.buf, seq) {
		return true
	}
	for _, r := range s.runs {
		if _, ok := slices.BinarySearch(r, seq); ok {
			return true
		}
	}
	return false
}

func mergeSorted(a, b []uint64) []uint64 {
	out := make([]uint64, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if a[i] <= b[j] {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, b[j])
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}
