package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/dispatchlog"
)

// TestWaitDelivered: with nothing in flight WaitDelivered returns at once;
// with a delivery whose done-record is held back it waits (its context
// ends first), and it returns only after that done-record was written.
func TestWaitDelivered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &recSink{}
		e := openEngine(t, t.TempDir(), sink, nil)
		defer e.Close()
		if err := e.WaitDelivered(t.Context()); err != nil {
			t.Fatalf("nothing in flight: %v", err)
		}
		release := make(chan struct{})
		var recorded atomic.Bool
		orig := e.d.markDone
		e.d.markDone = func(b int64, recs ...dispatchlog.Done) error {
			<-release
			err := orig(b, recs...)
			recorded.Store(err == nil)
			return err
		}
		schedule(t, e, "t", time.Second, "x")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if n := len(sink.snapshot()); n != 1 {
			t.Fatalf("the sink got %d messages; want the one due", n)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		if err := e.WaitDelivered(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a done-record held back: WaitDelivered = %v; want it to wait until its context ends", err)
		}
		cancel()
		errc := make(chan error, 1)
		go func() { errc <- e.WaitDelivered(t.Context()) }()
		synctest.Wait()
		select {
		case err := <-errc:
			t.Fatalf("WaitDelivered returned %v while the done-record was held back", err)
		default:
		}
		close(release)
		select {
		case err := <-errc:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(time.Minute):
			t.Fatal("WaitDelivered did not return within a minute of the done-record")
		}
		if !recorded.Load() {
			t.Error("WaitDelivered returned before the done-record was written")
		}
	})
}
