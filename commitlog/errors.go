package commitlog

import "errors"

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
	// ErrDamaged is wrapped by the *segfile.CorruptionError Open returns
	// when the active segment is damaged rather than torn (a valid record
	// follows the bad one, or the data ends below Options.MinEnd), and by
	// the one an Iterator stops on: a visible record that fails its
	// checksum, in any segment.
	ErrDamaged = errors.New("commitlog: damaged segment")
)
