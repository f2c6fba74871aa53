// Package schedulelog stores scheduled messages in one append-only segment
// file per delivery-time bucket. Reput appends each schedule record of the
// commitlog, verbatim, to the segment of its bucket; the wheel loads a
// segment shortly before its bucket starts and reads single entries back
// when they fire. An entry is a full copy of the message, so the commitlog
// can be trimmed once reput is past it.
//
// A segment covers [start, start+duration) in UTC epoch milliseconds. The
// duration is a whole number of seconds from 1 s to 24 h; the default
// bucket is BucketStart(deliverAt, d) = floor(deliverAt/d)*d. Every segment
// records its own start and duration in its header, so changing the
// configured duration affects new segments only (see Place).
//
// File name: the UTC bucket start, e.g. 20261130T050000Z.sched; the
// duration is in the header only. The server's start-up lists segments by
// name (ListNamesRemoveTemp) and reads a header when the segment is first
// needed (Stat, Open), so start-up cost does not depend on what future
// segments hold. The file:
//
//	0                                                              104
//	+----------------------------------------------------------------+
//	| header: magic "HGSCHED\0", version, start ms, duration ms,      |
//	|         xxh64; synced-length slots A and B (package segfile)    |
//	+----------------------------------------------------------------+
//	| entry | entry | entry | ...                    (to end of file) |
//	+----------------------------------------------------------------+
//
// An entry is one record (package record) of type TypeEntry whose framed
// size is a multiple of 8, so every entry offset is a multiple of 8: an
// index stores offset/8, and a search for the next whole entry after
// damage (Reader.Scan) tries aligned offsets only. The record's flags byte
// holds the number of padding bytes (0-7) at the end of the payload:
//
//	0     4      5     6    8         16                     16+p    n-8     n
//	+-----+------+-----+----+---------+----------------------+-------+-------+
//	| len | 0x53 | pad | 0  | seq u64 | schedule payload (p) | zeros | xxh64 |
//	+-----+------+-----+----+---------+----------------------+-------+-------+
//
// seq is the commitlog offset of the schedule record (message.ID.Seq); the
// schedule payload is the commitlog record's payload byte for byte
// (message.AppendSchedule). Within a segment, seqs strictly increase.
//
// Durability and recovery follow package segfile: Sync stores the synced
// length in alternating header slots, and Open scans only the bytes after
// the larger valid slot, truncating a torn tail.
//
// The layout above is part of the on-disk format (docs/FORMAT.md)
// and must not change without a new version.
//
// It owns the schedule segment files (*.sched) of one directory, and
// imports only packages record, message and segfile.
package schedulelog

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hourglassmq/hourglass/segfile"
)

// Format constants. They are part of the on-disk format and must not change.
const (
	// TypeEntry is the record type of a schedule entry.
	TypeEntry uint8 = 0x53 // 'S'
	// Suffix ends every segment file name.
	Suffix = ".sched"
	// DoneSuffix ends the name of a segment's dispatch log (package dispatchlog).
	DoneSuffix = ".done"
	// FirstOffset is the offset of the first entry in a segment.
	FirstOffset = segfile.HeaderSize
	// Align is the alignment of every entry offset and entry size.
	Align = 8
	// entryMeta is the seq before the schedule payload.
	entryMeta = 8
	// headerStartOffset is where the bucket start sits in the header.
	headerStartOffset = 16
)

// Magic starts every schedule segment. Part of the on-disk format.
var Magic = [8]byte{'H', 'G', 'S', 'C', 'H', 'E', 'D', 0}

// Limits on the configured segment duration.
const (
	// MinDuration is the shortest segment duration allowed.
	MinDuration = time.Second
	// MaxDuration is the longest segment duration allowed.
	MaxDuration = 24 * time.Hour
)

