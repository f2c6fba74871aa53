package reput

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/hourglassmq/hourglass/record"
	"github.com/hourglassmq/hourglass/segfile"
)

// Retired log constants. They are part of the on-disk format and must not
// change without a new retiredVersion.
//
// The retired log (schedule/reput.retired) records every bucket reput
// retired (deleted with its dispatch log), durably, before the files are
// deleted. It is append-only: a header, then one record per retirement.
//
//	header, 24 bytes:
//	0        4         6        8          16        24
//	+--------+---------+--------+----------+---------+
//	| "HGRT" | ver u16 | 0 u16  | base u64 | xxh64   |
//	+--------+---------+--------+----------+---------+
//
//	then records framed by package record: type 'R' (0x52), flags 0,
//	a 32-byte payload (48 bytes framed):
//	0            8               16            24          32
//	+------------+---------------+-------------+-----------+
//	| start i64  | duration i64  | seq end u64 | floor u64 |
//	+------------+---------------+-------------+-----------+
//
// base is the number of retirements recorded before the first record:
// compaction (at start-up, once most records name only commitlog records
// retention deleted) drops those and counts them there. start and duration (UTC epoch ms) are the
// retired bucket; every entry it held had a seq (commitlog offset) below
// seq end (0: it held none). floor is reput's durable checkpoint when the
// bucket was retired: every commitlog record below it was durably routed.
// A record with start and duration 0 names no bucket and only a floor
// (written by Repair and when the log is created beside an existing
// checkpoint). seq end is never above floor.
//
// Reput never routes a record below the largest floor again, nor a record
// whose deliverAt lies in a retired bucket and whose seq is below that
// bucket's seq end; so a lost checkpoint costs a longer scan, never a
// replay. The checkpoint records how many retirements the log held when it
// was written, so a log that lost records is detected.
const (
	retiredName        = "reput.retired"
	retiredMagic       = "HGRT"
	retiredVersion     = 1
	retiredHeaderSize  = 24
	retiredType        = 0x52 // 'R'
	retiredPayloadSize = 32
	retiredRecSize     = retiredPayloadSize + record.Overhead
)

// RetiredName is the file name of the retired log in the schedule
// directory.
const RetiredName = retiredName

var (
	// ErrBadRetired is the cause inside the segfile.CorruptionError for a
	// retired log whose header or a record is damaged or impossible.
	ErrBadRetired = errors.New("reput: damaged retired log")
	// ErrRetiredMissing is the cause inside the segfile.CorruptionError
	// Start returns when the retired log is gone but the checkpoint says
	// buckets were retired.
	ErrRetiredMissing = errors.New("reput: retired log missing")
	// ErrRetiredShort is the cause when the retired log holds fewer
	// retirements than the checkpoint counted.
	ErrRetiredShort = errors.New("reput: retired log lost records")
	// ErrNoRecord is the cause when the checkpoint and the retired log are
	// both missing or damaged in a directory that has routed before: what
	// was retired cannot be known, and routing from the oldest commitlog
	// segment could deliver retired messages again.
	ErrNoRecord = errors.New("reput: checkpoint and retired log both lost")
)

// Retirement is one record of the retired log.
type Retirement struct {
	Start    int64         // bucket start, UTC epoch ms (0 with Duration 0: a floor only)
	Duration time.Duration // bucket length
	SeqEnd   uint64        // every entry of the bucket had a seq below it; 0: none
	Floor    int64         // the durable checkpoint when it was retired
}

// retiredState is a decoded retired log.
type retiredState struct {
	base  uint64
	recs  []Retirement
	good  int64 // bytes of whole, valid data (header included)
	torn  int64 // bytes after good that are a torn tail (0: none)
	floor int64 // the largest Floor
	// spans are the retired buckets sorted by start, each with the
	// largest SeqEnd recorded for it; maxEnd is the largest of all.
	spans  []Retirement
	maxEnd uint64
}

// count is the number of retirements the log records.
func (s *retiredState) count() uint64 { return s.base + uint64(len(s.recs)) }

