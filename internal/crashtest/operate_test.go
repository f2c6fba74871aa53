package crashtest

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// resched records a Reschedule of key by ID (id set) or by key (id ""),
// in mode, answered ans with the replacement newID, due at dueMs.
func (b *hb) resched(key, id, mode string, out Outcome, ans RescheduleAnswer, newID string, sentMs, answeredMs, dueMs int) *hb {
	b.ev.Reschedules = append(b.ev.Reschedules, Reschedule{Key: key, Topic: "t", ID: id, ByKey: id == "", Mode: mode, Cycle: 1,
		Sent: at(sentMs), Answered: at(answeredMs), Outcome: out, Answer: ans, NewID: newID, NotBefore: at(dueMs)})
	return b
}

// cancelKey records a Cancel of key by topic and key.
func (b *hb) cancelKey(key string, out Outcome, ans CancelAnswer, sentMs, answeredMs int) *hb {
	b.ev.Cancels = append(b.ev.Cancels, Cancel{Key: key, Topic: "t", ByKey: true, Cycle: 1, Sent: at(sentMs), Answered: at(answeredMs), Outcome: out, Answer: ans})
	return b
}

// redrive records a Redrive of "t.dlq" answered with n moved.
func (b *hb) redrive(out Outcome, n int64, sentMs, answeredMs int) *hb {
	b.ev.Redrives = append(b.ev.Redrives, Redrive{DLQ: "t.dlq", Cycle: 2, Sent: at(sentMs), Answered: at(answeredMs), Outcome: out, Redriven: n})
	return b
}

// copyOn records a delivery on "t" of a copy (or a copy's retry) redriven
// from the dead letter dead.
func (b *hb) copyOn(key, id, origin, dead string, attempt uint32, issuedMs, recvMs int) *hb {
	b.on("t", key, id, origin, attempt, 2, issuedMs, recvMs)
	b.ev.Deliveries[len(b.ev.Deliveries)-1].RedriveOf = dead
	return b
}

// policy records a SetPolicy pausing or resuming topic.
func (b *hb) policy(topic string, paused bool, out Outcome, sentMs, answeredMs int) *hb {
	b.ev.Policies = append(b.ev.Policies, PolicyChange{Topic: topic, Paused: paused, Cycle: 2, Sent: at(sentMs), Answered: at(answeredMs), Outcome: out})
	return b
}

// acked delivers key's id (origin, attempt 0) at ms and acks it.
func (b *hb) acked(key, id, origin string, ms int) *hb {
	return b.deliver(key, id, origin, ms, ms+1).settle(key, id, Ack, 0, OK, ms+2, ms+3)
}

type checkCase struct {
	name   string
	b      *hb
	kind   string // the one violation expected; "" for none
	detail string
	counts func(c Counts) bool
}

func runCheckCases(t *testing.T, cases []checkCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := Check(tc.b.ev, CheckParams{Fsync: "always", SkewBound: time.Millisecond, MaxAttempts: 4})
			switch {
			case tc.kind == "" && len(res.Violations) > 0:
				t.Errorf("want no violation, got %v", res.Violations)
			case tc.kind != "" && len(res.Violations) != 1:
				t.Errorf("want one %s, got %v", tc.kind, res.Violations)
			case tc.kind != "":
				if v := res.Violations[0]; v.Kind != tc.kind || !strings.Contains(v.Detail, tc.detail) {
					t.Errorf("got %v; want kind %s, detail containing %q", v, tc.kind, tc.detail)
				}
			}
			if tc.counts != nil && !tc.counts(res.Counts) {
				t.Errorf("counts %+v", res.Counts)
			}
		})
	}
}

