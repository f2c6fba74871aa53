package commitlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/record"
	"github.com/hourglassmq/hourglass/segfile"
)

const testSegSize = 8 << 10 // small segments so tests rotate often

func openTest(t *testing.T, dir string, pol SyncPolicy) *Log {
	t.Helper()
	l, _, err := Open(Options{Dir: dir, SegmentSize: testSegSize, Sync: pol})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// payload returns a deterministic payload for record i.
func payload(i int) []byte {
	n := 10 + i%200
	p := make([]byte, n)
	binary.LittleEndian.PutUint32(p, uint32(i))
	for j := 4; j < n; j++ {
		p[j] = byte(i + j)
	}
	return p
}

func appendN(t *testing.T, l *Log, from, n int) []int64 {
	t.Helper()
	var offs []int64
	for i := from; i < from+n; i++ {
		var err error
		offs, err = l.Append(offs, Record{Type: 1, Flags: byte(i), Payload: payload(i)})
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	return offs
}

// readAll returns every visible record's offset and payload from offset from.
func readAll(t *testing.T, l *Log, from int64) ([]int64, [][]byte, error) {
	t.Helper()
	it, err := l.NewIterator(from)
	if err != nil {
		return nil, nil, err
	}
	defer it.Close()
	var offs []int64
	var ps [][]byte
	for it.Next() {
		offs = append(offs, it.Offset())
		ps = append(ps, bytes.Clone(it.Record().Payload))
	}
	return offs, ps, it.Err()
}

func checkRecords(t *testing.T, l *Log, wantOffs []int64, first int) {
	t.Helper()
	offs, ps, err := readAll(t, l, l.FirstOffset())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(offs, wantOffs) {
		t.Fatalf("offsets: got %d records %v..., want %d", len(offs), offs[:min(5, len(offs))], len(wantOffs))
	}
	for i, p := range ps {
		if !bytes.Equal(p, payload(first+i)) {
			t.Fatalf("record %d payload differs", i)
		}
	}
}

func TestAppendReadAcrossSegments(t *testing.T) {
	for _, pol := range []SyncPolicy{SyncAlways, SyncInterval, SyncNone} {
		t.Run(pol.String(), func(t *testing.T) {
			dir := t.TempDir()
			l := openTest(t, dir, pol)
			offs := appendN(t, l, 0, 300)
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			checkRecords(t, l, offs, 0)
			if n := len(l.segs.list); n < 3 {
				t.Fatalf("only %d segments after 300 records; rotation not exercised", n)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			l = openTest(t, dir, pol)
			defer l.Close()
			if rec := l.Recovery(); rec.Truncated {
				t.Fatalf("clean reopen truncated: %+v", rec)
			}
			checkRecords(t, l, offs, 0)
			more := appendN(t, l, 300, 50)
			if more[0] != l.Recovery().End {
				t.Fatalf("append after reopen at %d, want %d", more[0], l.Recovery().End)
			}
			l.Sync()
			checkRecords(t, l, append(offs, more...), 0)
		})
	}
}

func TestAppendBatch(t *testing.T) {
	l := openTest(t, t.TempDir(), SyncAlways)
	defer l.Close()
	// A batch bigger than a segment spans several; each record stays whole.
	var recs []Record
	for i := range 200 {
		recs = append(recs, Record{Type: 1, Payload: payload(i)})
	}
	offs, err := l.Append(nil, recs...)
	if err != nil {
		t.Fatal(err)
	}
	checkRecords(t, l, offs, 0)
	if _, err := l.Append(nil, Record{Type: 1, Payload: make([]byte, testSegSize)}); !errors.Is(err, ErrRecordTooLarge) {
		t.Fatalf("oversized record: %v", err)
	}
	if _, err := l.Append(nil, Record{Type: 1, Payload: []byte("x")}, Record{Type: 0}); !errors.Is(err, record.ErrInvalidType) {
		t.Fatalf("type 0: %v", err)
	}
	// Neither failed batch wrote anything.
	checkRecords(t, l, offs, 0)
}

func TestIteratorFromOffset(t *testing.T) {
	l := openTest(t, t.TempDir(), SyncNone)
	defer l.Close()
	offs := appendN(t, l, 0, 100)
	got, _, err := readAll(t, l, offs[57])
	if err != nil || !slices.Equal(got, offs[57:]) {
		t.Fatalf("from offs[57]: %v %v", len(got), err)
	}
	if _, err := l.NewIterator(l.EndOffset() + 1); !errors.Is(err, ErrOffsetRange) {
		t.Fatalf("beyond end: %v", err)
	}
	if _, err := l.NewIterator(l.EndOffset()); err != nil {
		t.Fatalf("at end: %v", err)
	}
}

// lastRecordTorn writes n records, closes, and returns the path of the
// active segment and the file positions where the last record starts and ends.
func writeAndLocateLast(t *testing.T, dir string, n int) (string, int64, int64, []int64) {
	l := openTest(t, dir, SyncAlways)
	offs := appendN(t, l, 0, n)
	active := l.mu.active
	path, base := active.path, active.base
	end := l.mu.written
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	last := offs[n-1]
	if last < base {
		t.Fatal("last record not in the active segment")
	}
	return path, headerSize + last - base, headerSize + end - base, offs
}

func TestTornTailEveryPosition(t *testing.T) {
	src := t.TempDir()
	path, start, end, offs := writeAndLocateLast(t, src, 40)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for cut := start; cut < end; cut++ {
		// Zero everything from cut on: the last record is torn at cut.
		dir := t.TempDir()
		copyDir(t, src, dir)
		b := bytes.Clone(orig)
		clear(b[cut:])
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(path)), b, 0o644); err != nil {
			t.Fatal(err)
		}
		l, rec, err := Open(Options{Dir: dir, SegmentSize: testSegSize})
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		wantTrunc := cut > start
		if rec.Truncated != wantTrunc {
			t.Fatalf("cut at %d: Truncated=%v, want %v (%+v)", cut, rec.Truncated, wantTrunc, rec)
		}
		if wantTrunc && (rec.DroppedFrom != offs[len(offs)-1] || rec.DroppedBytes <= 0 || rec.DroppedBytes > cut-start) {
			t.Fatalf("cut at %d: report %+v", cut, rec)
		}
		checkRecords(t, l, offs[:len(offs)-1], 0)
		// The log is writable again at exactly the dropped position.
		o, err := l.Append(nil, Record{Type: 1, Payload: payload(39)})
		if err != nil || o[0] != offs[len(offs)-1] {
			t.Fatalf("cut at %d: append after recovery at %v, %v", cut, o, err)
		}
		l.Close()
		if probs, _, err := Verify(dir, nil); err != nil || len(probs) != 0 {
			t.Fatalf("cut at %d: verify after recovery: %v %v", cut, probs, err)
		}
	}
}

func TestRecoveryCases(t *testing.T) {
	for _, tc := range []struct {
		name    string
		damage  func(t *testing.T, dir string, segs []string)
		openErr error // wanted error from Open, via errors.Is/As
		verify  ProblemKind
		readErr bool // iterating from the start fails with a CorruptionError
	}{
		{name: "clean_reopen", damage: func(*testing.T, string, []string) {}},
		{name: "flipped_bit_sealed", damage: func(t *testing.T, dir string, segs []string) {
			flipByte(t, filepath.Join(dir, segs[0]), headerSize+100)
		}, verify: Corruption, readErr: true},
		{name: "garbage_after_end_of_sealed", damage: func(t *testing.T, dir string, segs []string) {
			flipByte(t, filepath.Join(dir, segs[0]), testSegSize-3)
		}, verify: Corruption},
		{name: "missing_middle_segment", damage: func(t *testing.T, dir string, segs []string) {
			os.Remove(filepath.Join(dir, segs[1]))
		}, openErr: ErrMissingSegment, verify: MissingSegment},
		{name: "extra_overlapping_segment", damage: func(t *testing.T, dir string, segs []string) {
			b, _ := os.ReadFile(filepath.Join(dir, segs[0]))
			os.WriteFile(filepath.Join(dir, segmentName(10)), b, 0o644)
		}, openErr: &segfile.CorruptionError{}, verify: Corruption},
		{name: "unexpected_log_name", damage: func(t *testing.T, dir string, segs []string) {
			os.WriteFile(filepath.Join(dir, "notes.log"), []byte("x"), 0o644)
		}, openErr: errUnexpected, verify: UnexpectedFile},
		{name: "bad_header", damage: func(t *testing.T, dir string, segs []string) {
			flipByte(t, filepath.Join(dir, segs[1]), 9)
		}, openErr: &segfile.CorruptionError{}, verify: Corruption},
		{name: "leftover_tmp_removed", damage: func(t *testing.T, dir string, segs []string) {
			os.WriteFile(filepath.Join(dir, segmentName(1<<40)+segfile.TempSuffix), []byte("partial"), 0o644)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l := openTest(t, dir, SyncNone)
			offs := appendN(t, l, 0, 200)
			l.Close()
			var segs []string
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				segs = append(segs, e.Name())
			}
			if len(segs) < 3 {
				t.Fatalf("want 3+ segments, got %v", segs)
			}
			tc.damage(t, dir, segs)

			probs, _, err := Verify(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.verify == "" && len(probs) > 0 {
				t.Fatalf("verify found %v", probs)
			}
			if tc.verify != "" && (len(probs) == 0 || probs[0].Kind != tc.verify) {
				t.Fatalf("verify = %v, want %s", probs, tc.verify)
			}

			l, _, err = Open(Options{Dir: dir, SegmentSize: testSegSize})
			switch want := tc.openErr.(type) {
			case nil:
				if err != nil {
					t.Fatalf("open: %v", err)
				}
			case *segfile.CorruptionError:
				var ce *segfile.CorruptionError
				if !errors.As(err, &ce) {
					t.Fatalf("open error = %v, want CorruptionError", err)
				}
				return
			default:
				if !errors.Is(err, want) && !(want == errUnexpected && err != nil) {
					t.Fatalf("open error = %v, want %v", err, want)
				}
				return
			}
			defer l.Close()
			_, _, rerr := readAll(t, l, l.FirstOffset())
			var ce *segfile.CorruptionError
			if tc.readErr {
				if !errors.As(rerr, &ce) || ce.Path == "" || ce.Offset < 0 {
					t.Fatalf("read error = %v, want CorruptionError with file and offset", rerr)
				}
				return
			}
			if rerr != nil {
				t.Fatal(rerr)
			}
			checkRecords(t, l, offs, 0)
			if m, _ := filepath.Glob(filepath.Join(dir, "*"+segfile.TempSuffix)); len(m) != 0 {
				t.Fatalf("tmp files left: %v", m)
			}
		})
	}
}

var errUnexpected = errors.New("any error")

func flipByte(t *testing.T, path string, pos int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	f.ReadAt(b, pos)
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, pos); err != nil {
		t.Fatal(err)
	}
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTailingReaderIsWoken(t *testing.T) {
	l := openTest(t, t.TempDir(), SyncAlways)
	defer l.Close()
	it, err := l.NewIterator(l.EndOffset())
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	got := make(chan []byte)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for !it.Next() {
			if err := it.Wait(ctx); err != nil {
				got <- nil
				return
			}
		}
		got <- bytes.Clone(it.Record().Payload)
	}()
	if _, err := l.Append(nil, Record{Type: 1, Payload: []byte("wake")}); err != nil {
		t.Fatal(err)
	}
	if p := <-got; string(p) != "wake" {
		t.Fatalf("tailing reader got %q", p)
	}
	// Wait honours its context.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := it.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on cancelled ctx = %v", err)
	}
}

