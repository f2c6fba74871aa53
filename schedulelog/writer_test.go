package schedulelog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/segfile"
)

func TestAppendReadBack(t *testing.T) {
	tests := []struct {
		name string
		n    int
		body int
		buf  int // ReadAt buffer size
	}{
		{"empty_bodies", 20, 0, 4096},
		{"128B", 100, 128, 4096},
		{"1KiB_small_buf", 50, 1024, 64},
		{"300KiB_over_buffer", 5, 300 << 10, 4096},
		{"nil_buf", 10, 200, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			w, err := Create(dir, start, time.Hour, Options{BufferSize: 64 << 10})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			want := appendN(t, w, tt.n, 0, 3, tt.body)
			for _, e := range want {
				if e.off%Align != 0 {
					t.Fatalf("offset %d is not a multiple of %d", e.off, Align)
				}
			}
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			r, err := OpenReader(w.Path())
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			buf := make([]byte, tt.buf)
			var m message.Message
			for _, e := range slices.Backward(want) {
				seq, err := r.ReadAt(e.off, buf, &m)
				if err != nil || seq != e.seq {
					t.Fatalf("ReadAt(%d) = %d, %v; want seq %d", e.off, seq, err, e.seq)
				}
				if got := message.AppendSchedule(nil, &m); !bytes.Equal(got, e.p) {
					t.Fatalf("ReadAt(%d): message differs from what was appended", e.off)
				}
			}
			got, it := readAll(t, w.Path())
			if it.Err() != nil {
				t.Fatal(it.Err())
			}
			sameEntries(t, got, want)
			if _, err := r.ReadAt(FirstOffset+4, buf, &m); !errors.Is(err, ErrBadOffset) {
				t.Fatalf("ReadAt(unaligned) = %v, want ErrBadOffset", err)
			}
		})
	}
}

func TestReadAtDoesNotAllocate(t *testing.T) {
	w, err := Create(t.TempDir(), start, time.Hour, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	e := appendN(t, w, 1, 7, 1, 512)[0]
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	r, err := OpenReader(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, 4096)
	m := message.Message{Headers: make([]message.Header, 0, 4)}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := r.ReadAt(e.off, buf, &m); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("ReadAt allocates %.1f times per call", allocs)
	}
}

