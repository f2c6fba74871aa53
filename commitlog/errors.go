package commitlog

import (
	"errors"
	"fmt"
)

var (
	// ErrClosed is returned by operations on a closed Log.
	ErrClosed = errors.New("commitlog: log closed")
	// ErrReadOnly is returned by Append and Truncate on a read-only Log.
	ErrReadOnly = errors.New("commitlog: log opened read-only")
	// ErrRecordTooLarge is returned for a record that cannot fit in one segment.
	ErrRecordTooLarge = errors.New("commitlog: record larger than a segment")
	// ErrOffsetTrimmed is returned for an offset below the oldest retained segment.
	ErrOffsetTrimmed = errors.New("commitlog: offset below the oldest retained segment")
	// ErrOffsetRange is returned for an offset beyond the end of the log.
	ErrOffsetRange = errors.New("commitlog: offset beyond the end of the log")
	// ErrDiskFull is wrapped by the error Append returns when no space could be
	// preallocated for the next segment. The log stays consistent and
	// readable; appends succeed again once space is freed.
	ErrDiskFull = errors.New("commitlog: disk full")
	// ErrMissingSegment means the segment files do not form a contiguous
	// sequence: a file between two others is missing.
	ErrMissingSegment = errors.New("commitlog: missing segment")
)

// CorruptionError reports a record or header that failed its checksum or
// could not be decoded in a place where a torn write is not possible. The
// operator decides what to do; the log never serves the damaged data.
type CorruptionError struct {
	File   string // path of the segment file
	Pos    int64  // byte position in the file
	Offset int64  // logical offset of the damaged record, -1 for a header
	Err    error  // the underlying decode error (record.ErrChecksum, ...)
}

func (e *CorruptionError) Error() string {
	if e.Offset < 0 {
		return fmt.Sprintf("commitlog: corrupt segment header in %s: %v", e.File, e.Err)
	}
	return fmt.Sprintf("commitlog: corruption in %s at file position %d (offset %d): %v", e.File, e.Pos, e.Offset, e.Err)
}

func (e *CorruptionError) Unwrap() error { return e.Err }
