package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

// TestEdit: an edited message is delivered once, at its time, with the
// new content only, in a loaded and an unloaded bucket and across a crash;
// the first ID and the key name the replacement; the headers the server
// set are kept; a second Edit of the old ID, or an Edit of a delivered
// message, changes nothing.
func TestEdit(t *testing.T) {
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
				id, err := e.Schedule(ctx, Request{Topic: "t", At: at, Body: []byte("old"), IdempotencyKey: "k1",
					Headers: []message.Header{{Key: []byte("a"), Value: []byte("1")}}})
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Second)
				res, nid, err := e.Edit(ctx, id, Edit{Body: []byte("new"), SetBody: true,
					Headers: []message.Header{{Key: []byte("b"), Value: []byte("2")}}, SetHeaders: true})
				if err != nil || res != Edited {
					t.Fatalf("Edit = %v, %v", res, err)
				}
				if nid.DeliverAt != id.DeliverAt || nid == id {
					t.Fatalf("replacement %v of %v: want the same time under a new ID", nid, id)
				}
				c, err := e.Current(ctx, id)
				if err != nil || c.ID != nid || c.State != StatePending || string(c.Message.Body) != "new" {
					t.Fatalf("Current(first ID) = %v %v %q, %v; want %v pending with the new body", c.ID, c.State, c.Message.Body, err, nid)
				}
				if v := message.HeaderValue(c.Message.Headers, "b"); v != "2" || message.HeaderValue(c.Message.Headers, "a") != "" {
					t.Fatalf("headers %v: want b=2 and no a", c.Message.Headers)
				}
				if message.HeaderValue(c.Message.Headers, IdempotencyHeader) != "k1" {
					t.Fatalf("headers %v: the idempotency key is gone", c.Message.Headers)
				}
				if got, ok, err := e.Lookup(ctx, "t", "k1"); err != nil || !ok || got != nid {
					t.Fatalf("Lookup(k1) = %v, %v, %v; want %v", got, ok, err, nid)
				}
				if r, _, _ := e.Edit(ctx, id, Edit{Body: []byte("again"), SetBody: true}); r != EditCancelled {
					t.Fatalf("Edit of the replaced ID = %v; want %v", r, EditCancelled)
				}
				if tc.crash {
					copied := crashCopy(t, dir)
					e.Close()
					dir = copied
					sink = &recSink{}
					e = openEngine(t, dir, sink, nil)
				}
				// Just past its time (its bucket not over, so not retired).
				time.Sleep(time.Until(at) + 50*time.Millisecond)
				synctest.Wait()
				if r, _, _ := e.Edit(ctx, nid, Edit{Body: []byte("late"), SetBody: true}); r != EditTooLate {
					t.Errorf("Edit of a delivered message = %v; want %v", r, EditTooLate)
				}
				time.Sleep(10 * time.Second)
				synctest.Wait()
				gots := sink.snapshot()
				if len(gots) != 1 || gots[0].id != nid || gots[0].body != "new" {
					t.Fatalf("delivered %+v; want only %v with the new body", gots, nid)
				}
				if gots[0].at.Before(at) {
					t.Fatalf("delivered at %v, before its time %v", gots[0].at, at)
				}
				e.Close()
			})
		})
	}
}

// TestEditRefuses: an edit that changes nothing, sets a server header or
// holds too many headers is refused and the message keeps its content.
func TestEditRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &recSink{}
		e := openEngine(t, t.TempDir(), sink, nil)
		ctx := t.Context()
		id := schedule(t, e, "t", 5*time.Second, "old")
		many := make([]message.Header, message.MaxHeaders+1)
		for i := range many {
			many[i] = message.Header{Key: fmt.Appendf(nil, "h%d", i)}
		}
		for _, ed := range []Edit{
			{},
			{Headers: []message.Header{{Key: []byte("Hourglass-Idempotency-Key"), Value: []byte("x")}}, SetHeaders: true},
			{Headers: many, SetHeaders: true},
		} {
			if r, _, err := e.Edit(ctx, id, ed); err == nil || r != EditUnknown {
				t.Errorf("Edit(%+v) = %v, %v; want an error", ed, r, err)
			}
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if gots := sink.snapshot(); len(gots) != 1 || gots[0].id != id || gots[0].body != "old" {
			t.Fatalf("delivered %+v; want %v with its own body", gots, id)
		}
		e.Close()
	})
}

