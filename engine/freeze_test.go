package engine

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

// TestFreeze: a frozen message is never delivered while frozen (in a
// loaded and an unloaded bucket, and across a crash); thaw makes it due
// the delay it had left from the thaw, under a new ID that the first ID
// and the key name; it is delivered once, then; the answers for a message
// frozen twice, thawed twice, or replaced are truthful (another message
// frozen throughout keeps their bucket).
func TestFreeze(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
		crash bool
	}{
		{"unloaded_bucket", 5 * time.Minute, false},
		{"loaded_bucket", 3 * time.Second, false},
		{"across_a_crash", 2 * time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				dir := t.TempDir()
				sink := &recSink{}
				e := openEngine(t, dir, sink, nil)
				ctx := t.Context()
				at := time.Now().Add(tc.delay)
				id, err := e.Schedule(ctx, Request{Topic: "t", At: at, Body: []byte("b"), IdempotencyKey: "k1"})
				if err != nil {
					t.Fatal(err)
				}
				// Frozen throughout: the FrozenAt bucket keeps an entry
				// not done, so it does not retire (TestFrozenBucketRetires)
				// and the thawed entry's answers are read from it.
				stays := schedule(t, e, "t", tc.delay, "stays")
				if r, _, _, err := e.Freeze(ctx, stays); err != nil || r != Frozen {
					t.Fatalf("Freeze(stays) = %v, %v", r, err)
				}
				time.Sleep(time.Second)
				res, fid, left, err := e.Freeze(ctx, id)
				if err != nil || res != Frozen {
					t.Fatalf("Freeze = %v, %v", res, err)
				}
				if want := tc.delay - time.Second; left != want || fid.DeliverAt != FrozenAt {
					t.Fatalf("Freeze left %v at %v; want %v at FrozenAt", left, fid.Time(), want)
				}
				c, err := e.Current(ctx, id)
				if err != nil || c.ID != fid || c.State != StatePending {
					t.Fatalf("Current(first ID) = %v %v, %v; want %v pending", c.ID, c.State, err, fid)
				}
				if ms, ok := message.FrozenRemaining(c.Message.Headers); !ok || ms != left.Milliseconds() {
					t.Fatalf("frozen remaining %d, %v; want %d", ms, ok, left.Milliseconds())
				}
				if got, ok, err := e.Lookup(ctx, "t", "k1"); err != nil || !ok || got != fid {
					t.Fatalf("Lookup(k1) = %v, %v, %v; want %v", got, ok, err, fid)
				}
				if r, _, _, err := e.Freeze(ctx, fid); r != AlreadyFrozen || err != nil {
					t.Fatalf("Freeze of a frozen message = %v, %v; want %v", r, err, AlreadyFrozen)
				}
				if r, _, _, err := e.Freeze(ctx, id); r != FreezeCancelled || err != nil {
					t.Fatalf("Freeze of the replaced ID = %v, %v; want %v", r, err, FreezeCancelled)
				}
				if tc.crash {
					copied := crashCopy(t, dir)
					e.Close()
					dir = copied
					sink = &recSink{}
					e = openEngine(t, dir, sink, nil)
				}
				// Well past its old time: nothing is delivered.
				time.Sleep(time.Until(at) + time.Minute)
				synctest.Wait()
				if gots := sink.snapshot(); len(gots) != 0 {
					t.Fatalf("delivered %+v while frozen", gots)
				}
				thawedAt := time.Now()
				res, tid, err := e.Thaw(ctx, fid)
				if err != nil || res != Thawed {
					t.Fatalf("Thaw = %v, %v", res, err)
				}
				if want := thawedAt.Add(left).UnixMilli(); tid.DeliverAt != want {
					t.Fatalf("thawed to %v; want %v (its remaining %v from the thaw)", tid.Time(), time.UnixMilli(want), left)
				}
				c, err = e.Current(ctx, id)
				if err != nil || c.ID != tid || c.State != StatePending {
					t.Fatalf("Current(first ID) after Thaw = %v %v, %v; want %v pending", c.ID, c.State, err, tid)
				}
				if _, ok := message.FrozenRemaining(c.Message.Headers); ok || message.HeaderValue(c.Message.Headers, IdempotencyHeader) != "k1" {
					t.Fatalf("thawed headers %v: want the key and no %s", c.Message.Headers, message.FrozenHeader)
				}
				if r, _, err := e.Thaw(ctx, tid); r != NotFrozen || err != nil {
					t.Fatalf("Thaw of a thawed message = %v, %v; want %v", r, err, NotFrozen)
				}
				if r, _, err := e.Thaw(ctx, fid); r != FreezeCancelled || err != nil {
					t.Fatalf("Thaw of the frozen entry again = %v, %v; want %v", r, err, FreezeCancelled)
				}
				// Just past its time (its bucket not over, so not retired).
				time.Sleep(time.Until(tid.Time()) + 50*time.Millisecond)
				synctest.Wait()
				if r, _, _, _ := e.Freeze(ctx, tid); r != FreezeTooLate {
					t.Errorf("Freeze of a delivered message = %v; want %v", r, FreezeTooLate)
				}
				time.Sleep(10 * time.Second)
				synctest.Wait()
				gots := sink.snapshot()
				if len(gots) != 1 || gots[0].id != tid {
					t.Fatalf("delivered %+v; want only %v", gots, tid)
				}
				if gots[0].at.Before(tid.Time()) {
					t.Fatalf("delivered at %v, before its thawed time %v", gots[0].at, tid.Time())
				}
				e.Close()
			})
		})
	}
}

