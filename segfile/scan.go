package segfile

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/hourglassmq/hourglass/record"
)

// DefaultChunk is how many bytes a Scanner reads at a time.
const DefaultChunk = 1 << 20

// Format describes one kind of segment file to the generic code here.
type Format struct {
	// Magic is the file's first 8 bytes.
	Magic [8]byte
	// Type is the only record type the file holds.
	Type uint8
	// Align is the alignment of every record offset (1 or 8), used to
	// search for whole records past damage.
	Align int64
	// Check validates a record whose checksum holds and returns the aux
	// value to carry forward (prev and has describe the previous record's).
	// An error marks the record corrupt: its bytes are whole but impossible.
	Check func(h *Header, rec record.Record, prev uint64, has bool) (uint64, error)
}

// IsDecodeError reports whether err is one of package record's decode
// errors (as opposed to an I/O error).
func IsDecodeError(err error) bool {
	return errors.Is(err, record.ErrEnd) || errors.Is(err, record.ErrShort) ||
		errors.Is(err, record.ErrChecksum) || errors.Is(err, record.ErrBadHeader)
}

// Scanner decodes consecutive records from a file region with large reads.
// It is used by one goroutine at a time.
type Scanner struct {
	ra    io.ReaderAt
	end   int64  // scanning never reads at or past end
	chunk int    // preferred read size
	buf   []byte // buf[:n] holds the file bytes starting at bufOff
	n     int
	bufAt int64
	off   int64 // offset of the next record
}

// NewScanner returns a Scanner for the records in [from, end) of ra.
func NewScanner(ra io.ReaderAt, from, end int64, chunk int) *Scanner {
	if chunk <= 0 {
		chunk = DefaultChunk
	}
	return &Scanner{ra: ra, end: end, chunk: chunk, off: from}
}

// Offset returns the offset of the next record Next will decode.
func (s *Scanner) Offset() int64 { return s.off }

// End returns the end of the scanned region.
func (s *Scanner) End() int64 { return s.end }

// Next decodes the record at Offset. On success it advances past it; the
// payload aliases the Scanner's buffer until the next call. At the end of
// the region it returns io.EOF. A record that does not decode returns a
// record package error (see IsDecodeError) and does not advance.
func (s *Scanner) Next() (off int64, rec record.Record, size int, err error) {
	off = s.off
	if off >= s.end {
		return off, record.Record{}, 0, io.EOF
	}
	rec, size, err = s.DecodeAt(off)
	if err == nil {
		s.off += int64(size)
	}
	return off, rec, size, err
}

// DecodeAt decodes the record at off without moving the Scanner.
func (s *Scanner) DecodeAt(off int64) (record.Record, int, error) {
	b, err := s.window(off, record.HeaderSize)
	if err != nil {
		return record.Record{}, 0, err
	}
	if size := record.PeekSize(b); size > len(b) {
		if b, err = s.window(off, size); err != nil {
			return record.Record{}, 0, err
		}
	}
	return record.Decode(b)
}

// window returns the bytes from off to the end of the buffer, reading so
// that at least want bytes are there unless the region ends first.
func (s *Scanner) window(off int64, want int) ([]byte, error) {
	if rem := s.end - off; int64(want) > rem {
		want = int(max(rem, 0))
	}
	if off >= s.bufAt && off+int64(want) <= s.bufAt+int64(s.n) {
		return s.buf[off-s.bufAt : s.n], nil
	}
	size := max(want, s.chunk)
	if rem := s.end - off; int64(size) > rem {
		size = int(max(rem, 0))
	}
	if cap(s.buf) < size {
		s.buf = make([]byte, size)
	}
	n, err := s.ra.ReadAt(s.buf[:size], off)
	if err != nil && !errors.Is(err, io.EOF) {
		s.n = 0
		return nil, err
	}
	s.bufAt, s.n = off, n
	return s.buf[:n], nil
}

