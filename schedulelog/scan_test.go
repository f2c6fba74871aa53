package schedulelog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/segfile"
)

// scanAll runs Scan over the whole segment at path and returns the
// entries it yields and every damaged region it skipped.
func scanAll(t testing.TB, path string) ([]written, []Damage) {
	t.Helper()
	r, err := OpenReader(path)
	if err != nil {
		t.Fatalf("OpenReader: %v", err)
	}
	defer r.Close()
	it := r.Scan(FirstOffset, -1)
	var out []written
	var dmg []Damage
	for it.Next() {
		dmg = append(dmg, it.Skipped()...)
		out = append(out, written{it.Offset(), it.Seq(), bytes.Clone(it.Payload())})
	}
	dmg = append(dmg, it.Skipped()...)
	if err := it.Err(); err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return out, dmg
}

// closedSegment writes n entries to a new segment and closes it (its hint
// then covers the whole file); it returns the path, the entries and the
// file's bytes.
func closedSegment(t testing.TB, n int) (string, []written, []byte) {
	t.Helper()
	dir := t.TempDir()
	w, err := Create(dir, start, time.Hour, Options{SyncFile: func(*os.File) error { return nil }, Logger: quiet.Logger})
	if err != nil {
		t.Fatal(err)
	}
	all := appendN(t, w, n, 10, 7, 30)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	img, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	return w.Path(), all, img
}

// TestScanDamage: Scan skips each damaged region and yields every other
// entry, reporting each region with its file and offset.
func TestScanDamage(t *testing.T) {
	const n = 20
	for _, tc := range []struct {
		name   string
		damage func(img []byte, all []written) []byte
		lost   []int // indexes of the entries lost
		tail   bool  // the damage runs to the end of the data
	}{
		{name: "flip_in_entry", lost: []int{7},
			damage: func(img []byte, all []written) []byte { img[all[7].off+20] ^= 1; return img }},
		{name: "flip_in_length", lost: []int{3},
			damage: func(img []byte, all []written) []byte { img[all[3].off+1] ^= 0x40; return img }},
		{name: "flip_in_first", lost: []int{0},
			damage: func(img []byte, all []written) []byte { img[all[0].off+9] ^= 1; return img }},
		{name: "flip_in_last", lost: []int{n - 1}, tail: true,
			damage: func(img []byte, all []written) []byte { img[all[n-1].off+12] ^= 1; return img }},
		{name: "two_regions", lost: []int{2, 3, 11},
			damage: func(img []byte, all []written) []byte {
				img[all[2].off+16] ^= 1
				img[all[3].off+30] ^= 1
				img[all[11].off] ^= 1
				return img
			}},
		{name: "zeroed_middle", lost: []int{5, 6},
			damage: func(img []byte, all []written) []byte {
				clear(img[all[5].off:all[7].off])
				return img
			}},
		{name: "truncated_sched", lost: []int{n - 1}, tail: true,
			damage: func(img []byte, all []written) []byte { return img[:len(img)-5] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, all, img := closedSegment(t, n)
			if err := os.WriteFile(path, tc.damage(img, all), 0o644); err != nil {
				t.Fatal(err)
			}
			var want []written
			lost := map[int]bool{}
			for _, i := range tc.lost {
				lost[i] = true
			}
			for i, w := range all {
				if !lost[i] {
					want = append(want, w)
				}
			}
			got, dmg := scanAll(t, path)
			sameEntries(t, got, want)
			if len(dmg) == 0 {
				t.Fatal("no damage reported")
			}
			for _, d := range dmg {
				var ce *segfile.CorruptionError
				if !errors.As(d.Err, &ce) || ce.Path != path || ce.Offset != d.Offset {
					t.Errorf("damage %+v: error %v does not name the file and offset", d, d.Err)
				}
				if d.End < d.Offset {
					t.Errorf("damage %+v ends before it starts", d)
				}
			}
			first := all[tc.lost[0]].off
			if tc.name == "truncated_sched" {
				first = all[n-1].off
			}
			if dmg[0].Offset != first {
				t.Errorf("first damage at %d, want %d (entry %d)", dmg[0].Offset, first, tc.lost[0])
			}
			if last := dmg[len(dmg)-1]; tc.tail != (last.End >= int64(len(img))-5) {
				t.Errorf("last damage %+v: tail %v", last, tc.tail)
			}
			// Iter still stops at the damage.
			_, it := readAll(t, path)
			var ce *segfile.CorruptionError
			if !errors.As(it.Err(), &ce) {
				t.Errorf("Iter over damage: %v, want a CorruptionError", it.Err())
			}
		})
	}
}

