package commitlog

import (
	"os"
	"testing"
	"time"
)

// TestAppendNoWait checks that AppendNoWait returns before the fsync that
// covers its records (held here), that a later Append's records follow
// them, and that WaitVisible(end) returns once that fsync is done.
func TestAppendNoWait(t *testing.T) {
	l := openTest(t, t.TempDir(), SyncAlways)
	defer l.Close()
	held := make(chan struct{}, 1)
	release := make(chan struct{})
	l.mu.Lock()
	sync := l.mu.syncFile
	l.mu.syncFile = func(f *os.File) error {
		select {
		case held <- struct{}{}:
			<-release
		default:
		}
		return sync(f)
	}
	l.mu.Unlock()

	offs, end, err := l.AppendNoWait(nil, Record{Type: 1, Payload: payload(1)}, Record{Type: 1, Payload: payload(2)})
	if err != nil {
		t.Fatal(err)
	}
	if len(offs) != 2 || end <= offs[1] {
		t.Fatalf("offsets %v, end %d: want two offsets below end", offs, end)
	}
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("AppendNoWait did not ask for an fsync")
	}
	if got := l.EndOffset(); got >= end {
		t.Fatalf("EndOffset %d before the fsync finished, want < %d", got, end)
	}
	later := make(chan []int64, 1)
	go func() {
		o, err := l.Append(nil, Record{Type: 1, Payload: payload(3)})
		if err != nil {
			t.Error(err)
		}
		later <- o
	}()
	close(release)
	if err := l.WaitVisible(end); err != nil {
		t.Fatal(err)
	}
	if got := l.EndOffset(); got < end {
		t.Fatalf("EndOffset %d after WaitVisible(%d)", got, end)
	}
	select {
	case o := <-later:
		if len(o) != 1 || o[0] < end {
			t.Fatalf("a later Append got offsets %v, want one at or after %d", o, end)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the later Append did not return")
	}
}
