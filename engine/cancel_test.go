package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/message"
)

// crashCopy copies the data directory of a running engine: what a kill -9
// at this moment would leave (every answered record is in the files under
// the always fsync policy; nothing is synced or checkpointed for the copy).
func crashCopy(t *testing.T, dir string) string {
	t.Helper()
	// The engine's goroutines may be writing a file (a checkpoint's .tmp,
	// renamed a moment later): let every one of them block first, so the
	// copy sees no file vanish under it. Call it inside a synctest bubble.
	synctest.Wait()
	dst := filepath.Join(t.TempDir(), "copy")
	if err := os.CopyFS(dst, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	return dst
}

// openNotReady opens the engine in dir without waiting for Ready, and
// waits until every goroutine of the bubble is blocked.
func openNotReady(t *testing.T, dir string, sink Sink) *Engine {
	t.Helper()
	e, err := Open(Options{Dir: dir, Sink: sink, SegmentDuration: 10 * time.Second, PreloadLead: 2 * time.Second,
		CommitlogSegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	return e
}

type cancelCase struct {
	name string
	id   message.ID
	want CancelResult
}

func checkCancels(t *testing.T, when string, e *Engine, cases []cancelCase) {
	t.Helper()
	for _, tc := range cases {
		res, err := e.Cancel(context.Background(), tc.id)
		if err != nil || res != tc.want {
			t.Errorf("%s: %s: Cancel = %v, %v; want %v", when, tc.name, res, err, tc.want)
		}
	}
}

// TestCancelAgainAcrossRestarts: a second Cancel of a cancelled message
// answers AlreadyCancelled, in a loaded and in an unloaded bucket, in the
// same run, after a clean restart and after a crash that left the cancel
// records beyond reput's checkpoint; a delivered one answers AlreadyDone
// throughout.
func TestCancelAgainAcrossRestarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		sink := &recSink{}
		e := openEngine(t, dir, sink, nil)
		near := schedule(t, e, "t", 5*time.Second, "near") // the loaded bucket
		far := schedule(t, e, "t", time.Hour, "far")       // an unloaded one
		fired := schedule(t, e, "t", time.Second, "fired")
		keep := schedule(t, e, "t", 6*time.Second, "keep")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		checkCancels(t, "first", e, []cancelCase{
			{"loaded", near, Cancelled},
			{"unloaded", far, Cancelled},
			{"delivered", fired, AlreadyDone},
		})
		again := []cancelCase{
			{"loaded_again", near, AlreadyCancelled},
			{"unloaded_again", far, AlreadyCancelled},
			{"delivered_again", fired, AlreadyDone},
		}
		checkCancels(t, "same run", e, again)
		// The cancel records are in the commitlog, not yet checkpointed
		// (no time has passed): a crash now leaves them to route again.
		crashed := crashCopy(t, dir)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		e = openEngine(t, dir, sink, nil)
		checkCancels(t, "after a restart", e, again)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		e = openEngine(t, crashed, &recSink{}, nil)
		checkCancels(t, "after a crash", e, again)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		e = openEngine(t, dir, sink, nil)
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		checkDeliveries(t, sink.snapshot(), []message.ID{fired, keep}, 0)
		e.Close()
	})
}

// heldSink holds every Deliver call until release is closed, and says it
// holds the IDs in has (DeliveryChecker), as the queue can for messages an
// earlier run handed it without recording them done.
type heldSink struct {
	gateSink
	has map[message.ID]bool
}

func (s *heldSink) Delivered(_ context.Context, id message.ID) (bool, error) { return s.has[id], nil }

// TestCancelDeliveredBeforeCrash: messages handed to the sink whose
// done-records a crash lost are delivered again after the restart, so a
// Cancel must not answer Cancelled for them (I7), also while their bucket
// is not loaded yet (an overdue bucket before it still drains). A sink
// that can tell (DeliveryChecker) is asked; with one that cannot, every
// message due by the restart answers AlreadyDone until delivered again.
func TestCancelDeliveredBeforeCrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		gate := &gateSink{release: make(chan struct{})}
		e := openEngine(t, dir, gate, nil)
		// Buckets are 10 s from the bubble's start (a whole minute).
		first := schedule(t, e, "t", 5*time.Second, "first")    // bucket 0
		held := schedule(t, e, "t", 14*time.Second, "held")     // bucket 1: the sink keeps it
		notHeld := schedule(t, e, "t", 15*time.Second, "lost")  // bucket 1: the sink lost it
		future := schedule(t, e, "t", 18*time.Second, "future") // bucket 1, not due at the crash
		time.Sleep(16 * time.Second)
		synctest.Wait()
		if st := e.Stats(); st.Inflight != 3 {
			t.Fatalf("in flight %d, want 3 (first, held, lost: all in the sink)", st.Inflight)
		}
		crashed, crashed2 := crashCopy(t, dir), crashCopy(t, dir)
		close(gate.release)
		e.Close()

		// After the restart bucket 0 is overdue and first is in flight
		// again (the sink holds it): bucket 1 waits for it to drain.
		sink := &heldSink{gateSink: gateSink{release: make(chan struct{})}, has: map[message.ID]bool{first: true, held: true}}
		// Not Ready until bucket 1 has loaded, after first is confirmed.
		e2 := openNotReady(t, crashed, sink)
		if st := e2.Stats(); st.Loaded != 1 || st.Inflight != 1 {
			t.Fatalf("after the crash: %d buckets loaded, %d in flight; want 1 and 1 (bucket 1 waits)", st.Loaded, st.Inflight)
		}
		checkCancels(t, "with a sink that can tell", e2, []cancelCase{
			{"in_flight_again", first, AlreadyDone},
			{"held_by_the_sink", held, AlreadyDone},
			{"lost_by_the_sink", notHeld, Cancelled},
			{"due_after_the_restart", future, Cancelled},
		})
		close(sink.release)
		e2.Close()

		gate3 := &gateSink{release: make(chan struct{})}
		e3 := openNotReady(t, crashed2, gate3)
		checkCancels(t, "with a sink that cannot tell", e3, []cancelCase{
			{"held_unknown", held, AlreadyDone},
			{"lost_unknown", notHeld, AlreadyDone},
			{"due_after_the_restart", future, Cancelled},
		})
		close(gate3.release)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		checkDeliveries(t, gate3.snapshot(), []message.ID{first, held, notHeld}, time.Minute)
		e3.Close()
	})
}

