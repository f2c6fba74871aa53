package reput

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/dispatchlog"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/segfile"
)

// stallRecorder collects OnStall and OnResume calls.
type stallRecorder struct {
	mu      sync.Mutex
	errs    []error
	stalled chan struct{} // closed at the first OnStall
	resumed chan struct{} // closed at the first OnResume
	third   chan struct{} // closed at the third OnStall
	once1   sync.Once
	once2   sync.Once
}

func newStallRecorder() *stallRecorder {
	return &stallRecorder{stalled: make(chan struct{}), resumed: make(chan struct{}), third: make(chan struct{})}
}

func (s *stallRecorder) set(o *Options) {
	o.OnStall = func(err error) {
		s.mu.Lock()
		s.errs = append(s.errs, err)
		if len(s.errs) == 3 {
			close(s.third)
		}
		s.mu.Unlock()
		s.once1.Do(func() { close(s.stalled) })
	}
	o.OnResume = func() { s.once2.Do(func() { close(s.resumed) }) }
	o.retryMin, o.retryMax = time.Millisecond, 5*time.Millisecond
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestTransientFailuresRetry: a full disk (ENOSPC from fsync, so also
// from creating segments) and too many open files (EMFILE opening a
// segment) stall routing, which reports each attempt, retries, and resumes
// by itself once the cause is gone; every record ends up routed exactly
// once.
func TestTransientFailuresRetry(t *testing.T) {
	for _, tc := range []struct {
		name  string
		errno syscall.Errno
		sync  bool // fail fsyncs (else: opens)
	}{
		{"enospc_fsync", syscall.ENOSPC, true},
		{"edquot_fsync", syscall.EDQUOT, true},
		{"emfile_open", syscall.EMFILE, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var failing atomic.Bool
			rec := newStallRecorder()
			e := newEnv(t, t.TempDir(), func(o *Options) {
				rec.set(o)
				o.schedule.SyncFile = func(f *os.File) error {
					if tc.sync && failing.Load() {
						return tc.errno
					}
					return f.Sync()
				}
				o.hooks = &testHooks{open: func(int64) error {
					if !tc.sync && failing.Load() {
						return &os.PathError{Op: "open", Path: "x", Err: tc.errno}
					}
					return nil
				}}
			})
			first := e.schedule(100, 4, "a")
			e.waitRouted()
			failing.Store(true)
			// New buckets: creating (or opening) them fails.
			var more []message.ID
			for i := range 50 {
				at := base + 3600_000 + int64(i%5)*1000
				offs, err := e.log.Append(nil, schedRec(at, fmt.Sprintf("b-%d", i)))
				if err != nil {
					t.Fatal(err)
				}
				more = append(more, message.ID{DeliverAt: at, Seq: uint64(offs[0])})
			}
			waitFor(t, rec.stalled, "OnStall")
			if e.r.Err() != nil {
				t.Fatalf("routing stopped on a transient error: %v", e.r.Err())
			}
			// Attempts go on while the cause lasts.
			waitFor(t, rec.third, "a third attempt")
			select {
			case <-rec.resumed:
				t.Fatal("resumed while still failing")
			default:
			}
			failing.Store(false)
			waitFor(t, rec.resumed, "OnResume")
			e.waitRouted()
			e.close()
			got := scan(t, e.opts.Dir)
			if len(got) != len(first)+len(more) {
				t.Fatalf("%d entries, want %d", len(got), len(first)+len(more))
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if !errors.Is(rec.errs[0], tc.errno) {
				t.Fatalf("OnStall got %v, want %v", rec.errs[0], tc.errno)
			}
		})
	}
}

// TestCorruptionStopsAndReports: a damaged segment is not retried (it
// needs the operator) but is reported through OnStall and Err.
func TestCorruptionStopsAndReports(t *testing.T) {
	rec := newStallRecorder()
	bad := &segfile.CorruptionError{Path: "x.sched", Offset: 0, Err: errors.New("bad magic")}
	e := newEnv(t, t.TempDir(), func(o *Options) {
		rec.set(o)
		o.hooks = &testHooks{open: func(int64) error { return bad }}
	})
	e.schedule(1, 1, "c")
	waitFor(t, rec.stalled, "OnStall")
	waitFor(t, e.r.done, "routing to stop")
	if !errors.Is(e.r.Err(), bad) {
		t.Fatalf("Err() = %v, want the corruption", e.r.Err())
	}
	e.r.Close()
	e.log.Close()
}

var spreadBuckets = flag.Int("reput.spread", 2_000, "buckets of the burst in TestWriterBoundUnderSpread (10000 for the issue's case: about 30 s here, one segment creation with its directory fsync per bucket)")

// TestWriterBoundUnderSpread: one burst over thousands of buckets (one
// record each) never has more than maxOpenWriters segment writers open,
// and everything is routed.
func TestWriterBoundUnderSpread(t *testing.T) {
	n := *spreadBuckets
	if testing.Short() {
		n = min(n, 500)
	}
	const bound = 16
	var most int
	var r *Reput
	e := newEnv(t, t.TempDir(), func(o *Options) {
		o.maxOpenWriters = bound
		o.checkpointInterval = time.Hour // no checkpoint to close idle writers
		o.schedule.SyncFile = func(*os.File) error { return nil }
		o.hooks = &testHooks{open: func(int64) error {
			// On the routing goroutine, just before a writer is opened.
			most = max(most, len(r.writers.open)+1)
			return nil
		}}
	})
	r = e.r
	recs := make([]message.ID, 0, n)
	for i := range n {
		at := base + int64(i)*1000
		offs, err := e.log.Append(nil, schedRec(at, "x"))
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, message.ID{DeliverAt: at, Seq: uint64(offs[0])})
	}
	e.waitRouted()
	e.close()
	if most > bound {
		t.Fatalf("%d writers open at once, bound %d", most, bound)
	}
	if st := e.r.Stats(); st.Routed != int64(n) || st.Evicted < int64(n-bound) {
		t.Fatalf("stats %+v", st)
	}
	if got := scan(t, e.opts.Dir); len(got) != n {
		t.Fatalf("%d entries, want %d", len(got), n)
	}
}

// retireAll delivers and retires every bucket of e and returns how many.
func retireAll(t *testing.T, e *env) int {
	t.Helper()
	segs := e.r.Segments()
	for _, s := range segs {
		rd, err := schedulelog.OpenReader(filepath.Join(e.opts.Dir, s.Name))
		if err != nil {
			t.Fatal(err)
		}
		it := rd.Iter()
		var recs []dispatchlog.Done
		for it.Next() {
			recs = append(recs, dispatchlog.Done{Seq: it.Seq(), Reason: dispatchlog.Delivered})
		}
		rd.Close()
		if err := e.r.MarkDone(s.Start, recs...); err != nil {
			t.Fatal(err)
		}
		if err := e.r.Retire(s.Start, uint64(len(recs))); err != nil {
			t.Fatalf("retire %s: %v", s.Name, err)
		}
	}
	return len(segs)
}

// TestLostCheckpointReplaysNothing: with the checkpoint deleted or
// damaged, a restart routes from the oldest commitlog segment but never
// re-creates a retired bucket (its messages were delivered) and routes
// nothing twice.
func TestLostCheckpointReplaysNothing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(path string) error
	}{
		{"deleted", os.Remove},
		{"damaged", func(p string) error { return flipByte(p, 9) }},
		{"truncated", func(p string) error { return os.Truncate(p, 10) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			e := newEnv(t, dir, nil)
			e.schedule(200, 4, "old")
			e.waitRouted()
			e.close()
			e = newEnv(t, dir, nil) // checkpoint now covers them: Retire may go
			if n := retireAll(t, e); n != 4 {
				t.Fatalf("retired %d buckets", n)
			}
			kept := e.schedule(30, 3, "new") // buckets that stay
			e.waitRouted()
			e.close()
			if e.log.FirstOffset() != 0 {
				t.Fatal("the commitlog was trimmed: the test needs the retired records in it")
			}
			if err := tc.damage(filepath.Join(e.opts.Dir, checkpointName)); err != nil {
				t.Fatal(err)
			}
			e = newEnv(t, dir, nil)
			e.waitRouted()
			e.close()
			got := scan(t, e.opts.Dir)
			if len(got) != len(kept) {
				t.Fatalf("%d entries after the restart, want the %d not retired (retired ones came back: a replay)", len(got), len(kept))
			}
			for _, id := range kept {
				if _, ok := got[id.Seq]; !ok {
					t.Fatalf("entry %d lost", id.Seq)
				}
			}
			if _, ok, err := readCheckpoint(e.opts.Dir); !ok || err != nil {
				t.Fatalf("checkpoint not written back: %v %v", ok, err)
			}
		})
	}
}

