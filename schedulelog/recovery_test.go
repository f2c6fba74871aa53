package schedulelog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/record"
	"github.com/hourglassmq/hourglass/segfile"
)

// quiet keeps the expected torn-tail warnings out of the test output.
var quiet = Options{Logger: slog.New(slog.DiscardHandler)}

// crashImage appends synced entries, then unsynced ones (flushed to the OS
// only), and returns the file's bytes as a crash at that moment could
// leave them, the entries, and the synced length.
func crashImage(t *testing.T, synced, unsynced int) (img []byte, all []written, syncedLen int64) {
	t.Helper()
	w, err := Create(t.TempDir(), start, time.Hour, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	all = appendN(t, w, synced, 1, 1, 100)
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	syncedLen = w.Size()
	all = append(all, appendN(t, w, unsynced, uint64(synced)+1, 1, 100)...)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	img, err = os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	return img, all, syncedLen
}

// putImage writes img as the segment for start in dir (replacing it).
func putImage(t *testing.T, dir string, img []byte) string {
	t.Helper()
	path := filepath.Join(dir, Name(start))
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// entriesBefore returns the entries that end at or before n bytes.
func entriesBefore(all []written, img []byte, n int64) []written {
	var out []written
	for i, e := range all {
		end := int64(len(img))
		if i+1 < len(all) {
			end = all[i+1].off
		}
		if end <= n {
			out = append(out, e)
		}
	}
	return out
}

// TestTornTailEveryByte cuts the file at every byte of its last entry, as a
// crash during that write could, and checks that Open keeps every whole
// entry before it, truncates the rest and reports exactly what it dropped.
func TestTornTailEveryByte(t *testing.T) {
	tests := []struct {
		name     string
		synced   int // entries covered by the synced-length hint
		unsynced int // entries after it; the last one is torn
	}{
		{"hint_before_last_entry", 5, 1},
		{"hint_two_entries_back", 5, 2},
		{"no_sync_since_create", 0, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img, all, syncedLen := crashImage(t, tt.synced, tt.unsynced)
			last := all[len(all)-1]
			keep := all[:len(all)-1]
			dir := t.TempDir()
			for cut := last.off; cut < int64(len(img)); cut++ {
				path := putImage(t, dir, img[:cut])
				torn := cut > last.off
				probs, err := Verify(path)
				if err != nil {
					t.Fatal(err)
				}
				if torn != (len(probs) == 1) || len(probs) > 1 ||
					torn && (probs[0].Kind != segfile.TornTail || probs[0].Offset != last.off || probs[0].Bytes != cut-last.off) {
					t.Fatalf("cut %d: Verify = %v", cut, probs)
				}
				w, rec, err := Open(dir, start, quiet)
				if err != nil {
					t.Fatalf("cut %d: Open: %v", cut, err)
				}
				if rec.From != syncedLen || rec.Scanned != last.off-syncedLen || rec.Truncated != torn {
					t.Fatalf("cut %d: recovery %+v, want scan from %d", cut, rec, syncedLen)
				}
				if torn && (rec.Offset != last.off || rec.Bytes != cut-last.off || rec.Records != 0 || rec.Err == nil) {
					t.Fatalf("cut %d: recovery %+v, want %d bytes dropped at %d", cut, rec, cut-last.off, last.off)
				}
				if seq, ok := w.LastSeq(); !ok || seq != keep[len(keep)-1].seq || w.Size() != last.off {
					t.Fatalf("cut %d: LastSeq %d, %v, size %d", cut, seq, ok, w.Size())
				}
				// The segment takes the lost entry again.
				if off, err := w.Append(last.seq, last.p); err != nil || off != last.off {
					t.Fatalf("cut %d: re-Append = %d, %v", cut, off, err)
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				got, it := readAll(t, path)
				if it.Err() != nil {
					t.Fatalf("cut %d: %v", cut, it.Err())
				}
				sameEntries(t, got, all)
			}
		})
	}
}

// TestZeroedTail covers what a crash on a file system that extends the
// file before writing its data leaves: zeros where entries should be.
func TestZeroedTail(t *testing.T) {
	img, all, syncedLen := crashImage(t, 4, 3)
	tests := []struct {
		name  string
		img   []byte
		keep  int   // entries left after recovery
		cut   int64 // where Open truncates
		bytes int64 // bytes it drops
	}{
		{"zeros_after_last_entry", append(bytes.Clone(img), make([]byte, 4096)...), 7, int64(len(img)), 4096},
		{"last_entry_zeroed", append(bytes.Clone(img[:all[6].off]), make([]byte, len(img)-int(all[6].off))...),
			6, all[6].off, int64(len(img)) - all[6].off},
		{"all_unsynced_zeroed", append(bytes.Clone(img[:syncedLen]), make([]byte, len(img)-int(syncedLen))...),
			4, syncedLen, int64(len(img)) - syncedLen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := putImage(t, dir, tt.img)
			probs, err := Verify(path)
			if err != nil || len(probs) != 1 || probs[0].Kind != segfile.TornTail || probs[0].Offset != tt.cut {
				t.Fatalf("Verify = %v, %v", probs, err)
			}
			w, rec, err := Open(dir, start, quiet)
			if err != nil {
				t.Fatal(err)
			}
			if !rec.Truncated || rec.Offset != tt.cut || rec.Bytes != tt.bytes || !errors.Is(rec.Err, record.ErrEnd) {
				t.Fatalf("recovery %+v, want %d bytes of zeros cut at %d", rec, tt.bytes, tt.cut)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if fi, _ := os.Stat(path); fi.Size() != tt.cut {
				t.Fatalf("file size %d after recovery, want %d", fi.Size(), tt.cut)
			}
			got, it := readAll(t, path)
			if it.Err() != nil {
				t.Fatal(it.Err())
			}
			sameEntries(t, got, all[:tt.keep])
		})
	}
}

// damage returns a copy of img with a change applied at off.
type damage struct {
	name  string
	entry int                       // which entry is damaged
	at    func(e written) int64     // the byte to change, from the entry
	apply func(b []byte, off int64) // the change
}

func flipBit(b []byte, off int64) { b[off] ^= 0x10 }

// TestCorruptionBeforeHint damages one entry inside the synced region:
// Verify reports it with file and offset as corruption, the iterator stops
// there with a *segfile.CorruptionError and never yields it, ReadAt refuses it,
// and the entries after it can still be read one by one.
func TestCorruptionBeforeHint(t *testing.T) {
	const n, bad = 20, 10
	tests := []damage{
		{"flip_payload", bad, func(e written) int64 { return e.off + record.HeaderSize + 20 }, flipBit},
		{"flip_seq", bad, func(e written) int64 { return e.off + record.HeaderSize }, flipBit},
		{"flip_checksum", bad, func(e written) int64 {
			n, _ := entryPayloadSize(len(e.p))
			return e.off + int64(record.Size(n)) - 3
		}, flipBit},
		{"flip_length", bad, func(e written) int64 { return e.off + 1 }, flipBit},
		{"flip_type", bad, func(e written) int64 { return e.off + 4 }, flipBit},
		{"zeroed_header", bad, func(e written) int64 { return e.off },
			func(b []byte, off int64) { clear(b[off : off+record.HeaderSize]) }},
		{"first_entry", 0, func(e written) int64 { return e.off + 30 }, flipBit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			w, err := Create(dir, start, time.Hour, quiet)
			if err != nil {
				t.Fatal(err)
			}
			all := appendN(t, w, n, 100, 1, 64)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			path := w.Path()
			img, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			tt.apply(img, tt.at(all[tt.entry]))
			putImage(t, dir, img)
			badOff := all[tt.entry].off

			probs, err := Verify(path)
			if err != nil {
				t.Fatal(err)
			}
			if len(probs) != 1 || probs[0].Kind != segfile.Corrupt || probs[0].Offset != badOff || probs[0].Path != path ||
				probs[0].Bytes != all[tt.entry+1].off-badOff {
				t.Fatalf("Verify = %v; want one corruption at %d", probs, badOff)
			}

			got, it := readAll(t, path)
			var ce *segfile.CorruptionError
			if !errors.As(it.Err(), &ce) || ce.Offset != badOff || ce.Path != path {
				t.Fatalf("iterator error = %v, want a *segfile.CorruptionError at %s:%d", it.Err(), path, badOff)
			}
			if !bytes.Contains([]byte(it.Err().Error()), []byte(fmt.Sprintf("%s at offset %d", path, badOff))) {
				t.Fatalf("error %q does not name file and offset", it.Err())
			}
			sameEntries(t, got, all[:tt.entry])

			r, err := OpenReader(path)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			var m message.Message
			if _, err := r.ReadAt(badOff, make([]byte, 4096), &m); !errors.As(err, &ce) || ce.Offset != badOff {
				t.Fatalf("ReadAt(damaged) = %v, want a *segfile.CorruptionError", err)
			}
			for _, e := range all[tt.entry+1:] {
				if seq, err := r.ReadAt(e.off, nil, &m); err != nil || seq != e.seq {
					t.Fatalf("ReadAt(%d) after the damage = %d, %v", e.off, seq, err)
				}
			}
			// Open trusts the synced region without reading it (that is
			// what keeps start-up cheap), so it succeeds; Verify and the
			// iterator are where such damage shows.
			w, rec, err := Open(dir, start, quiet)
			if err != nil || rec.Truncated || rec.Scanned != 0 {
				t.Fatalf("Open = %+v, %v", rec, err)
			}
			w.Close()
		})
	}
}

// encodeEntry frames an entry by hand, bypassing Append's checks, so that
// tests can write entries whose checksum holds but whose content is wrong.
func encodeEntry(seq uint64, p []byte, typ uint8, padByte byte) []byte {
	n, pad := entryPayloadSize(len(p))
	payload := binary.LittleEndian.AppendUint64(nil, seq)
	payload = append(payload, p...)
	for range pad {
		payload = append(payload, padByte)
	}
	out := make([]byte, record.Size(n))
	if _, err := record.Encode(out, typ, uint8(pad), payload); err != nil {
		panic(err)
	}
	return out
}

// TestImpossibleEntries writes entries whose checksum holds but whose
// content no Writer produces. Before the hint they are corruption for
// Verify and the iterator; after it, Open refuses the file rather than
// truncating data that is whole.
func TestImpossibleEntries(t *testing.T) {
	good := func(seq uint64, at int64) []byte {
		return message.AppendSchedule(nil, msg(at, 10, seq))
	}
	tests := []struct {
		name string
		raw  []byte // written after entries with seqs 1..3
	}{
		{"seq_repeated", encodeEntry(3, good(3, start), TypeEntry, 0)},
		{"seq_backwards", encodeEntry(2, good(2, start), TypeEntry, 0)},
		{"due_before_bucket", encodeEntry(9, good(9, start-1), TypeEntry, 0)},
		{"due_after_bucket", encodeEntry(9, good(9, start+3600_000), TypeEntry, 0)},
		{"nonzero_padding", encodeEntry(9, good(9, start), TypeEntry, 7)}, // 58 bytes: 6 of padding
		{"wrong_record_type", encodeEntry(9, good(9, start), TypeEntry+1, 0)},
		{"malformed_message", encodeEntry(9, []byte{1, 2, 3, 4, 5, 6, 7, 8}, TypeEntry, 0)},
	}
	for _, tt := range tests {
		for _, synced := range []bool{true, false} {
			name := tt.name + map[bool]string{true: "/before_hint", false: "/after_hint"}[synced]
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				w, err := Create(dir, start, time.Hour, quiet)
				if err != nil {
					t.Fatal(err)
				}
				appendN(t, w, 3, 1, 1, 10)
				if err := w.Sync(); err != nil {
					t.Fatal(err)
				}
				badOff := w.Size()
				f, err := os.OpenFile(w.Path(), os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteAt(tt.raw, badOff); err != nil {
					t.Fatal(err)
				}
				f.Close()
				if synced {
					// Record a hint that covers the bad entry.
					b := make([]byte, 32)
					segfile.PutSlot(b, 0, segfile.Slot{Len: badOff + int64(len(tt.raw)), Records: 4, Aux: 9})
					f, _ := os.OpenFile(w.Path(), os.O_WRONLY, 0)
					f.WriteAt(b, segfile.SlotOffset(0))
					f.Close()
				}
				w.Close() // closes the descriptor; nothing new to sync

				probs, err := Verify(w.Path())
				if err != nil || len(probs) != 1 || probs[0].Kind != segfile.Corrupt || probs[0].Offset != badOff ||
					!errors.Is(probs[0].Err, ErrBadEntry) {
					t.Fatalf("Verify = %v, %v; want one corruption at %d", probs, err, badOff)
				}
				got, it := readAll(t, w.Path())
				var ce *segfile.CorruptionError
				if len(got) != 3 || !errors.As(it.Err(), &ce) || ce.Offset != badOff {
					t.Fatalf("iterator: %d entries, err %v", len(got), it.Err())
				}
				w2, _, err := Open(dir, start, quiet)
				if synced {
					if err != nil {
						t.Fatalf("Open read the synced region: %v", err)
					}
					w2.Close()
					return
				}
				if !errors.As(err, &ce) || ce.Offset != badOff || !errors.Is(err, ErrBadEntry) {
					t.Fatalf("Open = %v, want a *segfile.CorruptionError at %d", err, badOff)
				}
				if fi, _ := os.Stat(w.Path()); fi.Size() != badOff+int64(len(tt.raw)) {
					t.Fatal("Open changed a file it refused")
				}
			})
		}
	}
}