var (
	// ErrBadDuration is returned for a segment duration that is not a whole
	// number of seconds from MinDuration to MaxDuration.
	ErrBadDuration = errors.New("schedulelog: invalid segment duration")
	// ErrBadStart is returned for a bucket start that is not a whole second
	// between 1970 and 9999.
	ErrBadStart = errors.New("schedulelog: invalid bucket start")
	// ErrExist is returned by Create when the segment already exists.
	ErrExist = errors.New("schedulelog: segment already exists")
	// ErrSeqOrder is returned by Append for a seq not above the segment's
	// last one. Reput relies on it to skip what a segment already holds.
	ErrSeqOrder = errors.New("schedulelog: seq not above the segment's last seq")
	// ErrOutOfBucket is returned by Append for a message whose deliverAt is
	// outside the segment's bucket.
	ErrOutOfBucket = errors.New("schedulelog: deliverAt outside the segment's bucket")
	// ErrBadPayload is returned by Append for bytes that are not a valid
	// schedule payload.
	ErrBadPayload = errors.New("schedulelog: malformed schedule payload")
	// ErrTooLarge is returned by Append for an entry above the record limit.
	ErrTooLarge = errors.New("schedulelog: entry larger than 64 MiB")
	// ErrClosed is returned by a Writer's methods after Close.
	ErrClosed = errors.New("schedulelog: writer closed")
	// ErrBadOffset is returned by ReadAt for an offset that cannot start an entry.
	ErrBadOffset = errors.New("schedulelog: offset is not an entry offset")
	// ErrBadEntry is the cause inside a segfile.CorruptionError for an
	// entry whose checksum holds but whose content is impossible (bad
	// padding, seqs out of order, malformed message, deliverAt outside
	// the bucket).
	ErrBadEntry = errors.New("schedulelog: malformed entry")
)

// ValidateDuration returns nil if d is an allowed segment duration, and
// otherwise an error (wrapping ErrBadDuration) that says what is allowed.
func ValidateDuration(d time.Duration) error {
	if d%time.Second != 0 || d < MinDuration || d > MaxDuration {
		return fmt.Errorf("%w: %v; it must be a whole number of seconds from %v to %v",
			ErrBadDuration, d, MinDuration, MaxDuration)
	}
	return nil
}

func validateStart(ms int64) error {
	if !segfile.ValidStart(ms) {
		return fmt.Errorf("%w: %d ms; it must be a whole second from 1970 to 9999 (UTC epoch milliseconds)", ErrBadStart, ms)
	}
	return nil
}

// BucketStart returns the start of the bucket of length d holding
// deliverAtMs: floor(deliverAtMs/d)*d in UTC epoch milliseconds. It rounds
// toward minus infinity for negative times. d must be at least 1 ms (it
// panics otherwise); callers validate a configured d with ValidateDuration.
func BucketStart(deliverAtMs int64, d time.Duration) int64 {
	ms := d.Milliseconds()
	q := deliverAtMs / ms
	if deliverAtMs%ms < 0 {
		q--
	}
	return q * ms
}

// Name returns the file name of the segment starting at bucketStartMs (a
// whole second): the UTC start as 20261130T050000Z plus Suffix. Names sort
// lexically in time order.
func Name(bucketStartMs int64) string { return segfile.BaseName(bucketStartMs) + Suffix }

// DoneName returns the file name of the dispatch log of the segment
// starting at bucketStartMs.
func DoneName(bucketStartMs int64) string { return segfile.BaseName(bucketStartMs) + DoneSuffix }

// ParseName returns the bucket start a segment file name encodes. It
// accepts only names Name produces.
func ParseName(name string) (bucketStartMs int64, ok bool) {
	base, ok := strings.CutSuffix(name, Suffix)
	if !ok || len(base) != nameLen {
		return 0, false
	}
	return parseBase(base)
}

