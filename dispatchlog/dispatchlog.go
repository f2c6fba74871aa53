// Package dispatchlog records which entries of a schedule segment are done
// (delivered, cancelled or dead-lettered), so that a restart skips them.
// There is one dispatch log per schedule segment, named like it with the
// suffix .done (20261130T050000Z.sched → 20261130T050000Z.done), and it is
// deleted with its segment (schedulelog.Remove). A log is created as
// name.done.tmp and renamed into place; a leftover .tmp is never read and
// is removed at start-up by schedulelog.RemoveTemp.
//
// The file:
//
//	0                                                              104
//	+----------------------------------------------------------------+
//	| header: magic "HGDONE\0\0", version, bucket start ms,           |
//	|   duration ms, xxh64; synced-length slots A and B               |
//	|   (the same layout as schedule segments: package segfile)       |
//	+----------------------------------------------------------------+
//	| done | done | done | ...                      (to end of file)  |
//	+----------------------------------------------------------------+
//
// A done-record is one record (package record) of type TypeDone, 25 bytes:
//
//	0       4      5       6     8         16       17       25
//	+-------+------+-------+-----+---------+--------+--------+
//	| 9 u32 | 0x44 | 0     | 0   | seq u64 | reason | xxh64  |
//	+-------+------+-------+-----+---------+--------+--------+
//
// seq is the message.ID.Seq of the entry in the schedule segment; reason
// is a Reason. Records are in completion order, not seq order, and a seq
// may appear more than once (a redelivery after a crash records it again).
//
// Load refuses a log damaged before its synced length, since a partial
// set could hide a done entry; LoadSalvage reads every valid record past
// damage and lists the damaged regions, for a caller that then holds back
// what the damage may hide (the engine), and RecordsSalvage gives a repair
// the records themselves.
//
// Appends are group-committed: AppendSync returns once an fsync that
// started after its records were written has completed, and concurrent
// callers share fsyncs. Recovery is that of the schedule segments: the
// synced length is kept in alternating header slots, and opening for
// append scans and truncates only the tail after it.
//
// The layout above is part of the on-disk format (docs/FORMAT.md)
// and must not change without a new version.
//
// It owns the dispatch logs (*.done) of one directory, and imports only
// packages record and segfile.
package dispatchlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hourglassmq/hourglass/record"
	"github.com/hourglassmq/hourglass/segfile"
)

// Format constants. They are part of the on-disk format and must not change.
const (
	// TypeDone is the record type of a done-record.
	TypeDone uint8 = 0x44 // 'D'
	// Suffix ends every dispatch log's file name.
	Suffix = ".done"
	// PayloadSize is the size of a done-record's payload: seq and reason.
	PayloadSize = 9
	// RecordSize is the framed size of a done-record.
	RecordSize = PayloadSize + record.Overhead
	// MaxSeq is the largest seq a done-record may name: seqs are commitlog
	// offsets, and readers pack a seq and its reason in one word.
	MaxSeq = 1<<61 - 1
)

// Magic starts every dispatch log. Part of the on-disk format.
var Magic = [8]byte{'H', 'G', 'D', 'O', 'N', 'E', 0, 0}

// Reason says why an entry is done. The values are part of the on-disk format.
type Reason uint8

// Reasons. Part of the on-disk format.
const (
	// Delivered means the sink confirmed delivery.
	Delivered Reason = 1
	// Cancelled means a Cancel removed the entry before delivery.
	Cancelled Reason = 2
	// DeadLettered means the entry ran out of attempts and went to the
	// dead-letter topic.
	DeadLettered Reason = 3
	// Lost is a marker, not a done-record of an entry (its seq is 0): the
	// log was created in place of one that was lost (Options.CreateLost),
	// so entries with no record before it may have been done. Readers
	// report a log whose last marker is Lost (Salvage.Lost, Counts.Lost).
	Lost Reason = 4
	// Recovered is a marker (seq 0) appended once what the lost log held
	// has been recovered (the engine read the cancels back from the
	// commitlog, and nothing of the bucket can have been delivered): the
	// log is whole again.
	Recovered Reason = 5
	// Rescheduled means a Reschedule replaced the entry by another (a
	// cancel whose record also scheduled the replacement).
	Rescheduled Reason = 6
)

