package commitlog

import (
	"context"
	"errors"
	"fmt"

	"github.com/hourglassmq/hourglass/record"
)

// Iterator reads records in offset order. It is used by one goroutine at a
// time. Next never blocks; Wait blocks until more records are visible, so
// a tailing reader loops:
//
//	for {
//		for it.Next() { use(it.Offset(), it.Record()) }
//		if it.Err() != nil { ... }
//		if err := it.Wait(ctx); err != nil { ... }
//	}
type Iterator struct {
	l   *Log
	seg *segment // acquired segment holding pos, or nil
	pos int64    // offset of the next record to read
	off int64    // offset of the current record
	rec record.Record
	err error
	// kept is the offset from which the pages this iterator read are
	// still in the process's resident set (see dropBehind).
	kept int64
	// skipped are the spans of skip records the last Next stepped over.
	skipped []Span
}

// Span is a range [From, To) of log offsets.
type Span struct{ From, To int64 }

// dropChunk is how much an iterator reads before it drops the pages behind
// it from the process's resident set.
const dropChunk = 4 << 20

// dropBehind drops the whole pages of the current segment's mapping from
// it.kept up to to (a logical offset), once that spans dropChunk or the
// iterator leaves the segment (force). A reader of a mapped log otherwise
// keeps every page it touched resident until the segment is unmapped:
// routing 100,000,000 messages held about 250 MB of commitlog pages in the
// server's RSS. The pages stay in the page cache; a later read maps them
// again.
func (it *Iterator) dropBehind(to int64, force bool) {
	s := it.seg
	if s == nil || (!force && to-it.kept < dropChunk) {
		return
	}
	lo := max(it.kept, s.base)
	hi := min(to, s.end())
	page := int64(pageSize)
	a := (headerSize + lo - s.base + page - 1) / page * page // whole pages only
	b := (headerSize + hi - s.base) / page * page
	if a < b {
		dropPages(s.m[a:b])
	}
	it.kept = to
}

// NewIterator returns an iterator whose first record is the one at offset
// from, which must be a record boundary (an offset Append returned, or the
// end of the log). An offset below the oldest segment is ErrOffsetTrimmed.
func (l *Log) NewIterator(from int64) (*Iterator, error) {
	if from < l.FirstOffset() {
		return nil, fmt.Errorf("%w: %d < %d", ErrOffsetTrimmed, from, l.FirstOffset())
	}
	if from > l.view.visible.Load() {
		return nil, fmt.Errorf("%w: %d > %d", ErrOffsetRange, from, l.view.visible.Load())
	}
	return &Iterator{l: l, pos: from, off: -1, kept: from}, nil
}

// Next advances to the next visible record and reports whether there is
// one. Skip records (TypeSkip) and the spans they cover are stepped over
// (Skipped names them). It returns false at the end of what is visible or
// on an error (see Err): a record that fails its checksum is a
// *segfile.CorruptionError wrapping ErrDamaged that names the file, the
// offsets that cannot be read and where valid records follow.
func (it *Iterator) Next() bool {
	if it.err != nil {
		return false
	}
	it.skipped = it.skipped[:0]
	for {
		if it.pos >= it.l.view.visible.Load() {
			return false
		}
		if it.seg == nil || it.pos >= it.seg.end() {
			if it.seg != nil {
				it.dropBehind(it.seg.end(), true)
				it.seg.release()
			}
			it.seg = it.l.segmentFor(it.pos)
			if it.seg == nil {
				it.err = fmt.Errorf("%w: offset %d", ErrOffsetTrimmed, it.pos)
				return false
			}
		}
		s := it.seg
		p := it.pos - s.base
		rec, n, skip, err := decodeSpan(s.data[p:])
		if errors.Is(err, record.ErrEnd) {
			it.pos = s.end() // the unused tail of a sealed segment
			continue
		}
		if err != nil {
			it.err = s.damaged(it.pos, err)
			return false
		}
		if skip {
			// A span repair gave up (TypeSkip): adjacent skips are one span.
			if k := len(it.skipped); k > 0 && it.skipped[k-1].To == it.pos {
				it.skipped[k-1].To += int64(n)
			} else {
				it.skipped = append(it.skipped, Span{it.pos, it.pos + int64(n)})
			}
			it.pos += int64(n)
			continue
		}
		// The current record stays mapped until the next call: drop up
		// to its start only.
		it.dropBehind(it.pos, false)
		it.off, it.rec = it.pos, rec
		it.pos += int64(n)
		return true
	}
}

// Offset returns the offset of the current record.
func (it *Iterator) Offset() int64 { return it.off }

// Record returns the current record. Its payload aliases the mapped
// segment and is valid until the next call to Next or Close.
func (it *Iterator) Record() record.Record { return it.rec }

// Corruption returns the error for the current record (Next returned
// true) when the caller finds its content impossible though its checksum
// holds: a *segfile.CorruptionError naming the record's file and position,
// with err as its cause.
func (it *Iterator) Corruption(err error) error {
	return it.seg.corruption(it.off, err)
}

// Skipped returns the spans of skip records (TypeSkip: records that
// `hourglass repair` or Open gave up) the last call to Next stepped over,
// in offset order; nil or empty when it stepped over none. The slice is
// valid until the next call to Next.
func (it *Iterator) Skipped() []Span { return it.skipped }

// Pos returns the offset the next record will be read from.
func (it *Iterator) Pos() int64 { return it.pos }

// Err returns the error that stopped Next, if any.
func (it *Iterator) Err() error { return it.err }

// Wait blocks until a record beyond the iterator's position is visible,
// the context ends, or the log closes (ErrClosed). The writer wakes it;
// it does not poll.
func (it *Iterator) Wait(ctx context.Context) error { return it.l.waitFor(ctx, it.pos+1) }

// Close releases the segment the iterator holds.
func (it *Iterator) Close() {
	if it.seg != nil {
		it.seg.release()
		it.seg = nil
	}
	if it.err == nil {
		it.err = errIteratorClosed
	}
}

var errIteratorClosed = errors.New("commitlog: iterator closed")