func flipByte(path string, off int64) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	b[off] ^= 0x40
	return os.WriteFile(path, b, 0o644)
}

// TestLostRetiredLogRefuses: when the retired log is gone or damaged and
// the checkpoint says buckets were retired, or both files are gone from a
// directory that routed, Start refuses with a CorruptionError naming the
// file, instead of risking a replay.
func TestLostRetiredLogRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(dir string) error
		file   string
		cause  error
	}{
		{"retired_deleted", func(d string) error { return os.Remove(filepath.Join(d, retiredName)) }, retiredName, ErrRetiredMissing},
		{"retired_damaged", func(d string) error { return flipByte(filepath.Join(d, retiredName), retiredHeaderSize+10) }, retiredName, ErrBadRetired},
		{"retired_header_damaged", func(d string) error { return flipByte(filepath.Join(d, retiredName), 1) }, retiredName, ErrBadRetired},
		{"retired_short", func(d string) error {
			return os.Truncate(filepath.Join(d, retiredName), retiredHeaderSize+retiredRecSize)
		}, retiredName, ErrRetiredShort},
		{"both_deleted", func(d string) error {
			os.Remove(filepath.Join(d, checkpointName))
			return os.Remove(filepath.Join(d, retiredName))
		}, checkpointName, ErrNoRecord},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			e := newEnv(t, dir, nil)
			e.schedule(40, 4, "x")
			e.waitRouted()
			e.close()
			e = newEnv(t, dir, nil)
			retireAll(t, e)
			e.schedule(5, 1, "y")
			e.waitRouted()
			e.close()
			if err := tc.damage(e.opts.Dir); err != nil {
				t.Fatal(err)
			}
			r, err := Start(e.opts)
			if err == nil {
				r.Close()
				t.Fatal("started")
			}
			var ce *segfile.CorruptionError
			if !errors.As(err, &ce) || filepath.Base(ce.Path) != tc.file || !errors.Is(err, tc.cause) {
				t.Fatalf("error %v; want a CorruptionError on %s wrapping %v", err, tc.file, tc.cause)
			}
		})
	}
}

