package commitlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hourglassmq/hourglass/record"
	"github.com/hourglassmq/hourglass/segfile"
)

// Recovery reports what Open did to the active segment.
type Recovery struct {
	// Segment is the path of the segment that was scanned.
	Segment string
	// End is the logical offset one past the last whole record.
	End int64
	// Records is how many whole records the active segment holds.
	Records int
	// Truncated is true when a torn tail was found and zeroed.
	Truncated bool
	// DroppedFrom is the logical offset where the torn tail began.
	DroppedFrom int64
	// DroppedBytes counts the non-zero bytes zeroed from DroppedFrom on.
	DroppedBytes int64
	// Cause is the decode error at DroppedFrom.
	Cause error
}

// tailKind is what the scan of the active segment found after its last
// whole record.
type tailKind int

const (
	tailClean   tailKind = iota // zeros: the normal end
	tailTorn                    // the last write cut short: zero it
	tailDamaged                 // damage: refuse, never zero
)

// tailScan is the result of scanTail.
type tailScan struct {
	kind    tailKind
	end     int64 // data position one past the last whole record
	records int
	junk    int64 // torn: non-zero bytes from end on, to be zeroed
	next    int64 // damaged: data position of the next valid record, or -1
	cause   error
}

// scanTail decides what the bytes of an active segment's data hold: base
// is the segment's base offset and minEnd a position another file names
// (0 for none); nothing lies at or after data position limit but what a
// record before it covers. Records are read from the start; at the first position
// that does not hold one:
//
//   - all zeros after it: the clean end;
//   - a valid record at any later position: damage (lost from here to it);
//   - otherwise a torn tail (the end of the last write), to be zeroed.
//
// Whatever the tail, an end below minEnd is damage: what another file
// names is gone. It never modifies data.
func scanTail(data []byte, base, minEnd, limit int64) tailScan {
	var t tailScan
	var err error
	for {
		var n int
		_, n, _, err = decodeSpan(data[t.end:])
		if err != nil {
			break
		}
		t.end += int64(n)
		t.records++
	}
	t.next = -1
	rest := data[t.end:max(t.end, min(limit, int64(len(data))))]
	t.junk = nonZeroExtent(rest)
	switch {
	case errors.Is(err, record.ErrEnd) && t.junk == 0:
		t.kind = tailClean
	default:
		if errors.Is(err, record.ErrEnd) {
			err = errors.New("non-zero bytes after the end of the data")
		}
		t.cause = err
		if q := findRecord(rest[:t.junk], 1); q >= 0 {
			t.kind, t.next = tailDamaged, t.end+q
		} else {
			t.kind = tailTorn
		}
	}
	if t.kind != tailDamaged && base+t.end < minEnd {
		t.kind = tailDamaged
	}
	return t
}

// findRecord returns the first position at or after from in b where a
// whole, valid record starts, or -1.
func findRecord(b []byte, from int) int64 {
	for i := from; i+record.Overhead <= len(b); i++ {
		if b[i+4] == 0 || b[i+6] != 0 || b[i+7] != 0 {
			continue // no record header can start here
		}
		if _, _, _, err := decodeSpan(b[i:]); err == nil {
			return int64(i)
		}
	}
	return -1
}

// damage is the error Open returns for a damaged active segment: the file,
// the position and what is lost.
func (t tailScan) damage(s *segment, minEnd int64, from string) error {
	at := s.base + t.end
	var lost string
	switch {
	case t.next >= 0:
		lost = fmt.Sprintf("offsets %d..%d (%d bytes) cannot be read and valid records follow at offset %d, so this is damage, not a torn write",
			at, s.base+t.next, t.next-t.end, s.base+t.next)
	default:
		lost = fmt.Sprintf("the log ends at offset %d but offset %d is named by %s: offsets %d..%d (%d bytes) are lost",
			at, minEnd, from, at, minEnd, minEnd-at)
	}
	if t.cause != nil {
		lost += fmt.Sprintf(" (at offset %d: %v)", at, t.cause)
	}
	return &segfile.CorruptionError{Path: s.path, Offset: headerSize + t.end,
		Err: fmt.Errorf("%w: %s; run `hourglass repair` to keep a copy and skip the damaged span", ErrDamaged, lost)}
}

