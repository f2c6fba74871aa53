package server

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// TestFreezeRPC freezes a topic through SetPolicy on an injected clock and
// checks what GetPolicy, Get and List answer while it lasts and after it
// ended: a message stored before it is due as much later as it lasted.
func TestFreezeRPC(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 9, 0, 0, 0, time.UTC)
	var now atomic.Int64
	now.Store(t0.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	advance := func(d time.Duration) { now.Add(int64(d)) }
	ts := newTestServerClock(t, Options{MaxDelay: 24 * time.Hour}, clock)
	ctx := context.Background()
	sched, err := ts.client.Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "t", When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 30_000}}))
	if err != nil {
		t.Fatal(err)
	}
	id := sched.Msg.Id
	get := func() *hourglassv1.Message {
		t.Helper()
		r, err := ts.client.Get(ctx, connect.NewRequest(&hourglassv1.GetRequest{Id: id}))
		if err != nil {
			t.Fatal(err)
		}
		return r.Msg.Message
	}
	setPolicy := func(p *hourglassv1.Policy) (*hourglassv1.SetPolicyResponse, error) {
		r, err := ts.client.SetPolicy(ctx, connect.NewRequest(&hourglassv1.SetPolicyRequest{Topic: "t", Policy: p}))
		if err != nil {
			return nil, err
		}
		return r.Msg, nil
	}

	_, err = setPolicy(&hourglassv1.Policy{Freeze: ptr(true), Paused: ptr(false)})
	wantCode(t, "freeze with paused false", err, connect.CodeInvalidArgument, "freeze with paused false")

	advance(2 * time.Second)
	r, err := setPolicy(&hourglassv1.Policy{Freeze: ptr(true)})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Policy.GetFreeze() || !r.Policy.GetPaused() || len(r.Freezes) != 1 || r.Freezes[0].EndedAt != nil {
		t.Fatalf("SetPolicy freeze answered %v, freezes %v; want frozen, paused, one lasting freeze", r.Policy, r.Freezes)
	}
	advance(5 * time.Second)
	if m := get(); !m.Frozen || !m.DueAt.AsTime().Equal(t0.Add(35*time.Second)) {
		t.Errorf("Get while frozen 5 s: due_at %v, frozen %v; want %v (30 s + 5 s so far), frozen", m.DueAt.AsTime(), m.Frozen, t0.Add(35*time.Second))
	}
	// A message stored while frozen keeps its time.
	during, err := ts.client.Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "t", When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 60_000}}))
	if err != nil {
		t.Fatal(err)
	}
	advance(3 * time.Second)
	r, err = setPolicy(&hourglassv1.Policy{Paused: ptr(false)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Policy.GetFreeze() || r.Policy.GetPaused() || len(r.Freezes) != 1 || !r.Freezes[0].EndedAt.AsTime().Equal(t0.Add(10*time.Second)) {
		t.Fatalf("resume answered %v, freezes %v; want neither paused nor frozen, the freeze ended at +10 s", r.Policy, r.Freezes)
	}
	if m := get(); m.Frozen || !m.DueAt.AsTime().Equal(t0.Add(38*time.Second)) || !m.DeliverAt.AsTime().Equal(t0.Add(30*time.Second)) {
		t.Errorf("Get after an 8 s freeze: deliver_at %v, due_at %v, frozen %v; want +30 s, +38 s, not frozen", m.DeliverAt.AsTime(), m.DueAt.AsTime(), m.Frozen)
	}
	l, err := ts.client.List(ctx, connect.NewRequest(&hourglassv1.ListRequest{Topic: "t"}))
	if err != nil {
		t.Fatal(err)
	}
	due := map[string]*hourglassv1.Message{}
	for _, m := range l.Msg.Messages {
		due[m.Id] = m
	}
	if m := due[id]; m == nil || !m.DueAt.AsTime().Equal(t0.Add(38*time.Second)) {
		t.Errorf("List: %v; want %s due at +38 s", l.Msg.Messages, id)
	}
	if m := due[during.Msg.Id]; m == nil || m.DueAt != nil {
		t.Errorf("List: %v; want %s (stored while frozen) with no due_at", l.Msg.Messages, during.Msg.Id)
	}
	g, err := ts.client.GetPolicy(ctx, connect.NewRequest(&hourglassv1.GetPolicyRequest{Topic: "t"}))
	if err != nil || len(g.Msg.Freezes) != 1 || g.Msg.Effective.GetFreeze() {
		t.Errorf("GetPolicy: %v, %v; want one ended freeze, not frozen", g, err)
	}

	// Past its stored time the engine hands it to the queue, which keeps
	// it from consumers until +38 s and moves it there.
	advance(25 * time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		// A Receive reaches it once the engine handed it over: never
		// handed out, moved.
		rc, err := ts.client.Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: "t", MaxMessages: 10, WaitMs: 20}))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range rc.Msg.Messages {
			if m.Id == id || m.OriginId == id {
				t.Fatalf("received %s at +35 s; it is due at +38 s", m.Id)
			}
		}
		r, err := ts.client.Get(ctx, connect.NewRequest(&hourglassv1.GetRequest{Id: id}))
		if err != nil {
			t.Fatal(err)
		}
		if m := r.Msg.Message; r.Msg.RescheduledTo != "" && r.Msg.State == hourglassv1.MessageState_MESSAGE_STATE_PENDING {
			if !m.DeliverAt.AsTime().Equal(t0.Add(38*time.Second)) || m.DueAt != nil {
				t.Errorf("moved: deliver_at %v, due_at %v; want +38 s and no due_at", m.DeliverAt.AsTime(), m.DueAt)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Get: %v; want it moved to +38 s (pending under a new ID)", r.Msg)
		}
	}
}