// TestHeaderDamage damages the header: one bad slot falls back on the
// other, two bad slots scan from the first entry, and a bad fixed header
// or a hint past the end of the file is corruption.
func TestHeaderDamage(t *testing.T) {
	type result struct {
		from, scanned int64
		hintValid     bool
	}
	tests := []struct {
		name    string
		damage  func(img []byte, newest int, l1 int64) []byte
		want    result
		wantErr error // for Open, Verify, the iterator, and OpenReader and List unless dataOnly
		// dataOnly is set when the header itself is intact, so List and
		// OpenReader (which read only the header) succeed.
		dataOnly bool
	}{
		{"newest_slot_garbage", func(img []byte, newest int, _ int64) []byte {
			fill(img[segfile.SlotOffset(newest):segfile.SlotOffset(newest)+32], 0xA5)
			return img
		}, result{from: -1, hintValid: true}, nil, false},
		{"newest_slot_bit_flip", func(img []byte, newest int, _ int64) []byte {
			img[segfile.SlotOffset(newest)+3] ^= 1
			return img
		}, result{from: -1, hintValid: true}, nil, false},
		{"older_slot_garbage", func(img []byte, newest int, _ int64) []byte {
			fill(img[segfile.SlotOffset(1-newest):segfile.SlotOffset(1-newest)+32], 0xFF)
			return img
		}, result{from: -2, hintValid: true}, nil, false},
		{"both_slots_zeroed", func(img []byte, _ int, _ int64) []byte {
			clear(img[segfile.SlotOffset(0) : segfile.SlotOffset(1)+32])
			return img
		}, result{from: FirstOffset, hintValid: false}, nil, false},
		{"fixed_header_bit_flip", func(img []byte, _ int, _ int64) []byte {
			img[20] ^= 1
			return img
		}, result{}, segfile.ErrHeaderChecksum, false},
		{"wrong_magic", func(img []byte, _ int, _ int64) []byte {
			copy(img, "HGDONE\x00\x00")
			return img
		}, result{}, segfile.ErrBadMagic, false},
		{"shorter_than_header", func(img []byte, _ int, _ int64) []byte {
			return img[:50]
		}, result{}, segfile.ErrShortHeader, false},
		{"synced_data_lost", func(img []byte, _ int, l1 int64) []byte {
			return img[:l1]
		}, result{}, segfile.ErrHintBeyondEOF, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			w, err := Create(dir, start, time.Hour, quiet)
			if err != nil {
				t.Fatal(err)
			}
			all := appendN(t, w, 5, 1, 1, 50)
			if err := w.Sync(); err != nil {
				t.Fatal(err)
			}
			l1 := w.Size()
			all = append(all, appendN(t, w, 5, 6, 1, 50)...)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			img, err := os.ReadFile(w.Path())
			if err != nil {
				t.Fatal(err)
			}
			size := int64(len(img))
			_, newest, _ := segfile.BestSlot(img)
			path := putImage(t, dir, tt.damage(img, newest, l1))
			want := tt.want
			switch want.from {
			case -1: // falls back on the older slot
				want.from = l1
			case -2: // the newest slot is intact
				want.from = size
			}
			want.scanned = size - want.from

			probs, verr := Verify(path)
			_, lerr := List(dir)
			_, rerr := OpenReader(path)
			w, rec, err := Open(dir, start, quiet)
			if tt.wantErr != nil {
				errs := []error{err, lerr, rerr}
				if tt.dataOnly {
					_, it := readAll(t, path)
					errs = []error{err, it.Err()}
				}
				var ce *segfile.CorruptionError
				for _, e := range errs {
					if !errors.As(e, &ce) || !errors.Is(e, tt.wantErr) || ce.Path != path {
						t.Fatalf("error = %v, want a *segfile.CorruptionError in %s for %v", e, path, tt.wantErr)
					}
				}
				if verr != nil || len(probs) == 0 || probs[0].Kind != segfile.Corrupt || !errors.Is(probs[0].Err, tt.wantErr) {
					t.Fatalf("Verify = %v, %v", probs, verr)
				}
				return
			}
			if err != nil || lerr != nil || rerr != nil || verr != nil || len(probs) != 0 {
				t.Fatalf("Open %v, List %v, OpenReader %v, Verify %v %v", err, lerr, rerr, verr, probs)
			}
			got := result{rec.From, rec.Scanned, rec.HintValid}
			if got != want || rec.Truncated {
				t.Fatalf("recovery %+v, want %+v", rec, want)
			}
			if seq, _ := w.LastSeq(); seq != 10 || w.Entries() != 10 {
				t.Fatalf("LastSeq %d, Entries %d after recovery", seq, w.Entries())
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			// Recovery rewrote a valid slot for the whole file.
			img, _ = os.ReadFile(path)
			if s, _, ok := segfile.BestSlot(img); !ok || s.Len != size || s.Records != 10 || s.Aux != 10 {
				t.Fatalf("slot after recovery: %+v, %v", s, ok)
			}
			entries, it := readAll(t, path)
			if it.Err() != nil {
				t.Fatal(it.Err())
			}
			sameEntries(t, entries, all)
		})
	}
}