// Hunt looks for the next offset in [from, end), a multiple of align,
// where a whole record of type typ decodes. It reads the region once.
func (s *Scanner) Hunt(from, align int64, typ uint8) (int64, bool, error) {
	if align <= 0 {
		align = 1
	}
	if r := from % align; r != 0 {
		from += align - r
	}
	for off := from; off+record.Overhead <= s.end; off += align {
		b, err := s.window(off, record.HeaderSize)
		if err != nil {
			return 0, false, err
		}
		if len(b) < record.HeaderSize {
			break // the file shrank while we read it
		}
		if b[4] != typ || record.PeekSize(b) == 0 {
			continue
		}
		rec, _, err := s.DecodeAt(off)
		if err == nil && rec.Type == typ {
			return off, true, nil
		} else if err != nil && !IsDecodeError(err) {
			return 0, false, err
		}
	}
	return s.end, false, nil
}

// CountWhole counts the whole records of type typ in [from, end) found by
// Hunt, skipping each one found. It is how a dropped tail is described.
func (s *Scanner) CountWhole(from, align int64, typ uint8) (int, error) {
	n := 0
	for {
		off, ok, err := s.Hunt(from, align, typ)
		if err != nil || !ok {
			return n, err
		}
		n++
		_, size, _ := s.DecodeAt(off)
		from = off + int64(size)
	}
}

// ReadHeader reads and decodes the header of f (fixed part and slots).
// The returned error is a *CorruptionError for a damaged header.
func ReadHeader(f *os.File, path string, magic [8]byte) (Header, []byte, error) {
	b := make([]byte, HeaderSize)
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return Header{}, nil, err
	}
	if n < HeaderSize {
		return Header{}, nil, &CorruptionError{Path: path, Offset: int64(n), Err: ErrShortHeader}
	}
	h, err := DecodeHeader(b, magic)
	if err != nil {
		return Header{}, nil, &CorruptionError{Path: path, Offset: 0, Err: err}
	}
	return h, b, nil
}

// Verify walks every record of the file at path and reports each problem.
// The error is for I/O failures only; damage is reported as Problems.
func Verify(path string, ft Format) ([]Problem, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h, hdr, err := ReadHeader(f, path, ft.Magic)
	if ce := (*CorruptionError)(nil); errors.As(err, &ce) {
		return []Problem{{Path: path, Offset: ce.Offset, Kind: Corrupt, Err: ce.Err}}, nil
	} else if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	var probs []Problem
	hint := int64(HeaderSize)
	if s, _, ok := BestSlot(hdr); ok {
		hint = s.Len
	}
	if hint > size {
		probs = append(probs, Problem{Path: path, Offset: size, Kind: Corrupt, Bytes: hint - size,
			Err: fmt.Errorf("%w (hint %d, file size %d)", ErrHintBeyondEOF, hint, size)})
		hint = size
	}
	sc := NewScanner(f, HeaderSize, size, 0)
	var aux uint64
	var has bool
	for off := int64(HeaderSize); off < size; {
		rec, n, err := sc.DecodeAt(off)
		if err == nil {
			a, cerr := ft.Check(&h, rec, aux, has)
			if cerr != nil {
				probs = append(probs, Problem{Path: path, Offset: off, Kind: Corrupt, Bytes: int64(n), Err: cerr})
			} else {
				aux, has = a, true
			}
			off += int64(n)
			continue
		}
		if !IsDecodeError(err) {
			return probs, err
		}
		if off >= hint {
			recs, cerr := sc.CountWhole(off+ft.Align, ft.Align, ft.Type)
			if cerr != nil {
				return probs, cerr
			}
			probs = append(probs, Problem{Path: path, Offset: off, Kind: TornTail, Bytes: size - off, Records: recs, Err: err})
			break
		}
		next, _, herr := sc.Hunt(off+ft.Align, ft.Align, ft.Type)
		if herr != nil {
			return probs, herr
		}
		probs = append(probs, Problem{Path: path, Offset: off, Kind: Corrupt, Bytes: next - off, Err: err})
		off = next
	}
	return probs, nil
}