// TestPendingDropsAfterCancel: Stats' Pending and PendingByBucket leave out
// the cancelled entries that stay in the wheel until their deadline, and
// do not go below zero once those deadlines pass.
func TestPendingDropsAfterCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &recSink{}
		e := openEngine(t, t.TempDir(), sink, nil)
		a := schedule(t, e, "t", 5*time.Second, "a")
		schedule(t, e, "t", 6*time.Second, "b")
		far := schedule(t, e, "t", time.Hour, "far")
		synctest.Wait()
		pending := func() (int64, int64) {
			synctest.Wait()
			var sum int64
			for _, n := range e.PendingByBucket() {
				sum += n
			}
			return e.Stats().Pending, sum
		}
		if p, s := pending(); p != 2 || s != 2 {
			t.Fatalf("before the cancels: Pending %d, PendingByBucket %d; want 2, 2", p, s)
		}
		for _, id := range []message.ID{a, far} {
			if r, err := e.Cancel(context.Background(), id); err != nil || r != Cancelled {
				t.Fatalf("Cancel %v = %v, %v", id, r, err)
			}
		}
		time.Sleep(time.Millisecond) // one pass of the driver's loop after the cancels
		if p, s := pending(); p != 1 || s != 1 {
			t.Errorf("after cancelling one loaded and one unloaded: Pending %d, PendingByBucket %d; want 1, 1", p, s)
		}
		time.Sleep(10 * time.Second)
		if p, s := pending(); p != 0 || s != 0 {
			t.Errorf("after both deadlines: Pending %d, PendingByBucket %d; want 0, 0", p, s)
		}
		if n := len(sink.snapshot()); n != 1 {
			t.Errorf("%d delivered, want 1", n)
		}
		e.Close()
	})
}

// TestSecondCancelWaitsForTheFirst: a Cancel that arrives while another
// Cancel of the same message is appending its record takes that one's
// outcome: AlreadyCancelled once it is durable; if its append fails, its
// own cancel (I7: never "cancelled before" for a message that is then
// delivered).
func TestSecondCancelWaitsForTheFirst(t *testing.T) {
	for _, tc := range []struct {
		name       string
		firstFails bool
		wantFirst  CancelResult
		wantSecond CancelResult
	}{
		{"first_durable", false, Cancelled, AlreadyCancelled},
		{"first_fails", true, Unknown, Cancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sink := &recSink{}
				e := openEngine(t, t.TempDir(), sink, nil)
				id := schedule(t, e, "c", 5*time.Second, "x")
				release := make(chan struct{})
				real := e.appendCancel
				var calls int
				e.appendCancel = func(offs []int64, recs ...commitlog.Record) ([]int64, error) {
					calls++ // Cancels append one at a time here: the second waits
					if calls == 1 {
						<-release
						if tc.firstFails {
							return offs, errors.New("injected: disk gone")
						}
					}
					return real(offs, recs...)
				}
				results := make([]CancelResult, 2)
				var wg sync.WaitGroup
				for i := range 2 {
					wg.Go(func() { results[i], _ = e.Cancel(context.Background(), id) })
					synctest.Wait() // the first is in its append, the second waits for it
				}
				close(release)
				wg.Wait()
				if results[0] != tc.wantFirst || results[1] != tc.wantSecond {
					t.Errorf("answers %v, %v; want %v, %v", results[0], results[1], tc.wantFirst, tc.wantSecond)
				}
				time.Sleep(10 * time.Second)
				synctest.Wait()
				if got := sink.snapshot(); len(got) != 0 {
					t.Errorf("delivered %d, want none: a Cancel answered it cancelled", len(got))
				}
				e.Close()
			})
		})
	}
}

