package dispatchlog

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/hourglassmq/hourglass/record"
	"github.com/hourglassmq/hourglass/segfile"
)

// crashImage appends synced records, then unsynced ones (written to the OS
// only), and returns the file's bytes as a crash at that moment could
// leave them, with the synced length.
func crashImage(t *testing.T, synced, unsynced []Done) (img []byte, syncedLen int64) {
	t.Helper()
	w, _ := openLog(t, t.TempDir(), quiet)
	defer w.Close()
	if err := w.AppendSync(synced...); err != nil {
		t.Fatal(err)
	}
	syncedLen = w.sf.Synced().Len
	if err := w.Append(unsynced...); err != nil {
		t.Fatal(err)
	}
	flush(t, w)
	img, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	return img, syncedLen
}

func putImage(t *testing.T, dir string, img []byte) string {
	t.Helper()
	path := filepath.Join(dir, Name(start))
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTornTailEveryByte cuts the log at every byte of its last record and
// checks that Load keeps the whole records before it, that Open truncates
// the rest and reports the drop, and that the log takes the record again.
func TestTornTailEveryByte(t *testing.T) {
	tests := []struct {
		name             string
		synced, unsynced []Done
	}{
		{"hint_before_last_record", dones(5, 1, 1), dones(1, 100, 1)},
		{"hint_two_records_back", dones(5, 1, 1), dones(2, 100, 1)},
		{"nothing_synced", nil, dones(3, 100, 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img, syncedLen := crashImage(t, tt.synced, tt.unsynced)
			all := append(append([]Done(nil), tt.synced...), tt.unsynced...)
			last := int64(len(img)) - RecordSize
			dir := t.TempDir()
			for cut := last; cut < int64(len(img)); cut++ {
				path := putImage(t, dir, img[:cut])
				torn := cut > last
				checkLoad(t, path, all[:len(all)-1]) // readers stop quietly after the hint
				probs, err := Verify(path)
				if err != nil || torn != (len(probs) == 1) || len(probs) > 1 ||
					torn && (probs[0].Kind != segfile.TornTail || probs[0].Offset != last) {
					t.Fatalf("cut %d: Verify = %v, %v", cut, probs, err)
				}
				w, rec, err := Open(dir, start, hour, quiet)
				if err != nil {
					t.Fatalf("cut %d: %v", cut, err)
				}
				if rec.From != syncedLen || rec.Truncated != torn ||
					torn && (rec.Offset != last || rec.Bytes != cut-last || rec.Records != 0) {
					t.Fatalf("cut %d: recovery %+v", cut, rec)
				}
				if err := w.AppendSync(all[len(all)-1]); err != nil {
					t.Fatal(err)
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				if b, _ := os.ReadFile(path); !bytes.Equal(b[segfile.HeaderSize:], img[segfile.HeaderSize:]) {
					t.Fatalf("cut %d: the log differs after re-appending the lost record", cut)
				}
			}
		})
	}
}

func TestZeroedTail(t *testing.T) {
	img, syncedLen := crashImage(t, dones(4, 1, 1), dones(3, 10, 1))
	n := int64(len(img))
	tests := []struct {
		name string
		img  []byte
		keep int   // records left
		cut  int64 // where Open truncates
	}{
		{"zeros_after_last_record", append(bytes.Clone(img), make([]byte, 4096)...), 7, n},
		{"last_record_zeroed", append(bytes.Clone(img[:n-RecordSize]), make([]byte, RecordSize)...), 6, n - RecordSize},
		{"all_unsynced_zeroed", append(bytes.Clone(img[:syncedLen]), make([]byte, n-syncedLen)...), 4, syncedLen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := putImage(t, dir, tt.img)
			all := append(dones(4, 1, 1), dones(3, 10, 1)...)
			checkLoad(t, path, all[:tt.keep])
			w, rec, err := Open(dir, start, hour, quiet)
			if err != nil {
				t.Fatal(err)
			}
			w.Close()
			if !rec.Truncated || rec.Offset != tt.cut || rec.Bytes != int64(len(tt.img))-tt.cut || !errors.Is(rec.Err, record.ErrEnd) {
				t.Fatalf("recovery %+v, want a cut at %d", rec, tt.cut)
			}
			checkLoad(t, path, all[:tt.keep])
		})
	}
}

// TestCorruption damages a synced record: Verify reports it with file and
// offset, and Load refuses the log with a *segfile.CorruptionError rather than
// return a set that could be missing a done entry.
func TestCorruption(t *testing.T) {
	const bad = 10
	tests := []struct {
		name string
		at   int // byte within the damaged record
		fix  func(b []byte)
	}{
		{"flip_seq", record.HeaderSize + 2, nil},
		{"flip_reason", record.HeaderSize + 8, nil},
		{"flip_checksum", RecordSize - 1, nil},
		{"flip_length", 0, nil},
		{"flip_type", 4, nil},
		{"reason_zero_resealed", record.HeaderSize + 8, func(b []byte) { b[record.HeaderSize+8] = 0; record.Seal(b) }},
		{"flags_set_resealed", 5, func(b []byte) { b[5] = 1; record.Seal(b) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			w, _ := openLog(t, dir, quiet)
			if err := w.AppendSync(dones(20, 1, 1)...); err != nil {
				t.Fatal(err)
			}
			w.Close()
			img, err := os.ReadFile(w.Path())
			if err != nil {
				t.Fatal(err)
			}
			off := int64(segfile.HeaderSize + bad*RecordSize)
			rec := img[off : off+RecordSize]
			if tt.fix != nil {
				tt.fix(rec)
			} else {
				rec[tt.at] ^= 0x08
			}
			path := putImage(t, dir, img)

			probs, err := Verify(path)
			if err != nil || len(probs) != 1 || probs[0].Kind != segfile.Corrupt || probs[0].Offset != off ||
				probs[0].Path != path || probs[0].Bytes != RecordSize {
				t.Fatalf("Verify = %v, %v; want one corruption at %d", probs, err, off)
			}
			set, _, err := Load(path)
			var ce *segfile.CorruptionError
			if set != nil || !errors.As(err, &ce) || ce.Offset != off || ce.Path != path {
				t.Fatalf("Load = %v, %v; want a *segfile.CorruptionError at %s:%d", set, err, path, off)
			}
			if want := fmt.Sprintf("%s at offset %d", path, off); !bytes.Contains([]byte(err.Error()), []byte(want)) {
				t.Fatalf("error %q does not name file and offset", err)
			}
		})
	}
}

func TestHeaderSlots(t *testing.T) {
	tests := []struct {
		name      string
		damage    func(img []byte, newest int)
		from      int // 0: older slot, 1: newest slot, -1: first record
		hintValid bool
	}{
		{"newest_slot_garbage", func(img []byte, newest int) {
			copy(img[segfile.SlotOffset(newest):], bytes.Repeat([]byte{0x5A}, 32))
		}, 0, true},
		{"older_slot_garbage", func(img []byte, newest int) {
			img[segfile.SlotOffset(1-newest)+30] ^= 1
		}, 1, true},
		{"both_slots_garbage", func(img []byte, _ int) {
			copy(img[segfile.SlotOffset(0):], bytes.Repeat([]byte{0xFF}, 64))
		}, -1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			w, _ := openLog(t, dir, quiet)
			if err := w.AppendSync(dones(5, 1, 1)...); err != nil {
				t.Fatal(err)
			}
			older := w.sf.Synced().Len
			if err := w.AppendSync(dones(5, 10, 1)...); err != nil {
				t.Fatal(err)
			}
			w.Close()
			img, _ := os.ReadFile(w.Path())
			_, newest, _ := segfile.BestSlot(img)
			tt.damage(img, newest)
			path := putImage(t, dir, img)
			from := map[int]int64{0: older, 1: int64(len(img)), -1: segfile.HeaderSize}[tt.from]
			checkLoad(t, path, append(dones(5, 1, 1), dones(5, 10, 1)...))
			w, rec, err := Open(dir, start, hour, quiet)
			if err != nil {
				t.Fatal(err)
			}
			w.Close()
			if rec.From != from || rec.HintValid != tt.hintValid || rec.Scanned != int64(len(img))-from || rec.Truncated {
				t.Fatalf("recovery %+v, want a scan from %d", rec, from)
			}
			b, _ := os.ReadFile(path)
			if s, _, ok := segfile.BestSlot(b); !ok || s.Len != int64(len(img)) || s.Records != 10 {
				t.Fatalf("slot after recovery %+v, %v", s, ok)
			}
		})
	}
}

