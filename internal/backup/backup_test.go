package backup

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/record"
)

// TestCommitlogPrefix backs up a commitlog whose active segment ends in a
// record still being written (half of it on disk): the sealed segments
// are hard links, the active one is copied up to its last whole record,
// and the copy opens with every whole record and nothing else.
func TestCommitlogPrefix(t *testing.T) {
	data := t.TempDir()
	dir := filepath.Join(data, commitlogDir)
	l, _, err := commitlog.Open(commitlog.Options{Dir: dir, SegmentSize: 64 << 10, AllocStep: 64 << 10, Sync: commitlog.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	payload := bytes.Repeat([]byte("x"), 500)
	for i := range n {
		copy(payload, fmt.Sprintf("%06d", i))
		if _, err := l.Append(nil, commitlog.Record{Type: 1, Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	end := l.EndOffset()
	bases := l.SegmentBases()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if len(bases) < 3 {
		t.Fatalf("%d segments; the test wants sealed ones", len(bases))
	}
	// Half of a record after the last one, as a writer leaves it between
	// two writes: the copy must stop before it.
	var active string
	for _, b := range bases {
		if p := filepath.Join(dir, commitlog.SegmentName(b)); hasRecord(p) {
			active = p
		}
	}
	half := make([]byte, record.Size(100))
	if _, err := record.Encode(half, 1, 0, bytes.Repeat([]byte("y"), 100)); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(active, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var activeBase int64
	fmt.Sscanf(filepath.Base(active), "%d.log", &activeBase)
	if _, err := f.WriteAt(half[:len(half)/2], commitlogHeader+end-activeBase); err != nil {
		t.Fatal(err)
	}
	f.Close()

	to := filepath.Join(t.TempDir(), "copy")
	rep, err := Take(Options{DataDir: data, To: to, CopyCatalog: func(path string) error { return os.WriteFile(path, nil, 0o600) }})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Linked < 2 {
		t.Errorf("linked %d files, want every sealed segment (%d)", rep.Linked, len(bases)-1)
	}
	for _, b := range bases {
		name := commitlog.SegmentName(b)
		src, _ := os.Stat(filepath.Join(dir, name))
		dst, err := os.Stat(filepath.Join(to, commitlogDir, name))
		if p := filepath.Join(dir, name); p == active {
			if err != nil || os.SameFile(src, dst) {
				t.Errorf("active segment %s: a link or missing (%v); want a copy", name, err)
			}
		} else if b < activeBase && (err != nil || !os.SameFile(src, dst)) {
			t.Errorf("sealed segment %s: not a hard link (%v)", name, err)
		}
	}
	c, rec, err := commitlog.Open(commitlog.Options{Dir: filepath.Join(to, commitlogDir), SegmentSize: 64 << 10, AllocStep: 64 << 10, Sync: commitlog.SyncNone})
	if err != nil {
		t.Fatalf("opening the copy: %v", err)
	}
	defer c.Close()
	if c.EndOffset() != end {
		t.Errorf("the copy ends at %d, want %d (the last whole record; recovery: %+v)", c.EndOffset(), end, rec)
	}
	it, err := c.NewIterator(c.FirstOffset())
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for it.Next() {
		if want := fmt.Sprintf("%06d", got); !bytes.HasPrefix(it.Record().Payload, []byte(want)) {
			t.Fatalf("record %d: %.6q, want %s", got, it.Record().Payload, want)
		}
		got++
	}
	if got != n {
		t.Errorf("the copy holds %d records, want %d (err %v)", got, n, it.Err())
	}
}

// TestTargetExists: a backup never writes into a directory that exists.
func TestTargetExists(t *testing.T) {
	to := t.TempDir()
	if _, err := Take(Options{DataDir: t.TempDir(), To: to}); !errors.Is(err, ErrExists) {
		t.Errorf("Take into an existing directory: %v, want ErrExists", err)
	}
}

// TestWaitDeliveredFirst: Take waits for the deliveries in flight before
// it copies anything (the target is still empty then), and a failed wait
// fails the backup and leaves no target behind.
func TestWaitDeliveredFirst(t *testing.T) {
	data := t.TempDir()
	if err := os.MkdirAll(filepath.Join(data, "schedule"), 0o700); err != nil {
		t.Fatal(err)
	}
	catalog := func(path string) error { return os.WriteFile(path, nil, 0o600) }
	to := filepath.Join(t.TempDir(), "copy")
	waited := false
	_, err := Take(Options{DataDir: data, To: to, CopyCatalog: catalog, WaitDelivered: func() error {
		ents, err := os.ReadDir(to)
		if err != nil || len(ents) != 0 {
			t.Errorf("WaitDelivered called with the target holding %d entries (%v); want it called first", len(ents), err)
		}
		waited = true
		return nil
	}})
	if err != nil || !waited {
		t.Fatalf("Take = %v, WaitDelivered called %v; want a backup, after waiting", err, waited)
	}
	to2 := filepath.Join(t.TempDir(), "copy")
	stop := errors.New("engine: closed")
	_, err = Take(Options{DataDir: data, To: to2, CopyCatalog: catalog, WaitDelivered: func() error { return stop }})
	if !errors.Is(err, stop) {
		t.Errorf("Take with a failing wait = %v; want its error", err)
	}
	if _, serr := os.Lstat(to2); !errors.Is(serr, fs.ErrNotExist) {
		t.Errorf("a failed backup left its target: %v", serr)
	}
}
