package commitlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hourglassmq/hourglass/record"
	"github.com/hourglassmq/hourglass/segfile"
)

// FixKind says what a Fix does.
type FixKind string

// Fix kinds.
const (
	// FixSkipDamage writes a skip record (TypeSkip) over a damaged span
	// that valid records follow, or that lies in a sealed segment.
	FixSkipDamage FixKind = "skip-damage"
	// FixSkipToMinEnd writes a skip record from the end of the data to
	// Options.MinEnd, whose records are gone (a torn or zeroed tail below
	// a position another file names).
	FixSkipToMinEnd FixKind = "skip-to-min-end"
	// FixRecreateSegment creates a missing segment file (a gap, or the
	// segments after the last one when MinEnd lies beyond it) holding
	// one skip record over all of it.
	FixRecreateSegment FixKind = "recreate-segment"
	// FixTornTail is not a change: a torn tail above MinEnd, which Open
	// truncates by itself.
	FixTornTail FixKind = "torn-tail"
)

// Fix is one change Repair makes (or, in a dry run, would make).
type Fix struct {
	Kind FixKind
	// File is the segment file changed or created.
	File string
	// Pos is the byte position in File where the change starts.
	Pos int64
	// From and To are the logical offsets of the span that is lost: the
	// records in [From, To) cannot be read and are skipped from now on.
	From, To int64
	// Records is how many records the lost span held, when their headers
	// still chain from From to To; -1 when that cannot be told.
	Records int
	// Cause is what was found there.
	Cause error
}

// Bytes is the length of the lost span.
func (f Fix) Bytes() int64 { return f.To - f.From }

func (f Fix) String() string {
	return fmt.Sprintf("%s: %s at file position %d: offsets %d..%d (%d bytes): %v", f.File, f.Kind, f.Pos, f.From, f.To, f.Bytes(), f.Cause)
}

// RepairOptions configure Repair.
type RepairOptions struct {
	// MinEnd is the position another file names (the reput checkpoint):
	// the repaired log ends at or beyond it, and no offset below it is
	// ever used again.
	MinEnd int64
	// DryRun finds and returns the fixes without changing anything.
	DryRun bool
	// Keep is called with the path of each existing file before Repair
	// changes it, so that the caller keeps a copy (hourglass repair
	// copies it into the quarantine directory). An error stops Repair
	// before that file is changed.
	Keep func(path string) error
	// Progress, if set, is called after each segment is scanned with the
	// bytes scanned so far and in all.
	Progress func(done, total int64)
}

// Repair makes the log in dir open again after damage, without ever
// reusing an offset and without moving any record: it covers each damaged
// span with a skip record (so the records after it keep their offsets),
// writes a skip record from a torn or zeroed end up to opts.MinEnd, and
// recreates missing segment files as one skip record each. Torn tails
// above MinEnd are left to Open, which truncates them. It must not run
// while a writer has the log open. It returns the fixes made (or, with
// DryRun, to make) in file order.
func Repair(dir string, opts RepairOptions) ([]Fix, error) {
	names, err := listDir(dir, false)
	if err != nil {
		return nil, err
	}
	var segs []*segment
	defer func() {
		for _, s := range segs {
			s.release()
		}
	}()
	var total, done int64
	for _, name := range names {
		s, err := openSegment(filepath.Join(dir, name), true)
		if err != nil {
			return nil, fmt.Errorf("commitlog: repair cannot open %s (a damaged header is not repaired; move the file aside by hand only if it holds nothing you need): %w", name, err)
		}
		segs = append(segs, s)
		total += headerSize + s.capacity
	}
	var fixes []Fix
	var creates []Fix // segments to create: applied after the scan
	capacity := int64(DefaultSegmentSize - headerSize)
	for i, s := range segs {
		capacity = s.capacity
		if i > 0 && s.base != segs[i-1].end() {
			prev := segs[i-1]
			if s.base < prev.end() {
				return nil, &segfile.CorruptionError{Path: s.path, Offset: 0,
					Err: fmt.Errorf("base %d overlaps %s, which ends at %d: not repaired (one of them does not belong here)", s.base, prev.path, prev.end())}
			}
			creates = append(creates, Fix{Kind: FixRecreateSegment, Records: -1, File: filepath.Join(dir, segmentName(prev.end())), Pos: headerSize,
				From: prev.end(), To: s.base, Cause: ErrMissingSegment})
		}
	}
	// The active segment is the last holding data; MinEnd may lie in it,
	// in an empty spare after it, or beyond the last file.
	active := len(segs) - 1
	for active > 0 && isEmpty(segs[active]) {
		active--
	}
	for i, s := range segs {
		f := scanForRepair(s, i >= active, opts.MinEnd)
		fixes = append(fixes, f...)
		done += headerSize + s.capacity
		if opts.Progress != nil {
			opts.Progress(done, total)
		}
	}
	if len(segs) == 0 && opts.MinEnd > 0 {
		size := max(capacity, opts.MinEnd)
		creates = append(creates, Fix{Kind: FixRecreateSegment, Records: -1, File: filepath.Join(dir, segmentName(0)), Pos: headerSize,
			From: 0, To: size,
			Cause: fmt.Errorf("%w: there are no segment files, but offset %d is named by another file", ErrMissingSegment, opts.MinEnd)})
	}
	if n := len(segs); n > 0 && opts.MinEnd > segs[n-1].end() {
		last := segs[n-1]
		size := max(capacity, opts.MinEnd-last.end())
		creates = append(creates, Fix{Kind: FixRecreateSegment, Records: -1, File: filepath.Join(dir, segmentName(last.end())), Pos: headerSize,
			From: last.end(), To: last.end() + size,
			Cause: fmt.Errorf("%w: the log ends at offset %d, but offset %d is named by another file", ErrMissingSegment, last.end(), opts.MinEnd)})
	}
	fixes = append(fixes, creates...)
	if opts.DryRun {
		return fixes, nil
	}
	for _, s := range segs {
		s.release()
	}
	segs = nil
	for _, f := range fixes {
		var err error
		switch f.Kind {
		case FixSkipDamage, FixSkipToMinEnd:
			if opts.Keep != nil {
				if err := opts.Keep(f.File); err != nil {
					return nil, err
				}
			}
			err = writeSkip(f.File, f.Pos, f.To-f.From)
		case FixRecreateSegment:
			err = recreateSegment(dir, f.From, f.To-f.From)
		}
		if err != nil {
			return nil, fmt.Errorf("commitlog: repair %s: %w", f.File, err)
		}
	}
	return fixes, nil
}