// load lists, maps and checks the segments and recovers the active one.
func (l *Log) load() error {
	if !l.opts.ReadOnly {
		if err := os.MkdirAll(l.dir, 0o755); err != nil {
			return err
		}
	}
	names, err := listDir(l.dir, !l.opts.ReadOnly)
	if err != nil {
		return err
	}
	if len(names) == 0 {
		if l.opts.MinEnd > 0 {
			return &segfile.CorruptionError{Path: l.dir, Offset: -1,
				Err: fmt.Errorf("%w: there are no segment files, but offset %d is named by %s: the segments were deleted, offsets up to %d are lost; run `hourglass repair`",
					ErrMissingSegment, l.opts.MinEnd, l.opts.MinEndFrom, l.opts.MinEnd)}
		}
		if l.opts.ReadOnly {
			return fmt.Errorf("commitlog: no segments in %s", l.dir)
		}
		if _, err := createSegment(l.dir, 0, l.opts.SegmentSize, l.opts.AllocStep, l.opts.Sync == SyncAlways && !l.opts.FallocateFirst); err != nil {
			return fmt.Errorf("commitlog: create first segment %s: %w", filepath.Join(l.dir, segmentName(0)), wrapNoSpace(err))
		}
		names = []string{segmentName(0)}
	}
	for _, name := range names {
		s, err := openSegment(l.dir+"/"+name, l.opts.ReadOnly)
		if err != nil {
			return err
		}
		if n := len(l.segs.list); n > 0 {
			prev := l.segs.list[n-1]
			if s.base != prev.end() {
				s.release()
				if s.base > prev.end() {
					return &segfile.CorruptionError{Path: l.dir, Offset: -1,
						Err: fmt.Errorf("%w: %s ends at offset %d but the next file is %s: offsets %d..%d (%d bytes) are lost; run `hourglass repair`",
							ErrMissingSegment, prev.path, prev.end(), name, prev.end(), s.base, s.base-prev.end())}
				}
				return &segfile.CorruptionError{Path: s.path, Offset: 0, Err: fmt.Errorf("unexpected segment file: base %d overlaps %s", s.base, prev.path)}
			}
		}
		l.segs.list = append(l.segs.list, s)
	}
	// The active segment is the last one holding data; empty segments
	// after it are preallocated spares.
	ai := len(l.segs.list) - 1
	for ai > 0 && isEmpty(l.segs.list[ai]) {
		ai--
	}
	if !l.opts.ReadOnly && ai+1 < len(l.segs.list) {
		l.pre.spare = l.segs.list[ai+1]
		for _, s := range l.segs.list[ai+2:] {
			s.removed.Store(true)
			s.release()
		}
		l.segs.list = l.segs.list[:ai+1]
	}
	l.mu.active = l.segs.list[ai]
	l.first.Store(l.segs.list[0].base)
	if last := l.segs.list[len(l.segs.list)-1]; l.opts.MinEnd > last.end() {
		return &segfile.CorruptionError{Path: l.dir, Offset: -1,
			Err: fmt.Errorf("%w: the last segment, %s, ends at offset %d, but offset %d is named by %s: a segment was deleted, offsets %d..%d (%d bytes) are lost; run `hourglass repair`",
				ErrMissingSegment, last.path, last.end(), l.opts.MinEnd, l.opts.MinEndFrom, last.end(), l.opts.MinEnd, l.opts.MinEnd-last.end())}
	}
	end, err := l.recoverActive()
	if err != nil {
		return err
	}
	// Blocks exist where data was written; ensureAlloc adds more ahead.
	l.mu.active.alloc.Store(end)
	l.mu.writePos = end
	l.mu.written = l.mu.active.base + end
	l.view.visible.Store(l.mu.written)
	l.syncer.synced.Store(l.mu.written)
	return nil
}

// isEmpty reports whether s was never written: no record at its start and
// zeros in its first emptyCheck bytes (a damaged first header is not
// taken for an empty spare).
func isEmpty(s *segment) bool {
	_, _, err := record.Decode(s.data)
	return errors.Is(err, record.ErrEnd) && nonZeroExtent(s.data[:min(len(s.data), emptyCheck)]) == 0
}

// emptyCheck is how much of a segment isEmpty reads.
const emptyCheck = 1 << 20