// String returns "delivered", "cancelled" or "dead-lettered".
func (r Reason) String() string {
	switch r {
	case Delivered:
		return "delivered"
	case Cancelled:
		return "cancelled"
	case DeadLettered:
		return "dead-lettered"
	case Lost:
		return "lost-marker"
	case Recovered:
		return "recovered-marker"
	case Rescheduled:
		return "rescheduled"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Valid reports whether r is one of the defined reasons or markers.
func (r Reason) Valid() bool { return r >= Delivered && r <= Rescheduled }

// Marker reports whether r is a marker (Lost, Recovered) rather than the
// reason an entry is done.
func (r Reason) Marker() bool { return r == Lost || r == Recovered }

// Done is one done-record: the entry with this seq is done for this reason.
type Done struct {
	Seq    uint64 // the entry's message.ID.Seq (commitlog offset of its schedule record)
	Reason Reason // why it is done
}

var (
	// ErrBadReason is returned by Append for a Reason that is not defined.
	ErrBadReason = errors.New("dispatchlog: invalid reason")
	// ErrClosed is returned by a Writer's methods after Close.
	ErrClosed = errors.New("dispatchlog: writer closed")
	// ErrMismatch is returned by Open when the existing dispatch log's
	// header names another bucket or duration than its segment.
	ErrMismatch = errors.New("dispatchlog: dispatch log does not match its segment")
	// ErrBadBucket is returned by Open for a bucket start or duration that
	// no schedule segment can have.
	ErrBadBucket = errors.New("dispatchlog: invalid bucket")
	// ErrBadRecord is the cause inside a segfile.CorruptionError for a
	// done-record whose checksum holds but whose content is impossible.
	ErrBadRecord = errors.New("dispatchlog: malformed done-record")
)

// Name returns the file name of the dispatch log of the segment starting
// at bucketStartMs, e.g. 20261130T050000Z.done.
func Name(bucketStartMs int64) string { return segfile.BaseName(bucketStartMs) + Suffix }

// ParseName returns the bucket start a dispatch log's file name encodes.
func ParseName(name string) (bucketStartMs int64, ok bool) {
	return segfile.ParseBaseName(name, Suffix)
}

// Options configure a Writer. The zero value is ready to use.
type Options struct {
	// SyncFile makes the file durable. Default (*os.File).Sync; tests count
	// or fail fsyncs here.
	SyncFile func(*os.File) error
	// Logger receives a warning for every torn tail Open truncates.
	// Default slog.Default().
	Logger *slog.Logger
	// CreateLost makes Open create a missing log with a Lost marker as its
	// first record. It is for callers that open the log of a segment that
	// must already have one (the engine creates a segment's dispatch log
	// with the segment), so that a log created in place of a lost one
	// says so instead of passing for a whole, empty one.
	CreateLost bool

	// bufferSize is how many bytes Append gathers before writing them to
	// the OS; default segfile's (256 KiB). Tests make it small.
	bufferSize int
}

// Writer appends done-records to one dispatch log. All its methods are
// safe for concurrent use. After a failed write or fsync every method
// returns that error (it is sticky); reopening the log recovers it.
type Writer struct {
	// syncMu is held by the goroutine running an fsync; others queue on it
	// and find, once they get it, that the fsync they waited for covered
	// their records.
	syncMu sync.Mutex
	mu     sync.Mutex      // guards sf (except sf.SyncFile) and closed
	sf     *segfile.Writer // guarded by mu
	closed bool            // guarded by mu
}

// Open opens the dispatch log of the segment [bucketStartMs, +d) in dir
// for append, creating it (durably) if it does not exist. An existing log
// is recovered as schedulelog.Open recovers segments: only the tail after
// the last recorded sync is read, and a torn tail is truncated and
// reported. A log whose header names another start or duration fails with
// ErrMismatch; damage before the hint is a *segfile.CorruptionError.
func Open(dir string, bucketStartMs int64, d time.Duration, opts Options) (*Writer, segfile.Recovery, error) {
	h := segfile.Header{Magic: Magic, Start: bucketStartMs, Duration: d.Milliseconds()}
	if !segfile.ValidStart(h.Start) || !segfile.ValidDuration(h.Duration) || d%time.Second != 0 {
		return nil, segfile.Recovery{}, fmt.Errorf("%w: start %d ms, duration %v; the start must be a whole second from 1970 to 9999 (UTC epoch ms) and the duration a whole number of seconds from 1s to 24h",
			ErrBadBucket, bucketStartMs, d)
	}
	path := filepath.Join(dir, Name(bucketStartMs))
	so := segfile.Options{BufferSize: opts.bufferSize, SyncFile: opts.SyncFile, Logger: opts.Logger,
		CheckHeader: func(got segfile.Header) error {
			if got.Start != h.Start || got.Duration != h.Duration {
				return fmt.Errorf("%w: %s holds bucket %d ms + %d ms, want %d ms + %d ms",
					ErrMismatch, path, got.Start, got.Duration, h.Start, h.Duration)
			}
			return nil
		}}
	sf, rec, err := segfile.Open(path, format, so)
	if errors.Is(err, fs.ErrNotExist) {
		var init []byte
		var n uint64
		if opts.CreateLost {
			// Written before the file gets its name: a log created in
			// place of a lost one never passes for a whole, empty one.
			init, n = make([]byte, RecordSize), 1
			encodeDone(init, Done{Reason: Lost})
		}
		sf, err = segfile.CreateWith(path, h, init, n, so)
		rec = segfile.Recovery{Path: path, From: segfile.HeaderSize, HintValid: true}
	}
	if err != nil {
		return nil, rec, fmt.Errorf("dispatchlog: open: %w", err)
	}
	return &Writer{sf: sf}, rec, nil
}

// Path returns the dispatch log's file path.
func (w *Writer) Path() string { return w.sf.Path() }

// Append buffers done-records. They are not durable until a Sync or
// AppendSync that starts after Append returns has completed. An invalid
// Reason rejects the whole call.
func (w *Writer) Append(recs ...Done) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.appendLocked(recs)
}

func (w *Writer) appendLocked(recs []Done) error {
	if w.closed {
		return ErrClosed
	}
	for _, r := range recs {
		if !r.Reason.Valid() || (r.Reason.Marker() && r.Seq != 0) || r.Seq > MaxSeq {
			return fmt.Errorf("%w: %d for seq %d (seqs up to %d; want 1 delivered, 2 cancelled, 3 dead-lettered, 6 rescheduled, or the markers 4 lost and 5 recovered, with seq 0)", ErrBadReason, r.Reason, r.Seq, uint64(MaxSeq))
		}
	}
	if len(recs) == 0 {
		return nil
	}
	_, dst, err := w.sf.Reserve(len(recs) * RecordSize)
	if err != nil {
		return err
	}
	for i, r := range recs {
		encodeDone(dst[i*RecordSize:(i+1)*RecordSize], r)
	}
	w.sf.Commit(len(recs), 0)
	return nil
}

// Sync makes every record appended before the call durable. Concurrent
// callers share fsyncs.
func (w *Writer) Sync() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	end := w.sf.Size()
	w.mu.Unlock()
	return w.syncTo(end)
}

