package audit

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hourglassmq/hourglass/segfile"
)

// Suffix ends a segment's name.
const Suffix = ".audit"

// Defaults of Options.
const (
	DefaultMaxBytes = 64 << 20
	minSegmentBytes = 64 << 10
)

// Options configure a Log.
type Options struct {
	// Dir holds the segments; created if missing. Required.
	Dir string
	// MaxBytes bounds the trail: whole old segments are deleted while
	// it is larger; default DefaultMaxBytes.
	MaxBytes int64
	// MaxAge deletes whole old segments whose last entry is older; 0
	// keeps entries until MaxBytes needs their room.
	MaxAge time.Duration
	// SegmentBytes starts a new segment once the last one is this large;
	// default MaxBytes/8, at least 64 KiB.
	SegmentBytes int64
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger; default slog.Default().
	Logger *slog.Logger
}

type segment struct {
	first uint64
	path  string
	size  int64
}

// Log is the audit trail. Its methods may be called from any goroutine.
type Log struct {
	opts Options

	mu struct {
		sync.Mutex
		segs   []segment // oldest first; the last is written
		f      *os.File  // the last segment, nil before the first Append
		next   uint64    // the next entry's Seq
		err    error     // sticky: a failed write or fsync
		closed bool
	}
}

// Open opens the trail in opts.Dir. A torn tail of the last segment (a
// crash in the middle of an Append) is cut off and logged.
func Open(opts Options) (*Log, error) {
	if opts.Dir == "" {
		return nil, errors.New("audit: Options.Dir is empty")
	}
	if opts.MaxBytes == 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.SegmentBytes == 0 {
		opts.SegmentBytes = max(opts.MaxBytes/8, minSegmentBytes)
	}
	if opts.MaxBytes < 0 || opts.MaxAge < 0 || opts.SegmentBytes < 0 {
		return nil, fmt.Errorf("audit: max bytes %d, max age %v, segment bytes %d: none may be negative", opts.MaxBytes, opts.MaxAge, opts.SegmentBytes)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	if _, err := segfile.RemoveTemp(opts.Dir, Suffix); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	l := &Log{opts: opts}
	segs, err := list(opts.Dir)
	if err != nil {
		return nil, err
	}
	l.mu.segs, l.mu.next = segs, 1
	if len(segs) == 0 {
		return l, nil
	}
	last := &l.mu.segs[len(segs)-1]
	b, err := os.ReadFile(last.path)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	entries, good, derr := Decode(b)
	if errors.Is(derr, ErrBadHeader) {
		return nil, &segfile.CorruptionError{Path: last.path, Offset: 0, Err: derr}
	}
	if len(entries) > 0 {
		l.mu.next = entries[len(entries)-1].Seq + 1
	} else {
		l.mu.next = last.first
	}
	f, err := os.OpenFile(last.path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	if derr != nil || good < len(b) {
		opts.Logger.Warn("audit: cut a torn tail off the last segment", "file", last.path, "offset", good, "bytes", len(b)-good, "cause", derr)
		if err := f.Truncate(int64(good)); err == nil {
			err = f.Sync()
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("audit: truncating %s: %w", last.path, err)
		}
	}
	if _, err := f.Seek(int64(good), 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("audit: %w", err)
	}
	l.mu.f, last.size = f, int64(good)
	return l, nil
}

// list returns the segments in dir, oldest first.
func list(dir string) ([]segment, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	var segs []segment
	for _, e := range ents {
		base, ok := strings.CutSuffix(e.Name(), Suffix)
		if !ok || e.IsDir() || len(base) != 20 {
			continue
		}
		first, err := strconv.ParseUint(base, 10, 64)
		if err != nil {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		segs = append(segs, segment{first: first, path: filepath.Join(dir, e.Name()), size: info.Size()})
	}
	slices.SortFunc(segs, func(a, b segment) int { return compare(a.first, b.first) })
	return segs, nil
}

func compare(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Append records e, setting its Seq (and At when zero), and returns it
// once it is fsynced. A failed write or fsync is returned by every later
// Append too.
func (l *Log) Append(e Entry) (Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return e, ErrClosed
	}
	if l.mu.err != nil {
		return e, l.mu.err
	}
	e.Seq = l.mu.next
	if e.At.IsZero() {
		e.At = l.opts.Now()
	}
	e.At = e.At.UTC()
	b, err := encode(e)
	if err != nil {
		return e, fmt.Errorf("audit: %w", err)
	}
	if l.mu.f == nil || l.mu.segs[len(l.mu.segs)-1].size >= l.opts.SegmentBytes {
		if err := l.rotate(); err != nil {
			l.mu.err = err
			return e, err
		}
	}
	last := &l.mu.segs[len(l.mu.segs)-1]
	if _, err := l.mu.f.Write(b); err != nil {
		l.mu.err = fmt.Errorf("audit: writing %s: %w", last.path, err)
		return e, l.mu.err
	}
	if err := l.mu.f.Sync(); err != nil {
		l.mu.err = fmt.Errorf("audit: fsync %s: %w", last.path, err)
		return e, l.mu.err
	}
	last.size += int64(len(b))
	l.mu.next++
	l.retain()
	return e, nil
}

// rotate starts a segment named by the next Seq. l.mu is held.
func (l *Log) rotate() error {
	path := filepath.Join(l.opts.Dir, fmt.Sprintf("%020d%s", l.mu.next, Suffix))
	f, err := segfile.CreateAtomic(path, func(f *os.File) error {
		_, err := f.Write(header())
		return err
	}, nil)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	if _, err := f.Seek(HeaderSize, 0); err != nil {
		f.Close()
		return fmt.Errorf("audit: %w", err)
	}
	if l.mu.f != nil {
		l.mu.f.Close()
	}
	l.mu.f = f
	l.mu.segs = append(l.mu.segs, segment{first: l.mu.next, path: path, size: HeaderSize})
	return nil
}

// retain deletes whole old segments while the trail is over MaxBytes or
// their last entry is older than MaxAge; never the last one. l.mu is held.
// A segment that cannot be deleted is logged and kept.
func (l *Log) retain() {
	var total int64
	for _, s := range l.mu.segs {
		total += s.size
	}
	removed := 0
	for len(l.mu.segs) > 1 {
		s := l.mu.segs[0]
		old := false
		if l.opts.MaxAge > 0 {
			if info, err := os.Stat(s.path); err == nil && l.opts.Now().Sub(info.ModTime()) > l.opts.MaxAge {
				old = true
			}
		}
		if total <= l.opts.MaxBytes && !old {
			break
		}
		if err := os.Remove(s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			l.opts.Logger.Error("audit: deleting an old segment", "file", s.path, "err", err)
			break
		}
		total -= s.size
		l.mu.segs = l.mu.segs[1:]
		removed++
	}
	if removed > 0 {
		if err := segfile.SyncDir(l.opts.Dir); err != nil {
			l.opts.Logger.Error("audit: fsync of the directory after deleting old segments", "err", err)
		}
	}
}

// List returns up to limit entries older than before (every entry when
// before is 0), newest first, and whether older ones remain.
func (l *Log) List(before uint64, limit int) ([]Entry, bool, error) {
	l.mu.Lock()
	segs := slices.Clone(l.mu.segs)
	next := l.mu.next
	l.mu.Unlock()
	if before == 0 || before > next {
		before = next
	}
	var out []Entry
	for i := len(segs) - 1; i >= 0; i-- {
		s := segs[i]
		if s.first >= before {
			continue
		}
		b, err := os.ReadFile(s.path)
		if errors.Is(err, fs.ErrNotExist) {
			break // deleted by retention since: nothing older remains
		}
		if err != nil {
			return nil, false, fmt.Errorf("audit: %w", err)
		}
		entries, good, err := Decode(b)
		if err != nil && i < len(segs)-1 {
			return nil, false, &segfile.CorruptionError{Path: s.path, Offset: int64(good), Err: err}
		}
		// The last segment may end in an Append in progress: its whole
		// records are the trail.
		for j := len(entries) - 1; j >= 0; j-- {
			if entries[j].Seq >= before {
				continue
			}
			if len(out) == limit {
				return out, true, nil
			}
			out = append(out, entries[j])
		}
	}
	return out, false, nil
}

// Close closes the trail; Append fails from then on.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.closed = true
	if l.mu.f == nil {
		return nil
	}
	err := l.mu.f.Close()
	l.mu.f = nil
	return err
}