// TestEditRacesFiring edits messages exactly as they come due: an Edited
// answer means the new content and only it is delivered, any other
// answer that the old content was (and the new never is).
func TestEditRacesFiring(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &recSink{}
		e := openEngine(t, t.TempDir(), sink, nil)
		var ids []message.ID
		for i := range 300 {
			ids = append(ids, schedule(t, e, "race", time.Second+time.Duration(i%7)*time.Millisecond, fmt.Sprint(i)))
		}
		time.Sleep(time.Second)
		answers := make([]EditResult, len(ids))
		nids := make([]message.ID, len(ids))
		var wg sync.WaitGroup
		for i, id := range ids {
			wg.Go(func() {
				r, nid, err := e.Edit(context.Background(), id, Edit{Body: fmt.Appendf(nil, "edited %d", i), SetBody: true})
				if err != nil {
					t.Error(err)
				}
				answers[i], nids[i] = r, nid
			})
		}
		wg.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()
		bodies := map[message.ID][]string{}
		for _, g := range sink.snapshot() {
			bodies[g.id] = append(bodies[g.id], g.body)
		}
		edited := 0
		for i, id := range ids {
			switch answers[i] {
			case Edited:
				edited++
				if len(bodies[id]) != 0 || len(bodies[nids[i]]) != 1 || bodies[nids[i]][0] != fmt.Sprintf("edited %d", i) {
					t.Fatalf("%v answered edited; delivered %q under it, %q under %v", id, bodies[id], bodies[nids[i]], nids[i])
				}
			case EditTooLate:
				if len(bodies[id]) != 1 || bodies[id][0] != fmt.Sprint(i) {
					t.Fatalf("%v answered %v; delivered %q", id, answers[i], bodies[id])
				}
			default:
				t.Fatalf("%v answered %v", id, answers[i])
			}
		}
		t.Logf("%d of %d edited, the rest too late", edited, len(ids))
		e.Close()
	})
}

// TestEditRacesCancel: an Edit and a Cancel of one message at once: one
// of them wins, and what is delivered agrees with both answers.
func TestEditRacesCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sink := &recSink{}
		e := openEngine(t, t.TempDir(), sink, nil)
		const n = 100
		ids := make([]message.ID, n)
		for i := range ids {
			ids[i] = schedule(t, e, "race", 5*time.Second, "old")
		}
		edits := make([]EditResult, n)
		nids := make([]message.ID, n)
		cancels := make([]CancelResult, n)
		var wg sync.WaitGroup
		for i, id := range ids {
			wg.Go(func() {
				var err error
				edits[i], nids[i], err = e.Edit(context.Background(), id, Edit{Body: []byte("new"), SetBody: true})
				if err != nil {
					t.Error(err)
				}
			})
			wg.Go(func() {
				var err error
				cancels[i], err = e.Cancel(context.Background(), id)
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()
		delivered := map[message.ID]string{}
		for _, g := range sink.snapshot() {
			delivered[g.id] = g.body
		}
		for i, id := range ids {
			switch {
			case edits[i] == Edited && cancels[i] == AlreadyCancelled:
				if _, ok := delivered[id]; ok || delivered[nids[i]] != "new" {
					t.Fatalf("%v edited first: delivered %q under it, %q under the replacement", id, delivered[id], delivered[nids[i]])
				}
			case cancels[i] == Cancelled && edits[i] == EditCancelled:
				if _, ok := delivered[id]; ok {
					t.Fatalf("%v cancelled first, and delivered", id)
				}
			default:
				t.Fatalf("%v: Edit %v and Cancel %v", id, edits[i], cancels[i])
			}
		}
		if len(delivered) > n {
			t.Fatalf("%d deliveries of %d messages", len(delivered), n)
		}
		e.Close()
	})
}
