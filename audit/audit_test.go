package audit

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/segfile"
)

func appendN(t *testing.T, l *Log, n int) {
	t.Helper()
	for i := range n {
		if _, err := l.Append(Entry{Who: "ops", Action: "Purge", Target: "t" + string(rune('a'+i%26)), Result: "OK", Request: strings.Repeat("x", 200)}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAppendList(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 5)
	got, more, err := l.List(0, 3)
	if err != nil || !more || len(got) != 3 || got[0].Seq != 5 || got[2].Seq != 3 {
		t.Fatalf("List(0, 3) = %v, %v, %v; want seqs 5, 4, 3 and more", seqs(got), more, err)
	}
	got, more, err = l.List(3, 10)
	if err != nil || more || len(got) != 2 || got[0].Seq != 2 || got[1].Seq != 1 {
		t.Fatalf("List(3, 10) = %v, %v, %v; want 2, 1", seqs(got), more, err)
	}
	if got[0].At.IsZero() || got[0].Who != "ops" {
		t.Errorf("entry %+v", got[0])
	}
	l.Close()
	// Reopened, it goes on from the next seq.
	l, err = Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	e, err := l.Append(Entry{Who: "x", Action: "Cancel", Result: "OK"})
	if err != nil || e.Seq != 6 {
		t.Fatalf("Append after reopen: seq %d, %v; want 6", e.Seq, err)
	}
}

func seqs(es []Entry) []uint64 {
	var s []uint64
	for _, e := range es {
		s = append(s, e.Seq)
	}
	return s
}

// TestTornTail: a crash in the middle of an Append leaves a cut record;
// Open cuts it off, and the next Append takes its seq.
func TestTornTail(t *testing.T) {
	for _, cut := range []int{1, 7, 30} {
		dir := t.TempDir()
		l, _ := Open(Options{Dir: dir})
		appendN(t, l, 3)
		l.Close()
		path := filepath.Join(dir, "00000000000000000001.audit")
		info, _ := os.Stat(path)
		if err := os.Truncate(path, info.Size()-int64(cut)); err != nil {
			t.Fatal(err)
		}
		l, err := Open(Options{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		got, _, _ := l.List(0, 10)
		if len(got) != 2 {
			t.Fatalf("cut %d: %v after the torn tail; want 2 entries", cut, seqs(got))
		}
		if e, err := l.Append(Entry{Who: "x", Action: "Cancel", Result: "OK"}); err != nil || e.Seq != 3 {
			t.Fatalf("cut %d: Append: %d %v; want seq 3", cut, e.Seq, err)
		}
		got, _, _ = l.List(0, 10)
		if len(got) != 3 || got[0].Who != "x" {
			t.Fatalf("cut %d: %v", cut, seqs(got))
		}
		l.Close()
	}
}

// TestRetention: by size, whole old segments go; by age too; the newest
// segment stays.
func TestRetention(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(Options{Dir: dir, MaxBytes: 8 << 10, SegmentBytes: 2 << 10})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 200) // about 60 KB
	segs, _ := list(dir)
	var total int64
	for _, s := range segs {
		total += s.size
	}
	if total > 8<<10+2<<10 || len(segs) < 2 {
		t.Fatalf("%d segments of %d bytes; want at most about 8 KiB kept in several", len(segs), total)
	}
	got, more, err := l.List(0, 1000)
	if err != nil || more || got[0].Seq != 200 || got[len(got)-1].Seq != segs[0].first {
		t.Fatalf("List: %d entries from %d, more %v, %v; want the newest to the oldest kept", len(got), got[0].Seq, more, err)
	}
	l.Close()

	now := time.Now()
	dir = t.TempDir()
	l, _ = Open(Options{Dir: dir, SegmentBytes: 1 << 10, MaxAge: time.Hour, Now: func() time.Time { return now }})
	appendN(t, l, 20)
	before, _ := list(dir)
	now = now.Add(2 * time.Hour)
	appendN(t, l, 1)
	after, _ := list(dir)
	if len(before) < 3 || len(after) != 1 {
		t.Fatalf("by age: %d segments, then %d; want only the newest left", len(before), len(after))
	}
	l.Close()
}

// TestDamagedSealedSegment: a bad record in a segment that is not the
// last is corruption, named with its file.
func TestDamagedSealedSegment(t *testing.T) {
	dir := t.TempDir()
	l, _ := Open(Options{Dir: dir, SegmentBytes: 1 << 10})
	appendN(t, l, 20)
	segs, _ := list(dir)
	b, _ := os.ReadFile(segs[0].path)
	b[HeaderSize+20] ^= 0xff
	os.WriteFile(segs[0].path, b, 0o644)
	_, _, err := l.List(0, 1000)
	var ce *segfile.CorruptionError
	if !errors.As(err, &ce) || ce.Path != segs[0].path {
		t.Fatalf("List over a damaged sealed segment: %v; want a CorruptionError naming it", err)
	}
	l.Close()
}

func FuzzDecode(f *testing.F) {
	dir := f.TempDir()
	l, _ := Open(Options{Dir: dir})
	for range 3 {
		l.Append(Entry{Who: "a", Action: "Cancel", Result: "OK"})
	}
	l.Close()
	b, _ := os.ReadFile(filepath.Join(dir, "00000000000000000001.audit"))
	f.Add(b)
	f.Add(header())
	f.Add([]byte("HGAUDIT"))
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, good, err := Decode(b)
		if errors.Is(err, ErrBadHeader) {
			return
		}
		if good < HeaderSize || good > len(b) {
			t.Fatalf("good %d of %d bytes", good, len(b))
		}
		if err == nil && good != len(b) && !allZero(b[good:]) {
			t.Fatalf("no error, but %d bytes past the entries", len(b)-good)
		}
		again, good2, _ := Decode(b[:good])
		if len(again) != len(entries) || good2 != good {
			t.Fatalf("decoding the good part again: %d entries, %d bytes; want %d, %d", len(again), good2, len(entries), good)
		}
	})
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