// daysIn returns the number of days of month mo of year y (proleptic
// Gregorian).
func daysIn(y, mo int) int {
	switch mo {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil returns the days from 1970-01-01 to y-mo-d, for years
// from 0 on (H. Hinnant's days_from_civil).
func daysFromCivil(y, mo, d int) int64 {
	if mo <= 2 {
		y--
	}
	era := y / 400
	yoe := y - era*400
	m := mo + 9
	if mo > 2 {
		m = mo - 3
	}
	doy := (153*m+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
}

// nameLen is the length of a segment's base name, 20061130T050000Z.
const nameLen = 16

// parseBase parses a base name in the layout segfile.BaseName writes,
// accepting only its canonical form, as segfile.ParseBaseName does but
// without time.Parse (start-up parses every segment's name).
func parseBase(b string) (int64, bool) {
	if b[8] != 'T' || b[15] != 'Z' {
		return 0, false
	}
	num := func(s string) (int, bool) {
		n := 0
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, true
	}
	y, ok1 := num(b[0:4])
	mo, ok2 := num(b[4:6])
	d, ok3 := num(b[6:8])
	h, ok4 := num(b[9:11])
	mi, ok5 := num(b[11:13])
	sec, ok6 := num(b[13:15])
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || sec > 59 {
		return 0, false
	}
	if d > daysIn(y, mo) {
		return 0, false
	}
	ms := ((daysFromCivil(y, mo, d)*24+int64(h))*3600 + int64(mi)*60 + int64(sec)) * 1000
	if !segfile.ValidStart(ms) {
		return 0, false
	}
	return ms, true
}

// SegmentInfo describes a segment from its header and size alone.
type SegmentInfo struct {
	Name     string        // file name
	Start    int64         // bucket start, UTC epoch ms, from the header
	Duration time.Duration // bucket length, from the header
	Size     int64         // file size in bytes
	// HintLen and HintEntries come from the synced-length slot: at least
	// this many bytes, holding this many entries, were durable. The
	// entries after HintLen are not counted without a scan.
	HintLen     int64
	HintEntries uint64
}

// End returns the first millisecond after the segment's bucket.
func (s SegmentInfo) End() int64 { return s.Start + s.Duration.Milliseconds() }

// Contains reports whether deliverAtMs falls in the segment's bucket.
func (s SegmentInfo) Contains(deliverAtMs int64) bool {
	return deliverAtMs >= s.Start && deliverAtMs < s.End()
}

// ListNames returns the segments in dir sorted by bucket start, from
// their file names alone: Name and Start are set, Duration is 0 (unknown)
// and nothing of any file is read, so its cost does not depend on what the
// segments hold and a damaged segment does not fail it. Stat reads the
// rest of one segment's SegmentInfo when it is needed. Temporary files and
// names that are not segment names are skipped.
func ListNames(dir string) ([]SegmentInfo, error) {
	segs, _, err := listNames(dir, false)
	return segs, err
}

// ListNamesRemoveTemp is ListNames that also deletes the temporary files
// a crash during Create left (as RemoveTemp does), in one read of the
// directory: the owner of dir calls it once at start-up. It returns the
// names removed.
func ListNamesRemoveTemp(dir string) ([]SegmentInfo, []string, error) {
	return listNames(dir, true)
}

// listNames reads dir's names in batches, unsorted (the order of the
// directory), and sorts the segments by start: at 100,000 segments this
// costs a fraction of os.ReadDir's sort of every name.
func listNames(dir string, removeTemp bool) ([]SegmentInfo, []string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	// Sorted through keys (start in seconds, 38 bits; index, 26 bits):
	// sorting 8-byte integers is several times faster than sorting
	// SegmentInfos.
	var starts []int64
	var names []string
	if fi, err := f.Stat(); err == nil {
		// A directory takes some 24 bytes or more per entry (ext4, xfs):
		// room for that many names saves growing the slices.
		n := int(min(fi.Size()/24, 1<<22))
		starts, names = make([]int64, 0, n), make([]string, 0, n)
	}
	var removed []string
	for {
		batch, err := f.Readdirnames(4096)
		for _, name := range batch {
			if start, ok := ParseName(name); ok {
				starts = append(starts, start)
				names = append(names, name)
				continue
			}
			if !removeTemp {
				continue
			}
			if base, ok := strings.CutSuffix(name, segfile.TempSuffix); ok && (strings.HasSuffix(base, Suffix) || strings.HasSuffix(base, DoneSuffix)) {
				if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return nil, removed, err
				}
				removed = append(removed, name)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, removed, err
		}
	}
	if len(removed) > 0 {
		if err := segfile.SyncDir(dir); err != nil {
			return nil, removed, err
		}
	}
	segs := make([]SegmentInfo, len(names))
	if len(names) >= 1<<26 {
		for i := range names {
			segs[i] = SegmentInfo{Name: names[i], Start: starts[i]}
		}
		slices.SortFunc(segs, func(a, b SegmentInfo) int { return cmp.Compare(a.Start, b.Start) })
		return segs, removed, nil
	}
	keys := make([]uint64, len(names))
	for i, st := range starts {
		keys[i] = uint64(st/1000)<<26 | uint64(i)
	}
	slices.Sort(keys)
	for i, k := range keys {
		j := k & (1<<26 - 1)
		segs[i] = SegmentInfo{Name: names[j], Start: starts[j]}
	}
	return segs, removed, nil
}

// Stat returns the SegmentInfo of the segment starting at bucketStartMs in
// dir from its header and size. A damaged header, or one that disagrees
// with the file name, is a *segfile.CorruptionError.
func Stat(dir string, bucketStartMs int64) (SegmentInfo, error) {
	path := filepath.Join(dir, Name(bucketStartMs))
	si, err := readInfo(path)
	if err != nil {
		return SegmentInfo{}, err
	}
	if si.Start != bucketStartMs {
		return SegmentInfo{}, &segfile.CorruptionError{Path: path, Offset: headerStartOffset,
			Err: fmt.Errorf("%w: header start %d does not match the file name", segfile.ErrHeaderValue, si.Start)}
	}
	return si, nil
}

// List returns the segments in dir sorted by bucket start, reading only
// each file's header and size (tools and metrics; the server's start-up
// uses ListNames). Temporary files and names that are not
// segment names are skipped. A header that is damaged, or that disagrees
// with its file name, is a *segfile.CorruptionError.
func List(dir string) ([]SegmentInfo, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var segs []SegmentInfo
	for _, e := range ents {
		start, ok := ParseName(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		si, err := readInfo(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if si.Start != start {
			return nil, &segfile.CorruptionError{Path: filepath.Join(dir, e.Name()), Offset: headerStartOffset,
				Err: fmt.Errorf("%w: header start %d does not match the file name", segfile.ErrHeaderValue, si.Start)}
		}
		segs = append(segs, si)
	}
	slices.SortFunc(segs, func(a, b SegmentInfo) int { return cmp.Compare(a.Start, b.Start) })
	return segs, nil
}

func readInfo(path string) (SegmentInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return SegmentInfo{}, err
	}
	defer f.Close()
	h, hdr, err := segfile.ReadHeader(f, path, Magic)
	if err != nil {
		return SegmentInfo{}, err
	}
	fi, err := f.Stat()
	if err != nil {
		return SegmentInfo{}, err
	}
	si := SegmentInfo{Name: filepath.Base(path), Start: h.Start, Duration: time.Duration(h.Duration) * time.Millisecond,
		Size: fi.Size(), HintLen: segfile.HeaderSize}
	if s, _, ok := segfile.BestSlot(hdr); ok {
		si.HintLen, si.HintEntries = s.Len, s.Records
	}
	return si, nil
}

// Find returns the index of the segment in segs (sorted by start, as List
// returns them) whose bucket contains deliverAtMs. This is how a message
// ID's deliverAt finds its segment without any index.
func Find(segs []SegmentInfo, deliverAtMs int64) (int, bool) {
	i := sort.Search(len(segs), func(i int) bool { return segs[i].Start > deliverAtMs }) - 1
	if i >= 0 && segs[i].Contains(deliverAtMs) {
		return i, true
	}
	return -1, false
}

// Place returns the segment a new entry for deliverAtMs belongs to, given
// the existing segments (sorted, non-overlapping, as List returns them)
// and the configured duration d. If an existing segment covers deliverAtMs
// it is returned with exists true, whatever its duration. Otherwise the
// result is the bucket BucketStart(deliverAtMs, d) of length d, clipped so
// it overlaps no existing segment (this only happens next to segments
// written under another duration). Because segments never overlap, every
// deliverAt has at most one segment, so placement is stable across
// restarts and Find needs no index. d must pass ValidateDuration.
func Place(segs []SegmentInfo, deliverAtMs int64, d time.Duration) (seg SegmentInfo, exists bool) {
	i := sort.Search(len(segs), func(i int) bool { return segs[i].Start > deliverAtMs }) - 1
	if i >= 0 && segs[i].Contains(deliverAtMs) {
		return segs[i], true
	}
	start := BucketStart(deliverAtMs, d)
	end := start + d.Milliseconds()
	if i >= 0 && segs[i].End() > start {
		start = segs[i].End()
	}
	if i+1 < len(segs) && segs[i+1].Start < end {
		end = segs[i+1].Start
	}
	return SegmentInfo{Name: Name(start), Start: start, Duration: time.Duration(end-start) * time.Millisecond}, false
}

// Remove deletes the segment starting at bucketStartMs and then its
// dispatch log, fsyncing dir after each, so a crash in between can leave
// a dispatch log without its segment but never a segment without its
// dispatch log (whose entries would be delivered again). Missing files
// are not an error.
func Remove(dir string, bucketStartMs int64) error {
	for _, name := range []string{Name(bucketStartMs), DoneName(bucketStartMs)} {
		err := os.Remove(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if err := segfile.SyncDir(dir); err != nil {
			return err
		}
	}
	return nil
}

// RemoveTemp deletes the temporary files a crash during Create left in dir
// (names ending in .sched.tmp or .done.tmp) and fsyncs dir. The process
// that owns dir calls it once at start-up; it returns the names removed.
func RemoveTemp(dir string) ([]string, error) {
	return segfile.RemoveTemp(dir, Suffix, DoneSuffix)
}

// Options configure a Writer. The zero value is ready to use.
type Options struct {
	// BufferSize is how many bytes Append gathers before writing them to
	// the OS in one call. Default 256 KiB.
	BufferSize int
	// SyncFile makes the file durable. Default (*os.File).Sync; tests
	// inject failures or counters here.
	SyncFile func(*os.File) error
	// Logger receives a warning for every torn tail Open truncates.
	// Default slog.Default().
	Logger *slog.Logger
}

func (o Options) seg() segfile.Options {
	return segfile.Options{BufferSize: o.BufferSize, SyncFile: o.SyncFile, Logger: o.Logger}
}
