package crashtest

import (
	"testing"
	"time"
)

// TestCheckEdits judges deliveries against Edits in a forged history: a
// delivery after an Edit answered EDITED with the old content, or an
// older Edit's, is delivered-old-content; one whose body and header
// disagree is edit-torn; the new content, a delivery before the answer,
// and the content of a later Edit that may have taken effect after the
// first are not violations.
func TestCheckEdits(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	edit := func(key string, v, sent, answered int, out Outcome) Reschedule {
		return Reschedule{Key: key, Topic: "ct0", ID: key, Mode: "edit", Edit: v, Sent: at(sent), Answered: at(answered),
			Outcome: out, Answer: RescheduleRescheduled, NewID: key + "-e"}
	}
	deliver := func(key string, v int, header string, issued int) Delivery {
		return Delivery{Key: key, ID: key + "-e", Topic: "ct0", Edit: v, EditHeader: header, Issued: at(issued), Received: at(issued + 5)}
	}
	for _, tc := range []struct {
		name  string
		ev    Events
		want  string // the violation kind; "" for none
		count int    // Edited
	}{
		{name: "new_content", ev: Events{Reschedules: []Reschedule{edit("a", 1, 0, 10, OK)}, Deliveries: []Delivery{deliver("a", 1, "1", 20)}}, count: 1},
		{name: "old_content_after_answer", ev: Events{Reschedules: []Reschedule{edit("a", 1, 0, 10, OK)}, Deliveries: []Delivery{deliver("a", 0, "", 20)}},
			want: VEditOld, count: 1},
		{name: "old_content_before_answer_not_judged_here", ev: Events{Reschedules: []Reschedule{edit("a", 1, 0, 10, OK)}, Deliveries: []Delivery{deliver("a", 0, "", 5)}}, count: 1},
		{name: "older_edit_after_a_newer_answered", ev: Events{Reschedules: []Reschedule{edit("a", 1, 0, 10, OK), edit("a", 2, 20, 30, OK)},
			Deliveries: []Delivery{deliver("a", 1, "1", 40)}}, want: VEditOld, count: 2},
		{name: "racing_edit_may_have_won", ev: Events{Reschedules: []Reschedule{edit("a", 2, 0, 10, OK), edit("a", 1, 5, 30, InDoubt)},
			Deliveries: []Delivery{deliver("a", 1, "1", 40)}}, count: 1},
		{name: "edit_not_answered_edited", ev: Events{Reschedules: []Reschedule{{Key: "a", Mode: "edit", Edit: 1, Sent: at(0), Answered: at(10), Outcome: OK, Answer: RescheduleAlreadyDelivered}},
			Deliveries: []Delivery{deliver("a", 0, "", 20)}}},
		{name: "torn", ev: Events{Reschedules: []Reschedule{edit("a", 1, 0, 10, OK)}, Deliveries: []Delivery{deliver("a", 1, "", 20)}}, want: VEditTorn, count: 1},
		{name: "a_reschedule_is_no_edit", ev: Events{Reschedules: []Reschedule{{Key: "a", Mode: "later", Sent: at(0), Answered: at(10), Outcome: OK, Answer: RescheduleRescheduled}},
			Deliveries: []Delivery{deliver("a", 0, "", 20)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c Counts
			vs := checkEdits(tc.ev, nil, false, &c)
			switch {
			case tc.want == "" && len(vs) != 0:
				t.Errorf("violations %+v; want none", vs)
			case tc.want != "" && (len(vs) != 1 || vs[0].Kind != tc.want || c.EditOld != 1):
				t.Errorf("violations %+v (counted %d); want one %s", vs, c.EditOld, tc.want)
			}
			if c.Edited != tc.count {
				t.Errorf("edited %d; want %d", c.Edited, tc.count)
			}
		})
	}
	// Through Check, an edited message whose new incarnation is delivered
	// and acked is neither lost nor a phantom.
	sched := Schedule{Key: "a", Topic: "ct0", Sent: at(0), Answered: at(1), Outcome: OK, ID: "a", NotBefore: at(0), Kind: "delay"}
	ev := Events{Schedules: []Schedule{sched}, Reschedules: []Reschedule{edit("a", 1, 2, 3, OK)},
		Deliveries: []Delivery{{Key: "a", ID: "a-e", OriginID: "a", Topic: "ct0", Edit: 1, EditHeader: "1", Issued: at(10), Received: at(11), Receipt: "r"}},
		Settles:    []Settle{{Key: "a", ID: "a-e", Topic: "ct0", Kind: Ack, Sent: at(12), Answered: at(13), Outcome: OK}}}
	if res := Check(ev, CheckParams{SkewBound: time.Millisecond}); len(res.Violations) != 0 || res.Counts.Edited != 1 {
		t.Errorf("Check of an edited message delivered and acked: %+v, edited %d; want no violation, 1 edited", res.Violations, res.Counts.Edited)
	}
}

// TestSplitEdit reads keys and versions back from bodies, and leaves
// bodies that are not edits whole.
func TestSplitEdit(t *testing.T) {
	for body, want := range map[string]struct {
		key string
		v   int
	}{
		"s1-c2-p0-7": {"s1-c2-p0-7", 0}, editBody("s1-c2-p0-7", 3): {"s1-c2-p0-7", 3}, "sched#2": {"sched#2", 0}, "x~e": {"x~e", 0}, "x~e0": {"x~e0", 0},
	} {
		if k, v := splitEdit(body); k != want.key || v != want.v {
			t.Errorf("splitEdit(%q) = %q, %d; want %q, %d", body, k, v, want.key, want.v)
		}
	}
}

// TestEditKeepsARacingRescheduleTime replays the race a clean-clone CI run
// found: a by-key Reschedule to an earlier time and a by-key Edit of the
// same message, sent within a millisecond and applied in that order. The
// Edit keeps the time of the incarnation it replaced (the rescheduled
// one), not the one the workload saw when it chose the message; the
// delivery at the earlier time is on time. Without the racing Reschedule
// the same delivery is early.
func TestEditKeepsARacingRescheduleTime(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	sched := Schedule{Key: "a", Topic: "ct0", Sent: at(0), Answered: at(1), Outcome: OK, ID: "a0", NotBefore: at(11000), Kind: "delay"}
	earlier := Reschedule{Key: "a", Topic: "ct0", ByKey: true, Mode: "earlier", Sent: at(200), Answered: at(203),
		Outcome: OK, Answer: RescheduleRescheduled, NewID: "a1", NotBefore: at(2000)}
	edit := Reschedule{Key: "a", Topic: "ct0", ByKey: true, Mode: "edit", Edit: 1, Sent: at(199), Answered: at(204),
		Outcome: OK, Answer: RescheduleRescheduled, NewID: "a2", NotBefore: at(11000)}
	d := Delivery{Key: "a", ID: "a2", OriginID: "a0", Topic: "ct0", Edit: 1, EditHeader: "1", Issued: at(9000), Received: at(9001), Receipt: "r"}
	ack := Settle{Key: "a", ID: "a2", Topic: "ct0", Kind: Ack, Sent: at(9002), Answered: at(9003), Outcome: OK}
	p := CheckParams{SkewBound: time.Millisecond}

	ev := Events{Schedules: []Schedule{sched}, Reschedules: []Reschedule{earlier, edit}, Deliveries: []Delivery{d}, Settles: []Settle{ack}}
	if res := Check(ev, p); len(res.Violations) != 0 {
		t.Errorf("edit racing an earlier reschedule, delivered at the rescheduled time: %+v; want none", res.Violations)
	}
	ev = Events{Schedules: []Schedule{sched}, Reschedules: []Reschedule{edit}, Deliveries: []Delivery{d}, Settles: []Settle{ack}}
	res := Check(ev, p)
	if len(res.Violations) != 1 || res.Violations[0].Kind != VEarly {
		t.Errorf("edit alone, delivered 2 s before its time: %+v; want one %s", res.Violations, VEarly)
	}
}
