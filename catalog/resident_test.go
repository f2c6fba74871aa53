package catalog

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/hourglassmq/hourglass/internal/resident"
	"github.com/hourglassmq/hourglass/message"
)

// mappedKiB sums the Rss of this process's mappings of the file path.
func mappedKiB(t *testing.T, path string) int64 {
	t.Helper()
	kib, err := resident.MappedKiB(func(p string) bool { return p == path })
	if err != nil {
		t.Fatal(err)
	}
	return kib
}

// TestCommitDropsMappedPages: after a commit the catalog's file pages are
// no longer in the process's resident set, however many lookups touched
// them before (ten million keys held hundreds of megabytes of the
// server's RSS), and every key reads back afterwards.
func TestCommitDropsMappedPages(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/smaps and tests madvise, both Linux's")
	}
	path, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(path, FileName)
	c := open(t, path)
	defer c.Close()
	const n, batches = 200_000, 4
	key := func(i int) string { return string(KeyOf("jobs", fmt.Sprintf("order-%07d", i))) }
	for b := range batches {
		pairs := make([]KeyID, 0, n/batches)
		for i := b * n / batches; i < (b+1)*n/batches; i++ {
			pairs = append(pairs, KeyID{Key: key(i), ID: message.ID{DeliverAt: int64(i), Seq: uint64(i)}, At: 7})
		}
		c.PutKeys(pairs)
		if err := c.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	lookAll := func(when string) {
		t.Helper()
		keys := make([]string, n)
		for i := range keys {
			keys[i] = key(i)
		}
		hits := make([]KeyHit, n)
		if err := c.LookupKeys(keys, hits); err != nil {
			t.Fatal(err)
		}
		for i, h := range hits {
			if !h.OK || h.ID.Seq != uint64(i) || h.At != 7 {
				t.Fatalf("%s: key %d = %+v", when, i, h)
			}
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	lookAll("before")
	touched := mappedKiB(t, path)
	if touched < 4<<10 {
		t.Fatalf("looking up every key left %d KiB of a %d KiB file resident: the test touches too little", touched, fi.Size()>>10)
	}
	c.PutKeys([]KeyID{{Key: key(n), ID: message.ID{DeliverAt: n, Seq: n}, At: 7}})
	if err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	if after := mappedKiB(t, path); after > 256 {
		t.Fatalf("%d KiB of the catalog's mapping resident after a commit (%d KiB before it); want at most 256", after, touched)
	}
	lookAll("after the pages were dropped")
}
