package engine

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/catalog"
	"github.com/hourglassmq/hourglass/message"
)

// deliveredAt returns when the sink got each message, by ID.
func deliveredAt(s *recSink) map[message.ID][]time.Time {
	out := map[message.ID][]time.Time{}
	for _, g := range s.snapshot() {
		out[g.id] = append(out[g.id], g.at)
	}
	return out
}

// TestReschedule: a rescheduled message fires once, at its new time and
// under its new ID, never at the old time, whether its bucket was loaded
// or not, earlier or later, and across a restart; the old ID says
// rescheduled and names the new one; a second Reschedule of the old ID,
// or of a delivered one, changes nothing.
func TestReschedule(t *testing.T) {
	for _, tc := range []struct {
		name    string
		from    time.Duration // first delivery time, from start
		to      time.Duration // the new one (negative: now)
		restart bool
	}{
		{"unloaded_bucket_earlier", 5 * time.Minute, 30 * time.Second, false},
		{"unloaded_bucket_later", 5 * time.Minute, 20 * time.Minute, false},
		{"loaded_bucket_later", 3 * time.Second, 40 * time.Second, false},
		{"promote_to_now", 10 * time.Minute, -1, false},
		{"across_a_restart", 2 * time.Minute, 7 * time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				dir := t.TempDir()
				sink := &recSink{}
				e := openEngine(t, dir, sink, nil)
				start := time.Now()
				ctx := t.Context()
				id, err := e.Schedule(ctx, Request{Topic: "t", At: start.Add(tc.from), Body: []byte("x"), IdempotencyKey: "order-1"})
				if err != nil {
					t.Fatal(err)
				}
				other := schedule(t, e, "t", tc.from, "other")
				time.Sleep(time.Second)
				to := start.Add(tc.to)
				if tc.to < 0 {
					to = time.Time{}
				}
				res, nid, err := e.Reschedule(ctx, id, to)
				if err != nil || res != Rescheduled {
					t.Fatalf("Reschedule = %v, %v", res, err)
				}
				if tc.to > 0 && nid.DeliverAt != to.UnixMilli() || nid == id {
					t.Fatalf("new ID %v for %v", nid, to)
				}
				if got, ok, err := e.Lookup(ctx, "t", "order-1"); err != nil || !ok || got != nid {
					t.Fatalf("Lookup(order-1) = %v, %v, %v; want the replacement %v", got, ok, err, nid)
				}
				f, err := e.Get(ctx, id)
				if err != nil || f.State != StateRescheduled {
					t.Fatalf("Get(old) = %v, %v", f.State, err)
				}
				// Promoted to now, the replacement may be firing already.
				c0, err0 := e.Current(ctx, id)
				promoted := tc.to < 0 && (c0.State == StateDelivering || c0.State == StateDelivered)
				if c := c0; err0 != nil || c.ID != nid || c.State != StatePending && !promoted || c.Message.Origin != id {
					t.Fatalf("Current(old) = %v %v (origin %v), %v; want %v pending", c.ID, c.State, c.Message.Origin, err0, nid)
				}
				if r, _, _ := e.Reschedule(ctx, id, start.Add(time.Hour)); r != RescheduleCancelled {
					t.Fatalf("second Reschedule of the old ID = %v", r)
				}
				if r, _ := e.Cancel(ctx, id); r != AlreadyCancelled {
					t.Fatalf("Cancel of the old ID = %v", r)
				}
				if tc.restart {
					if err := e.Close(); err != nil {
						t.Fatal(err)
					}
					e = openEngine(t, dir, sink, nil)
					if f, err := e.Get(ctx, id); err != nil || f.State != StateRescheduled {
						t.Fatalf("Get(old) after a restart = %v, %v", f.State, err)
					}
					if c, err := e.Current(ctx, id); err != nil || c.ID != nid {
						t.Fatalf("Current(old) after a restart = %v, %v; want %v", c.ID, err, nid)
					}
					if got, ok, err := e.Lookup(ctx, "t", "order-1"); err != nil || !ok || got != nid {
						t.Fatalf("Lookup after a restart = %v, %v, %v", got, ok, err)
					}
				}
				time.Sleep(max(tc.from, tc.to) + 2*time.Minute)
				synctest.Wait()
				got := deliveredAt(sink)
				if len(got[id]) != 0 {
					t.Errorf("the old ID was delivered at %v", got[id])
				}
				if len(got[nid]) != 1 || got[nid][0].Before(time.UnixMilli(nid.DeliverAt)) {
					t.Errorf("the replacement was delivered at %v, want once, not before %v", got[nid], time.UnixMilli(nid.DeliverAt))
				}
				if len(got[other]) != 1 {
					t.Errorf("the other message was delivered %d times", len(got[other]))
				}
				if r, _, _ := e.Reschedule(ctx, nid, time.Now().Add(time.Hour)); r != RescheduleTooLate && r != RescheduleUnknown {
					t.Errorf("Reschedule of the delivered replacement = %v (its bucket may be retired: unknown)", r)
				}
				if r, _, _ := e.Reschedule(ctx, message.ID{DeliverAt: 5, Seq: 0}, time.Now()); r != RescheduleUnknown {
					t.Errorf("Reschedule of an unknown ID = %v", r)
				}
				e.Close()
			})
		})
	}
}

