package engine

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/internal/resident"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// TestDriverWarmsDueSegment: while it waits for the next entry, the driver
// maps in the pages of the loaded bucket's segment that reput appended, so
// that firing reads no page for the first time (warm.go).
func TestDriverWarmsDueSegment(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads the resident set from /proc/self/smaps (Linux only)")
	}
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		e := openEngine(t, dir, &recSink{}, nil)
		defer e.Close()
		body := bytes.Repeat([]byte("x"), 1000)
		reqs := make([]Request, 200)
		for i := range reqs {
			reqs[i] = Request{Topic: "w", Delay: 5 * time.Second, Body: body}
		}
		for range 5 { // 1,000 entries of about 1 KiB, due in the current bucket
			if _, err := e.ScheduleBatch(context.Background(), reqs); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait() // routed, and the driver waits for the first entry
		var seg string
		filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
			if err == nil && strings.HasSuffix(p, schedulelog.Suffix) {
				seg = p
			}
			return nil
		})
		fi, err := os.Stat(seg)
		if err != nil {
			t.Fatalf("the bucket's segment: %v", err)
		}
		kib, err := resident.MappedKiB(func(p string) bool { return p == seg })
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() < 1000*1000 || kib*1024 < fi.Size()-4096 {
			t.Fatalf("before any entry fired: %d KiB of the %d-byte segment mapped in; want all", kib, fi.Size())
		}
	})
}
