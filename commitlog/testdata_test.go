package commitlog

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hourglassmq/hourglass/internal/tdmanifest"
)

// testdataDamage reads where testdata/manifest.json says dir was damaged.
func testdataDamage(t *testing.T, dir string) (file string, offset int64) {
	t.Helper()
	m, err := tdmanifest.Load(tdmanifest.Path)
	if err != nil {
		t.Fatal(err)
	}
	return m.Damage[dir].File, m.Damage[dir].Offset
}

// TestTestdataTornTail: Verify finds the torn tail of testdata/torn-tail
// where the generator put it; Open (on a copy) cuts it there, and then
// Verify finds nothing. The healthy directory verifies clean.
func TestTestdataTornTail(t *testing.T) {
	probs, _, err := Verify("../testdata/healthy/commitlog", nil)
	if err != nil || len(probs) != 0 {
		t.Fatalf("healthy: %v, %v; want no problems", probs, err)
	}
	file, pos := testdataDamage(t, "torn-tail")
	probs, st, err := Verify(filepath.Join("../testdata/torn-tail", file[:len("commitlog")]), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(probs) != 1 || probs[0].Kind != TornTail || probs[0].Pos != pos || filepath.Base(probs[0].File) != filepath.Base(file) {
		t.Fatalf("Verify = %v; want one torn tail in %s at %d", probs, file, pos)
	}
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("../testdata/torn-tail/commitlog")); err != nil {
		t.Fatal(err)
	}
	l, rec, err := Open(Options{Dir: dir, Sync: SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Truncated || rec.DroppedFrom != st.End || rec.DroppedBytes == 0 {
		t.Fatalf("Recovery = %+v; want the tail cut at offset %d", rec, st.End)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if probs, _, err := Verify(dir, nil); err != nil || len(probs) != 0 {
		t.Fatalf("after Open: %v, %v; want no problems", probs, err)
	}
}
