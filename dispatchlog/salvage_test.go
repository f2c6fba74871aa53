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

// closedLog writes recs to a new dispatch log, closes it (its hint then
// covers the whole file) and returns its path and bytes.
func closedLog(t testing.TB, recs []Done) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	w, _, err := Open(dir, start, hour, Options{SyncFile: func(*os.File) error { return nil }, Logger: quiet.Logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AppendSync(recs...); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	img, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	return w.Path(), img
}

// TestLoadSalvage: every valid done-record counts wherever it lies, and
// each region where data was durable but no record could be read is
// reported, with its file and offset; a torn tail after the hint is not
// damage.
func TestLoadSalvage(t *testing.T) {
	recs := dones(20, 100, 3)
	recAt := func(i int) int64 { return segfile.HeaderSize + int64(i)*RecordSize }
	for _, tc := range []struct {
		name    string
		damage  func(img []byte) []byte
		lost    []int // records not in the set
		damaged bool
		torn    bool
	}{
		{name: "sound", damage: func(img []byte) []byte { return img }},
		{name: "flip_in_done", lost: []int{5}, damaged: true,
			damage: func(img []byte) []byte { img[recAt(5)+10] ^= 1; return img }},
		{name: "flip_in_length", lost: []int{0}, damaged: true,
			damage: func(img []byte) []byte { img[recAt(0)] ^= 0x20; return img }},
		{name: "two_flips", lost: []int{3, 17}, damaged: true,
			damage: func(img []byte) []byte { img[recAt(3)+16] ^= 4; img[recAt(17)+20] ^= 1; return img }},
		{name: "truncated_done", lost: []int{19}, damaged: true,
			damage: func(img []byte) []byte { return img[:len(img)-3] }},
		{name: "torn_done", torn: true,
			damage: func(img []byte) []byte { return append(img, 9, 0, 0, 0, TypeDone, 0, 0) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, img := closedLog(t, recs)
			if err := os.WriteFile(path, tc.damage(bytes.Clone(img)), 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := LoadSalvage(path)
			if err != nil {
				t.Fatal(err)
			}
			var want []uint64
			for i, r := range recs {
				if !slices.Contains(tc.lost, i) {
					want = append(want, r.Seq)
				}
			}
			if got := slices.Collect(s.Set.Seqs()); !slices.Equal(got, want) {
				t.Errorf("set %v, want %v", got, want)
			}
			if s.Damaged() != tc.damaged || s.Torn != tc.torn || s.Missing {
				t.Errorf("damaged %v torn %v missing %v, want %v %v false: %v", s.Damaged(), s.Torn, s.Missing, tc.damaged, tc.torn, s.Damage)
			}
			if tc.damaged && s.Unknown() < len(tc.lost) {
				t.Errorf("Unknown() = %d, want at least %d", s.Unknown(), len(tc.lost))
			}
			for _, p := range s.Damage {
				var ce *segfile.CorruptionError
				if !errors.As(p.Err, &ce) || ce.Path != path || p.Path != path {
					t.Errorf("damage %v does not name the file", p)
				}
			}
			if tc.damaged && s.Damage[0].Offset != recAt(tc.lost[0]) && tc.name != "truncated_done" {
				t.Errorf("first damage at %d, want %d", s.Damage[0].Offset, recAt(tc.lost[0]))
			}
			// Load still refuses a damaged log.
			if _, _, err := Load(path); tc.damaged != (err != nil) {
				t.Errorf("Load: %v", err)
			}
		})
	}
	t.Run("missing_done", func(t *testing.T) {
		s, err := LoadSalvage(filepath.Join(t.TempDir(), Name(start)))
		if err != nil || !s.Missing || s.Set.Len() != 0 || s.Damaged() {
			t.Fatalf("missing log: %+v, %v", s, err)
		}
	})
	t.Run("header_damage", func(t *testing.T) {
		path, img := closedLog(t, recs)
		img[3] ^= 1
		os.WriteFile(path, img, 0o644)
		var ce *segfile.CorruptionError
		if _, err := LoadSalvage(path); !errors.As(err, &ce) {
			t.Fatalf("damaged header: %v, want a CorruptionError", err)
		}
	})
}

// FuzzLoadSalvage damages a sound dispatch log and checks that
// LoadSalvage never panics, never invents a seq, keeps every record whose
// bytes were not touched, and reports damage whenever it lost one.
func FuzzLoadSalvage(f *testing.F) {
	f.Add([]byte{10, 1})
	f.Add([]byte{0, 0x80, 200, 0})
	f.Add([]byte{255, 0xff, 254, 0xff, 253, 0xff})
	recs := dones(16, 1000, 1)
	_, img := closedLog(f, recs)
	f.Fuzz(func(t *testing.T, flips []byte) {
		b := bytes.Clone(img)
		touched := map[int64]bool{}
		cut := int64(len(b))
		for i := 0; i+1 < len(flips); i += 2 {
			pos := segfile.HeaderSize + int64(flips[i])*int64(len(b)-segfile.HeaderSize)/256
			if flips[i+1] == 0 {
				cut = min(cut, pos)
				continue
			}
			b[pos] ^= flips[i+1]
			touched[pos] = true
		}
		path := filepath.Join(t.TempDir(), Name(start))
		if err := os.WriteFile(path, b[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := LoadSalvage(path)
		if err != nil {
			t.Fatal(err)
		}
		for seq := range s.Set.Seqs() {
			if seq < 1000 || seq >= 1016 {
				t.Fatalf("seq %d was never written", seq)
			}
		}
	recs:
		for i, r := range recs {
			at := segfile.HeaderSize + int64(i)*RecordSize
			if at+RecordSize > cut {
				if !s.Damaged() {
					t.Fatalf("record %d cut off and no damage reported", i)
				}
				continue
			}
			for p := at; p < at+RecordSize; p++ {
				if touched[p] {
					if !s.Set.Contains(r.Seq) && !s.Damaged() {
						t.Fatalf("record %d lost and no damage reported", i)
					}
					continue recs
				}
			}
			if !s.Set.Contains(r.Seq) {
				t.Fatalf("untouched record %d (seq %d) lost", i, r.Seq)
			}
		}
	})
}
