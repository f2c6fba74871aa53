package schedulelog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/record"
	"github.com/hourglassmq/hourglass/segfile"
)

// Writer appends entries to one segment. One goroutine at a time may use
// it (reput owns it). Appends are buffered; Flush hands them to the OS and
// Sync makes them durable. After a failed write or fsync every method
// returns that error: the segment must be reopened, which recovers it.
type Writer struct {
	sf     *segfile.Writer
	closed bool
	m      message.Message // scratch for validating payloads
}

// Create creates the segment for the bucket [bucketStartMs, +d) in dir,
// durably (written as a .tmp file, fsynced, renamed, directory fsynced).
// bucketStartMs must be a whole second and d a valid duration; the start
// need not be a multiple of d (see Place). It fails with ErrExist if the
// segment exists. A dispatch log left under the same name by an
// interrupted Remove belongs to a deleted segment and is removed first.
func Create(dir string, bucketStartMs int64, d time.Duration, opts Options) (*Writer, error) {
	if err := ValidateDuration(d); err != nil {
		return nil, err
	}
	if err := validateStart(bucketStartMs); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, Name(bucketStartMs))
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("%w: %s", ErrExist, path)
	}
	done := filepath.Join(dir, DoneName(bucketStartMs))
	if err := os.Remove(done); err == nil {
		logger := opts.Logger
		if logger == nil {
			logger = slog.Default()
		}
		logger.Warn("schedulelog: removed dispatch log of a deleted segment", "path", done)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	h := segfile.Header{Magic: Magic, Start: bucketStartMs, Duration: d.Milliseconds()}
	sf, err := segfile.Create(path, h, opts.seg()) // fsyncs dir, covering the removal too
	if errors.Is(err, segfile.ErrExist) {
		return nil, fmt.Errorf("%w: %s", ErrExist, path)
	}
	if err != nil {
		return nil, fmt.Errorf("schedulelog: create: %w", err)
	}
	return &Writer{sf: sf}, nil
}

// Open opens the existing segment starting at bucketStartMs in dir for
// append. It reads only the tail written after the last recorded sync
// (never the whole file, unless its hint slots are both damaged),
// truncates a torn tail, and reports what it found in the Recovery. After
// Open everything in the file is durable and LastSeq is the last entry's
// seq. Damage before the hint is a *segfile.CorruptionError and the file is left
// as it is.
func Open(dir string, bucketStartMs int64, opts Options) (*Writer, segfile.Recovery, error) {
	path := filepath.Join(dir, Name(bucketStartMs))
	so := opts.seg()
	so.CheckHeader = func(h segfile.Header) error {
		if h.Start != bucketStartMs {
			return &segfile.CorruptionError{Path: path, Offset: headerStartOffset,
				Err: fmt.Errorf("%w: header start %d does not match the file name", segfile.ErrHeaderValue, h.Start)}
		}
		return nil
	}
	sf, rec, err := segfile.Open(path, newFormat(), so)
	if err != nil {
		return nil, rec, err
	}
	return &Writer{sf: sf}, rec, nil
}

// Path returns the segment's file path.
func (w *Writer) Path() string { return w.sf.Path() }

// Start returns the bucket start in UTC epoch milliseconds.
func (w *Writer) Start() int64 { return w.sf.Header().Start }

// Duration returns the bucket length recorded in the segment's header.
func (w *Writer) Duration() time.Duration {
	return time.Duration(w.sf.Header().Duration) * time.Millisecond
}

// Size returns the segment's length including buffered entries.
func (w *Writer) Size() int64 { return w.sf.Size() }

// Entries returns the number of entries in the segment, buffered included.
func (w *Writer) Entries() uint64 { return w.sf.Records() }

// LastSeq returns the seq of the last entry appended (or recovered by
// Open); ok is false for an empty segment.
func (w *Writer) LastSeq() (seq uint64, ok bool) { return w.sf.Aux(), w.sf.Records() > 0 }

