package schedulelog

import (
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// IterNear starts at or before the entry sought, and close to it: a
// lookup reads little of a large segment, also with damage in it.
func TestIterNear(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, start, time.Hour, Options{BufferSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	want := appendN(t, w, 20_000, 5, 7, 100) // about 3 MiB
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// A flipped byte in an entry a third of the way in.
	dmg := want[len(want)/3]
	f, err := os.OpenFile(w.Path(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := []byte{0}
	f.ReadAt(b, dmg.off+20)
	b[0] ^= 0x40
	f.WriteAt(b, dmg.off+20)
	f.Close()
	r, err := OpenReader(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	for range 200 {
		e := want[rng.IntN(len(want))]
		if e.seq == dmg.seq {
			continue
		}
		it := r.IterNear(e.seq)
		read := 0
		found := false
		for it.Next() {
			read++
			if it.Seq() >= e.seq {
				found = it.Seq() == e.seq && it.Offset() == e.off
				break
			}
		}
		if !found {
			t.Fatalf("seq %d at %d: not found from IterNear (%v)", e.seq, e.off, it.Err())
		}
		if read > 2*nearScan/100 {
			t.Fatalf("seq %d: %d entries read after IterNear, want at most about %d", e.seq, read, nearScan/100)
		}
	}
	// A seq past the last one, and one before the first.
	it := r.IterNear(1 << 60)
	n := 0
	for it.Next() {
		n++
	}
	if n > 2*nearScan/100 {
		t.Fatalf("past the end: %d entries read", n)
	}
	if it := r.IterNear(0); !it.Next() || it.Seq() != want[0].seq {
		t.Fatal("IterNear(0) does not start at the first entry")
	}
}
