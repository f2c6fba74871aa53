package dispatchlog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hourglassmq/hourglass/record"
	"github.com/hourglassmq/hourglass/segfile"
)

// FuzzDecodeDone feeds arbitrary record flags and payloads to the
// done-record decoder: it never panics, accepts only what encodeDone
// writes, and what it accepts re-encodes to the same bytes.
func FuzzDecodeDone(f *testing.F) {
	for _, d := range []Done{{1, Delivered}, {^uint64(0), DeadLettered}, {0, Cancelled}} {
		b := make([]byte, RecordSize)
		encodeDone(b, d)
		f.Add(uint8(0), bytes.Clone(b[record.HeaderSize:record.HeaderSize+PayloadSize]))
	}
	f.Add(uint8(1), make([]byte, PayloadSize))
	f.Add(uint8(0), []byte{1, 2, 3})
	f.Add(uint8(0), append(make([]byte, 8), 4))
	f.Fuzz(func(t *testing.T, flags uint8, payload []byte) {
		d, err := decodeDone(record.Record{Type: TypeDone, Flags: flags, Payload: payload})
		if err != nil {
			if !errors.Is(err, ErrBadRecord) {
				t.Fatalf("error %v does not wrap ErrBadRecord", err)
			}
			return
		}
		if !d.Reason.Valid() {
			t.Fatalf("accepted reason %d", d.Reason)
		}
		b := make([]byte, RecordSize)
		encodeDone(b, d)
		if flags != 0 || !bytes.Equal(b[record.HeaderSize:record.HeaderSize+PayloadSize], payload) {
			t.Fatal("accepted record does not re-encode to the same bytes")
		}
	})
}

// FuzzLoad appends arbitrary bytes after the synced part of a dispatch log
// and checks that Load and Verify never panic, that Load either fails with
// a *segfile.CorruptionError or returns at least the synced records, and that
// after Open the log is whole.
func FuzzLoad(f *testing.F) {
	rec := make([]byte, RecordSize)
	encodeDone(rec, Done{77, Cancelled})
	f.Add(rec)
	f.Add(rec[:RecordSize-1])
	f.Add(append(bytes.Clone(rec), 0, 0, 0))
	f.Add(append([]byte{1}, rec...))
	f.Add(make([]byte, 40))
	// Build the synced part once: fsyncs would make every run wait for the disk.
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
		dir := t.TempDir()
		path := filepath.Join(dir, Name(start))
		if err := os.WriteFile(path, append(bytes.Clone(base), tail...), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Verify(path); err != nil {
			t.Fatal(err)
		}
		var ce *segfile.CorruptionError
		set, _, err := Load(path)
		if err != nil && !errors.As(err, &ce) {
			t.Fatal(err)
		}
		if err == nil {
			for seq := range uint64(5) {
				if !set.Contains(seq + 1) {
					t.Fatalf("synced seq %d missing", seq+1)
				}
			}
		}
		w, _, err := Open(dir, start, hour, noSync)
		if errors.As(err, &ce) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		w.Close()
		if probs, err := Verify(path); err != nil || len(probs) != 0 {
			t.Fatalf("Verify after Open: %v, %v", probs, err)
		}
		if _, _, err := Load(path); err != nil {
			t.Fatalf("Load after Open: %v", err)
		}
	})
}
