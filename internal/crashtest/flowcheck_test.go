package crashtest

import (
	"fmt"
	"testing"
	"time"
)

// TestFlowCheck: the flow checker finds each bound broken in a made-up
// history, and nothing in histories that keep them (a stop ends leases).
func TestFlowCheck(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	sched := func(topic string, seqs ...int) []FlowSchedule {
		var out []FlowSchedule
		for _, s := range seqs {
			out = append(out, FlowSchedule{Topic: topic, Key: "k0", Seq: s, Outcome: OK})
		}
		return out
	}
	// del is a delivery of seq received at ms (its Receive sent 1 ms
	// before), acked at ackMs (-1: never settled).
	type del struct{ seq, ms, ackMs int }
	build := func(topic string, ds []del, stops ...int) FlowEvents {
		var ev FlowEvents
		for i, d := range ds {
			r := fmt.Sprint("r", i)
			ev.Deliveries = append(ev.Deliveries, FlowDelivery{Topic: topic, Key: "k0", Seq: d.seq, Receipt: r,
				Issued: at(d.ms - 1), Received: at(d.ms), ServerAt: at(d.ms)})
			if d.ackMs >= 0 {
				ev.Settles = append(ev.Settles, FlowSettle{Receipt: r, Sent: at(d.ackMs), Outcome: OK})
			}
		}
		for _, s := range stops {
			ev.Stops = append(ev.Stops, at(s))
		}
		return ev
	}
	for _, tc := range []struct {
		name  string
		ev    FlowEvents
		sched []FlowSchedule
		want  string // the violation kind, "" for none
	}{
		{"ordered_in_turn", build(FlowOrderedTopic, []del{{0, 10, 20}, {1, 30, 40}}), sched(FlowOrderedTopic, 0, 1), ""},
		{"ordered_overlap", build(FlowOrderedTopic, []del{{0, 10, 50}, {1, 30, 60}}), sched(FlowOrderedTopic, 0, 1), VFlowConcurrency},
		{"ordered_skips_one", build(FlowOrderedTopic, []del{{1, 10, 20}, {0, 30, 40}}), sched(FlowOrderedTopic, 0, 1), VFlowOrder},
		{"ordered_lease_ends_at_kill", build(FlowOrderedTopic, []del{{0, 10, -1}, {0, 200, 210}, {1, 220, 230}}, 100), sched(FlowOrderedTopic, 0, 1), ""},
		{"ordered_never_acked", build(FlowOrderedTopic, []del{{0, 10, -1}}, 100), sched(FlowOrderedTopic, 0), VFlowLost},
		{"concurrency_three", build(FlowConcTopic, []del{{0, 10, 100}, {1, 11, 100}, {2, 12, 100}, {3, 100, 110}}), sched(FlowConcTopic, 0, 1, 2, 3), ""},
		{"concurrency_four", build(FlowConcTopic, []del{{0, 10, 100}, {1, 11, 100}, {2, 12, 100}, {3, 13, 110}}), sched(FlowConcTopic, 0, 1, 2, 3), VFlowConcurrency},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.ev.Schedules = tc.sched
			got := flowCheck(tc.ev, false).violations
			switch {
			case tc.want == "" && len(got) > 0:
				t.Fatalf("violations %v; want none", got)
			case tc.want != "" && (len(got) == 0 || got[0].Kind != tc.want):
				t.Fatalf("violations %v; want %s", got, tc.want)
			}
		})
	}
	// The rate: 25 a second is the bound (20/s, burst 5); 26 breaks it.
	for _, n := range []int{FlowRate + FlowBurst, FlowRate + FlowBurst + 1} {
		var ds []del
		var seqs []int
		for i := range n {
			ds, seqs = append(ds, del{i, 10 + i*30, 11 + i*30}), append(seqs, i)
		}
		ev := build(FlowRateTopic, ds)
		ev.Schedules = sched(FlowRateTopic, seqs...)
		got := flowCheck(ev, false).violations
		if broke := len(got) > 0 && got[0].Kind == VFlowRate; broke != (n > FlowRate+FlowBurst) {
			t.Errorf("%d deliveries in %d ms: violations %v", n, n*30, got)
		}
	}
}
