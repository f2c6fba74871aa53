package schedulelog

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

// writeSeg creates the segment at bucketStart of duration d in dir with one
// entry due at each of ats (seqs from seq0) and returns its path.
func writeSeg(t *testing.T, dir string, bucketStart int64, d time.Duration, seq0 uint64, ats ...int64) string {
	t.Helper()
	w, err := Create(dir, bucketStart, d, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, at := range ats {
		if _, err := w.Append(seq0+uint64(i), message.AppendSchedule(nil, msg(at, 20, seq0+uint64(i)))); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w.Path()
}

func flip(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRepairHeaders: a damaged fixed header (its start field) is rebuilt
// from the file name and the duration the neighbours have; the entries are
// read back unchanged and the segment opens for append. A dry run changes
// nothing; the copy is kept first.
func TestRepairHeaders(t *testing.T) {
	dir := t.TempDir()
	h := int64(time.Hour / time.Millisecond)
	writeSeg(t, dir, start, time.Hour, 0, start+5)
	bad := writeSeg(t, dir, start+h, time.Hour, 1, start+h+10, start+h+2000, start+2*h-1)
	writeSeg(t, dir, start+2*h, time.Hour, 4, start+2*h+7)
	before := readEntries(t, bad)
	flip(t, bad, 20)
	if _, err := OpenReader(bad); err == nil {
		t.Fatal("the damaged segment opens")
	}
	damaged, _ := os.ReadFile(bad)

	var out strings.Builder
	n, err := RepairHeaders(dir, HeaderRepairOptions{DryRun: true, Out: &out})
	if err != nil || n != 1 {
		t.Fatalf("dry run: %d, %v; want 1\n%s", n, err, out.String())
	}
	if now, _ := os.ReadFile(bad); !bytes.Equal(now, damaged) {
		t.Fatal("a dry run changed the file")
	}
	var kept []string
	out.Reset()
	n, err = RepairHeaders(dir, HeaderRepairOptions{Out: &out, Keep: func(p string) error { kept = append(kept, p); return nil }})
	if err != nil || n != 1 || len(kept) != 1 || kept[0] != bad {
		t.Fatalf("repair: %d, %v, kept %v; want 1 change, %s kept\n%s", n, err, kept, bad, out.String())
	}
	if !strings.Contains(out.String(), "3 entries") || !strings.Contains(out.String(), "duration 3600s") {
		t.Errorf("the repair's report does not say what it found:\n%s", out.String())
	}
	if got := readEntries(t, bad); !slices.Equal(got, before) {
		t.Fatalf("entries after the repair %v; want %v", got, before)
	}
	w, _, err := Open(dir, start+h, Options{})
	if err != nil {
		t.Fatalf("opening the repaired segment for append: %v", err)
	}
	w.Close()
	if n, err := RepairHeaders(dir, HeaderRepairOptions{Keep: func(string) error { return nil }}); n != 0 || err != nil {
		t.Fatalf("a second run: %d, %v; want nothing to do", n, err)
	}
}

// TestRepairHeadersNoFit: when no duration holds every entry without
// reaching the next segment, the file is left as it is and the step fails
// naming it.
func TestRepairHeadersNoFit(t *testing.T) {
	dir := t.TempDir()
	m := int64(60_000)
	writeSeg(t, dir, start, 10*time.Second, 0, start+1)                         // 10 s buckets around it
	bad := writeSeg(t, dir, start+m, time.Minute, 1, start+m+1, start+m+30_000) // a minute, unlike its neighbours
	writeSeg(t, dir, start+3*m, 10*time.Second, 3, start+3*m+1)
	flip(t, bad, 20)
	damaged, _ := os.ReadFile(bad)
	n, err := RepairHeaders(dir, HeaderRepairOptions{Keep: func(string) error { t.Fatal("Keep called"); return nil }})
	if n != 0 || err == nil || !strings.Contains(err.Error(), filepath.Base(bad)) || !strings.Contains(err.Error(), "no duration fits") {
		t.Fatalf("%d, %v; want an error naming %s", n, err, filepath.Base(bad))
	}
	if now, _ := os.ReadFile(bad); !bytes.Equal(now, damaged) {
		t.Fatal("the file was changed")
	}
	// With the right duration offered (the engine's configured one) it fits.
	n, err = RepairHeaders(dir, HeaderRepairOptions{Fallback: 60_000, Keep: func(string) error { return nil }})
	if n != 1 || err != nil {
		t.Fatalf("with a fallback of a minute: %d, %v", n, err)
	}
	if r, err := OpenReader(bad); err != nil || r.Duration() != time.Minute {
		t.Fatalf("repaired: %v", err)
	} else {
		r.Close()
	}
}

func readEntries(t *testing.T, path string) []string {
	t.Helper()
	r, err := OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var out []string
	it := r.Iter()
	for it.Next() {
		out = append(out, string(message.AppendSchedule(nil, it.Message())))
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
