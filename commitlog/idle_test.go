package commitlog

import (
	"testing"
	"time"
)

// goroutinesRun reports whether l's syncer or preallocator goroutine runs.
func goroutinesRun(l *Log) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.syncing || l.mu.preallocating
}

// TestIdleLogHoldsNoGoroutines: the syncer and the preallocator run only
// while they have work, so an idle log (a queue topic nobody writes) holds
// no goroutine; the next append starts them again and is made durable.
func TestIdleLogHoldsNoGoroutines(t *testing.T) {
	for _, pol := range []SyncPolicy{SyncAlways, SyncInterval} {
		t.Run(pol.String(), func(t *testing.T) {
			l, _, err := Open(Options{Dir: t.TempDir(), SegmentSize: testSegSize, Sync: pol, SyncInterval: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			for round := range 3 {
				// Enough to fill half a segment: the preallocator is asked
				// for the next one.
				offs := appendN(t, l, round*100, 100)
				if err := l.WaitVisible(l.WrittenOffset()); err != nil {
					t.Fatal(err)
				}
				deadline := time.Now().Add(10 * time.Second)
				for goroutinesRun(l) {
					if time.Now().After(deadline) {
						t.Fatalf("round %d: the log's goroutines still run 10 s after its last append", round)
					}
					time.Sleep(time.Millisecond)
				}
				if got, _, err := readAll(t, l, offs[0]); err != nil || len(got) != 100 {
					t.Fatalf("round %d: %d records visible, %v; want the 100 appended", round, len(got), err)
				}
			}
		})
	}
}