// A Reschedule past the maximum delay is refused and changes nothing.
func TestRescheduleTooFar(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &recSink{}
		e := openEngine(t, t.TempDir(), sink, func(o *Options) { o.MaxDelay = time.Hour })
		defer e.Close()
		id := schedule(t, e, "t", time.Minute, "x")
		if _, _, err := e.Reschedule(t.Context(), id, time.Now().Add(2*time.Hour)); err == nil {
			t.Fatal("a reschedule 2h ahead with a 1h maximum was accepted")
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if got := deliveredAt(sink); len(got[id]) != 1 {
			t.Fatalf("the message was delivered %d times after a refused Reschedule", len(got[id]))
		}
	})
}

// Keys are found for the message's whole life, well past the idempotency
// window and across restarts, and are swept once their bucket is gone.
func TestLookupWholeLife(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		sink := &recSink{}
		mod := func(o *Options) { o.IdempotencyWindow = time.Second }
		e := openEngine(t, dir, sink, mod)
		ctx := t.Context()
		id, err := e.Schedule(ctx, Request{Topic: "t", Delay: 2 * time.Hour, IdempotencyKey: "k"})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour)
		e.Close()
		e = openEngine(t, dir, sink, mod)
		defer func() { e.Close() }()
		if got, ok, err := e.Lookup(ctx, "t", "k"); err != nil || !ok || got != id {
			t.Fatalf("Lookup an hour later, after a restart = %v, %v, %v", got, ok, err)
		}
		if _, ok, _ := e.Lookup(ctx, "u", "k"); ok {
			t.Fatal("a key of another topic was found")
		}
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		// Delivered: its bucket retires, and the key is gone with it.
		if got := deliveredAt(sink); len(got[id]) != 1 {
			t.Fatalf("delivered %d times", len(got[id]))
		}
		if _, ok, err := e.Lookup(ctx, "t", "k"); ok || err != nil {
			t.Fatalf("the key of a delivered, retired message is still found (%v)", err)
		}
	})
}

// Control records reach OnControl in order, land in the catalog's
// settings, and survive a restart.
func TestControl(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		var mu sync.Mutex
		var seen []string
		mod := func(o *Options) {
			o.OnControl = func(c message.Control) {
				mu.Lock()
				seen = append(seen, string(c.Name)+"="+string(c.Value))
				mu.Unlock()
			}
		}
		e := openEngine(t, dir, &recSink{}, mod)
		ctx := context.Background()
		for _, c := range []message.Control{
			{Kind: message.ControlPolicy, Name: []byte("a"), Value: []byte(`{"paused":true}`)},
			{Kind: message.ControlPolicy, Name: []byte("b"), Value: []byte(`{"rate":1}`)},
			{Kind: message.ControlPolicy, Name: []byte("a"), Value: nil},
			{Kind: message.ControlCalendar, Name: []byte("office"), Value: []byte(`{"mon":["09:00-17:00"]}`)},
			{Kind: message.ControlCalendar, Name: []byte("gone"), Value: []byte(`{"tue":["09:00-17:00"]}`)},
			{Kind: message.ControlCalendar, Name: []byte("office"), Value: []byte(`{"mon":["08:00-16:00"]}`)},
			{Kind: message.ControlCalendar, Name: []byte("gone"), Value: nil},
		} {
			if err := e.Control(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		mu.Lock()
		if want := []string{`a={"paused":true}`, `b={"rate":1}`, `a=`, `office={"mon":["09:00-17:00"]}`, `gone={"tue":["09:00-17:00"]}`,
			`office={"mon":["08:00-16:00"]}`, `gone=`}; !slices.Equal(seen, want) {
			t.Errorf("OnControl saw %v, want %v", seen, want)
		}
		mu.Unlock()
		e.Close()
		e = openEngine(t, dir, &recSink{}, nil)
		defer e.Close()
		got, err := e.Settings(catalog.Policies)
		if err != nil || len(got) != 1 || string(got["b"]) != `{"rate":1}` {
			t.Fatalf("Settings after a restart = %v, %v", got, err)
		}
		// A calendar's record replaces the one before; an empty one
		// deletes it.
		got, err = e.Settings(catalog.Calendars)
		if err != nil || len(got) != 1 || string(got["office"]) != `{"mon":["08:00-16:00"]}` {
			t.Fatalf("calendars after a restart = %q, %v", got, err)
		}
	})
}

