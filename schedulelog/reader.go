package schedulelog

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/record"
	"github.com/hourglassmq/hourglass/segfile"
)

// firstRead is how much ReadAt reads before it knows an entry's size.
const firstRead = 4096

// Reader reads a segment through its own read-only descriptor. It never
// writes, so it may be used on a segment another process (or a Writer in
// this one) is appending to. ReadAt is safe for concurrent use; each
// Iterator belongs to one goroutine.
type Reader struct {
	f    *os.File
	path string
	hdr  segfile.Header
}

// OpenReader opens the segment file at path read-only and checks its
// header (a damaged header is a *segfile.CorruptionError).
func OpenReader(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	h, _, err := segfile.ReadHeader(f, path, Magic)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Reader{f: f, path: path, hdr: h}, nil
}

// Path returns the segment's file path.
func (r *Reader) Path() string { return r.path }

// Start returns the bucket start in UTC epoch milliseconds.
func (r *Reader) Start() int64 { return r.hdr.Start }

// Duration returns the bucket length recorded in the segment's header.
func (r *Reader) Duration() time.Duration { return time.Duration(r.hdr.Duration) * time.Millisecond }

// Close closes the descriptor.
func (r *Reader) Close() error { return r.f.Close() }

// ReadAt reads the entry at off (an offset Append or an Iterator
// returned), decodes its message into m and returns its seq. The slices in
// m alias buf when buf holds the entry (then ReadAt does not allocate);
// for a bigger entry ReadAt allocates a buffer of its size. An offset that
// is unaligned, before the first entry or at or past the end of the file
// is ErrBadOffset. A damaged entry (or an entry not yet wholly written) is
// a *segfile.CorruptionError, and m must not be used.
func (r *Reader) ReadAt(off int64, buf []byte, m *message.Message) (uint64, error) {
	if off < FirstOffset || off%Align != 0 {
		return 0, fmt.Errorf("%w: %d in %s", ErrBadOffset, off, r.path)
	}
	if len(buf) < record.HeaderSize {
		buf = make([]byte, firstRead)
	}
	n, err := r.f.ReadAt(buf[:min(len(buf), firstRead)], off)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: %d is at or past the end of %s", ErrBadOffset, off, r.path)
	}
	// The length is not yet verified: grow the buffer with what the file
	// actually holds, so a damaged length cannot make us allocate 64 MiB.
	for size := record.PeekSize(buf[:n]); n < size; {
		if n == len(buf) {
			nb := make([]byte, min(size, max(2*n, 64<<10)))
			copy(nb, buf[:n])
			buf = nb
		}
		k, err := r.f.ReadAt(buf[n:min(size, len(buf))], off+int64(n))
		n += k
		if errors.Is(err, io.EOF) || k == 0 && err == nil {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	return entryAt(r.path, &r.hdr, buf[:n], off, m)
}

// entryAt decodes the entry framed at the start of b, found at off in the
// segment at path with header h, into m and returns its seq. Damage is a
// *segfile.CorruptionError.
func entryAt(path string, h *segfile.Header, b []byte, off int64, m *message.Message) (uint64, error) {
	rec, _, err := record.Decode(b)
	if err == nil {
		var seq uint64
		var p []byte
		if seq, p, err = decodeEntry(rec); err == nil {
			if err = checkMessage(h, p, m); err == nil {
				return seq, nil
			}
		}
	}
	return 0, &segfile.CorruptionError{Path: path, Offset: off, Err: err}
}

// Iter returns an iterator over every entry, from the first.
func (r *Reader) Iter() *Iterator { return r.IterFrom(FirstOffset) }

// IterFrom returns an iterator over the entries from off (FirstOffset, or
// the End of an earlier iterator) to the end of the file as it is now.
//
// Entries before the segment's synced-length hint must all be whole: any
// damage there, or a file shorter than the hint, stops the iterator with a
// *segfile.CorruptionError. After the hint
// the iterator stops quietly at the first record that is incomplete or
// does not decode (a write in progress, or a torn tail that the owner's
// Open will truncate) and Torn reports where.
func (r *Reader) IterFrom(off int64) *Iterator { return r.iter(off, -1, false) }

// Scan returns an iterator over the entries in [from, to) that skips
// damage instead of stopping at it: a region where no whole, valid entry
// decodes (a flipped byte, a record cut short, a file shorter than its
// synced-length hint) is reported through Skipped and the iterator goes on
// at the next valid entry, found by trying every aligned offset after the
// damage. An entry is valid when its checksum holds, it decodes, it is
// due inside the bucket and its seq is above the last valid entry's. So
// one damaged entry costs that entry only. to is clipped to the file's
// size; a negative to means the file's size. Err is for I/O errors only.
//
// The caller should know that [from, to) is wholly written (reput's
// Watch returns such an end): Scan cannot tell a write in progress from
// damage, and reports both.
func (r *Reader) Scan(from, to int64) *Iterator { return r.iter(from, to, true) }

func (r *Reader) iter(off, to int64, skip bool) *Iterator { return r.iterChunk(off, to, skip, 0) }

// iterChunk is iter reading chunk bytes at a time (0: segfile's default).
func (r *Reader) iterChunk(off, to int64, skip bool, chunk int) *Iterator {
	it := &Iterator{r: r, hint: FirstOffset, off: off, torn: -1, skip: skip}
	hdr := make([]byte, segfile.HeaderSize)
	if _, err := r.f.ReadAt(hdr, 0); err != nil {
		it.err = err
		return it
	}
	if s, _, ok := segfile.BestSlot(hdr); ok {
		it.hint, it.slot = s.Len, s
	}
	fi, err := r.f.Stat()
	if err != nil {
		it.err = err
		return it
	}
	if off < FirstOffset || off%Align != 0 {
		it.err = fmt.Errorf("%w: %d in %s", ErrBadOffset, off, r.path)
		return it
	}
	end := fi.Size()
	if to >= 0 && to < end {
		end = to
	}
	it.sc = segfile.NewScanner(r.f, off, end, chunk)
	return it
}

// Iterator yields a segment's entries in file order, which is seq order,
// reading the file in large chunks. Use it from one goroutine:
//
//	for it.Next() { use(it.Offset(), it.Seq(), it.Message()) }
//	if err := it.Err(); err != nil { ... }
type Iterator struct {
	r       *Reader
	sc      *segfile.Scanner
	hint    int64
	slot    segfile.Slot // the synced-length slot the hint came from
	skip    bool         // Scan: go on past damage
	skipped []Damage     // damage the last Next skipped
	m       message.Message
	p       []byte
	off     int64
	seq     uint64
	started bool
	err     error
	torn    int64
	done    bool
}

// Next advances to the next entry and reports whether there is one. It
// returns false at the end of the data and on error (see Err and Torn).
func (it *Iterator) Next() bool {
	it.skipped = it.skipped[:0]
	if it.done || it.err != nil {
		return false
	}
	for {
		off, rec, _, err := it.sc.Next()
		if err == io.EOF {
			it.done = true
			if it.hint > it.sc.End() && (!it.skip || it.sc.End() == it.fileSize()) {
				// Data the header says was durable is gone.
				cerr := &segfile.CorruptionError{Path: it.r.path, Offset: it.sc.End(),
					Err: fmt.Errorf("%w (hint %d, file size %d)", segfile.ErrHintBeyondEOF, it.hint, it.sc.End())}
				if !it.skip {
					it.err = cerr
				} else {
					it.skipped = append(it.skipped, Damage{Offset: it.sc.End(), End: it.hint, Err: cerr})
				}
			}
			return false
		}
		if err != nil && !segfile.IsDecodeError(err) {
			it.err = fmt.Errorf("schedulelog: read %s: %w", it.r.path, err)
			it.done = true
			return false
		}
		if err == nil {
			var seq uint64
			var p []byte
			if seq, p, err = decodeEntry(rec); err == nil && it.started && seq <= it.seq {
				err = fmt.Errorf("%w: seq %d after %d", ErrBadEntry, seq, it.seq)
			}
			if err == nil {
				err = checkMessage(&it.r.hdr, p, &it.m)
			}
			if err == nil {
				it.off, it.seq, it.p, it.started = off, seq, p, true
				return true
			}
		} else if !it.skip {
			if off >= it.hint {
				it.torn = off
			} else {
				it.err = &segfile.CorruptionError{Path: it.r.path, Offset: off, Err: err}
			}
			it.done = true
			return false
		}
		cerr := &segfile.CorruptionError{Path: it.r.path, Offset: off, Err: err}
		if !it.skip {
			it.err = cerr
			it.done = true
			return false
		}
		next, ok, rerr := it.resync(off + Align)
		if rerr != nil {
			it.err = fmt.Errorf("schedulelog: read %s: %w", it.r.path, rerr)
			it.done = true
			return false
		}
		it.skipped = append(it.skipped, Damage{Offset: off, End: next, Torn: !ok && off >= it.hint, Err: cerr})
		if !ok {
			it.done = true
			if end := it.sc.End(); it.hint > end && end == it.fileSize() {
				it.skipped = append(it.skipped, Damage{Offset: end, End: it.hint, Err: &segfile.CorruptionError{Path: it.r.path, Offset: end,
					Err: fmt.Errorf("%w (hint %d, file size %d)", segfile.ErrHintBeyondEOF, it.hint, end)}})
			}
			return false
		}
		it.sc = segfile.NewScanner(it.r.f, next, it.sc.End(), 0)
	}
}

// resync returns the first aligned offset from from on where a valid entry
// (see Scan) starts, or the end of the scanned region and false.
func (it *Iterator) resync(from int64) (int64, bool, error) {
	var m message.Message
	for from < it.sc.End() {
		off, ok, err := it.sc.Hunt(from, Align, TypeEntry)
		if err != nil || !ok {
			return it.sc.End(), false, err
		}
		rec, _, err := it.sc.DecodeAt(off)
		if err == nil {
			seq, p, derr := decodeEntry(rec)
			if derr == nil && (!it.started || seq > it.seq) && checkMessage(&it.r.hdr, p, &m) == nil {
				return off, true, nil
			}
		}
		from = off + Align
	}
	return it.sc.End(), false, nil
}

func (it *Iterator) fileSize() int64 {
	fi, err := it.r.f.Stat()
	if err != nil {
		return -1
	}
	return fi.Size()
}

// Damage is a region of a segment that Scan skipped because no valid
// entry starts in it.
type Damage struct {
	// Offset is where the region starts: the first byte that did not
	// decode as a valid entry (for a file cut short, its end).
	Offset int64
	// End is where the next valid entry starts, or the end of the scanned
	// range if none follows (for a file cut short, its synced-length
	// hint: the bytes in between were durable and are gone).
	End int64
	// Torn is set when nothing valid follows and the region lies after
	// the synced-length hint: what a crash during a write leaves (or a
	// write in progress).
	Torn bool
	// Err is a *segfile.CorruptionError naming the file and Offset.
	Err error
}

// Skipped returns the damaged regions the last call to Next skipped:
// those before the entry it yielded, or before the end when it returned
// false. Only iterators made by Scan skip damage. The slice is valid until
// the next call to Next.
func (it *Iterator) Skipped() []Damage { return it.skipped }

// Hint returns the synced-length slot the iterator read when it was made:
// the first Len bytes of the file, holding Records entries up to seq Aux,
// were durable then. Its Len is 0 when neither slot is valid.
func (it *Iterator) Hint() segfile.Slot { return it.slot }

// Offset returns the current entry's offset (for ReadAt).
func (it *Iterator) Offset() int64 { return it.off }

// Seq returns the current entry's seq (its message.ID.Seq).
func (it *Iterator) Seq() uint64 { return it.seq }

// Message returns the current entry's message. It and the slices in it
// are valid until the next call to Next.
func (it *Iterator) Message() *message.Message { return &it.m }

// Payload returns the current entry's schedule payload, byte for byte as
// appended, valid until the next call to Next.
func (it *Iterator) Payload() []byte { return it.p }

// End returns the offset just after the last entry yielded: where an
// IterFrom continues once more has been appended.
func (it *Iterator) End() int64 {
	if it.sc == nil {
		return FirstOffset
	}
	return it.sc.Offset()
}

// Err returns the error that stopped the iterator: a *segfile.CorruptionError
// for damaged data, or an I/O error. It is nil at the end of the data.
func (it *Iterator) Err() error { return it.err }

// Torn reports the offset of an incomplete or undecodable record after the
// synced-length hint at which the iterator stopped without error.
func (it *Iterator) Torn() (off int64, ok bool) { return it.torn, it.torn >= 0 }

// Verify walks every entry of the segment at path and reports each
// problem with its file, offset and kind: a torn tail (after the synced
// length hint, what Open would truncate) or corruption (anything else).
// The error is for I/O failures only.
func Verify(path string) ([]segfile.Problem, error) { return segfile.Verify(path, newFormat()) }

// nearScan is the span IterNear leaves to a plain scan.
const nearScan = 64 << 10

// IterNear returns an iterator that starts at an entry boundary at or
// before the entry whose seq is seq (if the segment has one), close to it:
// entries are in seq order, so it bisects the file, finding an entry near
// each midpoint as Scan resynchronizes after damage, and leaves at most
// about 64 KiB to read. It is how one entry is looked up without reading
// the segment up to it. Damage makes it start earlier, never later, and
// the iterator steps over damage as Scan's does.
func (r *Reader) IterNear(seq uint64) *Iterator {
	fi, err := r.f.Stat()
	if err != nil {
		return r.Iter()
	}
	// Small reads: each probe needs one entry near its midpoint.
	sc := segfile.NewScanner(r.f, FirstOffset, fi.Size(), 4<<10)
	lo, hi := int64(FirstOffset), fi.Size()
	var m message.Message
	for hi-lo > nearScan {
		mid := (lo + (hi-lo)/2) &^ (Align - 1)
		off, ok, err := sc.Hunt(mid, Align, TypeEntry)
		if err != nil {
			break
		}
		if !ok || off >= hi {
			hi = mid
			continue
		}
		rec, _, err := sc.DecodeAt(off)
		if err != nil {
			break
		}
		s, p, derr := decodeEntry(rec)
		if derr != nil || checkMessage(&r.hdr, p, &m) != nil {
			// Not an entry after all (a payload that looks like one):
			// the plain scan from lo decides.
			break
		}
		if s <= seq {
			lo = off
		} else {
			hi = off
		}
	}
	return r.iterChunk(lo, -1, true, nearScan)
}
