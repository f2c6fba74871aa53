package commitlog

import (
	"bytes"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/internal/resident"
)

// residentKiB sums the Rss of this process's mappings of files in dir.
func residentKiB(t *testing.T, dir string) int64 {
	t.Helper()
	kib, err := resident.MappedKiB(func(p string) bool { return strings.HasPrefix(p, dir+string(filepath.Separator)) })
	if err != nil {
		t.Fatal(err)
	}
	return kib
}

// TestIteratorDropsPagesBehind: reading a log through its mapping leaves at
// most about a chunk of it in the process's resident set per iterator, not
// every page read (routing 100,000,000 messages held about 250 MB), and the
// records read are those written, also when read again.
func TestIteratorDropsPagesBehind(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/smaps and tests madvise, both Linux's")
	}
	dir := t.TempDir()
	// SyncAlways writes with pwrite, so only the reader maps pages.
	l, _, err := Open(Options{Dir: dir, SegmentSize: 16 << 20, Sync: SyncAlways})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	body := bytes.Repeat([]byte{0xa5}, 4000)
	recs := make([]Record, 256)
	for i := range recs {
		recs[i] = Record{Type: 1, Payload: body}
	}
	for range 40 { // 40 MiB in three segments
		if _, err := l.Append(nil, recs...); err != nil {
			t.Fatal(err)
		}
	}
	before := residentKiB(t, dir)
	for pass := range 2 {
		it, err := l.NewIterator(l.FirstOffset())
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for it.Next() {
			if !bytes.Equal(it.Record().Payload, body) {
				t.Fatalf("pass %d: record %d at %d differs from what was written", pass, n, it.Offset())
			}
			n++
		}
		if it.Err() != nil || n != 40*len(recs) {
			t.Fatalf("pass %d: read %d records, err %v; want %d", pass, n, it.Err(), 40*len(recs))
		}
		got := residentKiB(t, dir) - before
		it.Close()
		// The chunk the iterator is in, and the one the last record
		// straddles: well under the 40 MiB read.
		if got > 2*dropChunk>>10+64 {
			t.Errorf("pass %d: %d KiB of the log resident after reading 40 MiB; want at most about %d KiB", pass, got, 2*dropChunk>>10)
		}
	}
}

// TestSyncDropsWrittenPages: under SyncInterval appends write through the
// mapping; once synced, the pages written leave the process's resident set
// (a burst of 256 MiB not yet routed stayed resident), and a reader still
// reads every record.
func TestSyncDropsWrittenPages(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/smaps and tests madvise, both Linux's")
	}
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// An interval far longer than the test: only the Syncs below sync.
	l, _, err := Open(Options{Dir: dir, SegmentSize: 16 << 20, Sync: SyncInterval, SyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	body := bytes.Repeat([]byte{0x5a}, 4000)
	recs := make([]Record, 256)
	for i := range recs {
		recs[i] = Record{Type: 1, Payload: body}
	}
	for range 40 { // 40 MiB in three segments
		if _, _, err := l.AppendNoWait(nil, recs...); err != nil {
			t.Fatal(err)
		}
	}
	written := residentKiB(t, dir)
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	synced := residentKiB(t, dir)
	if written < 30<<10 || synced > 64 {
		t.Fatalf("%d KiB of the log resident once written, %d KiB once synced; want over 30 MiB, then at most 64 KiB", written, synced)
	}
	it, err := l.NewIterator(l.FirstOffset())
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for it.Next() {
		if !bytes.Equal(it.Record().Payload, body) {
			t.Fatalf("record %d at %d differs from what was written", n, it.Offset())
		}
		n++
	}
	if it.Err() != nil || n != 40*len(recs) {
		t.Fatalf("read %d records, err %v; want %d", n, it.Err(), 40*len(recs))
	}
}
