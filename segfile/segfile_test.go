package segfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/hourglassmq/hourglass/record"
)

var testMagic = [8]byte{'T', 'E', 'S', 'T', 'S', 'E', 'G', 0}

var start = time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC).UnixMilli()

func TestHeaderRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		h    Header
	}{
		{"1h", Header{Magic: testMagic, Start: start, Duration: 3600_000}},
		{"1s", Header{Magic: testMagic, Start: start + 1000, Duration: MinDurationMs}},
		{"24h", Header{Magic: testMagic, Start: 0, Duration: MaxDurationMs}},
		{"year_9999", Header{Magic: testMagic, Start: maxStartMs, Duration: 1000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := EncodeHeader(tt.h)
			if len(b) != HeaderSize {
				t.Fatalf("header is %d bytes", len(b))
			}
			h, err := DecodeHeader(b, testMagic)
			if err != nil || h != tt.h {
				t.Fatalf("DecodeHeader = %+v, %v", h, err)
			}
			s, i, ok := BestSlot(b)
			if !ok || i != 0 || s != (Slot{Len: HeaderSize}) {
				t.Fatalf("fresh header's slot: %+v %d %v", s, i, ok)
			}
			if _, ok := DecodeSlot(b[SlotOffset(1):], 1); ok {
				t.Fatal("fresh header's slot B is valid")
			}
		})
	}
}

// reseal recomputes the fixed header's checksum after a test changed it.
func reseal(b []byte) []byte {
	binary.LittleEndian.PutUint64(b[32:40], xxhash.Sum64(b[0:32]))
	return b
}

func TestDecodeHeaderErrors(t *testing.T) {
	good := func() []byte { return EncodeHeader(Header{Magic: testMagic, Start: start, Duration: 60_000}) }
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrShortHeader},
		{"short", good()[:39], ErrShortHeader},
		{"other_magic", func() []byte { b := good(); b[0] = 'X'; return reseal(b) }(), ErrBadMagic},
		{"checksum", func() []byte { b := good(); b[17] ^= 1; return b }(), ErrHeaderChecksum},
		{"version_2", func() []byte { b := good(); b[8] = 2; return reseal(b) }(), ErrVersion},
		{"reserved_set", func() []byte { b := good(); b[12] = 1; return reseal(b) }(), ErrHeaderValue},
		{"duration_1500ms", func() []byte {
			b := good()
			binary.LittleEndian.PutUint64(b[24:32], 1500)
			return reseal(b)
		}(), ErrHeaderValue},
		{"duration_25h", func() []byte {
			b := good()
			binary.LittleEndian.PutUint64(b[24:32], 25*3600_000)
			return reseal(b)
		}(), ErrHeaderValue},
		{"start_negative", func() []byte {
			b := good()
			neg := int64(-1000)
			binary.LittleEndian.PutUint64(b[16:24], uint64(neg))
			return reseal(b)
		}(), ErrHeaderValue},
		{"start_not_whole_second", func() []byte {
			b := good()
			binary.LittleEndian.PutUint64(b[16:24], uint64(start+1))
			return reseal(b)
		}(), ErrHeaderValue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodeHeader(tt.b, testMagic); !errors.Is(err, tt.want) {
				t.Fatalf("DecodeHeader = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestSlots(t *testing.T) {
	enc := func(i int, s Slot) []byte {
		b := make([]byte, slotSize)
		PutSlot(b, i, s)
		return b
	}
	s := Slot{Len: 4096, Records: 12, Aux: 99}
	tests := []struct {
		name string
		b    []byte
		i    int
		ok   bool
	}{
		{"slot_a", enc(0, s), 0, true},
		{"slot_b", enc(1, s), 1, true},
		{"a_bytes_read_as_b", enc(0, s), 1, false},
		{"zeros", make([]byte, slotSize), 0, false},
		{"short", enc(0, s)[:31], 0, false},
		{"flipped", func() []byte { b := enc(0, s); b[9] ^= 4; return b }(), 0, false},
		{"len_inside_header", enc(0, Slot{Len: HeaderSize - 8}), 0, false},
		{"more_records_than_fit", enc(0, Slot{Len: HeaderSize + 10*record.Overhead, Records: 11}), 0, false},
		{"records_that_fit", enc(0, Slot{Len: HeaderSize + 10*record.Overhead, Records: 10}), 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := DecodeSlot(tt.b, tt.i)
			if ok != tt.ok {
				t.Fatalf("DecodeSlot = %+v, %v; want ok %v", got, ok, tt.ok)
			}
		})
	}
}

func TestBestSlot(t *testing.T) {
	hdr := func(a, b *Slot) []byte {
		h := EncodeHeader(Header{Magic: testMagic, Start: start, Duration: 1000})
		clear(h[fixedSize:])
		if a != nil {
			PutSlot(h[SlotOffset(0):], 0, *a)
		}
		if b != nil {
			PutSlot(h[SlotOffset(1):], 1, *b)
		}
		return h
	}
	small, big := &Slot{Len: 200, Records: 2}, &Slot{Len: 300, Records: 3}
	tests := []struct {
		name  string
		hdr   []byte
		want  Slot
		which int
		ok    bool
	}{
		{"a_larger", hdr(big, small), *big, 0, true},
		{"b_larger", hdr(small, big), *big, 1, true},
		{"only_a", hdr(small, nil), *small, 0, true},
		{"only_b", hdr(nil, small), *small, 1, true},
		{"neither", hdr(nil, nil), Slot{}, 0, false},
		{"short", hdr(big, big)[:HeaderSize-1], Slot{}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, i, ok := BestSlot(tt.hdr)
			if s != tt.want || i != tt.which || ok != tt.ok {
				t.Fatalf("BestSlot = %+v, %d, %v", s, i, ok)
			}
		})
	}
}