// AppendSync appends recs and returns once they are durable. Callers that
// arrive while an fsync is running wait for it to finish, then one of them
// runs a single fsync covering all of their records; the rest see that it
// covered theirs and return without another.
func (w *Writer) AppendSync(recs ...Done) error {
	w.mu.Lock()
	err := w.appendLocked(recs)
	end := w.sf.Size()
	w.mu.Unlock()
	if err != nil {
		return err
	}
	return w.syncTo(end)
}

// syncTo returns once the first end bytes of the file are durable.
func (w *Writer) syncTo(end int64) error {
	w.syncMu.Lock()
	defer w.syncMu.Unlock()
	w.mu.Lock()
	if w.sf.Synced().Len >= end {
		w.mu.Unlock()
		return nil // an fsync that started after our write covered it
	}
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	s, need, err := w.sf.SyncBegin()
	w.mu.Unlock()
	if err != nil || !need {
		return err
	}
	ferr := w.sf.SyncFile() // without mu: appends go on meanwhile
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sf.SyncEnd(s, ferr)
}

// Close syncs and closes the dispatch log.
func (w *Writer) Close() error {
	w.syncMu.Lock()
	defer w.syncMu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	w.closed = true
	return w.sf.Close()
}

// encodeDone frames r into dst, which is RecordSize bytes.
func encodeDone(dst []byte, r Done) {
	record.PutHeader(dst, TypeDone, 0, PayloadSize)
	binary.LittleEndian.PutUint64(dst[record.HeaderSize:], r.Seq)
	dst[record.HeaderSize+8] = byte(r.Reason)
	record.Seal(dst)
}

// decodeDone decodes a done-record that passed its checksum. It never
// panics.
func decodeDone(rec record.Record) (Done, error) {
	if rec.Type != TypeDone || rec.Flags != 0 || len(rec.Payload) != PayloadSize {
		return Done{}, fmt.Errorf("%w: type %#x, flags %#x, %d payload bytes", ErrBadRecord, rec.Type, rec.Flags, len(rec.Payload))
	}
	d := Done{Seq: binary.LittleEndian.Uint64(rec.Payload), Reason: Reason(rec.Payload[8])}
	if !d.Reason.Valid() || (d.Reason.Marker() && d.Seq != 0) || d.Seq > MaxSeq {
		return Done{}, fmt.Errorf("%w: reason %d, seq %d", ErrBadRecord, d.Reason, d.Seq)
	}
	return d, nil
}

// format describes dispatch logs to package segfile.
var format = segfile.Format{Magic: Magic, Type: TypeDone, Align: 1,
	Check: func(_ *segfile.Header, rec record.Record, _ uint64, _ bool) (uint64, error) {
		_, err := decodeDone(rec)
		return 0, err
	}}

// Verify walks every done-record of the log at path and reports each
// problem with its file, offset and kind (torn tail or corruption). The
// error is for I/O failures only.
func Verify(path string) ([]segfile.Problem, error) { return segfile.Verify(path, format) }
