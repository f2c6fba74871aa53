package commitlog

import (
	"errors"
	"fmt"
	"os"
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
		if l.opts.ReadOnly {
			return fmt.Errorf("commitlog: no segments in %s", l.dir)
		}
		if _, err := createSegment(l.dir, 0, l.opts.SegmentSize, l.opts.Sync == SyncAlways && !l.opts.FallocateFirst); err != nil {
			return fmt.Errorf("commitlog: create first segment: %w", wrapNoSpace(err))
		}
		names = []string{segmentName(0)}
	}
	for _, name := range names {
		s, err := openSegment(l.dir+"/"+name, l.opts.ReadOnly)
		if err != nil {
			return err
		}
		if n := len(l.segs); n > 0 {
			prev := l.segs[n-1]
			if s.base != prev.end() {
				s.release()
				if s.base > prev.end() {
					return fmt.Errorf("%w: %s ends at offset %d but the next file is %s", ErrMissingSegment, prev.path, prev.end(), name)
				}
				return &segfile.CorruptionError{Path: s.path, Offset: 0, Err: fmt.Errorf("unexpected segment file: base %d overlaps %s", s.base, prev.path)}
			}
		}
		l.segs = append(l.segs, s)
	}
	// The active segment is the last one holding data; empty segments
	// after it are preallocated spares.
	ai := len(l.segs) - 1
	for ai > 0 && isEmpty(l.segs[ai]) {
		ai--
	}
	if !l.opts.ReadOnly && ai+1 < len(l.segs) {
		l.pre.spare = l.segs[ai+1]
		for _, s := range l.segs[ai+2:] {
			s.removed.Store(true)
			s.release()
		}
		l.segs = l.segs[:ai+1]
	}
	l.active = l.segs[ai]
	l.first.Store(l.segs[0].base)
	end, err := l.recoverActive()
	if err != nil {
		return err
	}
	l.writePos = end
	l.written = l.active.base + end
	l.view.visible.Store(l.written)
	l.syncer.synced.Store(l.written)
	return nil
}

func isEmpty(s *segment) bool {
	_, _, err := record.Decode(s.data)
	return errors.Is(err, record.ErrEnd)
}

// recoverActive scans the active segment and zeroes a torn tail. It returns
// the data position one past the last whole record.
func (l *Log) recoverActive() (int64, error) {
	s := l.active
	rec := Recovery{Segment: s.path}
	var pos int64
	for {
		_, n, err := record.Decode(s.data[pos:])
		if err == nil {
			pos += int64(n)
			rec.Records++
			continue
		}
		if !errors.Is(err, record.ErrEnd) {
			rec.Truncated = true
			rec.DroppedFrom = s.base + pos
			rec.DroppedBytes = nonZeroExtent(s.data[pos:])
			rec.Cause = err
		}
		break
	}
	rec.End = s.base + pos
	l.recovery = rec
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
	for _, seg := range l.segs[max(0, len(l.segs)-2):] {
		if err := fdatasync(seg.f); err != nil {
			return 0, fmt.Errorf("commitlog: sync %s: %w", seg.path, err)
		}
	}
	return pos, nil
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
