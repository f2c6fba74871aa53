package schedulelog

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/hourglassmq/hourglass/internal/tdmanifest"
	"github.com/hourglassmq/hourglass/segfile"
)

func testdataDamage(t *testing.T, dir string) tdmanifest.Damage {
	t.Helper()
	m, err := tdmanifest.Load(tdmanifest.Path)
	if err != nil {
		t.Fatal(err)
	}
	return m.Damage[dir]
}

// TestTestdataBitflip: the flipped bit in testdata/sched-bitflip is
// corruption where the generator put it, for Verify and readers. Open for
// append trusts the synced part without reading it (start-up reads only the
// tail), so it succeeds, changes nothing there, and the damage is still
// found afterwards.
func TestTestdataBitflip(t *testing.T) {
	d := testdataDamage(t, "sched-bitflip")
	src := filepath.Join("../testdata/sched-bitflip", d.File)
	probs, err := Verify(src)
	if err != nil || len(probs) != 1 || probs[0].Kind != segfile.Corrupt || probs[0].Offset != d.Offset {
		t.Fatalf("Verify = %v, %v; want one corruption at %d", probs, err, d.Offset)
	}
	rd, err := OpenReader(src)
	if err != nil {
		t.Fatal(err)
	}
	it := rd.Iter()
	for it.Next() {
		if it.Offset() >= d.Offset {
			t.Fatalf("the iterator yielded the entry at %d, at or after the damage", it.Offset())
		}
	}
	var ce *segfile.CorruptionError
	if !errors.As(it.Err(), &ce) || ce.Offset != d.Offset {
		t.Fatalf("iterator error %v; want a segfile.CorruptionError at %d", it.Err(), d.Offset)
	}
	rd.Close()

	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Dir(src))); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, filepath.Base(src))
	before, _ := os.ReadFile(path)
	start, _ := ParseName(filepath.Base(src))
	w, _, err := Open(dir, start, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before[FirstOffset:], after[FirstOffset:]) {
		t.Fatal("Open changed the records of the file")
	}
	if probs, err := Verify(path); err != nil || len(probs) != 1 || probs[0].Offset != d.Offset {
		t.Fatalf("after Open: Verify = %v, %v; want the corruption at %d still reported", probs, err, d.Offset)
	}
}

// TestTestdataTornTail: the half entry after the last one in
// testdata/torn-tail is a torn tail; Open (on a copy) cuts it.
func TestTestdataTornTail(t *testing.T) {
	var d tdmanifest.Damage
	for _, a := range testdataDamage(t, "torn-tail").Also {
		if filepath.Ext(a.File) == Suffix {
			d = a
		}
	}
	src := filepath.Join("../testdata/torn-tail", d.File)
	probs, err := Verify(src)
	if err != nil || len(probs) != 1 || probs[0].Kind != segfile.TornTail || probs[0].Offset != d.Offset {
		t.Fatalf("Verify = %v, %v; want one torn tail at %d", probs, err, d.Offset)
	}
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(filepath.Dir(src))); err != nil {
		t.Fatal(err)
	}
	start, _ := ParseName(filepath.Base(src))
	w, rec, err := Open(dir, start, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Truncated || rec.Offset != d.Offset || w.Entries() != 3 {
		t.Fatalf("Recovery %+v with %d entries; want the tail cut at %d and 3 entries", rec, w.Entries(), d.Offset)
	}
	w.Close()
	if probs, err := Verify(filepath.Join(dir, filepath.Base(src))); err != nil || len(probs) != 0 {
		t.Fatalf("after Open: %v, %v", probs, err)
	}
}
