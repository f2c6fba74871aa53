package commitlog

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/hourglassmq/hourglass/record"
)

// TypeSkip is the record type the log reserves for a skip record: a record
// that readers step over, with the bytes after it up to its span. It is
// written only by repair (hourglass repair), over a damaged span, so that
// the offsets around the damage stay what they were and no offset is ever
// used twice. Append refuses it.
//
// A skip record's span, counted from its first byte, is its own framed
// size when its payload is shorter than 8 bytes, and otherwise the u64
// (little-endian) at the start of its payload, which is at least its
// framed size. The bytes inside the span after the record are not read.
// The type value is part of the on-disk format (docs/FORMAT.md).
const TypeSkip uint8 = 0xFF

// skipPayload is the payload size of the skip records this package writes.
const skipPayload = 8

// SkipRecordSize is the framed size of the smallest skip record that
// carries a span: a damaged span shorter than this is covered by a skip
// record without one (its payload padded to fill the span exactly), which
// needs at least record.Overhead bytes.
const SkipRecordSize = record.Overhead + skipPayload

var errSkipReserved = fmt.Errorf("commitlog: record type %d is reserved for skip records", TypeSkip)

var errBadSkip = errors.New("skip record span is shorter than the record or runs past the segment")

// decodeSpan decodes the record at the start of src. It returns the record,
// the number of bytes it covers (for a skip record, its span) and whether
// it is a skip record. Errors are record.Decode's, and errBadSkip.
func decodeSpan(src []byte) (record.Record, int, bool, error) {
	rec, n, err := record.Decode(src)
	if err != nil || rec.Type != TypeSkip {
		return rec, n, false, err
	}
	if len(rec.Payload) < skipPayload {
		return rec, n, true, nil
	}
	span := binary.LittleEndian.Uint64(rec.Payload)
	if span < uint64(n) || span > uint64(len(src)) {
		return rec, 0, true, fmt.Errorf("%w: span %d, record %d bytes, %d bytes left", errBadSkip, span, n, len(src))
	}
	return rec, int(span), true, nil
}

// PutSkip writes into dst a skip record covering all of dst, which must be
// at least record.Overhead bytes long, and returns how many bytes it wrote
// (the record itself: the rest of dst is left as it is).
func PutSkip(dst []byte) (int, error) {
	if len(dst) < SkipRecordSize {
		if len(dst) < record.Overhead {
			return 0, fmt.Errorf("commitlog: a skip record needs %d bytes, the span has %d", record.Overhead, len(dst))
		}
		// Too short for a span field: the record fills the span itself.
		pad := make([]byte, len(dst)-record.Overhead)
		return record.Encode(dst, TypeSkip, 0, pad)
	}
	return putSkipSpan(dst, int64(len(dst)))
}

// putSkipSpan writes into dst (at least SkipRecordSize bytes) a skip
// record with the given span, which is at least SkipRecordSize.
func putSkipSpan(dst []byte, span int64) (int, error) {
	if span < SkipRecordSize {
		return 0, fmt.Errorf("commitlog: a skip record's span of %d bytes is shorter than the record", span)
	}
	var p [skipPayload]byte
	binary.LittleEndian.PutUint64(p[:], uint64(span))
	return record.Encode(dst, TypeSkip, 0, p[:])
}