func TestGroupCommit(t *testing.T) {
	var mu sync.Mutex
	syncs := 0
	l, _, err := Open(Options{Dir: t.TempDir(), SegmentSize: 1 << 20, OnSync: func(time.Duration) {
		mu.Lock()
		syncs++
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const writers, per = 32, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range per {
				if _, err := l.Append(nil, Record{Type: 1, Payload: payload(w*per + i)}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if syncs == 0 || syncs >= writers*per {
		t.Fatalf("%d fsyncs for %d appends: group commit not sharing", syncs, writers*per)
	}
	t.Logf("%d fsyncs for %d appends", syncs, writers*per)
}

func TestConcurrentAppendTailRetain(t *testing.T) {
	l := openTest(t, t.TempDir(), SyncAlways)
	defer l.Close()
	const writers, per = 8, 200
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	it, _ := l.NewIterator(0)
	seen := make(map[uint32]bool)
	readerDone := make(chan error)
	go func() {
		defer it.Close()
		last := int64(-1)
		for len(seen) < writers*per {
			for it.Next() {
				if it.Offset() <= last {
					readerDone <- fmt.Errorf("offset %d after %d", it.Offset(), last)
					return
				}
				last = it.Offset()
				p := it.Record().Payload
				i := binary.LittleEndian.Uint32(p)
				if !bytes.Equal(p, payload(int(i))) || seen[i] {
					readerDone <- fmt.Errorf("record %d damaged or duplicated", i)
					return
				}
				seen[i] = true
				// Retention behind the reader, as reput does.
				if _, err := l.DeleteBefore(it.Pos()); err != nil {
					readerDone <- err
					return
				}
			}
			if err := it.Err(); err != nil {
				readerDone <- err
				return
			}
			if len(seen) == writers*per {
				break
			}
			if err := it.Wait(ctx); err != nil {
				readerDone <- fmt.Errorf("%w: seen %d of %d, pos %d, end %d", err, len(seen), writers*per, it.Pos(), l.EndOffset())
				return
			}
		}
		readerDone <- nil
	}()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range per {
				if _, err := l.Append(nil, Record{Type: 1, Payload: payload(w*per + i)}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if err := <-readerDone; err != nil {
		t.Fatal(err)
	}
	if l.FirstOffset() == 0 {
		t.Fatal("retention deleted nothing")
	}
}

func TestDiskFull(t *testing.T) {
	dir := t.TempDir()
	l := openTest(t, dir, SyncAlways)
	defer l.Close()
	offs := appendN(t, l, 0, 10)
	// Wait until the preallocator has produced the spare, then take it away
	// and make creating segments fail as on a full disk.
	l.pre.mu.Lock()
	if l.pre.spare != nil {
		l.pre.spare.removed.Store(true)
		l.pre.spare.release()
		l.pre.spare = nil
	}
	l.pre.create = func(string, int64, int64, int64, bool) (string, error) {
		return "", &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}
	}
	l.pre.mu.Unlock()
	var err error
	n := 10
	for ; err == nil && n < 1000; n++ {
		var o []int64
		o, err = l.Append(nil, Record{Type: 1, Payload: payload(n)})
		offs = append(offs, o...)
	}
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("append on a full disk: %v", err)
	}
	checkRecords(t, l, offs, 0)
	l.pre.mu.Lock()
	l.pre.create = createSegment
	l.pre.mu.Unlock()
	more, err := l.Append(nil, Record{Type: 1, Payload: payload(n - 1)})
	if err != nil {
		t.Fatalf("append after space returned: %v", err)
	}
	checkRecords(t, l, append(offs, more...), 0)
}

func TestFsyncErrorIsSticky(t *testing.T) {
	l := openTest(t, t.TempDir(), SyncAlways)
	defer l.Close()
	appendN(t, l, 0, 3)
	boom := errors.New("injected fsync failure")
	l.mu.Lock()
	l.mu.syncFile = func(*os.File) error { return boom }
	l.mu.Unlock()
	_, err := l.Append(nil, Record{Type: 1, Payload: []byte("x")})
	if !errors.Is(err, boom) {
		t.Fatalf("append with failing fsync: %v", err)
	}
	if _, err := l.Append(nil, Record{Type: 1, Payload: []byte("y")}); !errors.Is(err, boom) {
		t.Fatalf("error not sticky: %v", err)
	}
	if err := l.Sync(); !errors.Is(err, boom) {
		t.Fatalf("Sync after failure: %v", err)
	}
}

func TestReadOnlyBesideWriter(t *testing.T) {
	dir := t.TempDir()
	l := openTest(t, dir, SyncAlways)
	defer l.Close()
	offs := appendN(t, l, 0, 100)
	ro, rec, err := Open(Options{Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if rec.Truncated {
		t.Fatalf("read-only open reported truncation: %+v", rec)
	}
	checkRecords(t, ro, offs, 0)
	if _, err := ro.Append(nil, Record{Type: 1}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("append on read-only: %v", err)
	}
}

func TestOptionErrors(t *testing.T) {
	if _, _, err := Open(Options{}); err == nil {
		t.Fatal("empty dir accepted")
	}
	if _, _, err := Open(Options{Dir: t.TempDir(), SegmentSize: 100}); err == nil {
		t.Fatal("tiny segment accepted")
	}
	if _, err := ParseSyncPolicy("sometimes"); err == nil {
		t.Fatal("bad policy accepted")
	}
	for _, p := range []SyncPolicy{SyncAlways, SyncInterval, SyncNone} {
		if q, err := ParseSyncPolicy(p.String()); err != nil || q != p {
			t.Fatalf("round trip %v: %v %v", p, q, err)
		}
	}
}

// TestSpareAskedAtHalf: the next segment is asked of the preallocator once
// the active one is half full, not at Open, and again for each new segment.
func TestSpareAskedAtHalf(t *testing.T) {
	l := openTest(t, t.TempDir(), SyncNone)
	defer l.Close()
	asked := func() (int64, int64, int64) {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.mu.spareAsked, l.mu.active.end(), l.mu.writePos
	}
	if a, end, _ := asked(); a == end {
		t.Fatalf("spare for %d asked at Open of an empty log", end)
	}
	first := l.mu.active.base
	var offs []int64
	for i := 0; ; i++ {
		o := appendN(t, l, i, 1)
		offs = append(offs, o...)
		a, end, pos := asked()
		if l.mu.active.base != first {
			if a == end && pos < l.mu.active.capacity/2 {
				t.Fatalf("spare for the second segment asked at %d of %d", pos, l.mu.active.capacity)
			}
			break
		}
		if half := pos >= l.mu.active.capacity/2; half != (a == end) {
			t.Fatalf("at %d of %d bytes: asked for %d, active ends at %d", pos, l.mu.active.capacity, a, end)
		}
	}
	checkRecords(t, l, offs, 0)
}

// TestPreallocationFollowsGroupCommitSize checks how the preallocator
// chooses between zeros and fallocate under SyncAlways: zeros while each
// fsync covers little data (one small record per Append, each waiting
// for its own fsync), fallocate once the fsyncs cover large batches.
func TestPreallocationFollowsGroupCommitSize(t *testing.T) {
	const segSize = 256 << 10
	l, _, err := Open(Options{Dir: t.TempDir(), SegmentSize: segSize, Sync: SyncAlways})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	created := make(chan bool, 4)
	l.pre.mu.Lock()
	l.pre.create = func(dir string, base, size, first int64, zeroFill bool) (string, error) {
		created <- zeroFill
		return createSegment(dir, base, size, first, zeroFill)
	}
	l.pre.mu.Unlock()
	// next waits for the preallocator's next segment, appending n bytes
	// at a time with add until it comes: the request is made once the
	// active segment is half full, so within two segments' worth.
	next := func(what string, n int64, add func(i int)) bool {
		t.Helper()
		for i := 0; ; i++ {
			select {
			case zero := <-created:
				return zero
			default:
			}
			if int64(i)*n > 2*segSize {
				select {
				case zero := <-created:
					return zero
				case <-time.After(10 * time.Second):
					t.Fatalf("%s: no segment preallocated after %d appends", what, i)
				}
			}
			add(i)
		}
	}
	small := func(i int) {
		if _, err := l.Append(nil, Record{Type: 1, Payload: payload(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if zero := next("small appends", 10, small); !zero {
		t.Errorf("one small record per fsync: the next segment was preallocated with fallocate, want zeros")
	}
	big := make([]Record, 64)
	for j := range big {
		big[j] = Record{Type: 1, Payload: make([]byte, 1000)}
	}
	if zero := next("batches of 64 KB", 64000, func(int) {
		if _, err := l.Append(nil, big...); err != nil {
			t.Fatal(err)
		}
	}); zero {
		t.Errorf("64 KB per fsync: the next segment was zero-filled, want fallocate")
	}
	if zero := next("small appends again", 10, small); !zero {
		t.Errorf("back to one small record per fsync: fallocate, want zeros")
	}
}