func (s *retiredState) add(r Retirement) {
	s.recs = append(s.recs, r)
	s.floor = max(s.floor, r.Floor)
	if r.Duration <= 0 || r.SeqEnd == 0 {
		return
	}
	s.maxEnd = max(s.maxEnd, r.SeqEnd)
	i := sort.Search(len(s.spans), func(i int) bool { return s.spans[i].Start >= r.Start })
	if i < len(s.spans) && s.spans[i].Start == r.Start && s.spans[i].Duration == r.Duration {
		s.spans[i].SeqEnd = max(s.spans[i].SeqEnd, r.SeqEnd)
		return
	}
	s.spans = append(s.spans, Retirement{})
	copy(s.spans[i+1:], s.spans[i:])
	s.spans[i] = r
}

// covers reports whether a record with this deliverAt and seq belonged to
// a bucket that was retired: routing it again would deliver it again.
func (s *retiredState) covers(deliverAt int64, seq uint64) bool {
	if s == nil || seq >= s.maxEnd {
		return false
	}
	// Buckets are at most a day long: look back that far from deliverAt.
	i := sort.Search(len(s.spans), func(i int) bool { return s.spans[i].Start > deliverAt })
	for j := i - 1; j >= 0 && s.spans[j].Start > deliverAt-maxBucketMs; j-- {
		if s.spans[j].covers(deliverAt, seq) {
			return true
		}
	}
	return false
}

// maxBucketMs is the longest bucket (schedulelog.ValidateDuration).
const maxBucketMs = int64(24 * time.Hour / time.Millisecond)

// covers reports whether a record with this deliverAt and seq belonged to
// the retired bucket r.
func (r Retirement) covers(deliverAt int64, seq uint64) bool {
	return deliverAt >= r.Start && deliverAt < r.Start+r.Duration.Milliseconds() && seq < r.SeqEnd
}

// overlapping returns copies of the retired buckets that overlap
// [start, end).
func (s *retiredState) overlapping(start, end int64) Retired {
	if s == nil {
		return nil
	}
	var out Retired
	i := sort.Search(len(s.spans), func(i int) bool { return s.spans[i].Start >= end })
	for j := i - 1; j >= 0 && s.spans[j].Start > start-maxBucketMs; j-- {
		if sp := s.spans[j]; sp.Start+sp.Duration.Milliseconds() > start {
			out = append(out, sp)
		}
	}
	return out
}

// Retired are the retirements of the buckets that overlap one bucket's
// time (Watch): a commitlog record of their time whose seq is below their
// SeqEnd was routed to a segment since deleted, and routing never puts it
// in a segment created after (a bucket retired and created again).
type Retired []Retirement

// Covers reports whether the commitlog record with this deliverAt and seq
// belonged to one of the retired buckets, never to a segment of now.
func (rs Retired) Covers(deliverAt int64, seq uint64) bool {
	for _, r := range rs {
		if r.covers(deliverAt, seq) {
			return true
		}
	}
	return false
}

func encodeRetiredHeader(base uint64) []byte {
	b := make([]byte, retiredHeaderSize)
	copy(b[0:4], retiredMagic)
	binary.LittleEndian.PutUint16(b[4:6], retiredVersion)
	binary.LittleEndian.PutUint64(b[8:16], base)
	binary.LittleEndian.PutUint64(b[16:24], xxhash.Sum64(b[0:16]))
	return b
}

func encodeRetirement(r Retirement) []byte {
	var p [retiredPayloadSize]byte
	binary.LittleEndian.PutUint64(p[0:8], uint64(r.Start))
	binary.LittleEndian.PutUint64(p[8:16], uint64(r.Duration.Milliseconds()))
	binary.LittleEndian.PutUint64(p[16:24], r.SeqEnd)
	binary.LittleEndian.PutUint64(p[24:32], uint64(r.Floor))
	b := make([]byte, retiredRecSize)
	record.Encode(b, retiredType, 0, p[:])
	return b
}