// TestFreshDirectoryHasBothFiles: a new directory gets the checkpoint and
// the retired log at once, so that either's loss is noticed; a directory
// from before the retired log (a version 1 checkpoint) is upgraded.
func TestFreshDirectoryHasBothFiles(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, dir, nil)
	e.r.abandon()
	e.log.Close()
	for _, name := range []string{checkpointName, retiredName} {
		if _, err := os.Stat(filepath.Join(e.opts.Dir, name)); err != nil {
			t.Fatalf("fresh directory: %v", err)
		}
	}
	t.Run("upgrade_from_v1", func(t *testing.T) {
		os.Remove(filepath.Join(e.opts.Dir, retiredName))
		if err := os.WriteFile(filepath.Join(e.opts.Dir, checkpointName), encodeCheckpointV1(0), 0o644); err != nil {
			t.Fatal(err)
		}
		e := newEnv(t, dir, nil)
		e.schedule(3, 1, "u")
		e.waitRouted()
		e.close()
		c, ok, err := readCkpt(e.opts.Dir)
		if !ok || err != nil || c.version != checkpointVersion {
			t.Fatalf("checkpoint after upgrade: %+v %v %v", c, ok, err)
		}
		if _, ok, err := ReadRetired(e.opts.Dir); !ok || err != nil {
			t.Fatalf("retired log after upgrade: %v %v", ok, err)
		}
	})
}