// scanForRepair returns the fixes one segment needs. last is set for the
// active segment and the spares after it, where a bad record with nothing
// valid after it is a torn tail unless it lies below minEnd.
func scanForRepair(s *segment, last bool, minEnd int64) []Fix {
	var fixes []Fix
	var pos int64
	data := s.data
	for pos < int64(len(data)) {
		_, n, _, err := decodeSpan(data[pos:])
		if err == nil {
			pos += int64(n)
			continue
		}
		junk := nonZeroExtent(data[pos:])
		if errors.Is(err, record.ErrEnd) && junk == 0 {
			break
		}
		if errors.Is(err, record.ErrEnd) {
			err = errors.New("non-zero bytes after the end of the data")
		}
		next := findRecord(data[pos:pos+junk], 1)
		if next >= 0 {
			fixes = append(fixes, Fix{Kind: FixSkipDamage, File: s.path, Pos: headerSize + pos, From: s.base + pos, To: s.base + pos + next,
				Records: chainCount(data[pos : pos+next]), Cause: err})
			pos += next
			continue
		}
		if !last {
			if junk >= record.Overhead {
				fixes = append(fixes, Fix{Kind: FixSkipDamage, Records: chainCount(data[pos : pos+junk]), File: s.path, Pos: headerSize + pos, From: s.base + pos, To: s.base + pos + junk, Cause: err})
			}
			// Shorter junk after the end of a sealed segment is never read.
			return fixes
		}
		if s.base+pos+junk >= minEnd {
			return append(fixes, Fix{Kind: FixTornTail, Records: -1, File: s.path, Pos: headerSize + pos, From: s.base + pos, To: s.base + pos + junk, Cause: err})
		}
		if minEnd > s.end() {
			// Torn below minEnd, and minEnd lies in a later (missing)
			// segment: this one is sealed from now on, so cover the rest
			// of it.
			return append(fixes, Fix{Kind: FixSkipDamage, Records: -1, File: s.path, Pos: headerSize + pos, From: s.base + pos, To: s.end(), Cause: err})
		}
		break // torn below minEnd: covered to minEnd below
	}
	if last && s.base+pos < minEnd && minEnd <= s.end() {
		fixes = append(fixes, Fix{Kind: FixSkipToMinEnd, Records: -1, File: s.path, Pos: headerSize + pos, From: s.base + pos, To: minEnd,
			Cause: fmt.Errorf("the data ends at offset %d, but offset %d is named by another file", s.base+pos, minEnd)})
	}
	return fixes
}

// chainCount returns how many record headers chain through all of b (each
// header's size leads to the next, the last ends exactly at len(b)), or -1.
func chainCount(b []byte) int {
	n := 0
	for p := 0; p < len(b); n++ {
		size := record.PeekSize(b[p:])
		if size == 0 || n >= len(b) {
			return -1
		}
		p += size
		if p > len(b) {
			return -1
		}
	}
	return n
}

// writeSkip writes a skip record at file position pos of path covering
// span bytes, and syncs the file.
func writeSkip(path string, pos, span int64) error {
	if span < record.Overhead && pos+span == headerSize+capacityOf(path) {
		// The last bytes of a segment, too few for a record: zeros
		// there are the end of the data.
		return writeSync(path, pos, make([]byte, span))
	}
	if span < record.Overhead {
		return fmt.Errorf("a damaged span of %d bytes at file position %d is shorter than a skip record (%d bytes)", span, pos, record.Overhead)
	}
	var buf []byte
	if span >= SkipRecordSize {
		buf = make([]byte, SkipRecordSize)
		if _, err := putSkipSpan(buf, span); err != nil {
			return err
		}
	} else {
		buf = make([]byte, span)
		if _, err := PutSkip(buf); err != nil {
			return err
		}
	}
	return writeSync(path, pos, buf)
}

// capacityOf returns the data capacity of the segment file at path, or -1.
func capacityOf(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return fi.Size() - headerSize
}

// writeSync writes buf at pos of path and syncs the file.
func writeSync(path string, pos int64, buf []byte) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(buf, pos); err != nil {
		f.Close()
		return err
	}
	if err := fdatasync(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// recreateSegment creates the segment at base with capacity bytes of data,
// sparse, holding one skip record over all of it.
func recreateSegment(dir string, base, capacity int64) error {
	path := filepath.Join(dir, segmentName(base))
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("segment %s already exists", path)
	}
	f, err := segfile.CreateAtomic(path, func(f *os.File) error {
		var hdr [headerSize + SkipRecordSize]byte
		encodeHeader(hdr[:], base, capacity)
		if _, err := putSkipSpan(hdr[headerSize:], capacity); err != nil {
			return err
		}
		if err := f.Truncate(headerSize + capacity); err != nil {
			return err
		}
		_, err := f.WriteAt(hdr[:], 0)
		return err
	}, fdatasync)
	if err != nil {
		return err
	}
	return f.Close()
}
