package dispatchlog

import (
	"errors"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// gatedSync is an Options.SyncFile that counts fsyncs and can hold one
// fsync open until the test releases it. Its state is per test, never a
// package variable, so it cannot race with another test's goroutines.
type gatedSync struct {
	calls   atomic.Int64
	armed   atomic.Bool   // the next fsync blocks
	entered chan struct{} // receives when the blocked fsync has started
	release chan struct{} // closing it lets the blocked fsync go on
	fail    error         // returned by the blocked fsync
}

func newGatedSync() *gatedSync {
	return &gatedSync{entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (g *gatedSync) sync(f *os.File) error {
	g.calls.Add(1)
	if g.armed.CompareAndSwap(true, false) {
		g.entered <- struct{}{}
		<-g.release
		if g.fail != nil {
			return g.fail
		}
	}
	return f.Sync()
}

// records returns how many records w holds, buffered ones included.
func records(w *Writer) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sf.Records()
}

// waitFor polls cond without sleeping until it holds or ten seconds pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

// TestGroupCommitSharesFsyncs makes the sharing deterministic: the first
// caller's fsync is held open while the other callers append; once it
// completes, one fsync covers all of them. So n concurrent AppendSync
// calls cost exactly two fsyncs, and every record is there on reopen.
func TestGroupCommitSharesFsyncs(t *testing.T) {
	tests := []struct {
		name    string
		callers int
		fail    error
	}{
		{"2_callers", 2, nil},
		{"64_callers", 64, nil},
		{"failed_fsync_fails_every_waiter", 16, errors.New("injected fsync failure")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			g := newGatedSync()
			g.fail = tt.fail
			w, _ := openLog(t, dir, Options{SyncFile: g.sync, Logger: quiet.Logger})
			base := g.calls.Load() // the fsync that created the file
			g.armed.Store(true)
			errs := make(chan error, tt.callers)
			go func() { errs <- w.AppendSync(Done{Seq: 0, Reason: Delivered}) }()
			<-g.entered
			for i := 1; i < tt.callers; i++ {
				go func() { errs <- w.AppendSync(Done{Seq: uint64(i), Reason: Cancelled}) }()
			}
			waitFor(t, "every caller to append", func() bool { return records(w) == uint64(tt.callers) })
			close(g.release)
			for range tt.callers {
				if err := <-errs; !errors.Is(err, tt.fail) {
					t.Fatalf("AppendSync = %v, want %v", err, tt.fail)
				}
			}
			fsyncs := g.calls.Load() - base
			if tt.fail != nil {
				// Nobody retries a failed fsync; everyone gets its error.
				if fsyncs != 1 {
					t.Fatalf("%d fsyncs after a failure, want 1", fsyncs)
				}
				if err := w.Close(); !errors.Is(err, tt.fail) {
					t.Fatalf("Close = %v, want the sticky error", err)
				}
				return
			}
			if fsyncs != 2 {
				t.Fatalf("%d concurrent AppendSync calls made %d fsyncs, want 2", tt.callers, fsyncs)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			w, rec := openLog(t, dir, Options{})
			defer w.Close()
			if rec.Scanned != 0 || rec.Truncated {
				t.Fatalf("reopen scanned %+v", rec)
			}
			set, c, err := Load(w.Path())
			if err != nil || set.Len() != tt.callers || c.Delivered != 1 || c.Cancelled != tt.callers-1 {
				t.Fatalf("after reopen: %d seqs, %+v, %v", set.Len(), c, err)
			}
			for i := range uint64(tt.callers) {
				if !set.Contains(i) {
					t.Fatalf("seq %d missing after reopen", i)
				}
			}
		})
	}
}

// TestGroupCommitStress runs many goroutines doing AppendSync with real
// fsyncs: no call costs more than one fsync, and all records are there
// after reopen. (How many fsyncs are shared depends on timing; the
// deterministic bound is TestGroupCommitSharesFsyncs.)
func TestGroupCommitStress(t *testing.T) {
	const goroutines, calls = 32, 20
	dir := t.TempDir()
	var fsyncs atomic.Int64
	count := func(f *os.File) error { fsyncs.Add(1); return f.Sync() }
	w, _ := openLog(t, dir, Options{SyncFile: count})
	base := fsyncs.Load()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			for i := range calls {
				seq := uint64(g*calls + i)
				if err := w.AppendSync(Done{Seq: seq, Reason: Reason(seq%3 + 1)}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	n := fsyncs.Load() - base
	t.Logf("%d AppendSync calls, %d fsyncs", goroutines*calls, n)
	if n > goroutines*calls {
		t.Fatalf("%d fsyncs for %d calls", n, goroutines*calls)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w, _ = openLog(t, dir, Options{})
	defer w.Close()
	set, c, err := Load(w.Path())
	if err != nil || set.Len() != goroutines*calls || c.Total() != goroutines*calls {
		t.Fatalf("after reopen: %d seqs, %+v, %v", set.Len(), c, err)
	}
}