func fill(b []byte, c byte) {
	for i := range b {
		b[i] = c
	}
}

// TestDropUnsyncedWrites models a crash that loses what was not fsynced:
// the file is cut at the synced length or anywhere after it, and the slot
// written after the last fsync may be lost too. Everything synced is
// there after Open, followed by a prefix of what was not.
func TestDropUnsyncedWrites(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, start, time.Hour, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	all := appendN(t, w, 20, 1, 2, 80)
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	// The header as it is before the next Sync's slot write.
	staleHdr, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	staleHdr = staleHdr[:segfile.HeaderSize]
	all = append(all, appendN(t, w, 20, 100, 3, 80)...)
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	synced, syncedN := w.Size(), len(all)
	all = append(all, appendN(t, w, 30, 1000, 1, 80)...)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	img, err := os.ReadFile(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	cuts := []int64{synced, synced + 1, int64(len(img))}
	for range 25 {
		cuts = append(cuts, synced+rng.Int64N(int64(len(img))-synced+1))
	}
	for _, stale := range []bool{false, true} {
		for _, cut := range cuts {
			t.Run(fmt.Sprintf("stale_slot=%v/cut=%d", stale, cut), func(t *testing.T) {
				b := bytes.Clone(img[:cut])
				if stale {
					copy(b, staleHdr)
				}
				d := t.TempDir()
				path := putImage(t, d, b)
				w, rec, err := Open(d, start, quiet)
				if err != nil {
					t.Fatal(err)
				}
				want := entriesBefore(all, img, cut)
				if len(want) < syncedN {
					t.Fatalf("test bug: cut %d loses synced entries", cut)
				}
				if w.Entries() != uint64(len(want)) || rec.Truncated != (w.Size() != cut) {
					t.Fatalf("Entries %d, recovery %+v; want %d entries", w.Entries(), rec, len(want))
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				got, it := readAll(t, path)
				if it.Err() != nil {
					t.Fatal(it.Err())
				}
				sameEntries(t, got, want)
			})
		}
	}
}