// records frames n records with payload sizes 0, 1, 2, ... and returns
// them back to back, with each one's offset.
func records(n int, typ uint8) ([]byte, []int) {
	var b []byte
	var offs []int
	for i := range n {
		p := bytes.Repeat([]byte{byte(i)}, i*37%300)
		rec := make([]byte, record.Size(len(p)))
		record.Encode(rec, typ, 0, p)
		offs = append(offs, len(b))
		b = append(b, rec...)
	}
	return b, offs
}

func TestScannerChunks(t *testing.T) {
	data, offs := records(50, 7)
	for _, chunk := range []int{1, 7, 64, 333, 4096, 0} {
		sc := NewScanner(bytes.NewReader(data), 0, int64(len(data)), chunk)
		for i := 0; ; i++ {
			off, rec, size, err := sc.Next()
			if err == io.EOF {
				if i != len(offs) {
					t.Fatalf("chunk %d: EOF after %d records", chunk, i)
				}
				break
			}
			if err != nil || off != int64(offs[i]) || len(rec.Payload) != i*37%300 || size != record.Size(len(rec.Payload)) {
				t.Fatalf("chunk %d: record %d at %d: %v", chunk, i, off, err)
			}
		}
	}
}

func TestHuntAndCountWhole(t *testing.T) {
	data, offs := records(10, 7)
	data[offs[3]+record.HeaderSize] ^= 1 // damage record 3
	sc := NewScanner(bytes.NewReader(data), 0, int64(len(data)), 64)
	if _, _, err := sc.DecodeAt(int64(offs[3])); !errors.Is(err, record.ErrChecksum) {
		t.Fatalf("damaged record decodes: %v", err)
	}
	off, ok, err := sc.Hunt(int64(offs[3])+1, 1, 7)
	if err != nil || !ok || off != int64(offs[4]) {
		t.Fatalf("Hunt = %d, %v, %v; want %d", off, ok, err, offs[4])
	}
	if _, ok, _ := sc.Hunt(int64(offs[3])+1, 1, 8); ok {
		t.Fatal("Hunt found a record of another type")
	}
	if n, err := sc.CountWhole(int64(offs[3])+1, 1, 7); err != nil || n != 6 {
		t.Fatalf("CountWhole = %d, %v; want 6", n, err)
	}
}