func TestIterateFollowsFlushes(t *testing.T) {
	w, err := Create(t.TempDir(), start, time.Hour, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	first := appendN(t, w, 10, 1, 1, 64)
	if got, _ := readAll(t, w.Path()); len(got) != 0 {
		t.Fatalf("iterator saw %d buffered entries before Flush", len(got))
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	r, err := OpenReader(w.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	it := r.Iter()
	n := 0
	for it.Next() {
		n++
	}
	if n != len(first) || it.Err() != nil {
		t.Fatalf("first pass: %d entries, err %v", n, it.Err())
	}
	more := appendN(t, w, 5, 100, 1, 64)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	it = r.IterFrom(it.End())
	var got []written
	for it.Next() {
		got = append(got, written{it.Offset(), it.Seq(), bytes.Clone(it.Payload())})
	}
	if it.Err() != nil {
		t.Fatal(it.Err())
	}
	sameEntries(t, got, more)
}

func TestReopenClean(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, start, time.Hour, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := appendN(t, w, 100, 10, 2, 100)
	size := w.Size()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close = %v, want ErrClosed", err)
	}
	if _, err := w.Append(1000, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close = %v, want ErrClosed", err)
	}
	w, rec, err := Open(dir, start, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Truncated || rec.Scanned != 0 || rec.From != size || !rec.HintValid {
		t.Fatalf("clean reopen: %+v, want nothing scanned from %d", rec, size)
	}
	if last, ok := w.LastSeq(); !ok || last != want[len(want)-1].seq || w.Entries() != 100 {
		t.Fatalf("LastSeq = %d, %v; Entries %d", last, ok, w.Entries())
	}
	if w.Duration() != time.Hour || w.Start() != start {
		t.Fatalf("header: start %d duration %v", w.Start(), w.Duration())
	}
	want = append(want, appendN(t, w, 3, 1000, 1, 10)...)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, it := readAll(t, filepath.Join(dir, Name(start)))
	if it.Err() != nil {
		t.Fatal(it.Err())
	}
	sameEntries(t, got, want)
	if _, err := Create(dir, start, time.Minute, Options{}); !errors.Is(err, ErrExist) {
		t.Fatalf("Create over an existing segment = %v, want ErrExist", err)
	}
}

func TestAppendRejects(t *testing.T) {
	w, err := Create(t.TempDir(), start, time.Hour, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, ok := w.LastSeq(); ok {
		t.Fatal("LastSeq of an empty segment reports ok")
	}
	good := message.AppendSchedule(nil, msg(start, 10, 0))
	if _, err := w.Append(0, good); err != nil {
		t.Fatalf("seq 0 first: %v", err)
	}
	if _, err := w.Append(5, good); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		seq  uint64
		p    []byte
		want error
	}{
		{"same_seq", 5, good, ErrSeqOrder},
		{"lower_seq", 4, good, ErrSeqOrder},
		{"before_bucket", 6, message.AppendSchedule(nil, msg(start-1, 1, 6)), ErrOutOfBucket},
		{"after_bucket", 6, message.AppendSchedule(nil, msg(start+3600_000, 1, 6)), ErrOutOfBucket},
		{"malformed", 6, []byte{9, 9, 9}, ErrBadPayload},
		{"trailing_bytes", 6, append(bytes.Clone(good), 0), ErrBadPayload},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			size := w.Size()
			if _, err := w.Append(tt.seq, tt.p); !errors.Is(err, tt.want) {
				t.Fatalf("Append = %v, want %v", err, tt.want)
			}
			if w.Size() != size {
				t.Fatal("a rejected Append wrote bytes")
			}
		})
	}
	if last, _ := w.LastSeq(); last != 5 {
		t.Fatalf("LastSeq = %d after rejections, want 5", last)
	}
	if _, err := w.Append(6, good); err != nil {
		t.Fatalf("seq 6 after rejections: %v", err)
	}
}

func TestStickyError(t *testing.T) {
	boom := errors.New("injected fsync failure")
	fail := false
	opts := Options{SyncFile: func(f *os.File) error {
		if fail {
			return boom
		}
		return f.Sync()
	}}
	w, err := Create(t.TempDir(), start, time.Hour, opts)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, w, 3, 1, 1, 10)
	fail = true
	if err := w.Sync(); !errors.Is(err, boom) {
		t.Fatalf("Sync = %v, want the injected error", err)
	}
	fail = false // the error stays: an fsync is never retried
	if _, err := w.Append(100, message.AppendSchedule(nil, msg(start, 1, 100))); !errors.Is(err, boom) {
		t.Fatalf("Append after a failed Sync = %v, want the sticky error", err)
	}
	if err := w.Sync(); !errors.Is(err, boom) {
		t.Fatalf("second Sync = %v, want the sticky error", err)
	}
	if err := w.Close(); !errors.Is(err, boom) {
		t.Fatalf("Close = %v, want the sticky error", err)
	}
}

func TestReaderDuringAppendInProgress(t *testing.T) {
	w, err := Create(t.TempDir(), start, time.Hour, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	want := appendN(t, w, 4, 1, 1, 100)
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	// Half of a record being written by another process.
	p := message.AppendSchedule(nil, msg(start, 100, 9))
	half := make([]byte, 40)
	half[0], half[4] = byte(len(p)+8), TypeEntry
	f, err := os.OpenFile(w.Path(), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(half, w.Size()); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, it := readAll(t, w.Path())
	if it.Err() != nil {
		t.Fatalf("iterator error on an in-progress tail: %v", it.Err())
	}
	if off, ok := it.Torn(); !ok || off != w.Size() {
		t.Fatalf("Torn = %d, %v; want %d", off, ok, w.Size())
	}
	sameEntries(t, got, want)
}

func TestHeaderHintSlotsAlternate(t *testing.T) {
	w, err := Create(t.TempDir(), start, time.Hour, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var lens []int64
	for i := range 4 {
		appendN(t, w, 1, uint64(i), 1, 10)
		if err := w.Sync(); err != nil {
			t.Fatal(err)
		}
		lens = append(lens, w.Size())
		hdr, err := os.ReadFile(w.Path())
		if err != nil {
			t.Fatal(err)
		}
		s, which, ok := segfile.BestSlot(hdr)
		if !ok || s.Len != w.Size() || s.Records != uint64(i+1) || s.Aux != uint64(i) || which != (i+1)%2 {
			t.Fatalf("after sync %d: best slot %d = %+v, %v", i, which, s, ok)
		}
	}
}
