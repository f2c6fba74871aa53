package dispatchlog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/hourglassmq/hourglass/segfile"
)

// checkRecordsAgree asserts that Records fails exactly when Load does, and
// otherwise returns records whose seqs and reasons add up to Load's set and
// counts.
func checkRecordsAgree(t *testing.T, path string) []Done {
	t.Helper()
	set, counts, lerr := Load(path)
	recs, rerr := Records(path)
	if (lerr == nil) != (rerr == nil) {
		t.Fatalf("Load error %v, Records error %v: they must agree", lerr, rerr)
	}
	if lerr != nil {
		var a, b *segfile.CorruptionError
		if errors.As(lerr, &a) != errors.As(rerr, &b) || a != nil && (a.Offset != b.Offset) {
			t.Fatalf("Load error %v, Records error %v: not the same corruption", lerr, rerr)
		}
		return nil
	}
	var c Counts
	var seqs []uint64
	for _, d := range recs {
		c.add(d.Reason)
		seqs = append(seqs, d.Seq)
	}
	slices.Sort(seqs)
	seqs = slices.Compact(seqs)
	if c != counts || !slices.Equal(seqs, slices.Collect(set.Seqs())) {
		t.Fatalf("Records gives %v %v, Load %v %v", seqs, c, slices.Collect(set.Seqs()), counts)
	}
	return recs
}

func TestRecords(t *testing.T) {
	dir := t.TempDir()
	if recs, err := Records(filepath.Join(dir, Name(start))); err != nil || recs != nil {
		t.Fatalf("missing file: %v, %v; want no records", recs, err)
	}
	w, _ := openLog(t, dir, quiet)
	want := append(dones(7, 100, 3), Done{Seq: 100, Reason: Delivered}) // a repeat after a crash
	if err := w.AppendSync(want...); err != nil {
		t.Fatal(err)
	}
	w.Close()
	got := checkRecordsAgree(t, w.Path())
	if !slices.Equal(got, want) {
		t.Fatalf("Records = %v, want %v in file order", got, want)
	}

	// A flipped bit inside the synced part is corruption for both.
	b, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(b)
	bad[len(bad)-RecordSize*2+9] ^= 0x10
	path := filepath.Join(t.TempDir(), Name(start))
	if err := os.WriteFile(path, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	var ce *segfile.CorruptionError
	if _, err := Records(path); !errors.As(err, &ce) || ce.Offset != int64(len(b)-RecordSize*2) {
		t.Fatalf("Records on a flipped bit: %v; want a segfile.CorruptionError at %d", err, len(b)-RecordSize*2)
	}
	checkRecordsAgree(t, path)

	// A torn record after the hint is where Records stops, quietly.
	if err := os.WriteFile(path, append(bytes.Clone(b), b[len(b)-RecordSize:len(b)-3]...), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := checkRecordsAgree(t, path); len(got) != len(want) {
		t.Fatalf("torn tail: %d records, want %d", len(got), len(want))
	}
}

// FuzzRecords appends arbitrary bytes after the synced part of a dispatch
// log: Records never panics and always agrees with Load.
func FuzzRecords(f *testing.F) {
	rec := make([]byte, RecordSize)
	encodeDone(rec, Done{77, Cancelled})
	f.Add(rec)
	f.Add(rec[:RecordSize-1])
	f.Add(append([]byte{1}, rec...))
	noSync := Options{SyncFile: func(*os.File) error { return nil }, Logger: quiet.Logger}
	w, _ := openLog(f, f.TempDir(), noSync)
	if err := w.AppendSync(dones(5, 1, 1)...); err != nil {
		f.Fatal(err)
	}
	w.Close()
	base, err := os.ReadFile(w.Path())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, tail []byte) {
		path := filepath.Join(t.TempDir(), Name(start))
		if err := os.WriteFile(path, append(bytes.Clone(base), tail...), 0o644); err != nil {
			t.Fatal(err)
		}
		checkRecordsAgree(t, path)
	})
}
