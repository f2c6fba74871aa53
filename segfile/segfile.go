// Package segfile is the file layer Hourglass's logs share. It owns:
//
//   - CorruptionError, the one typed error every log (commitlog, schedule
//     segments, dispatch logs, the queue's logs) reports damage with: file,
//     offset and cause;
//   - durable file creation: CreateAtomic (tmp, fsync, rename, fsync the
//     directory), SyncDir, and the removal of leftover temporary files;
//   - the segment-file format of the schedule segments (package
//     schedulelog) and the dispatch logs (package dispatchlog): a fixed
//     header with two synced-length hint slots, followed by records framed
//     by package record, with the buffering, fsync, torn-tail recovery,
//     chunked scanning and verification both formats need. What a record
//     means is left to the caller (a Format).
//
// It imports package record and nothing else of Hourglass; every log
// package may import it.
//
// File layout, all integers little-endian:
//
//	0        8        12       16             24             32        40
//	+--------+--------+--------+--------------+--------------+---------+
//	| magic  | ver u32| 0 u32  | start i64 ms | duration i64 | xxh64   |  fixed header
//	+--------+--------+--------+--------------+--------------+---------+
//	40                                                                  72
//	+-----------------+-----------------+-----------------+------------+
//	| synced len u64  | records u64     | aux u64         | xxh64      |  slot A
//	+-----------------+-----------------+-----------------+------------+
//	72                                                                 104
//	| synced len u64  | records u64     | aux u64         | xxh64      |  slot B
//	+-----------------+-----------------+-----------------+------------+
//	104: records (package record framing), back to back, to end of file
//
// The fixed header's checksum is xxhash64 of bytes [0, 32). A slot's
// checksum is xxhash64 of its 24 value bytes followed by one byte holding
// the slot index (0 for A, 1 for B), so an all-zero slot is invalid.
//
// A slot says: the first "synced len" bytes of the file (header included)
// were durable, holding "records" records, and "aux" is the format's
// running value at that point (schedulelog: the last entry's seq). After
// each successful fsync the writer stores the new state in the slot it did
// not write last; that slot write becomes durable with the next fsync.
// Slots are therefore only ever a lower bound of the durable data, and a
// torn slot write leaves the other slot, already durable, intact. On open
// for append the larger valid slot is trusted and only the bytes after it
// are scanned; a record that fails to decode there is a torn tail and is
// truncated away. A record that fails before it is corruption.
//
// The layout above is part of the on-disk format (docs/FORMAT.md)
// and must not change without a new version.
package segfile

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cespare/xxhash/v2"
	"github.com/hourglassmq/hourglass/record"
)

// Format constants. They are part of the on-disk format and must not change.
const (
	// Version is the format version written in every header.
	Version = 1
	// HeaderSize is the size of the header (fixed part and both slots);
	// the first record starts here. It is a multiple of 8.
	HeaderSize = 104

	// FixedSize is the fixed part of the header: magic through its
	// checksum; the hint slots follow it.
	FixedSize = 40
	fixedSize = FixedSize
	slotSize  = 32 // one hint slot
	slotAOff  = fixedSize
	slotBOff  = fixedSize + slotSize

	// MinDurationMs and MaxDurationMs bound a segment's duration; it must
	// also be a whole number of seconds.
	MinDurationMs = 1000
	MaxDurationMs = 24 * 3600 * 1000
)

// Corruption causes found in headers.
var (
	// ErrBadMagic means the file does not start with the expected magic.
	ErrBadMagic = errors.New("segment header: wrong magic number (not this kind of file)")
	// ErrVersion means the header names a format version this code does not know.
	ErrVersion = errors.New("segment header: unsupported format version")
	// ErrHeaderChecksum means the fixed header's checksum does not match.
	ErrHeaderChecksum = errors.New("segment header: checksum mismatch")
	// ErrHeaderValue means the header's checksum is fine but a field is impossible.
	ErrHeaderValue = errors.New("segment header: impossible field value")
	// ErrShortHeader means the file is shorter than a header.
	ErrShortHeader = errors.New("segment header: file shorter than the header")
	// ErrHintBeyondEOF means a valid slot claims more durable bytes than the
	// file holds: data that was synced is gone.
	ErrHintBeyondEOF = errors.New("segment: synced length hint is beyond the end of the file")
)

// Header is the fixed part of a segment file header.
type Header struct {
	Magic    [8]byte
	Start    int64 // bucket start, UTC epoch milliseconds (a whole second)
	Duration int64 // milliseconds (a whole number of seconds, 1 s to 24 h)
}

// End returns the first millisecond after the bucket.
func (h Header) End() int64 { return h.Start + h.Duration }

// ValidDuration reports whether ms is an allowed segment duration.
func ValidDuration(ms int64) bool {
	return ms >= MinDurationMs && ms <= MaxDurationMs && ms%1000 == 0
}