// TestCurrentFollowsRetries: the first ID names a message through its
// retries (a Request with an Origin, as the queue's Nack with a delay
// makes) and reschedules, also after a restart, and after the upgrade of
// a catalog written before origins were mapped (version 0: no Moved entry
// for retries), which keeps a copy of the file it changes.
func TestCurrentFollowsRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		e := openEngine(t, dir, &recSink{}, nil)
		ctx := t.Context()
		first := schedule(t, e, "t", time.Second, "x")
		retry := func(after time.Duration, attempt uint32) message.ID {
			t.Helper()
			id, err := e.Schedule(ctx, Request{Topic: "t", Delay: after, Body: []byte("x"), Attempt: attempt, Origin: first})
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
		time.Sleep(2 * time.Second) // first is delivered, then retried
		synctest.Wait()
		second := retry(time.Second, 1)
		time.Sleep(2 * time.Second) // and so is the retry
		synctest.Wait()
		third := retry(3*time.Hour, 2)
		_, moved, err := e.Reschedule(ctx, third, time.Now().Add(4*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		keyedAt := time.Now()
		keyedID, err := e.Schedule(ctx, Request{Topic: "t", Delay: time.Hour, IdempotencyKey: "kk"})
		if err != nil {
			t.Fatal(err)
		}
		check := func(when string, e *Engine) {
			t.Helper()
			for _, id := range []message.ID{first, second, third, moved} {
				c, err := e.Current(ctx, id)
				if err != nil || c.ID != moved || c.State != StatePending || c.Message.Attempt != 2 {
					t.Errorf("%s: Current(%v) = %v %v attempt %d, %v; want %v pending attempt 2", when, id, c.ID, c.State, c.Message.Attempt, err, moved)
				}
			}
		}
		check("same run", e)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		// What a build before origins were mapped left: no version, and
		// Moved only from a rescheduled ID to its replacement.
		c, err := catalog.Open(filepath.Join(dir, "schedule", catalog.FileName))
		if err != nil {
			t.Fatal(err)
		}
		c.Delete(catalog.Meta, []byte("version"))
		c.Delete(catalog.Moved, catalog.EncodeID(first))
		c.Put(catalog.Moved, catalog.EncodeID(third), catalog.EncodeID(moved))
		c.Put(catalog.Keys, catalog.KeyOf("t", "kk"), catalog.EncodeID(keyedID)) // no arrival time
		if err := c.Commit(); err != nil {
			t.Fatal(err)
		}
		c.Close()
		e = openEngine(t, dir, &recSink{}, nil)
		check("after the upgrade", e)
		hits := make([]catalog.KeyHit, 1)
		if err := e.cat.LookupKeys([]string{string(catalog.KeyOf("t", "kk"))}, hits); err != nil || hits[0].ID != keyedID || hits[0].At != keyedAt.UnixMilli() {
			t.Errorf("the key after the upgrade: %+v, %v; want %v arrived at %d", hits[0], err, keyedID, keyedAt.UnixMilli())
		}
		copies, _ := filepath.Glob(filepath.Join(dir, UpgradeDir, "*", "schedule", catalog.FileName))
		if len(copies) != 1 {
			t.Errorf("copies of the catalog kept by the upgrade: %v; want one", copies)
		}
		e.Close()
		e = openEngine(t, dir, &recSink{}, nil)
		check("after a restart", e)
		if again, _ := filepath.Glob(filepath.Join(dir, UpgradeDir, "*")); len(again) != 1 {
			t.Errorf("the upgrade ran again: %v", again)
		}
		e.Close()
	})
}
