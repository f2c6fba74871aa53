package commitlog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/hourglassmq/hourglass/record"
	"github.com/hourglassmq/hourglass/segfile"
)

// ProblemKind classifies what Verify found.
type ProblemKind string

// Problem kinds.
const (
	// TornTail is a damaged record at the end of the active segment with
	// no valid record after it: the usual trace of a crash during a
	// write. Open truncates it.
	TornTail ProblemKind = "torn-tail"
	// Corruption is a damaged record or header where no write was in
	// progress: in a sealed segment, or with valid records after it.
	// Open refuses it; hourglass repair covers it with a skip record.
	Corruption ProblemKind = "corruption"
	// MissingSegment is a gap between two segment files.
	MissingSegment ProblemKind = "missing-segment"
	// UnexpectedFile is a file that does not belong in the directory.
	UnexpectedFile ProblemKind = "unexpected-file"
)

// Problem is one finding of Verify.
type Problem struct {
	Kind   ProblemKind
	File   string
	Pos    int64 // byte position in File, -1 when not applicable
	Offset int64 // logical offset, -1 when not applicable
	// Len is the length of the damaged span from Pos: to the next valid
	// record when one follows, else to the last non-zero byte; 0 when not
	// applicable.
	Len int64
	Err error
}

func (p Problem) String() string {
	if p.Pos < 0 {
		return fmt.Sprintf("%s: %s: %v", p.File, p.Kind, p.Err)
	}
	return fmt.Sprintf("%s: %s at file position %d (offset %d): %v", p.File, p.Kind, p.Pos, p.Offset, p.Err)
}

// VerifyStats summarises a clean or damaged log.
type VerifyStats struct {
	Segments int
	Records  int64
	Bytes    int64 // framed record bytes
	First    int64 // first offset
	End      int64 // offset one past the last whole record
	// Skipped are the spans skip records cover (records repair gave up),
	// adjacent ones merged, in offset order.
	Skipped []Span
}

// Verify reads every record of every segment in dir read-only, checking
// every checksum, and returns each problem found. It is safe while a
// writer has the log open. The returned error is for failures to read at
// all (a missing directory), not for damage.
func Verify(dir string, progress func(done, total int64)) ([]Problem, VerifyStats, error) {
	var st VerifyStats
	// A writer beside us creates, renames and deletes segments while the
	// directory is read; a gap or an overlap that is only such a race is
	// gone when the directory is read again, so look a few times before
	// reporting one.
	var segs []*segment
	var probs []Problem
	var total int64
	for attempt := 0; ; attempt++ {
		var racy bool
		var err error
		segs, probs, total, racy, err = listVerify(dir)
		if err != nil {
			return nil, st, err
		}
		if !racy || attempt == liveRetries {
			break
		}
		for _, s := range segs {
			s.release()
		}
		time.Sleep(time.Millisecond)
	}
	defer func() {
		for _, s := range segs {
			s.release()
		}
	}()
	active := len(segs) - 1
	for active > 0 && isEmpty(segs[active]) {
		active--
	}
	var done int64
	for i, s := range segs {
		if i == 0 {
			st.First = s.base
		}
		st.Segments++
		var pos int64
		retries := 0
		for pos < int64(len(s.data)) {
			_, n, skip, err := decodeSpan(s.data[pos:])
			if err == nil {
				if off := s.base + pos; skip {
					if k := len(st.Skipped); k > 0 && st.Skipped[k-1].To == off {
						st.Skipped[k-1].To += int64(n)
					} else {
						st.Skipped = append(st.Skipped, Span{off, off + int64(n)})
					}
				}
				pos += int64(n)
				st.Records++
				st.Bytes += int64(n)
				st.End = s.base + pos
				retries = 0
				continue
			}
			junk := nonZeroExtent(s.data[pos:])
			if errors.Is(err, record.ErrEnd) && junk == 0 {
				break
			}
			if i >= active && retries < liveRetries {
				// A writer may be in the middle of writing here: look
				// again before calling it damage.
				retries++
				time.Sleep(time.Millisecond)
				continue
			}
			next := findRecord(s.data[pos:pos+junk], 1)
			p := Problem{Kind: Corruption, File: s.path, Pos: headerSize + pos, Offset: s.base + pos, Len: junk, Err: err}
			if next >= 0 {
				p.Len = next
				p.Err = fmt.Errorf("%w; valid records follow at offset %d", err, s.base+pos+next)
			} else if i >= active {
				// Nothing valid after it: the end of the last write.
				p.Kind = TornTail
			}
			if errors.Is(err, record.ErrEnd) {
				p.Err = errors.New("non-zero bytes after the end of the data")
				if next < 0 {
					p.Pos += firstNonZero(s.data[pos:])
					p.Offset, p.Len = -1, junk-firstNonZero(s.data[pos:])
				}
			}
			probs = append(probs, p)
			if next < 0 {
				break
			}
			pos += next
		}
		done += headerSize + s.capacity
		if progress != nil {
			progress(done, total)
		}
	}
	return probs, st, nil
}

// listVerify lists and opens the segments of dir read-only for Verify.
// racy reports a problem that a concurrent writer could have caused: a
// gap or overlap between segments, or a segment gone before it was opened.
func listVerify(dir string) (segs []*segment, probs []Problem, total int64, racy bool, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, 0, false, err
	}
	var names []string
	for _, e := range ents {
		name := e.Name()
		if filepath.Ext(name) == segfile.TempSuffix {
			continue
		}
		if _, ok := parseSegmentName(name); !ok {
			probs = append(probs, Problem{Kind: UnexpectedFile, File: filepath.Join(dir, name), Pos: -1, Offset: -1,
				Err: errors.New("not a segment file (want a 20-digit offset and .log)")})
			continue
		}
		if fi, err := e.Info(); err == nil {
			total += fi.Size()
		}
		names = append(names, name)
	}
	for _, name := range names {
		path := filepath.Join(dir, name)
		s, err := openSegment(path, true)
		if err != nil {
			racy = racy || errors.Is(err, fs.ErrNotExist)
			probs = append(probs, Problem{Kind: Corruption, File: path, Pos: 0, Offset: -1, Err: err})
			continue
		}
		if n := len(segs); n > 0 && s.base != segs[n-1].end() {
			kind := MissingSegment
			if s.base < segs[n-1].end() {
				kind = UnexpectedFile
			}
			racy = true
			probs = append(probs, Problem{Kind: kind, File: path, Pos: -1, Offset: -1,
				Err: fmt.Errorf("base %d, previous segment ends at %d", s.base, segs[n-1].end())})
		}
		segs = append(segs, s)
	}
	return segs, probs, total, racy, nil
}

// liveRetries is how many times Verify reads a damaged-looking record of
// the active segment again, a millisecond apart, before reporting it: a
// writer beside it may be in the middle of writing it.
const liveRetries = 5

func firstNonZero(b []byte) int64 {
	for i, c := range b {
		if c != 0 {
			return int64(i)
		}
	}
	return -1
}