// TestDamagedFutureHeaderStartsAndStopsNothingElse: start-up reads only
// names, so a far-future segment with a damaged header does not fail
// Start; routing to other buckets goes on; the damage is reported when
// that bucket is needed.
func TestDamagedFutureHeaderStartsAndStopsNothingElse(t *testing.T) {
	dir := t.TempDir()
	e := newEnv(t, dir, nil)
	far := base + 3600_000*24*365
	offs, err := e.log.Append(nil, schedRec(far+5, "far"))
	if err != nil {
		t.Fatal(err)
	}
	e.schedule(10, 2, "near")
	e.waitRouted()
	e.close()
	farSeg := schedulelog.Name(schedulelog.BucketStart(far, time.Second))
	if err := flipByte(filepath.Join(e.opts.Dir, farSeg), 3); err != nil {
		t.Fatal(err)
	}
	e = newEnv(t, dir, nil)
	more := e.schedule(10, 2, "later")
	e.waitRouted()
	if _, ok := e.r.FindSegment(far + 5); ok {
		t.Fatal("found a segment whose header is damaged")
	}
	if e.r.Stats().Damaged != 1 {
		t.Fatalf("damage not counted: %+v", e.r.Stats())
	}
	if e.r.Err() != nil {
		t.Fatalf("routing stopped: %v", e.r.Err())
	}
	e.close()
	_ = offs
	if got := scan2(t, e.opts.Dir, farSeg); len(got) != 20 || got[more[0].Seq] == "" {
		t.Fatalf("%d entries in the other segments", len(got))
	}
}

