package crashtest

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/record"
)

// fakeSegment writes a preallocated commitlog-format file: a 32-byte
// header (not checked by the harness), the records, zeros to size.
func fakeSegment(t *testing.T, path string, size int, recs ...[]byte) (end int) {
	t.Helper()
	buf := make([]byte, size)
	copy(buf, "HGCL")
	pos := commitlogHeader
	for _, r := range recs {
		pos += copy(buf[pos:], r)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	return pos
}

func framed(t *testing.T, typ uint8, payload []byte) []byte {
	t.Helper()
	buf := make([]byte, record.Size(len(payload)))
	if _, err := record.Encode(buf, typ, 0, payload); err != nil {
		t.Fatal(err)
	}
	return buf
}

func schedRecord(t *testing.T, body string) []byte {
	return framed(t, message.TypeSchedule, message.AppendSchedule(nil, &message.Message{DeliverAt: 1, Topic: []byte("t"), Body: []byte(body)}))
}

func TestDamageCommitlog(t *testing.T) {
	dir := t.TempDir()
	seg := filepath.Join(dir, "commitlog", "00000000000000000000.log")
	a, b := schedRecord(t, "key-a"), schedRecord(t, "key-b")
	end := fakeSegment(t, seg, 4096, a, b)
	// An empty spare after the active segment is not the target.
	fakeSegment(t, filepath.Join(dir, "commitlog", "00000000000000004064.log"), 4096)

	targets, err := findTargets(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(targets) != 1 || targets[0].path != seg || !targets[0].prealloc {
		t.Fatalf("targets %+v, want only %s", targets, seg)
	}
	orig, _ := os.ReadFile(seg)

	t.Run("torn_append_removes_nothing", func(t *testing.T) {
		c, err := damage(targets[0], rand.New(rand.NewPCG(1, 2)), false)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(seg)
		if c.Mode != "torn-append" || !bytes.Equal(got[:end], orig[:end]) {
			t.Fatalf("mode %q; written data changed", c.Mode)
		}
		if allZero(got[end : end+int(c.Bytes)]) {
			t.Fatal("nothing appended after the data")
		}
		if _, _, err := record.Decode(got[end:]); err == nil {
			t.Fatal("the appended fragment decodes as a whole record")
		}
		if tl := scanTail(got, commitlogHeader); tl.end != end {
			t.Errorf("scanTail after the tear ends at %d, want %d", tl.end, end)
		}
		os.WriteFile(seg, orig, 0o644)
	})
	t.Run("cut_zeroes_the_last_record_and_names_it", func(t *testing.T) {
		var c Cut
		for seed := uint64(0); c.Mode != "cut"; seed++ { // cut is drawn half the time
			if c, err = damage(targets[0], rand.New(rand.NewPCG(seed, 3)), true); err != nil {
				t.Fatal(err)
			}
			if c.Mode != "cut" {
				os.WriteFile(seg, orig, 0o644)
			}
		}
		got, _ := os.ReadFile(seg)
		if c.Bytes < 1 || c.Bytes > int64(len(b)) {
			t.Fatalf("cut %d bytes; the last record is %d", c.Bytes, len(b))
		}
		if !bytes.Equal(got[:end-int(c.Bytes)], orig[:end-int(c.Bytes)]) || !allZero(got[end-int(c.Bytes):]) {
			t.Error("not exactly the last bytes zeroed")
		}
		if len(c.Keys) != 1 || c.Keys[0] != "key-b" {
			t.Errorf("cut names %v, want [key-b]", c.Keys)
		}
		if tl := scanTail(got, commitlogHeader); tl.end != commitlogHeader+len(a) {
			t.Errorf("after the cut the data ends at %d, want %d", tl.end, commitlogHeader+len(a))
		}
	})
}

func TestDamageScheduleSegmentAppendsOnly(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "schedule", "20261130T080000Z.done")
	os.MkdirAll(filepath.Dir(p), 0o755)
	body := append(make([]byte, segfileHeader), framed(t, typeDone, make([]byte, 9))...)
	os.WriteFile(p, body, 0o644)
	targets, err := findTargets(dir)
	if err != nil || len(targets) != 1 || targets[0].kind != "done" {
		t.Fatalf("targets %+v, %v", targets, err)
	}
	c, err := damage(targets[0], rand.New(rand.NewPCG(5, 5)), true)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p)
	if c.Mode != "torn-append" || len(got) != len(body)+int(c.Bytes) || !bytes.Equal(got[:len(body)], body) {
		t.Errorf("mode %s, %d bytes -> %d: a dispatch log is only ever appended to", c.Mode, len(body), len(got))
	}
	if got[len(body)+4] != typeDone {
		t.Errorf("fragment type %#x, want the dispatch log's %#x", got[len(body)+4], typeDone)
	}
}

// FuzzScanTail: scanTail never panics, never reports an end past the data
// or before start, and its last record starts inside [start, end).
func FuzzScanTail(f *testing.F) {
	rec := make([]byte, record.Size(5))
	record.Encode(rec, 1, 0, []byte("hello"))
	f.Add(append(make([]byte, 32), rec...), 32)
	f.Add(append(append(make([]byte, 32), rec...), 9, 0, 0, 0, 1, 0, 0, 0, 1), 32)
	f.Add([]byte{1, 2, 3}, 32)
	f.Fuzz(func(t *testing.T, data []byte, start int) {
		if start < 0 || start > 1<<20 {
			return
		}
		tl := scanTail(data, start)
		if tl.end > len(data) || (start <= len(data) && tl.end < start) {
			t.Fatalf("end %d outside [%d, %d]", tl.end, start, len(data))
		}
		if tl.lastStart >= 0 && (tl.lastStart < start || tl.lastStart >= tl.end) {
			t.Fatalf("last record at %d outside [%d, %d)", tl.lastStart, start, tl.end)
		}
		if tl.lastStart >= 0 {
			if _, n, err := record.Decode(data[tl.lastStart:]); err != nil || tl.lastStart+n != tl.end {
				t.Fatalf("last record at %d does not decode to the end %d: %v", tl.lastStart, tl.end, err)
			}
		}
	})
}
