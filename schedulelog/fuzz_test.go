package schedulelog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/record"
	"github.com/hourglassmq/hourglass/segfile"
)

// FuzzDecodeEntry feeds arbitrary record flags and payloads to the entry
// decoder and the message check behind it: they never panic, never return
// padding as payload, and what they accept re-encodes to the same bytes.
func FuzzDecodeEntry(f *testing.F) {
	for _, e := range [][]byte{
		encodeEntry(7, message.AppendSchedule(nil, msg(start+5, 10, 7)), TypeEntry, 0),
		encodeEntry(1<<63, message.AppendSchedule(nil, msg(start, 0, 1)), TypeEntry, 0),
		encodeEntry(8, []byte{1, 2, 3}, TypeEntry, 0),
		encodeEntry(9, message.AppendSchedule(nil, msg(start, 3, 9)), TypeEntry, 1),
	} {
		rec, _, err := record.Decode(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(rec.Flags, bytes.Clone(rec.Payload))
	}
	f.Add(uint8(8), make([]byte, 16))
	f.Add(uint8(0), []byte{})
	h := segfile.Header{Magic: Magic, Start: start, Duration: 3600_000}
	f.Fuzz(func(t *testing.T, flags uint8, payload []byte) {
		seq, p, err := decodeEntry(record.Record{Type: TypeEntry, Flags: flags, Payload: payload})
		if err != nil {
			if !errors.Is(err, ErrBadEntry) {
				t.Fatalf("error %v does not wrap ErrBadEntry", err)
			}
			return
		}
		if len(p) > len(payload)-entryMeta || len(payload)-entryMeta-len(p) != int(flags) {
			t.Fatalf("payload of %d bytes from %d with %d padding", len(p), len(payload), flags)
		}
		rec, _, err := record.Decode(encodeEntry(seq, p, TypeEntry, 0))
		if err != nil || rec.Flags != flags || !bytes.Equal(rec.Payload, payload) {
			t.Fatalf("re-encoding differs: %v", err)
		}
		var m message.Message
		if err := checkMessage(&h, p, &m); err == nil {
			if m.DeliverAt < h.Start || m.DeliverAt >= h.End() {
				t.Fatalf("accepted deliverAt %d outside the bucket", m.DeliverAt)
			}
			if !bytes.Equal(message.AppendSchedule(nil, &m), p) {
				t.Fatal("accepted message does not re-encode to the stored bytes")
			}
		} else if !errors.Is(err, ErrBadEntry) {
			t.Fatalf("error %v does not wrap ErrBadEntry", err)
		}
	})
}

// FuzzOpenTail appends arbitrary bytes to a segment after its synced
// length, as a crash could leave them, and checks that readers never
// panic and that after Open the segment is whole: Verify finds nothing and
// the iterator yields every entry without error.
func FuzzOpenTail(f *testing.F) {
	good := encodeEntry(10, message.AppendSchedule(nil, msg(start+10, 20, 10)), TypeEntry, 0)
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add(append(bytes.Clone(good), good[:9]...))
	f.Add(append(make([]byte, 8), good...))
	f.Add(encodeEntry(2, message.AppendSchedule(nil, msg(start+10, 20, 2)), TypeEntry, 0))
	f.Add([]byte{0xff, 0xff, 0xff, 0x03, TypeEntry, 0, 0, 0})
	// fsyncs would make every execution wait for the disk; a crash is
	// not what is being tested here.
	noSync := Options{SyncFile: func(*os.File) error { return nil }, Logger: quiet.Logger}
	w, err := Create(f.TempDir(), start, time.Hour, noSync)
	if err != nil {
		f.Fatal(err)
	}
	appendN(f, w, 3, 1, 1, 5)
	if err := w.Close(); err != nil {
		f.Fatal(err)
	}
	base, err := os.ReadFile(w.Path())
	if err != nil {
		f.Fatal(err)
	}
	size := int64(len(base))
	f.Fuzz(func(t *testing.T, tail []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, Name(start))
		if err := os.WriteFile(path, append(bytes.Clone(base), tail...), 0o644); err != nil {
			t.Fatal(err)
		}

		if _, err := Verify(path); err != nil {
			t.Fatal(err)
		}
		r, err := OpenReader(path)
		if err != nil {
			t.Fatal(err)
		}
		var m message.Message
		for off := size; off < size+int64(len(tail)); off += Align {
			r.ReadAt(off, nil, &m)
		}
		r.Close()
		readAll(t, path)

		w, rec, err := Open(dir, start, noSync)
		var ce *segfile.CorruptionError
		if errors.As(err, &ce) {
			return // a whole record with impossible content: refused, not truncated
		}
		if err != nil {
			t.Fatal(err)
		}
		if rec.From != size || rec.Truncated && rec.Offset+rec.Bytes != size+int64(len(tail)) {
			t.Fatalf("recovery %+v for a %d-byte tail after %d", rec, len(tail), size)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if probs, err := Verify(path); err != nil || len(probs) != 0 {
			t.Fatalf("Verify after Open: %v, %v", probs, err)
		}
		got, it := readAll(t, path)
		if it.Err() != nil || uint64(len(got)) != w.Entries() {
			t.Fatalf("iterator after Open: %d entries, want %d: %v", len(got), w.Entries(), it.Err())
		}
	})
}