// scan2 is scan without the segment skip.
func scan2(t *testing.T, dir, skip string) map[uint64]string {
	t.Helper()
	tmp := t.TempDir()
	segs, err := schedulelog.ListNames(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		if s.Name == skip {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, s.Name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, s.Name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return scan(t, tmp)
}

// FuzzDecodeRetired: the retired log decoder never panics, and what it
// accepts encodes back to the bytes it read (up to a torn tail).
func FuzzDecodeRetired(f *testing.F) {
	good := encodeRetiredHeader(0)
	good = append(good, encodeRetirement(Retirement{Start: base, Duration: time.Hour, SeqEnd: 10, Floor: 20})...)
	good = append(good, encodeRetirement(Retirement{Floor: 30})...)
	f.Add(good)
	f.Add(good[:len(good)-5])
	f.Add(encodeRetiredHeader(3))
	f.Add([]byte("HGRT"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, _, err := decodeRetired(b)
		if err != nil {
			return
		}
		if s.good+s.torn != int64(len(b)) {
			t.Fatalf("good %d + torn %d != %d bytes", s.good, s.torn, len(b))
		}
		re := encodeRetiredHeader(s.base)
		for _, r := range s.recs {
			re = append(re, encodeRetirement(r)...)
			if r.SeqEnd > uint64(r.Floor) || r.Floor < 0 {
				t.Fatalf("accepted %+v", r)
			}
		}
		if string(re) != string(b[:s.good]) {
			t.Fatal("accepted bytes that encodeRetirement does not write")
		}
	})
}

// TestRetiredCovers: a record is skipped exactly when its deliverAt lies
// in a retired bucket and its seq is below that bucket's seq end.
func TestRetiredCovers(t *testing.T) {
	var s retiredState
	s.add(Retirement{Start: base, Duration: time.Hour, SeqEnd: 100, Floor: 200})
	s.add(Retirement{Start: base + 3600_000, Duration: 30 * time.Minute, SeqEnd: 150, Floor: 200})
	s.add(Retirement{Floor: 500}) // a floor only covers no bucket
	for _, tc := range []struct {
		name      string
		deliverAt int64
		seq       uint64
		want      bool
	}{
		{"in_bucket_below_end", base + 10, 99, true},
		{"in_bucket_at_end", base + 10, 100, false},
		{"bucket_edge_start", base, 0, true},
		{"bucket_edge_end", base + 3600_000 - 1, 99, true},
		{"second_bucket", base + 3600_000, 120, true},
		{"after_clipped_bucket", base + 3600_000 + 1800_000, 1, false},
		{"before_all", base - 1, 1, false},
		{"far_later", base + 48*3600_000, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := s.covers(tc.deliverAt, tc.seq); got != tc.want {
				t.Fatalf("covers(%d, %d) = %v", tc.deliverAt-base, tc.seq, got)
			}
		})
	}
	if s.floor != 500 || s.count() != 3 {
		t.Fatalf("floor %d count %d", s.floor, s.count())
	}
}

// TestDescriptorLimitBelowWriterBound: when the process runs out of
// descriptors with fewer writers open than maxOpenWriters, routing keeps
// fewer open and gets through a burst over many buckets instead of
// failing at the same record on every retry.
func TestDescriptorLimitBelowWriterBound(t *testing.T) {
	const limit = 10 // "descriptors" left for segment writers
	var r *Reput
	rec := newStallRecorder()
	e := newEnv(t, t.TempDir(), func(o *Options) {
		rec.set(o)
		o.maxOpenWriters = 64
		o.schedule.SyncFile = func(*os.File) error { return nil }
		o.hooks = &testHooks{open: func(int64) error {
			if len(r.writers.open) >= limit {
				return &os.PathError{Op: "open", Path: "x", Err: syscall.EMFILE}
			}
			return nil
		}}
	})
	r = e.r
	const n = 300
	for i := range n {
		if _, err := e.log.Append(nil, schedRec(base+int64(i)*1000, "x")); err != nil {
			t.Fatal(err)
		}
	}
	e.waitRouted()
	waitFor(t, rec.resumed, "OnResume")
	e.close()
	if got := scan(t, e.opts.Dir); len(got) != n {
		t.Fatalf("%d entries, want %d", len(got), n)
	}
}

// TestRetiredCompaction: a retired log whose records mostly name commitlog
// records that retention deleted is rewritten smaller at start-up, keeping
// its count (the checkpoint checks it) and its floor, and what still
// covers retained records.
func TestRetiredCompaction(t *testing.T) {
	dir := t.TempDir()
	var recs []Retirement
	for i := range compactMin + 100 {
		recs = append(recs, Retirement{Start: base + int64(i)*1000, Duration: time.Second, SeqEnd: uint64(i + 1), Floor: int64(i + 1)})
	}
	st, err := createRetired(dir, recs...)
	if err != nil {
		t.Fatal(err)
	}
	l := &retiredLog{dir: dir, sync: (*os.File).Sync, st: st}
	first := int64(compactMin) // records with seq end above it stay
	n, err := l.compact(first)
	if err != nil || n != compactMin {
		t.Fatalf("compact: %d, %v; want %d dropped", n, err, compactMin)
	}
	back, ok, err := readRetired(dir)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if back.count() != uint64(len(recs)) || back.floor != int64(len(recs)) || len(back.recs) != 101 {
		t.Fatalf("after compaction: count %d floor %d records %d", back.count(), back.floor, len(back.recs))
	}
	last := recs[len(recs)-1]
	if !back.covers(last.Start, last.SeqEnd-1) {
		t.Fatal("a retained retirement no longer covers its bucket")
	}
	if n, _ := (&retiredLog{dir: dir, st: back}).compact(first); n != 0 {
		t.Fatalf("compacted again: %d", n)
	}
	if err := l.append(Retirement{Start: base - 1000, Duration: time.Second, SeqEnd: 1, Floor: int64(len(recs))}); err != nil {
		t.Fatal(err)
	}
	if back, _, _ := readRetired(dir); back.count() != uint64(len(recs))+1 {
		t.Fatalf("append after compaction: count %d", back.count())
	}
}