// TestFreezeThenCancelOrReschedule: a frozen message can be cancelled
// (never delivered) or rescheduled (thawed to the new time, delivered
// then without the frozen mark); an overdue message not yet fired freezes
// with no delay left.
func TestFreezeThenCancelOrReschedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &recSink{}
		e := openEngine(t, t.TempDir(), sink, nil)
		ctx := t.Context()
		cancelled := schedule(t, e, "t", time.Minute, "cancelled")
		moved := schedule(t, e, "t", time.Minute, "moved")
		_, fc, _, err := e.Freeze(ctx, cancelled)
		if err != nil {
			t.Fatal(err)
		}
		_, fm, _, err := e.Freeze(ctx, moved)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := e.Cancel(ctx, fc); r != Cancelled || err != nil {
			t.Fatalf("Cancel of a frozen message = %v, %v", r, err)
		}
		if r, _, err := e.Thaw(ctx, fc); r != FreezeCancelled || err != nil {
			t.Fatalf("Thaw of a cancelled frozen message = %v, %v; want %v", r, err, FreezeCancelled)
		}
		res, rid, err := e.Reschedule(ctx, fm, time.Now().Add(5*time.Second))
		if err != nil || res != Rescheduled {
			t.Fatalf("Reschedule of a frozen message = %v, %v", res, err)
		}
		f, err := e.Get(ctx, rid)
		if _, frozen := message.FrozenRemaining(f.Message.Headers); err != nil || frozen {
			t.Fatalf("rescheduled frozen message: headers %v, %v; want it thawed", f.Message.Headers, err)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if gots := sink.snapshot(); len(gots) != 1 || gots[0].id != rid {
			t.Fatalf("delivered %+v; want only the rescheduled %v", gots, rid)
		}
		e.Close()
	})
}

// TestFreezeRefuses: a message with every header slot used cannot carry
// its remaining delay and is left pending as it was.
func TestFreezeRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &recSink{}
		e := openEngine(t, t.TempDir(), sink, nil)
		ctx := t.Context()
		hs := make([]message.Header, message.MaxHeaders)
		for i := range hs {
			hs[i] = message.Header{Key: []byte{'h', byte('a' + i/26), byte('a' + i%26)}}
		}
		hs = append(hs, message.Header{Key: []byte(message.TraceParentHeader), Value: []byte("x")}, message.Header{Key: []byte(message.TraceStateHeader), Value: []byte("y")})
		id, err := e.Schedule(ctx, Request{Topic: "t", Delay: 5 * time.Second, Headers: hs})
		if err != nil {
			t.Fatal(err)
		}
		if r, _, _, err := e.Freeze(ctx, id); err == nil || r != FreezeUnknown {
			t.Fatalf("Freeze of a message with %d headers = %v, %v; want an error", len(hs), r, err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if gots := sink.snapshot(); len(gots) != 1 || gots[0].id != id {
			t.Fatalf("delivered %+v; want %v", gots, id)
		}
		e.Close()
	})
}
