package server

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

type ctxKey struct{}

// TestLazyDeadline holds lazyDeadline to what context.WithDeadline does:
// its deadline, its error before and after the deadline, Done closing at
// the deadline whether asked for before or after it, the parent's
// cancellation, cancel, values, and contexts derived from it.
func TestLazyDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent := context.WithValue(context.Background(), ctxKey{}, "v")
		at := time.Now().Add(time.Second)
		closed := func(ch <-chan struct{}) bool {
			select {
			case <-ch:
				return true
			default:
				return false
			}
		}

		// Asked for Done before the deadline: it closes at the deadline.
		d := newLazyDeadline(parent, at)
		if got, ok := d.Deadline(); !ok || !got.Equal(at) {
			t.Fatalf("Deadline() = %v, %v; want %v, true", got, ok, at)
		}
		if d.Err() != nil || d.Value(ctxKey{}) != "v" {
			t.Fatalf("before the deadline: Err %v, Value %v", d.Err(), d.Value(ctxKey{}))
		}
		done := d.Done()
		child, stop := context.WithCancel(d)
		defer stop()
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		if closed(done) || d.Err() != nil || child.Err() != nil {
			t.Fatal("closed before the deadline")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if !closed(done) || !errors.Is(d.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(d), context.DeadlineExceeded) {
			t.Fatalf("at the deadline: closed %v, Err %v, Cause %v", closed(done), d.Err(), context.Cause(d))
		}
		if !errors.Is(child.Err(), context.DeadlineExceeded) || d.Value(ctxKey{}) != "v" {
			t.Fatalf("child Err %v, Value %v", child.Err(), d.Value(ctxKey{}))
		}
		d.cancel()
		if !errors.Is(d.Err(), context.DeadlineExceeded) {
			t.Fatalf("cancel after the deadline changed Err to %v", d.Err())
		}

		// Never asked for Done: Err still says when the deadline passed,
		// and Done asked for late is closed at once.
		d = newLazyDeadline(parent, time.Now().Add(time.Second))
		time.Sleep(2 * time.Second)
		if !errors.Is(d.Err(), context.DeadlineExceeded) || !closed(d.Done()) || !errors.Is(d.Err(), context.DeadlineExceeded) {
			t.Fatalf("after the deadline, unasked: Err %v", d.Err())
		}
		d.cancel()

		// The parent's cancellation, with and without Done asked for.
		for _, ask := range []bool{false, true} {
			p, cancelParent := context.WithCancel(parent)
			d = newLazyDeadline(p, time.Now().Add(time.Hour))
			if ask {
				d.Done()
			}
			cancelParent()
			synctest.Wait()
			if !errors.Is(d.Err(), context.Canceled) || !closed(d.Done()) {
				t.Fatalf("ask %v: after the parent's cancel: Err %v, closed %v", ask, d.Err(), closed(d.Done()))
			}
			d.cancel()
		}

		// cancel before anything asked: cancelled, values kept.
		d = newLazyDeadline(parent, time.Now().Add(time.Hour))
		d.cancel()
		d.cancel() // twice is fine, as for a CancelFunc
		if !errors.Is(d.Err(), context.Canceled) || !closed(d.Done()) || d.Value(ctxKey{}) != "v" {
			t.Fatalf("after cancel: Err %v, closed %v, Value %v", d.Err(), closed(d.Done()), d.Value(ctxKey{}))
		}
	})
}
