package engine

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

// TestReadyWithFutureSegments: a restart finds a segment whose bucket
// starts beyond the preload lead; Ready must not wait for it to load, and
// it still fires on time.
func TestReadyWithFutureSegments(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		sink := &recSink{}
		e := openEngine(t, dir, sink, nil)
		id := schedule(t, e, "t", time.Minute, "later") // buckets of 10 s, preload lead 2 s
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		e = openEngine(t, dir, sink, nil) // waits for Ready
		if waited := time.Since(start); waited > time.Second {
			t.Errorf("Ready took %v: it waited for a bucket beyond the preload lead", waited)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		checkDeliveries(t, sink.snapshot(), []message.ID{id}, time.Second)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
