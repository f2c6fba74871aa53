// Package record is the checksummed framing shared by every Hourglass log:
// the commitlog, the schedule segments and the dispatch logs. It knows
// nothing about files; it encodes one record into a byte slice and decodes
// one record from a byte slice, without allocating.
//
// A framed record on disk:
//
//	0       4      5       6       8                    8+n        16+n
//	+-------+------+-------+-------+--------------------+----------+
//	| n u32 | type | flags | 0 u16 |  payload (n bytes) | xxh64    |
//	+-------+------+-------+-------+--------------------+----------+
//	|<------------ header -------->|                    |  u64     |
//
// All integers are little-endian. The checksum is xxhash64 over the header
// and the payload. Type 0 is never written, so a region of zero bytes (the
// unwritten, preallocated part of a segment) decodes as [ErrEnd] rather than
// as a record: this is how readers find the end of the written data.
//
// The layout above is part of the on-disk format (docs/FORMAT.md) and must
// not change without a new format version in the files that contain it.
//
// It owns the record framing only, and imports no other Hourglass package:
// every log imports it.
package record

import (
	"encoding/binary"
	"errors"

	"github.com/cespare/xxhash/v2"
)

// Framing constants. They are part of the on-disk format and must not change.
const (
	// HeaderSize is the size of the fixed header before the payload.
	HeaderSize = 8
	// TrailerSize is the size of the checksum after the payload.
	TrailerSize = 8
	// Overhead is the number of bytes framing adds to a payload.
	Overhead = HeaderSize + TrailerSize
	// MaxPayload is the largest payload a record may carry (64 MiB). It
	// bounds what a reader trusts from a length field before the checksum
	// has been verified.
	MaxPayload = 64 << 20
)

var (
	// ErrEnd means the bytes at this position are zero: nothing was
	// written here. It is the normal end of a preallocated segment.
	ErrEnd = errors.New("record: end of data")
	// ErrShort means the slice ends before the record does: either the
	// record continues past the buffer or the write was torn.
	ErrShort = errors.New("record: truncated record")
	// ErrChecksum means the record's checksum does not match its bytes.
	ErrChecksum = errors.New("record: checksum mismatch")
	// ErrBadHeader means the header is impossible (type 0 with a length,
	// reserved bits set, or a length above MaxPayload).
	ErrBadHeader = errors.New("record: malformed header")
	// ErrTooLarge is returned by Encode for a payload above MaxPayload.
	ErrTooLarge = errors.New("record: payload larger than 64 MiB")
	// ErrInvalidType is returned by Encode for type 0, which is reserved.
	ErrInvalidType = errors.New("record: type 0 is reserved")
)

// Size returns the framed size of a record with a payload of n bytes.
func Size(n int) int { return n + Overhead }

// Encode frames a record with the given type, flags and payload into dst,
// which must be at least Size(len(payload)) bytes long, and returns the
// number of bytes written. It does not allocate.
func Encode(dst []byte, typ, flags uint8, payload []byte) (int, error) {
	if typ == 0 {
		return 0, ErrInvalidType
	}
	if len(payload) > MaxPayload {
		return 0, ErrTooLarge
	}
	n := Size(len(payload))
	if len(dst) < n {
		return 0, ErrShort
	}
	PutHeader(dst, typ, flags, len(payload))
	copy(dst[HeaderSize:], payload)
	Seal(dst[:n])
	return n, nil
}

// PutHeader writes the header of a record whose payload of n bytes the
// caller will place at dst[HeaderSize:] itself (to encode a payload in place
// without an intermediate buffer). Call Seal once the payload is written.
func PutHeader(dst []byte, typ, flags uint8, n int) {
	binary.LittleEndian.PutUint32(dst[0:4], uint32(n))
	dst[4] = typ
	dst[5] = flags
	dst[6] = 0
	dst[7] = 0
}

// Seal computes and writes the checksum of the record occupying all of rec,
// whose header and payload are already in place.
func Seal(rec []byte) {
	body := len(rec) - TrailerSize
	binary.LittleEndian.PutUint64(rec[body:], xxhash.Sum64(rec[:body]))
}

// Record is a decoded record. Payload aliases the buffer it was decoded
// from and is only valid while that buffer is.
type Record struct {
	Type    uint8
	Flags   uint8
	Payload []byte
}

// Decode decodes the record at the start of src and returns it with its
// framed size. It never allocates and never trusts a length before checking
// it against src and MaxPayload. Errors: ErrEnd (zero header: no record
// here), ErrShort (src ends inside the record), ErrBadHeader, ErrChecksum.
func Decode(src []byte) (Record, int, error) {
	if len(src) < HeaderSize {
		if allZero(src) {
			return Record{}, 0, ErrEnd
		}
		return Record{}, 0, ErrShort
	}
	n := binary.LittleEndian.Uint32(src[0:4])
	typ, flags := src[4], src[5]
	if typ == 0 {
		if n == 0 && flags == 0 && src[6] == 0 && src[7] == 0 {
			return Record{}, 0, ErrEnd
		}
		return Record{}, 0, ErrBadHeader
	}
	if src[6] != 0 || src[7] != 0 || n > MaxPayload {
		return Record{}, 0, ErrBadHeader
	}
	size := Size(int(n))
	if len(src) < size {
		return Record{}, 0, ErrShort
	}
	body := size - TrailerSize
	if xxhash.Sum64(src[:body]) != binary.LittleEndian.Uint64(src[body:size]) {
		return Record{}, 0, ErrChecksum
	}
	return Record{Type: typ, Flags: flags, Payload: src[HeaderSize:body:body]}, size, nil
}

// PeekSize returns the framed size the header at the start of src claims,
// or 0 when src holds no plausible header. It does not verify the checksum.
func PeekSize(src []byte) int {
	if len(src) < HeaderSize || src[4] == 0 {
		return 0
	}
	n := binary.LittleEndian.Uint32(src[0:4])
	if n > MaxPayload {
		return 0
	}
	return Size(int(n))
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
