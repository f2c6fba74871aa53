package schedulelog

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/internal/resident"
	"github.com/hourglassmq/hourglass/message"
)

// testSegment is a schedule segment a test writes in its own directory,
// each entry with the next sequence number and topic "t".
type testSegment struct {
	t     testing.TB
	w     *Writer
	start int64
	path  string
	seq   uint64
}

func newTestSegment(t testing.TB) *testSegment {
	dir := t.TempDir()
	const start = int64(1796014800000)
	w, err := Create(dir, start, time.Hour, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return &testSegment{t: t, w: w, start: start, path: filepath.Join(dir, Name(start))}
}

// add appends an entry due delay ms after the segment's start and returns
// its offset.
func (s *testSegment) add(delay int64, body []byte) int64 {
	s.seq++
	m := message.Message{DeliverAt: s.start + delay, Topic: []byte("t"), Body: body}
	off, err := s.w.Append(s.seq, message.AppendSchedule(nil, &m))
	if err != nil {
		s.t.Fatal(err)
	}
	return off
}

func (s *testSegment) flush() {
	if err := s.w.Flush(); err != nil {
		s.t.Fatal(err)
	}
}

func TestMappedReaderFollowsGrowth(t *testing.T) {
	seg := newTestSegment(t)
	add := func(i int) int64 { return seg.add(int64(i), bytes.Repeat([]byte{byte(i)}, i%3000)) }
	var offs []int64
	for i := range 100 {
		offs = append(offs, add(i))
	}
	seg.flush()
	mr, err := OpenMapped(seg.path)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	// Grow the file past the initial mapping while it is mapped.
	for i := 100; i < 100+(mapReserve/1500); i++ {
		offs = append(offs, add(i))
	}
	seg.flush()
	var m message.Message
	for i, off := range offs {
		seq, err := mr.Entry(off, &m)
		if err != nil {
			t.Fatalf("entry %d at %d: %v", i, off, err)
		}
		if seq != uint64(i+1) || m.DeliverAt != seg.start+int64(i) || len(m.Body) != i%3000 {
			t.Fatalf("entry %d: seq %d deliverAt %d body %d", i, seq, m.DeliverAt, len(m.Body))
		}
	}
	if _, err := mr.Entry(offs[len(offs)-1]+1<<30, &m); !errors.Is(err, ErrBadOffset) {
		t.Fatalf("offset past the end: %v", err)
	}
	if _, err := mr.Entry(offs[1]+Align, &m); err == nil {
		t.Fatal("offset inside an entry decoded")
	}
}

func BenchmarkMappedEntry(b *testing.B) {
	seg := newTestSegment(b)
	var offs []int64
	for i := range 10000 {
		offs = append(offs, seg.add(int64(i), make([]byte, 128)))
	}
	seg.flush()
	mr, err := OpenMapped(seg.path)
	if err != nil {
		b.Fatal(err)
	}
	defer mr.Close()
	var m message.Message
	i := 0
	for b.Loop() {
		if _, err := mr.Entry(offs[i%len(offs)], &m); err != nil {
			b.Fatal(fmt.Sprint(err))
		}
		i++
	}
}

// TestMappedReaderWarm checks that Warm maps the segment's pages into the
// process before any entry is read, a bounded number of bytes per call,
// and then the pages of entries appended after it.
func TestMappedReaderWarm(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads the resident set from /proc/self/smaps (Linux only)")
	}
	seg := newTestSegment(t)
	add := func(n int) {
		for i := range n {
			seg.add(int64(i), make([]byte, 1000))
		}
		seg.flush()
	}
	add(4000) // about 4 MiB
	path := seg.path
	mr, err := OpenMapped(path)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	mapped := func() int64 {
		kib, err := resident.MappedKiB(func(p string) bool { return p == path })
		if err != nil {
			t.Fatal(err)
		}
		return kib
	}
	if kib := mapped(); kib > 64 {
		t.Fatalf("%d KiB resident before any read or Warm", kib)
	}
	more, err := mr.Warm(1 << 20)
	if err != nil || !more {
		t.Fatalf("Warm(1 MiB) of a 4 MiB segment: more %v, err %v", more, err)
	}
	if kib := mapped(); kib < 1024 || kib > 1024+64 {
		t.Fatalf("after Warm(1 MiB): %d KiB resident, want about 1024", kib)
	}
	for more {
		if more, err = mr.Warm(1 << 20); err != nil {
			t.Fatal(err)
		}
	}
	size := mr.size
	if kib := mapped(); kib*1024 < size-pageSize {
		t.Fatalf("after warming all: %d KiB resident of a %d-byte segment", kib, size)
	}
	add(2000) // appended after: Warm maps them in next
	if more, err := mr.Warm(64 << 20); err != nil || more {
		t.Fatalf("Warm after growth: more %v, err %v", more, err)
	}
	if kib := mapped(); kib*1024 < mr.size-pageSize || mr.size <= size {
		t.Fatalf("after growth: %d KiB resident of a %d-byte segment (was %d)", kib, mr.size, size)
	}
}