// TestDropUnsyncedWrites cuts the log at the synced length or anywhere
// after it, with or without the slot write of the last sync: every synced
// record survives.
func TestDropUnsyncedWrites(t *testing.T) {
	w, _ := openLog(t, t.TempDir(), quiet)
	defer w.Close()
	if err := w.AppendSync(dones(50, 1, 1)...); err != nil {
		t.Fatal(err)
	}
	stale, _ := os.ReadFile(w.Path())
	stale = stale[:segfile.HeaderSize]
	if err := w.AppendSync(dones(50, 100, 1)...); err != nil {
		t.Fatal(err)
	}
	synced := w.sf.Synced().Len
	if err := w.Append(dones(100, 1000, 1)...); err != nil {
		t.Fatal(err)
	}
	flush(t, w)
	img, _ := os.ReadFile(w.Path())
	all := append(append(dones(50, 1, 1), dones(50, 100, 1)...), dones(100, 1000, 1)...)
	rng := rand.New(rand.NewPCG(5, 6))
	cuts := []int64{synced, synced + 1, int64(len(img))}
	for range 20 {
		cuts = append(cuts, synced+rng.Int64N(int64(len(img))-synced+1))
	}
	for _, staleSlot := range []bool{false, true} {
		for _, cut := range cuts {
			t.Run(fmt.Sprintf("stale_slot=%v/cut=%d", staleSlot, cut), func(t *testing.T) {
				b := bytes.Clone(img[:cut])
				if staleSlot {
					copy(b, stale)
				}
				dir := t.TempDir()
				path := putImage(t, dir, b)
				w, _, err := Open(dir, start, hour, quiet)
				if err != nil {
					t.Fatal(err)
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				whole := int((cut - segfile.HeaderSize) / RecordSize)
				if whole < 100 {
					t.Fatalf("test bug: cut %d loses synced records", cut)
				}
				checkLoad(t, path, all[:whole])
			})
		}
	}
}