// deliveredThenRetiring schedules a message on a fresh engine, lets it be
// delivered, and sets e.afterFind to wait (in synctest time) until the
// message's bucket has retired and the driver has unloaded it. *retired
// says whether it did, within an hour. Run inside a synctest bubble.
func deliveredThenRetiring(t *testing.T) (e *Engine, id message.ID, retired *bool) {
	t.Helper()
	sink := &recSink{}
	e = openEngine(t, t.TempDir(), sink, nil)
	id = schedule(t, e, "t", time.Second, "m")
	time.Sleep(2 * time.Second)
	synctest.Wait()
	if got := deliveredAt(sink); len(got[id]) != 1 {
		t.Fatalf("delivered %d times before the test's call", len(got[id]))
	}
	retired = new(bool)
	e.afterFind = func() {
		for range 3600 {
			if _, ok := e.reput.FindSegment(id.DeliverAt); !ok {
				*retired = true
				break
			}
			time.Sleep(time.Second)
		}
		synctest.Wait() // the driver has unloaded the retired bucket
	}
	return e, id, retired
}

// A Cancel that finds a delivered message's segment just before its bucket
// retires, and decides after the retirement unloaded it, does not answer
// cancelled: the dispatch log that said delivered is gone with the bucket
// (the crash harness caught this once reput checkpointed sooner and
// buckets retired sooner after their end).
func TestCancelRacesRetirement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, id, retired := deliveredThenRetiring(t)
		defer e.Close()
		res, err := e.Cancel(t.Context(), id)
		if !*retired {
			t.Fatal("the bucket did not retire within an hour of its end")
		}
		if err != nil || res == Cancelled {
			t.Fatalf("Cancel of a delivered message whose bucket retired meanwhile = %v, %v; want not cancelled", res, err)
		}
	})
}

// Get of a delivered message whose bucket retires between reading its
// entry and reading its state does not say pending: the dispatch log that
// said delivered is gone, and it answers as for a retired bucket.
func TestGetRacesRetirement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e, id, retired := deliveredThenRetiring(t)
		defer e.Close()
		hook := e.afterFind
		e.afterFind = nil
		if f, err := e.Get(t.Context(), id); err != nil || f.State != StateDelivered {
			t.Fatalf("Get of the delivered message = %v, %v", f.State, err)
		}
		e.afterFind = hook
		f, err := e.Get(t.Context(), id)
		if !*retired {
			t.Fatal("the bucket did not retire within an hour of its end")
		}
		if err != nil || f.State == StatePending {
			t.Fatalf("Get of a delivered message whose bucket retired meanwhile = %v, %v; want not pending", f.State, err)
		}
	})
}

// TestGetAnswersEachFate: Get says what became of a message in a loaded and
// in an unloaded bucket, right after the Cancel or Reschedule that changed
// it (before reput checkpoints it), after a clean restart and after a
// crash that left those records to route again; it reads no commitlog.
func TestGetAnswersEachFate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		sink := &recSink{}
		e := openEngine(t, dir, sink, nil)
		ctx := context.Background()
		near := schedule(t, e, "t", 5*time.Second, "near")
		far := schedule(t, e, "t", time.Hour, "far")
		nearMoved := schedule(t, e, "t", 6*time.Second, "near-moved")
		farMoved := schedule(t, e, "t", 2*time.Hour, "far-moved")
		fired := schedule(t, e, "t", time.Second, "fired")
		nearKept := schedule(t, e, "t", 7*time.Second, "near-kept")
		farKept := schedule(t, e, "t", 3*time.Hour, "far-kept")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		checkCancels(t, "cancel", e, []cancelCase{{"loaded", near, Cancelled}, {"unloaded", far, Cancelled}})
		for _, id := range []message.ID{nearMoved, farMoved} {
			if res, _, err := e.Reschedule(ctx, id, time.Now().Add(4*time.Hour)); err != nil || res != Rescheduled {
				t.Fatalf("Reschedule(%v) = %v, %v", id, res, err)
			}
		}
		want := map[message.ID]State{near: StateCancelled, far: StateCancelled, nearMoved: StateRescheduled,
			farMoved: StateRescheduled, fired: StateDelivered, nearKept: StatePending, farKept: StatePending}
		names := map[message.ID]string{near: "near", far: "far", nearMoved: "near-moved", farMoved: "far-moved",
			fired: "fired", nearKept: "near-kept", farKept: "far-kept"}
		check := func(when string, e *Engine) {
			t.Helper()
			for id, st := range want {
				f, err := e.Get(ctx, id)
				if err != nil || f.State != st {
					t.Errorf("%s: Get(%s) = %v, %v; want %v", when, names[id], f.State, err, st)
				}
				if err == nil && string(f.Message.Body) != names[id] {
					t.Errorf("%s: Get(%s) body %q", when, names[id], f.Message.Body)
				}
			}
		}
		check("same run", e)
		crashed := crashCopy(t, dir)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		e = openEngine(t, dir, sink, nil)
		check("after a restart", e)
		e.Close()
		e = openEngine(t, crashed, &recSink{}, nil)
		check("after a crash", e)
		e.Close()
	})
}