// TestScanBounded: Scan stops at its end, and a sound segment yields
// everything with no damage.
func TestScanBounded(t *testing.T) {
	path, all, _ := closedSegment(t, 10)
	got, dmg := scanAll(t, path)
	sameEntries(t, got, all)
	if len(dmg) != 0 {
		t.Fatalf("damage %v in a sound segment", dmg)
	}
	r, err := OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	it := r.Scan(FirstOffset, all[5].off)
	k := 0
	for it.Next() {
		k++
	}
	if k != 5 || len(it.Skipped()) != 0 || it.Err() != nil {
		t.Fatalf("Scan to entry 5: %d entries, %v, %v", k, it.Skipped(), it.Err())
	}
	if h := it.Hint(); h.Len != int64(len(mustRead(t, path))) || h.Aux != all[9].seq {
		t.Errorf("Hint %+v, want the closed file's length and last seq %d", h, all[9].seq)
	}
}

func mustRead(t *testing.T, path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzScanResync flips bytes of a sound segment and checks that Scan
// never panics, yields only entries that were written, at their offsets
// and in seq order, and yields every entry whose bytes were not touched.
func FuzzScanResync(f *testing.F) {
	f.Add([]byte{200, 1})
	f.Add([]byte{105, 0xff, 130, 0x01, 250, 0x80})
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{255, 255, 255, 255, 254, 3})
	_, all, img := closedSegment(f, 12)
	f.Fuzz(func(t *testing.T, flips []byte) {
		b := bytes.Clone(img)
		touched := map[int64]bool{}
		cut := int64(len(b))
		for i := 0; i+1 < len(flips); i += 2 {
			// Byte pairs: a position in the data (scaled) and a mask; a
			// zero mask cuts the file there.
			pos := FirstOffset + int64(flips[i])*int64(len(b)-FirstOffset)/256
			if flips[i+1] == 0 {
				cut = min(cut, pos)
				continue
			}
			b[pos] ^= flips[i+1]
			touched[pos] = true
		}
		b = b[:cut]
		path := filepath.Join(t.TempDir(), Name(start))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		got, _ := scanAll(t, path)
		byOff := map[int64]written{}
		for _, w := range all {
			byOff[w.off] = w
		}
		for i, g := range got {
			w, ok := byOff[g.off]
			if !ok || w.seq != g.seq || !bytes.Equal(w.p, g.p) {
				t.Fatalf("Scan yielded an entry at %d (seq %d) that was not written there", g.off, g.seq)
			}
			if i > 0 && g.seq <= got[i-1].seq {
				t.Fatalf("seqs out of order: %d after %d", g.seq, got[i-1].seq)
			}
		}
		yielded := map[int64]bool{}
		for _, g := range got {
			yielded[g.off] = true
		}
	entries:
		for i, w := range all {
			end := int64(len(img))
			if i+1 < len(all) {
				end = all[i+1].off
			}
			if end > cut {
				continue
			}
			for p := w.off; p < end; p++ {
				if touched[p] {
					continue entries
				}
			}
			if !yielded[w.off] {
				t.Fatalf("untouched entry %d at %d (seq %d) not yielded", i, w.off, w.seq)
			}
		}
	})
}