// recoverActive scans the active segment and zeroes a torn tail. It returns
// the data position one past the last whole record, or a
// *segfile.CorruptionError for damage (scanTail), which it never zeroes.
func (l *Log) recoverActive() (int64, error) {
	s := l.mu.active
	// The holes after the last data of the file read as zeros and need
	// not be read: blocks are allocated a step ahead of the writes
	// (ensureAlloc), so a segment is mostly holes.
	limit := max(0, dataEnd(s.f, headerSize+s.capacity)-headerSize)
	t := scanTail(s.data, s.base, l.opts.MinEnd, limit)
	rec := Recovery{Segment: s.path, End: s.base + t.end, Records: t.records}
	if t.kind == tailTorn {
		rec.Truncated = true
		rec.DroppedFrom = s.base + t.end
		rec.DroppedBytes = t.junk
		rec.Cause = t.cause
	}
	l.recovery = rec
	if t.kind == tailDamaged && t.next < 0 && l.opts.PadToMinEnd && !l.opts.ReadOnly {
		if pos, ok, err := l.padToMinEnd(t); ok || err != nil {
			return pos, err
		}
	}
	if t.kind == tailDamaged {
		if l.opts.ReadOnly {
			// Beside a writer a read-only view takes what it can read.
			return t.end, nil
		}
		return 0, t.damage(s, l.opts.MinEnd, l.opts.MinEndFrom)
	}
	pos := t.end
	if l.opts.ReadOnly {
		return pos, nil
	}
	if rec.Truncated {
		clear(s.data[pos : pos+rec.DroppedBytes])
		l.opts.Logger.Warn("commitlog: truncated torn tail",
			"segment", s.path, "offset", rec.DroppedFrom, "dropped_bytes", rec.DroppedBytes, "cause", rec.Cause)
	}
	// What survived a crash of the process may still be only in the page
	// cache: make it durable before readers may see it.
	for _, seg := range l.segs.list[max(0, len(l.segs.list)-2):] {
		if err := fdatasync(seg.f); err != nil {
			return 0, fmt.Errorf("commitlog: sync %s: %w", seg.path, err)
		}
	}
	return pos, nil
}

// padToMinEnd covers the active segment from t.end to Options.MinEnd (at
// least a skip record's size) with a skip record, for PadToMinEnd. It
// returns ok=false, changing nothing, when the span does not fit in the
// segment (Open then refuses).
func (l *Log) padToMinEnd(t tailScan) (int64, bool, error) {
	s := l.mu.active
	span := max(l.opts.MinEnd-s.base-t.end, SkipRecordSize)
	if t.end+span > s.capacity || t.end+span > int64(len(s.data)) {
		return 0, false, nil
	}
	if err := l.ensureAlloc(s, t.end+span); err != nil {
		return 0, false, fmt.Errorf("commitlog: pad %s to offset %d: %w", s.path, l.opts.MinEnd, err)
	}
	clear(s.data[t.end : t.end+max(span, t.junk)])
	if _, err := putSkipSpan(s.data[t.end:], span); err != nil {
		return 0, false, err
	}
	if err := fdatasync(s.f); err != nil {
		return 0, false, fmt.Errorf("commitlog: sync %s: %w", s.path, err)
	}
	l.opts.Logger.Warn("commitlog: torn tail below a position another file names (the fsync policy allows this loss after a power loss): skipped to that position so that no offset is used twice",
		"segment", s.path, "end", s.base+t.end, "min_end", l.opts.MinEnd, "named_by", l.opts.MinEndFrom, "lost_bytes", l.opts.MinEnd-s.base-t.end)
	l.recovery.End = s.base + t.end + span
	return t.end + span, true, nil
}

// nonZeroExtent returns the length of b up to and including its last
// non-zero byte.
func nonZeroExtent(b []byte) int64 {
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] != 0 {
			return int64(i + 1)
		}
	}
	return 0
}

// listDir returns the segment file names in dir, sorted. It removes
// leftover .tmp files when clean is set and rejects .log files whose
// names are not segment names.
func listDir(dir string, clean bool) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		name := e.Name()
		switch {
		case len(name) > len(segfile.TempSuffix) && strings.HasSuffix(name, segfile.TempSuffix):
			if clean {
				if err := os.Remove(dir + "/" + name); err != nil {
					return nil, err
				}
			}
		case len(name) > len(segmentSuffix) && strings.HasSuffix(name, segmentSuffix):
			if _, ok := parseSegmentName(name); !ok {
				return nil, fmt.Errorf("commitlog: unexpected file %s in %s: segment files are named by a 20-digit offset", name, dir)
			}
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names, nil
}
