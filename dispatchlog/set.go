package dispatchlog

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"math"
	"os"
	"slices"

	"github.com/hourglassmq/hourglass/segfile"
)

// Counts are the number of done-records per reason in a dispatch log. A
// seq recorded twice counts twice.
type Counts struct {
	Delivered    int // records with reason Delivered
	Cancelled    int // records with reason Cancelled
	DeadLettered int // records with reason DeadLettered
	Rescheduled  int // records with reason Rescheduled
	// Lost is set when the log's last marker is Lost: it was created in
	// place of a lost log, and entries not in the set may be done.
	Lost bool
}

// Total returns the number of done-records counted.
func (c Counts) Total() int { return c.Delivered + c.Cancelled + c.DeadLettered + c.Rescheduled }

func (c *Counts) add(r Reason) {
	switch r {
	case Delivered:
		c.Delivered++
	case Cancelled:
		c.Cancelled++
	case DeadLettered:
		c.DeadLettered++
	case Rescheduled:
		c.Rescheduled++
	case Lost:
		c.Lost = true
	case Recovered:
		c.Lost = false
	}
}

// Set is a compact set of done seqs, each with the reason of its first
// done-record: 8 bytes per seq (the seq and its reason packed in one
// word) in a sorted slice, plus a small sorted tail for seqs added while
// the bucket is loaded. The zero value is an empty set. It is not safe for
// concurrent use: its owner (the engine's driver, or a reader of one log)
// serializes the calls.
type Set struct {
	sorted []uint64 // packed, ascending by seq, one per seq
	tail   []uint64 // packed, ascending by seq, disjoint from sorted; merged into sorted when it grows past tailLimit
}

// pack packs a done-record into one word: seqs are commitlog offsets, far
// below 2^61, and reasons fit in 3 bits.
func pack(seq uint64, r Reason) uint64 { return seq<<3 | uint64(r&7) }

func cmpSeq(p, seq uint64) int { return cmp.Compare(p>>3, seq) }

// find returns the packed word of seq, if the set holds it.
func (s *Set) find(seq uint64) (uint64, bool) {
	if i, ok := slices.BinarySearchFunc(s.sorted, seq, cmpSeq); ok {
		return s.sorted[i], true
	}
	if i, ok := slices.BinarySearchFunc(s.tail, seq, cmpSeq); ok {
		return s.tail[i], true
	}
	return 0, false
}

// Contains reports whether seq is in the set, in O(log n).
func (s *Set) Contains(seq uint64) bool {
	_, ok := s.find(seq)
	return ok
}

// Reason returns why seq is done (the reason of its first done-record),
// and whether the set holds it.
func (s *Set) Reason(seq uint64) (Reason, bool) {
	p, ok := s.find(seq)
	return Reason(p & 7), ok
}

// Len returns the number of distinct seqs in the set.
func (s *Set) Len() int { return len(s.sorted) + len(s.tail) }

// Add inserts seq with reason r and reports whether it was new; a seq the
// set holds keeps its first reason. Its amortized cost is O(sqrt n): the
// tail holds at most about sqrt(n) seqs before a merge.
func (s *Set) Add(seq uint64, r Reason) bool {
	if _, ok := slices.BinarySearchFunc(s.sorted, seq, cmpSeq); ok {
		return false
	}
	i, ok := slices.BinarySearchFunc(s.tail, seq, cmpSeq)
	if ok {
		return false
	}
	s.tail = slices.Insert(s.tail, i, pack(seq, r))
	if len(s.tail) > tailLimit(len(s.sorted)) {
		s.merge()
	}
	return true
}

// AddSet adds every seq of o, keeping the reasons s has.
func (s *Set) AddSet(o *Set) {
	for seq, r := range o.All() {
		s.Add(seq, r)
	}
}

func tailLimit(n int) int { return max(64, int(math.Sqrt(float64(n)))) }

// merge moves the tail into sorted, merging from the back in place.
func (s *Set) merge() {
	a, b := len(s.sorted), len(s.tail)
	s.sorted = slices.Grow(s.sorted, b)[:a+b]
	i, j := a-1, b-1
	for k := a + b - 1; j >= 0; k-- {
		if i >= 0 && s.sorted[i] > s.tail[j] {
			s.sorted[k] = s.sorted[i]
			i--
		} else {
			s.sorted[k] = s.tail[j]
			j--
		}
	}
	s.tail = s.tail[:0]
}

// All yields the seqs in ascending order, each with its reason.
func (s *Set) All() iter.Seq2[uint64, Reason] {
	return func(yield func(uint64, Reason) bool) {
		i, j := 0, 0
		for i < len(s.sorted) || j < len(s.tail) {
			var v uint64
			if j >= len(s.tail) || (i < len(s.sorted) && s.sorted[i] < s.tail[j]) {
				v, i = s.sorted[i], i+1
			} else {
				v, j = s.tail[j], j+1
			}
			if !yield(v>>3, Reason(v&7)) {
				return
			}
		}
	}
}

// Seqs yields the seqs in ascending order.
func (s *Set) Seqs() iter.Seq[uint64] {
	return func(yield func(uint64) bool) {
		for seq := range s.All() {
			if !yield(seq) {
				return
			}
		}
	}
}

// setOf returns the set of packed done-records in file order, keeping the
// first record of each seq.
func setOf(packed []uint64) *Set {
	// Stable: of equal seqs the first in the file stays first.
	slices.SortStableFunc(packed, func(a, b uint64) int { return cmp.Compare(a>>3, b>>3) })
	return &Set{sorted: slices.CompactFunc(packed, func(a, b uint64) bool { return a>>3 == b>>3 })}
}

// Load reads the whole dispatch log at path and returns the set of done seqs
// and the number of records per reason (and whether the log says it was
// recreated after a loss: Counts.Lost). A missing file is an empty set.
// Damage before the synced-length hint, or a whole record with impossible
// content anywhere, is a *segfile.CorruptionError: a damaged log could hide a
// done entry, so it is never read past. After the hint, Load stops quietly at
// the first incomplete or undecodable record (a torn tail the writer's Open
// will truncate, or a write in progress). Load only reads.
func Load(path string) (*Set, Counts, error) {
	var c Counts
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &Set{}, c, nil
	}
	if err != nil {
		return nil, c, err
	}
	defer f.Close()
	_, hdr, err := segfile.ReadHeader(f, path, Magic)
	if err != nil {
		return nil, c, err
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, c, err
	}
	hint, hintRecs := int64(segfile.HeaderSize), uint64(0)
	if s, _, ok := segfile.BestSlot(hdr); ok {
		hint, hintRecs = s.Len, s.Records
	}
	seqs := make([]uint64, 0, min(hintRecs, uint64(fi.Size()/RecordSize))+64)
	sc := segfile.NewScanner(f, segfile.HeaderSize, fi.Size(), 0)
	for {
		off, rec, _, err := sc.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if !segfile.IsDecodeError(err) {
				return nil, c, fmt.Errorf("dispatchlog: read %s: %w", path, err)
			}
			if off >= hint {
				break
			}
			return nil, c, &segfile.CorruptionError{Path: path, Offset: off, Err: err}
		}
		d, err := decodeDone(rec)
		if err != nil {
			return nil, c, &segfile.CorruptionError{Path: path, Offset: off, Err: err}
		}
		c.add(d.Reason)
		if !d.Reason.Marker() {
			seqs = append(seqs, pack(d.Seq, d.Reason))
		}
	}
	return setOf(seqs), c, nil
}