// TestCheckReschedules holds each Reschedule rule to histories that keep
// it and ones that break it.
func TestCheckReschedules(t *testing.T) {
	const rs, late, none = RescheduleRescheduled, RescheduleAlreadyDelivered, RescheduleNone
	x := func() *hb { return (&hb{}).sched("x", "X", OK, 0, 1000) }
	runCheckCases(t, []checkCase{
		{"moved_earlier_delivered_at_its_new_time", x().resched("x", "X", "earlier", OK, rs, "N", 10, 11, 200).acked("x", "N", "X", 200), "", "",
			func(c Counts) bool { return c.Rescheduled == 1 && c.Lost == 0 }},
		{"too_late_the_old_one_arrives", x().resched("x", "X", "later", OK, late, "", 990, 995, 3000).acked("x", "X", "X", 1000), "", "",
			func(c Counts) bool { return c.RescheduleOther == 1 }},
		{"old_delivered_after_the_answer", x().resched("x", "X", "later", OK, rs, "N", 10, 11, 3000).acked("x", "X", "X", 1000).acked("x", "N", "X", 3000),
			VAfterReschedule, "answered RESCHEDULED to N", nil},
		{"answered_after_the_old_one_was_returned", (&hb{}).sched("x", "X", OK, 0, 100).deliver("x", "X", "X", 100, 105).
			resched("x", "X", "later", OK, rs, "N", 104, 110, 3000).settle("x", "X", Ack, 0, OK, 106, 107).acked("x", "N", "X", 3000),
			VRescheduleUntruthful, "after a Receive had returned it", nil},
		{"replacement_before_its_new_time", x().resched("x", "X", "later", OK, rs, "N", 10, 11, 3000).acked("x", "N", "X", 2000),
			VEarly, "rescheduled later", nil},
		{"replacement_never_delivered", x().resched("x", "X", "later", OK, rs, "N", 10, 11, 3000), VRescheduledLost, "which was never delivered",
			func(c Counts) bool { return c.Lost == 1 && c.Pending == 1 }},
		{"replacement_cancelled_later", x().resched("x", "X", "later", OK, rs, "N", 10, 11, 3000).cancel("x", "N", OK, CancelCancelled, 20, 21), "", "", nil},
		{"old_id_cancelled_after_the_move", x().resched("x", "X", "now", OK, rs, "N", 10, 11, 10).cancel("x", "X", OK, CancelCancelled, 20, 21).
			acked("x", "N", "X", 30), "", "", nil},
		{"old_id_cancelled_after_the_move_replacement_lost", x().resched("x", "X", "now", OK, rs, "N", 10, 11, 10).cancel("x", "X", OK, CancelCancelled, 20, 21),
			VRescheduledLost, "never delivered", nil},
		{"in_doubt_the_old_one_arrives", x().resched("x", "X", "later", InDoubt, none, "", 10, 50, 3000).acked("x", "X", "X", 1000), "", "",
			func(c Counts) bool { return c.RescheduleInDoubt == 1 }},
		{"in_doubt_the_replacement_arrives", x().resched("x", "X", "earlier", InDoubt, none, "", 10, 50, 300).acked("x", "N2", "X", 300), "", "", nil},
		{"in_doubt_both_arrive", x().resched("x", "X", "earlier", InDoubt, none, "", 10, 50, 300).acked("x", "N2", "X", 300).acked("x", "X", "X", 1000),
			VRescheduleBoth, "both X", nil},
		{"in_doubt_neither_arrives", x().resched("x", "X", "earlier", InDoubt, none, "", 10, 50, 300), VLost, "never delivered", nil},
		{"in_doubt_replacement_early", x().resched("x", "X", "later", InDoubt, none, "", 10, 50, 3000).acked("x", "N2", "X", 2000), VEarly, "", nil},
		{"by_key_old_delivered_after_the_answer", x().resched("x", "", "later", OK, rs, "N", 10, 11, 3000).acked("x", "X", "X", 1000).acked("x", "N", "X", 3000),
			VAfterReschedule, "", func(c Counts) bool { return c.RescheduleByKey == 1 }},
		// A Nack with a delay made a retry that carries the key: the
		// Reschedule by key may have moved it, not X.
		{"by_key_after_a_retry_is_not_judged", (&hb{}).sched("x", "X", OK, 0, 100).deliver("x", "X", "X", 100, 101).settle("x", "X", Nack, 500, OK, 102, 103).
			resched("x", "", "now", OK, rs, "N", 200, 201, 200).acked("x", "N", "X", 300), "", "",
			func(c Counts) bool { return c.RescheduleUnjudged == 1 }},
		{"by_key_follows_the_chain", x().resched("x", "X", "later", OK, rs, "N1", 10, 11, 3000).resched("x", "", "later", OK, rs, "N2", 20, 21, 4000).
			acked("x", "N1", "X", 3000).acked("x", "N2", "X", 4000), VAfterReschedule, "to N2", nil},
	})
}