// decodeRetired decodes a whole retired log. A record that does not decode
// in the last record's worth of bytes, or followed only by zeros, is a torn
// tail (the last append, cut short: each append is fsynced before the next
// and before the bucket's files are deleted); anywhere else, or a record
// whose checksum holds but whose content is impossible, it is damage,
// returned as an error wrapping ErrBadRetired with its offset, with the
// state of the records before it (nil if the header is damaged).
func decodeRetired(b []byte) (*retiredState, int64, error) {
	if len(b) < retiredHeaderSize || string(b[0:4]) != retiredMagic {
		return nil, 0, fmt.Errorf("%w: bad magic or short header", ErrBadRetired)
	}
	if xxhash.Sum64(b[0:16]) != binary.LittleEndian.Uint64(b[16:24]) {
		return nil, 0, fmt.Errorf("%w: header checksum mismatch", ErrBadRetired)
	}
	if v := binary.LittleEndian.Uint16(b[4:6]); v != retiredVersion {
		return nil, 4, fmt.Errorf("%w: version %d, this build reads %d", ErrBadRetired, v, retiredVersion)
	}
	if binary.LittleEndian.Uint16(b[6:8]) != 0 {
		return nil, 6, fmt.Errorf("%w: reserved header field is not zero", ErrBadRetired)
	}
	s := &retiredState{base: binary.LittleEndian.Uint64(b[8:16]), good: retiredHeaderSize}
	off := int64(retiredHeaderSize)
	for off < int64(len(b)) {
		rest := b[off:]
		rec, n, err := record.Decode(rest)
		if err != nil {
			if len(rest) <= retiredRecSize || allZero(rest) {
				s.torn = int64(len(rest))
				return s, off, nil
			}
			return s, off, fmt.Errorf("%w: record at offset %d: %w", ErrBadRetired, off, err)
		}
		r, err := checkRetirement(rec)
		if err != nil {
			return s, off, fmt.Errorf("%w: record at offset %d: %w", ErrBadRetired, off, err)
		}
		s.add(r)
		off += int64(n)
		s.good = off
	}
	return s, off, nil
}

func checkRetirement(rec record.Record) (Retirement, error) {
	if rec.Type != retiredType || rec.Flags != 0 || len(rec.Payload) != retiredPayloadSize {
		return Retirement{}, fmt.Errorf("type %#x, flags %#x, %d payload bytes; want %#x, 0, %d",
			rec.Type, rec.Flags, len(rec.Payload), retiredType, retiredPayloadSize)
	}
	p := rec.Payload
	start, dur := int64(binary.LittleEndian.Uint64(p[0:8])), int64(binary.LittleEndian.Uint64(p[8:16]))
	r := Retirement{Start: start, Duration: time.Duration(dur) * time.Millisecond,
		SeqEnd: binary.LittleEndian.Uint64(p[16:24]), Floor: int64(binary.LittleEndian.Uint64(p[24:32]))}
	switch {
	case start == 0 && dur == 0:
		if r.SeqEnd != 0 {
			return Retirement{}, errors.New("a floor record with a seq end")
		}
	case !segfile.ValidStart(start) || !segfile.ValidDuration(dur):
		return Retirement{}, fmt.Errorf("impossible bucket %d+%dms", start, dur)
	}
	if r.Floor < 0 || r.SeqEnd > uint64(r.Floor) {
		return Retirement{}, fmt.Errorf("seq end %d above floor %d", r.SeqEnd, r.Floor)
	}
	return r, nil
}

func allZero(b []byte) bool { return len(bytes.Trim(b, "\x00")) == 0 }

// readRetired reads and decodes the retired log of dir; ok is false when
// it does not exist. Damage is a *segfile.CorruptionError.
func readRetired(dir string) (s *retiredState, ok bool, err error) {
	path := filepath.Join(dir, retiredName)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	s, off, err := decodeRetired(b)
	if err != nil {
		return nil, true, &segfile.CorruptionError{Path: path, Offset: off, Err: err}
	}
	return s, true, nil
}

