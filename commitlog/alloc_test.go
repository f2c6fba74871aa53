//go:build linux

package commitlog

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/hourglassmq/hourglass/record"
)

// allocatedBytes returns how many bytes of f have blocks (st_blocks).
func allocatedBytes(f *os.File) int64 {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return -1
	}
	return st.Blocks * 512
}

// TestAllocStep: a new segment has blocks for one step only, and the
// blocks follow the writes a step ahead.
func TestAllocStep(t *testing.T) {
	const step, segSize = 16 << 10, 1 << 20
	for _, pol := range []SyncPolicy{SyncAlways, SyncNone} {
		t.Run(pol.String(), func(t *testing.T) {
			l, _, err := Open(Options{Dir: t.TempDir(), SegmentSize: segSize, AllocStep: step, Sync: pol})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			f := l.mu.active.f
			if fi, _ := f.Stat(); fi.Size() != segSize {
				t.Fatalf("segment file is %d bytes, want its full size %d", fi.Size(), segSize)
			}
			if n := allocatedBytes(f); n > 2*step {
				t.Fatalf("a new segment has %d bytes of blocks, want at most %d", n, 2*step)
			}
			appendN(t, l, 0, 1000) // about 120 KiB
			l.mu.Lock()
			pos, alloc := l.mu.writePos, l.mu.active.alloc.Load()
			l.mu.Unlock()
			if alloc < pos || alloc > pos+2*step+pageSize {
				t.Fatalf("allocated to %d with writes at %d; want within two steps ahead", alloc, pos)
			}
			if n := allocatedBytes(f); n > pos+3*step {
				t.Fatalf("%d bytes of blocks for %d bytes written", n, pos)
			}
		})
	}
}

// TestAllocDiskFull: an append that needs a step the disk cannot give
// fails with ErrDiskFull and ENOSPC naming the segment file, writes
// nothing, and appends work again once space is free (not sticky).
func TestAllocDiskFull(t *testing.T) {
	const step = 8 << 10
	l, _, err := Open(Options{Dir: t.TempDir(), SegmentSize: 1 << 20, AllocStep: step, Sync: SyncAlways})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	offs := appendN(t, l, 0, 10)
	full := true
	l.pre.mu.Lock()
	l.pre.allocRange = func(f *os.File, from, to int64, zero bool) error {
		if full {
			return &os.PathError{Op: "fallocate", Path: f.Name(), Err: syscall.ENOSPC}
		}
		return allocRange(f, from, to, zero)
	}
	l.pre.mu.Unlock()
	n := 10
	for ; n < 1000; n++ {
		o, err := l.Append(nil, Record{Type: 1, Flags: byte(n), Payload: payload(n)})
		if err != nil {
			if !errors.Is(err, ErrDiskFull) || !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("append on a full disk: %v, want ErrDiskFull and ENOSPC", err)
			}
			if !strings.Contains(err.Error(), l.mu.active.path) || strings.Contains(err.Error(), ".tmp") {
				t.Fatalf("error %q does not name the segment file %s", err, l.mu.active.path)
			}
			break
		}
		offs = append(offs, o...)
	}
	if n == 1000 {
		t.Fatal("no append failed with the disk full")
	}
	checkRecords(t, l, offs, 0)
	l.pre.mu.Lock()
	full = false
	l.pre.mu.Unlock()
	o, err := l.Append(nil, Record{Type: 1, Flags: byte(n), Payload: payload(n)})
	if err != nil {
		t.Fatalf("append once space is free: %v", err)
	}
	checkRecords(t, l, append(offs, o...), 0)
}

// TestDamageInHole: a valid record far beyond the allocated blocks of a
// sparse segment (in a hole) is still found: the data there is damage
// found, not skipped because of the holes before it.
func TestDamageInHole(t *testing.T) {
	dir := t.TempDir()
	l, _, err := Open(Options{Dir: dir, SegmentSize: 1 << 20, AllocStep: 16 << 10, Sync: SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, l, 0, 10)
	path, end := l.mu.active.path, l.mu.active.base+l.mu.writePos
	l.Close()
	rec := make([]byte, 40)
	if _, err := record.Encode(rec, 1, 0, make([]byte, 24)); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(rec, 900<<10)
	f.WriteAt([]byte{7}, headerSize+end+3) // junk at the end: a bad header
	f.Close()
	_, _, err = Open(Options{Dir: dir, SegmentSize: 1 << 20, AllocStep: 16 << 10, Sync: SyncNone})
	if !errors.Is(err, ErrDamaged) {
		t.Fatalf("open with a valid record after junk in a hole: %v, want ErrDamaged", err)
	}
}

// TestStageGrowsOnce checks that a group commit of many records claims its
// staging room once under SyncAlways, not a record at a time: 4,000
// records of 300 bytes staged into a log with no staging buffer to reuse.
func TestStageGrowsOnce(t *testing.T) {
	l, _, err := Open(Options{Dir: t.TempDir(), SegmentSize: 16 << 20, Sync: SyncAlways})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	recs := make([]Record, 4000)
	for i := range recs {
		recs[i] = Record{Type: 1, Payload: make([]byte, 300)}
	}
	offs := make([]int64, 0, len(recs))
	allocs := testing.AllocsPerRun(3, func() {
		l.mu.Lock()
		l.mu.freeBufs = nil // as a new log has none
		l.mu.Unlock()
		var err error
		if offs, err = l.Append(offs[:0], recs...); err != nil {
			t.Fatal(err)
		}
	})
	// The staging buffer, and what an Append's wait for its fsync takes (6-7
	// here; 32 when the room grew a record at a time).
	if allocs > 12 {
		t.Errorf("an Append of %d records allocated %v times; want the staging room claimed once", len(recs), allocs)
	}
}