var testFormat = Format{Magic: testMagic, Type: 7, Align: 1,
	Check: func(_ *Header, rec record.Record, prev uint64, _ bool) (uint64, error) {
		return prev + uint64(len(rec.Payload)), nil
	}}

// TestWriterBuffering checks that Reserve gathers records until the
// buffer is full, that a record larger than the buffer still goes through,
// and that Flush makes them visible to another descriptor.
func TestWriterBuffering(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.seg")
	w, err := Create(path, Header{Magic: testMagic, Start: start, Duration: 1000}, Options{BufferSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := Create(path, Header{Magic: testMagic, Start: start, Duration: 1000}, Options{}); !errors.Is(err, ErrExist) {
		t.Fatalf("Create over an existing file = %v", err)
	}
	size := func() int64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	put := func(n int) int64 {
		off, dst, err := w.Reserve(record.Size(n))
		if err != nil {
			t.Fatal(err)
		}
		record.Encode(dst, 7, 0, make([]byte, n))
		w.Commit(1, w.Aux()+uint64(n))
		return off
	}
	if off := put(10); off != HeaderSize || size() != HeaderSize {
		t.Fatalf("first record at %d, file %d bytes", off, size())
	}
	put(60) // 26 + 76 > 100: the first record is written out
	if size() != HeaderSize+26 {
		t.Fatalf("file is %d bytes, want the first record flushed", size())
	}
	put(1000) // larger than the buffer
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if size() != w.Size() || w.Records() != 3 || w.Aux() != 1070 {
		t.Fatalf("size %d/%d, records %d, aux %d", size(), w.Size(), w.Records(), w.Aux())
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if s := w.Synced(); s.Len != w.Size() || s.Records != 3 || s.Aux != 1070 {
		t.Fatalf("Synced = %+v", s)
	}
}

// FuzzDecodeHeader checks that the header and slot decoders never panic
// on any input and that what they accept re-encodes to the same bytes.
func FuzzDecodeHeader(f *testing.F) {
	h := EncodeHeader(Header{Magic: testMagic, Start: start, Duration: 3600_000})
	f.Add(h)
	b := bytes.Clone(h)
	PutSlot(b[SlotOffset(1):], 1, Slot{Len: 4096, Records: 20, Aux: 77})
	f.Add(b)
	f.Add(h[:fixedSize])
	f.Add(make([]byte, HeaderSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, err := DecodeHeader(b, testMagic); err == nil {
			if !ValidStart(got.Start) || !ValidDuration(got.Duration) {
				t.Fatalf("accepted %+v", got)
			}
			if !bytes.Equal(EncodeHeader(got)[:fixedSize], b[:fixedSize]) {
				t.Fatal("accepted header does not re-encode to the same bytes")
			}
		}
		s, i, ok := BestSlot(b)
		if !ok {
			return
		}
		if s.Len < HeaderSize {
			t.Fatalf("accepted slot %+v", s)
		}
		out := make([]byte, slotSize)
		PutSlot(out, i, s)
		if !bytes.Equal(out, b[SlotOffset(i):SlotOffset(i)+slotSize]) {
			t.Fatal("accepted slot does not re-encode to the same bytes")
		}
	})
}

// TestReports checks that the one-line reports name what an operator
// needs: the file, the offset, the kind and the extent.
func TestReports(t *testing.T) {
	ce := &CorruptionError{Path: "/d/x.sched", Offset: 4096, Err: record.ErrChecksum}
	if !errors.Is(ce, record.ErrChecksum) || ce.Error() != "corrupt data in /d/x.sched at offset 4096: record: checksum mismatch" {
		t.Fatalf("CorruptionError: %q", ce.Error())
	}
	ce = &CorruptionError{Path: "/d/topics/t/log", Offset: -1, Err: record.ErrShort}
	if ce.Error() != "corrupt data in /d/topics/t/log: record: truncated record" {
		t.Fatalf("CorruptionError without an offset: %q", ce.Error())
	}
	p := Problem{Path: "/d/x.sched", Offset: 200, Kind: TornTail, Bytes: 57, Records: 2, Err: record.ErrShort}
	if got, want := p.String(), "/d/x.sched: torn tail at offset 200 (57 bytes, 2 whole records): record: truncated record"; got != want {
		t.Fatalf("Problem: %q, want %q", got, want)
	}
	r := Recovery{Path: "/d/x.sched", Truncated: true, Offset: 200, Bytes: 57, Err: record.ErrShort}
	if got, want := r.String(), "/d/x.sched: torn tail truncated at offset 200: dropped 57 bytes, 0 whole records (record: truncated record)"; got != want {
		t.Fatalf("Recovery: %q, want %q", got, want)
	}
	if Corrupt.String() != "corruption" || Kind(9).String() != "kind(9)" {
		t.Fatal("Kind.String")
	}
}

func TestNames(t *testing.T) {
	for _, ms := range []int64{0, start, maxStartMs} {
		name := BaseName(ms) + ".x"
		if got, ok := ParseBaseName(name, ".x"); !ok || got != ms {
			t.Fatalf("ParseBaseName(%q) = %d, %v", name, got, ok)
		}
	}
	if BaseName(start) != "20261130T050000Z" {
		t.Fatalf("BaseName = %q", BaseName(start))
	}
}

func TestRemoveTemp(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a.sched.tmp", "b.done.tmp", "c.sched", "d.tmp", "e.done"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := RemoveTemp(dir, ".sched", ".done")
	if err != nil || len(removed) != 2 {
		t.Fatalf("RemoveTemp = %v, %v", removed, err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 3 {
		t.Fatalf("%d files left", len(ents))
	}
}

// TestCreateAtomic checks that a file is either replaced whole or left as
// it was, and that no temporary file is left behind either way.
func TestCreateAtomic(t *testing.T) {
	boom := errors.New("injected")
	write := func(b string) func(*os.File) error {
		return func(f *os.File) error { _, err := f.Write([]byte(b)); return err }
	}
	tests := []struct {
		name    string
		old     string // content before, "" for no file
		fill    func(*os.File) error
		sync    func(*os.File) error
		want    string
		wantErr error
	}{
		{"new_file", "", write("new"), nil, "new", nil},
		{"replaces", "old", write("new"), nil, "new", nil},
		{"fill_fails", "old", func(*os.File) error { return boom }, nil, "old", boom},
		{"sync_fails", "old", write("new"), func(*os.File) error { return boom }, "old", boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "meta")
			if tt.old != "" {
				if err := os.WriteFile(path, []byte(tt.old), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			f, err := CreateAtomic(path, tt.fill, tt.sync)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("CreateAtomic = %v, want %v", err, tt.wantErr)
			}
			if f != nil {
				f.Close()
			}
			if b, _ := os.ReadFile(path); string(b) != tt.want {
				t.Fatalf("file holds %q, want %q", b, tt.want)
			}
			if _, err := os.Stat(path + TempSuffix); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("temporary file left: %v", err)
			}
		})
	}
	path := filepath.Join(t.TempDir(), "ckpt")
	if err := WriteFileAtomic(path, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "x" {
		t.Fatalf("WriteFileAtomic wrote %q", b)
	}
}

// TestCreateAtomicNamesFinalPath: the file CreateAtomic returns, and the
// errors it returns, name the final path, not the temporary one.
func TestCreateAtomicNamesFinalPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.sched")
	f, err := CreateAtomic(path, func(f *os.File) error { _, err := f.Write([]byte("hi")); return err }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if f.Name() != path {
		t.Fatalf("file is named %s, want %s", f.Name(), path)
	}
	f.Close()
	_, err = f.WriteAt([]byte("x"), 0)
	if err == nil || !strings.Contains(err.Error(), path+":") {
		t.Fatalf("write error %v does not name %s", err, path)
	}
	full := &os.PathError{Op: "write", Path: path + TempSuffix, Err: syscall.ENOSPC}
	_, err = CreateAtomic(filepath.Join(filepath.Dir(path), "y.sched"), func(*os.File) error { return full }, nil)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "create "+filepath.Join(filepath.Dir(path), "y.sched")+":") {
		t.Fatalf("fill error = %v; want ENOSPC naming the final path", err)
	}
}
