package engine

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

// TestExpiry: a message that falls due after its expiry (the engine was
// down meanwhile) is never handed to a sink that is no ExpiryHandler: it
// is recorded dead-lettered and counted; one whose expiry is later is
// delivered; an edit keeps the expiry; an expiry not after the delivery
// time, or two of them, is refused.
func TestExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		sink := &recSink{}
		// Hour-long buckets: not over, so not retired, while Get asks.
		long := func(o *Options) { o.SegmentDuration = time.Hour }
		e := openEngine(t, dir, sink, long)
		ctx := t.Context()
		start := time.Now()
		late, err := e.Schedule(ctx, Request{Topic: "x", Delay: 5 * time.Second, TTL: time.Second, Body: []byte("late")})
		if err != nil {
			t.Fatal(err)
		}
		edited, err := e.Schedule(ctx, Request{Topic: "x", Delay: 5 * time.Second, ExpireAt: start.Add(7 * time.Second), Body: []byte("old")})
		if err != nil {
			t.Fatal(err)
		}
		if r, nid, err := e.Edit(ctx, edited, Edit{Body: []byte("new"), SetBody: true}); err != nil || r != Edited {
			t.Fatalf("Edit = %v, %v", r, err)
		} else {
			edited = nid
		}
		onTime, err := e.Schedule(ctx, Request{Topic: "x", Delay: 30 * time.Second, TTL: time.Hour, Body: []byte("on time")})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []Request{
			{Topic: "x", Delay: time.Second, ExpireAt: start.Add(time.Second)},
			{Topic: "x", Delay: time.Second, ExpireAt: start.Add(time.Hour), TTL: time.Second},
			{Topic: "x", Delay: time.Second, TTL: -time.Second},
		} {
			if _, err := e.Schedule(ctx, r); err == nil {
				t.Errorf("Schedule(delay %v, expire at +%v, TTL %v) accepted", r.Delay, r.ExpireAt.Sub(start), r.TTL)
			}
		}
		e.Close()
		time.Sleep(20 * time.Second) // down past both messages' expiry
		e = openEngine(t, dir, sink, long)
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		for _, id := range []message.ID{late, edited} {
			if f, err := e.Get(ctx, id); err != nil || f.State != StateDeadLettered {
				t.Errorf("Get(%v) = %v, %v; want dead-lettered", id, f.State, err)
			}
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		got := map[message.ID]string{}
		for _, g := range sink.snapshot() {
			got[g.id] = g.body
		}
		if len(got) != 1 || got[onTime] != "on time" {
			t.Fatalf("delivered %v; want only %v", got, onTime)
		}
		if n := e.Stats().Expired; n != 2 {
			t.Errorf("Stats().Expired = %d; want 2", n)
		}
		e.Close()
	})
}
