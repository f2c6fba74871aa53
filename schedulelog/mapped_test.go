package schedulelog

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

func TestMappedReaderFollowsGrowth(t *testing.T) {
	dir := t.TempDir()
	const start = int64(1796014800000)
	w, err := Create(dir, start, time.Hour, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	add := func(i int) int64 {
		m := message.Message{DeliverAt: start + int64(i), Topic: []byte("t"), Body: bytes.Repeat([]byte{byte(i)}, i%3000)}
		off, err := w.Append(uint64(i+1), message.AppendSchedule(nil, &m))
		if err != nil {
			t.Fatal(err)
		}
		return off
	}
	var offs []int64
	for i := range 100 {
		offs = append(offs, add(i))
	}
	w.Flush()
	mr, err := OpenMapped(filepath.Join(dir, Name(start)))
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	// Grow the file past the initial mapping while it is mapped.
	for i := 100; i < 100+(mapReserve/1500); i++ {
		offs = append(offs, add(i))
	}
	w.Flush()
	var m message.Message
	for i, off := range offs {
		seq, err := mr.Entry(off, &m)
		if err != nil {
			t.Fatalf("entry %d at %d: %v", i, off, err)
		}
		if seq != uint64(i+1) || m.DeliverAt != start+int64(i) || len(m.Body) != i%3000 {
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
	dir := b.TempDir()
	const start = int64(1796014800000)
	w, _ := Create(dir, start, time.Hour, Options{})
	var offs []int64
	for i := range 10000 {
		m := message.Message{DeliverAt: start + int64(i), Topic: []byte("t"), Body: make([]byte, 128)}
		off, _ := w.Append(uint64(i+1), message.AppendSchedule(nil, &m))
		offs = append(offs, off)
	}
	w.Close()
	mr, err := OpenMapped(filepath.Join(dir, Name(start)))
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