// RetiredLog is what the retired log holds, for tools.
type RetiredLog struct {
	Records []Retirement
	Size    int64 // bytes of whole records, header included
	Torn    int64 // bytes after them: the last append, cut short by a crash
}

// ReadRetired returns the retirements recorded in the schedule directory
// dir, for tools; ok is false when there is no retired log. A damaged log
// is a *segfile.CorruptionError; a torn tail is reported in Torn and is
// not an error. It only reads.
func ReadRetired(dir string) (RetiredLog, bool, error) {
	s, ok, err := readRetired(dir)
	if err != nil || !ok {
		return RetiredLog{}, ok, err
	}
	return RetiredLog{Records: s.recs, Size: s.good, Torn: s.torn}, true, nil
}

// createRetired durably creates an empty retired log in dir (tmp, fsync,
// rename, fsync dir), replacing any there, with the given records.
func createRetired(dir string, recs ...Retirement) (*retiredState, error) {
	b := encodeRetiredHeader(0)
	s := &retiredState{}
	for _, r := range recs {
		b = append(b, encodeRetirement(r)...)
		s.add(r)
	}
	s.good = int64(len(b))
	if err := segfile.WriteFileAtomic(filepath.Join(dir, retiredName), b); err != nil {
		return nil, fmt.Errorf("reput: create the retired log: %w", err)
	}
	return s, nil
}

// retiredLog appends to the retired log. Owned by the routing goroutine.
type retiredLog struct {
	dir  string
	sync func(*os.File) error
	f    *os.File // nil until the first append, and after a failed one
	st   *retiredState
}

// append durably records r: written, then fsynced, before it returns nil.
// A failed write or fsync closes the file; the next append reopens it and
// cuts what the failure may have left (a torn tail) at the last whole
// record.
func (l *retiredLog) append(r Retirement) error {
	path := filepath.Join(l.dir, retiredName)
	if l.f == nil {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("reput: open the retired log: %w", err)
		}
		if err := f.Truncate(l.st.good); err != nil {
			f.Close()
			return fmt.Errorf("reput: retired log %s: %w", path, err)
		}
		l.f = f
	}
	_, err := l.f.WriteAt(encodeRetirement(r), l.st.good)
	if err == nil {
		err = l.sync(l.f)
	}
	if err != nil {
		l.f.Close()
		l.f = nil
		return fmt.Errorf("reput: append to the retired log %s: %w", path, err)
	}
	l.st.add(r)
	l.st.good += retiredRecSize
	return nil
}

func (l *retiredLog) close() {
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// Compaction thresholds: the retired log is rewritten at start-up once it
// holds more than compactMin records of which more than half name only
// commitlog records that retention deleted (they can never be routed
// again, so they cover nothing).
const compactMin = 4096

// compact rewrites the log without the records whose buckets' entries all
// lie below first (the commitlog's first offset), keeping the largest
// floor in a floor record and counting the dropped ones in base, so that
// count() does not change. Atomic: a crash leaves the old log or the new.
func (l *retiredLog) compact(first int64) (dropped int, err error) {
	st := l.st
	var keep []Retirement
	for _, r := range st.recs {
		if r.SeqEnd > uint64(max(first, 0)) {
			keep = append(keep, r)
		}
	}
	// The floor record carries the largest floor.
	drop := len(st.recs) - len(keep)
	if len(st.recs) <= compactMin || drop <= len(st.recs)/2 {
		return 0, nil
	}
	keep = append(keep, Retirement{Floor: st.floor})
	base := st.count() - uint64(len(keep))
	b := encodeRetiredHeader(base)
	ns := &retiredState{base: base}
	for _, r := range keep {
		b = append(b, encodeRetirement(r)...)
		ns.add(r)
	}
	ns.good = int64(len(b))
	l.close()
	if err := segfile.WriteFileAtomic(filepath.Join(l.dir, retiredName), b); err != nil {
		return 0, fmt.Errorf("reput: compact the retired log: %w", err)
	}
	l.st = ns
	return drop, nil
}
