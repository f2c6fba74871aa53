package segfile

import "fmt"

// CorruptionError is the one error every Hourglass log reports damaged data
// with: a record or header that fails its checksum or its checks where the
// data is known (or required) to be whole, or logs that contradict each
// other. The damaged bytes are never returned as data; the operator
// decides what to do. Callers match it with errors.As and its cause with
// errors.Is (record.ErrChecksum, ErrBadMagic, a package's malformed-record
// error).
type CorruptionError struct {
	// Path is the damaged file, or the log directory when the damage is
	// not in one file (a checkpoint that names data the log lacks).
	Path string
	// Offset is the byte offset in Path of the damaged record or header
	// field, or -1 when the damage is not at one place.
	Offset int64
	// Err is the cause: a record or header decode error, or the check
	// that failed.
	Err error
}

// Error names the file, the offset and the cause.
func (e *CorruptionError) Error() string {
	if e.Offset < 0 {
		return fmt.Sprintf("corrupt data in %s: %v", e.Path, e.Err)
	}
	return fmt.Sprintf("corrupt data in %s at offset %d: %v", e.Path, e.Offset, e.Err)
}

// Unwrap returns the cause, so errors.Is(err, record.ErrChecksum) works.
func (e *CorruptionError) Unwrap() error { return e.Err }

// Kind classifies a Problem found by Verify.
type Kind uint8

// Problem kinds.
const (
	// TornTail is undecodable data after the synced-length hint: what a
	// crash leaves behind. Opening the file for append truncates it.
	TornTail Kind = iota + 1
	// Corrupt is damage that opening for append will not repair: a bad
	// record before the hint, a bad header, or a record whose checksum
	// holds but whose content is impossible.
	Corrupt
)

// String returns "torn tail" or "corruption".
func (k Kind) String() string {
	switch k {
	case TornTail:
		return "torn tail"
	case Corrupt:
		return "corruption"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Problem is one finding of Verify.
type Problem struct {
	Path    string // the file
	Offset  int64  // where the damaged region starts
	Kind    Kind   // torn tail or corruption
	Bytes   int64  // length of the damaged region (to the next good record or end of file)
	Records int    // whole records found inside a torn tail (they are dropped with it)
	Err     error  // the first decode or check error in the region
}

// String describes the problem on one line: file, kind, offset, extent
// and cause.
func (p Problem) String() string {
	s := fmt.Sprintf("%s: %s at offset %d (%d bytes", p.Path, p.Kind, p.Offset, p.Bytes)
	if p.Records > 0 {
		s += fmt.Sprintf(", %d whole records", p.Records)
	}
	return s + fmt.Sprintf("): %v", p.Err)
}

// Recovery reports what opening a file for append found and did.
type Recovery struct {
	Path      string // the file
	From      int64  // where the tail scan started: the synced-length hint, or HeaderSize without one
	HintValid bool   // a valid slot was found
	Scanned   int64  // bytes decoded after From
	Truncated bool   // a torn tail was cut off
	Offset    int64  // where the file was cut (its new length)
	Bytes     int64  // bytes cut off
	Records   int    // whole records found in the cut-off bytes (dropped with them)
	Err       error  // why the record at Offset failed to decode
}

// String describes the recovery on one line, for logs and tools.
func (r Recovery) String() string {
	if !r.Truncated {
		return fmt.Sprintf("%s: clean (scanned %d bytes from offset %d)", r.Path, r.Scanned, r.From)
	}
	return fmt.Sprintf("%s: torn tail truncated at offset %d: dropped %d bytes, %d whole records (%v)",
		r.Path, r.Offset, r.Bytes, r.Records, r.Err)
}
