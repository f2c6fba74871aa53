package e2e

import (
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// TestRecurringSchedule: an @every 1s schedule (fire-all) delivers one
// message per occurrence, never early, each with its own ID, through a
// kill -9 and a SIGTERM restart, none missing or doubled; after
// DeleteSchedule answers, nothing more comes.
func TestRecurringSchedule(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir, nil)
	ctx := ctxT(t)
	cr, err := p.client.CreateSchedule(ctx, connect.NewRequest(&hourglassv1.CreateScheduleRequest{Schedule: &hourglassv1.RecurringSchedule{
		Name: "tick", Topic: "cron", Spec: "@every 1s", Body: []byte("tick"), MisfirePolicy: hourglassv1.MisfirePolicy_MISFIRE_POLICY_FIRE_ALL,
	}}))
	if err != nil {
		t.Fatal(err)
	}
	first := cr.Msg.Next.AsTime()
	// Refusals of CreateSchedule: the conformance suite, caseSchedules.

	var mu sync.Mutex
	var got []received
	recv := func(p *proc, until time.Time) {
		for time.Now().Before(until) {
			res, err := p.client.Receive(ctxT(t), connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: "cron", MaxMessages: 10, WaitMs: 200}))
			if err != nil {
				return // the server went away
			}
			now := time.Now()
			for _, m := range res.Msg.Messages {
				if _, err := p.client.Ack(ctxT(t), connect.NewRequest(&hourglassv1.AckRequest{Topic: "cron", Receipt: m.Receipt})); err != nil {
					return // acked again after the restart
				}
				mu.Lock()
				got = append(got, received{m: m, at: now})
				mu.Unlock()
			}
		}
	}
	recv(p, time.Now().Add(3*time.Second))
	p.stop(syscall.SIGKILL)
	time.Sleep(1500 * time.Millisecond) // down: occurrences missed
	p = start(t, dir, nil)
	recv(p, time.Now().Add(2*time.Second))
	p.stop(syscall.SIGTERM)
	p = start(t, dir, nil)
	recv(p, time.Now().Add(2*time.Second))
	g, err := p.client.GetSchedule(ctx, connect.NewRequest(&hourglassv1.GetScheduleRequest{Name: "tick", NextCount: 3}))
	if err != nil || len(g.Msg.Next) != 3 || g.Msg.ArmedId == "" || g.Msg.Fired < 5 {
		t.Fatalf("GetSchedule = %v, %v", g, err)
	}
	ls, err := p.client.ListSchedules(ctx, connect.NewRequest(&hourglassv1.ListSchedulesRequest{}))
	if err != nil || len(ls.Msg.Schedules) != 1 || ls.Msg.Schedules[0].Schedule.Name != "tick" {
		t.Fatalf("ListSchedules = %v, %v", ls, err)
	}
	if _, err := p.client.DeleteSchedule(ctx, connect.NewRequest(&hourglassv1.DeleteScheduleRequest{Name: "tick"})); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	recv(p, time.Now().Add(2*time.Second))

	occ := map[string]int{}
	ids := map[string]bool{}
	last := first
	for _, r := range got {
		at := headerOf(r.m, "hourglass-occurrence")
		o, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			t.Fatalf("occurrence header %q: %v", at, err)
		}
		occ[at]++
		if ids[r.m.Id] {
			t.Errorf("ID %s received twice", r.m.Id)
		}
		ids[r.m.Id] = true
		if r.at.Before(o) {
			t.Errorf("occurrence %s received early, at %s", at, r.at)
		}
		// One handed to the queue within the handoff lead (20 ms) before
		// the answer was on its way.
		if o.After(deleted.Add(20 * time.Millisecond)) {
			t.Errorf("occurrence %s received after DeleteSchedule answered", at)
		}
		if o.After(last) {
			last = o
		}
	}
	n := 0
	for o := first; !o.After(last); o = o.Add(time.Second) {
		n++
		if k := o.UTC().Format(time.RFC3339Nano); occ[k] != 1 {
			t.Errorf("occurrence %s received %d times, want once", k, occ[k])
		}
	}
	if n < 6 || len(got) != n {
		t.Errorf("%d occurrences from %s to %s, %d received", n, first, last, len(got))
	}
}

func headerOf(m *hourglassv1.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return ""
}