// Append adds the entry for commitlog record seq with the schedule payload
// p (exactly as message.AppendSchedule produced it; it is stored verbatim)
// and returns its offset, a multiple of 8. It buffers: nothing reaches the
// OS until the buffer fills or Flush or Sync is called. It rejects a seq
// not above LastSeq (ErrSeqOrder), a malformed payload (ErrBadPayload) and
// a deliverAt outside the bucket (ErrOutOfBucket) without writing.
func (w *Writer) Append(seq uint64, p []byte) (int64, error) {
	if w.closed {
		return 0, ErrClosed
	}
	if last, ok := w.LastSeq(); ok && seq <= last {
		return 0, fmt.Errorf("%w: seq %d after %d in %s", ErrSeqOrder, seq, last, w.Path())
	}
	if err := message.DecodeSchedule(p, &w.m); err != nil {
		return 0, fmt.Errorf("%w (seq %d): %w", ErrBadPayload, seq, err)
	}
	if h := w.sf.Header(); w.m.DeliverAt < h.Start || w.m.DeliverAt >= h.End() {
		return 0, fmt.Errorf("%w: seq %d is due at %s; %s holds [%s, %s)", ErrOutOfBucket, seq,
			fmtMs(w.m.DeliverAt), filepath.Base(w.Path()), fmtMs(h.Start), fmtMs(h.End()))
	}
	n, pad := entryPayloadSize(len(p))
	if n > record.MaxPayload {
		return 0, fmt.Errorf("%w: %d bytes (seq %d)", ErrTooLarge, n, seq)
	}
	off, dst, err := w.sf.Reserve(record.Size(n))
	if err != nil {
		return 0, err
	}
	record.PutHeader(dst, TypeEntry, uint8(pad), n)
	binary.LittleEndian.PutUint64(dst[record.HeaderSize:], seq)
	q := record.HeaderSize + entryMeta + copy(dst[record.HeaderSize+entryMeta:], p)
	clear(dst[q : q+pad])
	record.Seal(dst)
	w.sf.Commit(1, seq)
	return off, nil
}

// Flush writes buffered entries to the OS: afterwards ReadAt and
// iterators on any descriptor of the file see them. They are not durable.
func (w *Writer) Flush() error {
	if w.closed {
		return ErrClosed
	}
	return w.sf.Flush()
}

// Sync makes every entry appended so far durable, then records the synced
// length in a header slot so that a later Open scans only what follows.
func (w *Writer) Sync() error {
	if w.closed {
		return ErrClosed
	}
	return w.sf.Sync()
}

// Close syncs and closes the segment. The next Open scans nothing.
func (w *Writer) Close() error {
	if w.closed {
		return ErrClosed
	}
	w.closed = true
	return w.sf.Close()
}

// entryPayloadSize returns the record payload size for a schedule payload
// of n bytes and the padding that makes the framed record a multiple of 8.
func entryPayloadSize(n int) (size, pad int) {
	size = entryMeta + n
	pad = -size & (Align - 1)
	return size + pad, pad
}

// decodeEntry splits an entry record into its seq and schedule payload.
// It never panics and never returns padding as payload.
func decodeEntry(rec record.Record) (seq uint64, p []byte, err error) {
	if rec.Type != TypeEntry {
		return 0, nil, fmt.Errorf("%w: record type %#x, want %#x", ErrBadEntry, rec.Type, TypeEntry)
	}
	pad, q := int(rec.Flags), rec.Payload
	if len(q)%Align != 0 || pad >= Align || len(q) < entryMeta+pad {
		return 0, nil, fmt.Errorf("%w: payload of %d bytes with %d bytes of padding", ErrBadEntry, len(q), pad)
	}
	for _, c := range q[len(q)-pad:] {
		if c != 0 {
			return 0, nil, fmt.Errorf("%w: nonzero padding", ErrBadEntry)
		}
	}
	return binary.LittleEndian.Uint64(q), q[entryMeta : len(q)-pad], nil
}

// newFormat describes schedule segments to package segfile. Its check
// holds scratch state, so each scan gets its own.
func newFormat() segfile.Format {
	var m message.Message
	return segfile.Format{Magic: Magic, Type: TypeEntry, Align: Align,
		Check: func(h *segfile.Header, rec record.Record, prev uint64, has bool) (uint64, error) {
			seq, p, err := decodeEntry(rec)
			if err != nil {
				return 0, err
			}
			if has && seq <= prev {
				return 0, fmt.Errorf("%w: seq %d after %d", ErrBadEntry, seq, prev)
			}
			return seq, checkMessage(h, p, &m)
		}}
}

// checkMessage decodes a stored schedule payload into m and checks that it
// is due inside the segment's bucket.
func checkMessage(h *segfile.Header, p []byte, m *message.Message) error {
	if err := message.DecodeSchedule(p, m); err != nil {
		return fmt.Errorf("%w: %w", ErrBadEntry, err)
	}
	if m.DeliverAt < h.Start || m.DeliverAt >= h.End() {
		return fmt.Errorf("%w: deliverAt %s outside the bucket [%s, %s)", ErrBadEntry,
			fmtMs(m.DeliverAt), fmtMs(h.Start), fmtMs(h.End()))
	}
	return nil
}

func fmtMs(ms int64) string { return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z") }