// TestCheckCancelByKey: a Cancel by topic and key names the latest
// incarnation; when the history can tell which, it is held to I7.
func TestCheckCancelByKey(t *testing.T) {
	runCheckCases(t, []checkCase{
		{"cancelled_never_delivered", (&hb{}).sched("x", "X", OK, 0, 1000).cancelKey("x", OK, CancelCancelled, 10, 11), "", "",
			func(c Counts) bool { return c.CancelByKey == 1 && c.Cancelled == 1 && c.Lost == 0 }},
		{"delivered_after_cancel", (&hb{}).sched("x", "X", OK, 0, 1000).cancelKey("x", OK, CancelCancelled, 10, 11).acked("x", "X", "X", 1000),
			VAfterCancel, "Cancel by key", nil},
		{"untruthful", (&hb{}).sched("x", "X", OK, 0, 100).deliver("x", "X", "X", 100, 101).cancelKey("x", OK, CancelCancelled, 140, 150).
			settle("x", "X", Ack, 0, OK, 102, 103), VCancelUntruthful, "Cancel by key", nil},
		{"too_late", (&hb{}).sched("x", "X", OK, 0, 100).acked("x", "X", "X", 100).cancelKey("x", OK, CancelAlreadyDelivered, 140, 150), "", "", nil},
		{"after_a_retry_is_not_judged", (&hb{}).sched("x", "X", OK, 0, 100).deliver("x", "X", "X", 100, 101).settle("x", "X", Nack, 500, OK, 102, 103).
			cancelKey("x", OK, CancelCancelled, 200, 201), "", "", func(c Counts) bool { return c.CancelByKeyUnjudged == 1 && c.Lost == 0 }},
		{"names_the_replacement", (&hb{}).sched("x", "X", OK, 0, 1000).resched("x", "X", "later", OK, RescheduleRescheduled, "N", 10, 11, 3000).
			cancelKey("x", OK, CancelCancelled, 20, 21).acked("x", "N", "X", 3000), VAfterCancel, "Cancel by key", nil},
	})
}

// poisonFailed schedules the poison message p (ID P) and fails it 4 times
// on "t" (100 to 400 ms), so that it is dead-lettered.
func poisonFailed() *hb {
	return (&hb{}).sched("p", "P", OK, 0, 100).poisoned().failed("p", "P", 4)
}

// failCopy delivers the copy id of p (or a retry of one, with attempts
// from first) on t from ms until its attempt 3, each nacked, then on
// t.dlq, acked.
func (b *hb) failCopy(id, dead string, first uint32, ms int) *hb {
	for i := first; i < 4; i++ {
		m := ms + 10*int(i)
		b.copyOn("p", id, "P", dead, i, m, m+1).settleOn("t", "p", id, Nack, OK, 2, m+2, m+3)
	}
	return b.on("t.dlq", "p", id, "P", 4, 2, ms+50, ms+51).settleOn("t.dlq", "p", id, Ack, OK, 2, ms+52, ms+53)
}