// ValidStart reports whether ms is an allowed bucket start: a whole second,
// not before 1970 and not after year 9999 (so names stay 16 characters).
func ValidStart(ms int64) bool {
	return ms >= 0 && ms%1000 == 0 && ms <= maxStartMs
}

// maxStartMs is 9999-12-31T23:59:59Z.
const maxStartMs = 253402300799000

// EncodeHeader returns a full header for h whose slot A says that nothing
// but the header is durable and whose slot B is empty.
func EncodeHeader(h Header) []byte {
	b := make([]byte, HeaderSize)
	copy(b[0:8], h.Magic[:])
	binary.LittleEndian.PutUint32(b[8:12], Version)
	binary.LittleEndian.PutUint64(b[16:24], uint64(h.Start))
	binary.LittleEndian.PutUint64(b[24:32], uint64(h.Duration))
	binary.LittleEndian.PutUint64(b[32:40], xxhash.Sum64(b[0:32]))
	PutSlot(b[slotAOff:slotAOff+slotSize], 0, Slot{Len: HeaderSize})
	return b
}

// DecodeHeader decodes the fixed header at the start of b and checks it
// against magic. It never panics on any input.
func DecodeHeader(b []byte, magic [8]byte) (Header, error) {
	if len(b) < fixedSize {
		return Header{}, ErrShortHeader
	}
	if [8]byte(b[0:8]) != magic {
		return Header{}, ErrBadMagic
	}
	if xxhash.Sum64(b[0:32]) != binary.LittleEndian.Uint64(b[32:40]) {
		return Header{}, ErrHeaderChecksum
	}
	if v := binary.LittleEndian.Uint32(b[8:12]); v != Version {
		return Header{}, fmt.Errorf("%w %d (this build reads %d)", ErrVersion, v, Version)
	}
	h := Header{
		Magic:    magic,
		Start:    int64(binary.LittleEndian.Uint64(b[16:24])),
		Duration: int64(binary.LittleEndian.Uint64(b[24:32])),
	}
	if binary.LittleEndian.Uint32(b[12:16]) != 0 || !ValidStart(h.Start) || !ValidDuration(h.Duration) {
		return Header{}, ErrHeaderValue
	}
	return h, nil
}

// Slot is one synced-length hint.
type Slot struct {
	Len     int64  // the first Len bytes of the file were durable
	Records uint64 // records in [HeaderSize, Len)
	Aux     uint64 // the format's running value at Len (schedulelog: last seq)
}

// SlotOffset returns the file offset of slot i (0 or 1).
func SlotOffset(i int) int64 { return int64(slotAOff + i*slotSize) }

// PutSlot encodes s as slot i into dst, which must be 32 bytes.
func PutSlot(dst []byte, i int, s Slot) {
	binary.LittleEndian.PutUint64(dst[0:8], uint64(s.Len))
	binary.LittleEndian.PutUint64(dst[8:16], s.Records)
	binary.LittleEndian.PutUint64(dst[16:24], s.Aux)
	binary.LittleEndian.PutUint64(dst[24:32], slotSum(dst[0:24], i))
}

// DecodeSlot decodes slot i from its 32 bytes. ok is false for a torn,
// empty or impossible slot. It never panics on any input.
func DecodeSlot(b []byte, i int) (s Slot, ok bool) {
	if len(b) < slotSize || slotSum(b[0:24], i) != binary.LittleEndian.Uint64(b[24:32]) {
		return Slot{}, false
	}
	s = Slot{
		Len:     int64(binary.LittleEndian.Uint64(b[0:8])),
		Records: binary.LittleEndian.Uint64(b[8:16]),
		Aux:     binary.LittleEndian.Uint64(b[16:24]),
	}
	// A record is at least record.Overhead bytes long.
	if s.Len < HeaderSize || s.Records > uint64(s.Len-HeaderSize)/record.Overhead {
		return Slot{}, false
	}
	return s, true
}

// BestSlot returns the valid slot with the larger length from a full
// header, and which slot it was. ok is false when neither slot is valid.
func BestSlot(hdr []byte) (s Slot, i int, ok bool) {
	if len(hdr) < HeaderSize {
		return Slot{}, 0, false
	}
	a, okA := DecodeSlot(hdr[slotAOff:slotAOff+slotSize], 0)
	b, okB := DecodeSlot(hdr[slotBOff:slotBOff+slotSize], 1)
	switch {
	case okA && okB && b.Len > a.Len, !okA && okB:
		return b, 1, true
	case okA:
		return a, 0, true
	}
	return Slot{}, 0, false
}

func slotSum(vals []byte, i int) uint64 {
	var b [25]byte
	copy(b[:24], vals)
	b[24] = byte(i)
	return xxhash.Sum64(b[:])
}