// TestCheckRedrive holds each redrive rule to histories that keep it and
// ones that break it.
func TestCheckRedrive(t *testing.T) {
	runCheckCases(t, []checkCase{
		{"redriven_once_and_dead_lettered_again", poisonFailed().redrive(OK, 1, 500, 510).failCopy("R", "P", 0, 600), "", "",
			func(c Counts) bool { return c.RedrivenCopies == 1 && c.RedriveCalls == 1 && c.Redriven == 1 }},
		{"a_retry_of_the_copy_keeps_its_key", poisonFailed().redrive(OK, 1, 500, 510).copyOn("p", "R", "P", "P", 0, 600, 601).
			settleOn("t", "p", "R", Nack, OK, 2, 602, 603).failCopy("R2", "P", 1, 700), "", "", nil},
		{"moved_back_twice", poisonFailed().redrive(OK, 1, 500, 510).copyOn("p", "R1", "P", "P", 0, 600, 601).redrive(InDoubt, 0, 650, 660).
			failCopy("R2", "P", 0, 700), VRedrivenTwice, "as R1 (cycle 2) and as R2", func(c Counts) bool { return c.RedriveInDoubt == 1 }},
		{"copy_before_any_redrive", poisonFailed().failCopy("R", "P", 0, 600).redrive(OK, 1, 900, 910), VRedriveUnfounded, "before any Redrive of t.dlq", nil},
		{"copy_before_max_attempts", (&hb{}).sched("p", "P", OK, 0, 100).poisoned().failed("p", "P", 2).redrive(OK, 1, 500, 510).failCopy("R", "P", 0, 600),
			VRedriveUnfounded, "a dead letter needs 4", nil},
		{"copy_never_dead_lettered_again", poisonFailed().redrive(OK, 1, 500, 510).copyOn("p", "R", "P", "P", 0, 600, 601), VNotDeadLettered,
			"none of its 1 IDs", func(c Counts) bool { return c.Pending == 1 }},
		{"copy_redriven_again", poisonFailed().redrive(OK, 1, 500, 510).copyOn("p", "R", "P", "P", 0, 600, 601).redrive(OK, 1, 700, 710).
			failCopy("R2", "R", 0, 800), "", "", nil},
	})
}

// TestCheckPauses: nothing of a paused topic is handed out by a Receive
// sent after the pause was answered and returned before the resume was
// sent.
func TestCheckPauses(t *testing.T) {
	x := func() *hb { return (&hb{}).sched("x", "X", OK, 0, 100) }
	runCheckCases(t, []checkCase{
		{"handed_out_while_paused", x().policy("t", true, OK, 100, 110).policy("t", false, OK, 1000, 1010).acked("x", "X", "X", 200),
			VDeliveredWhilePaused, "resumed 799ms after", func(c Counts) bool { return c.Paused == 1 && c.Resumed == 1 && c.DeliveredWhilePaused == 1 }},
		{"receive_sent_before_the_pause_answered", x().policy("t", true, OK, 100, 110).policy("t", false, OK, 1000, 1010).acked("x", "X", "X", 105), "", "", nil},
		{"returned_after_the_resume_was_sent", x().policy("t", true, OK, 100, 110).policy("t", false, OK, 1000, 1010).
			deliver("x", "X", "X", 900, 1001).settle("x", "X", Ack, 0, OK, 1002, 1003), "", "", nil},
		{"pause_in_doubt", x().policy("t", true, InDoubt, 100, 110).policy("t", false, OK, 1000, 1010).acked("x", "X", "X", 200), "", "",
			func(c Counts) bool { return c.PolicyInDoubt == 1 }},
		{"a_refused_resume_ends_nothing", x().policy("t", true, OK, 100, 110).policy("t", false, Rejected, 500, 501).policy("t", false, OK, 800, 810).
			acked("x", "X", "X", 600), VDeliveredWhilePaused, "", nil},
		{"never_resumed", x().policy("t", true, OK, 100, 110).acked("x", "X", "X", 5000), VDeliveredWhilePaused, "never resumed", nil},
		{"another_topic_paused", x().policy("u", true, OK, 100, 110).acked("x", "X", "X", 200), "", "", nil},
	})
	// Its dead-letter topic is not paused with it.
	b := poisonFailed().policy("t", true, OK, 450, 460).on("t.dlq", "p", "P", "P", 4, 2, 500, 501).settleOn("t.dlq", "p", "P", Ack, OK, 2, 502, 503)
	if res := Check(b.ev, CheckParams{SkewBound: time.Millisecond}); slices.ContainsFunc(res.Violations, func(v Violation) bool { return v.Kind == VDeliveredWhilePaused }) {
		t.Errorf("a dead letter of a paused topic: %v", res.Violations)
	}
}
