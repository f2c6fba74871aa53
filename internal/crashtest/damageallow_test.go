package crashtest

import (
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

// TestDamageAllowsOperated: what repair reports lost allows the new
// checks' violations of what it may have held, and nothing else: a
// reschedule record in a lost commitlog span (its replacement lost, its
// old incarnation back); a recurring schedule whose arming record the
// span may have held (its run of occurrences broken from there on); an
// armed occurrence's schedule entry lost; an occurrence lost from the
// queue (that one alone).
func TestDamageAllowsOperated(t *testing.T) {
	data := "/d"
	clPath := data + "/commitlog/00000000000000000000.log"
	qPath := data + "/queue/topics/" + SchedTopic + "/log/00000000000000000000.log"
	id := func(seq int) string { return message.ID{DeliverAt: 1, Seq: uint64(seq)}.String() }
	occID := func(ms, seq int) string { return message.ID{DeliverAt: at(ms).UnixMilli(), Seq: uint64(seq)}.String() }
	ev := Events{
		Schedules: []Schedule{
			{Key: "k100", ID: id(100), Outcome: OK, Topic: "ct0", Sent: at(0), Answered: at(1)},
			{Key: "k300", ID: id(300), Outcome: OK, Topic: "ct0", Sent: at(3000), Answered: at(3001)},
		},
		Reschedules: []Reschedule{
			{Key: "k100", ID: id(100), Outcome: OK, Answer: RescheduleRescheduled, NewID: id(150), Sent: at(10), Answered: at(11)},
			{Key: "k300", ID: id(300), Outcome: OK, Answer: RescheduleRescheduled, NewID: id(350), Sent: at(3010), Answered: at(3011)},
		},
		// Nacks with a delay schedule their retry as a new commitlog
		// record: p1's between k100 and k300, p2's after k300; p3's
		// without a delay stays in the queue's log.
		Settles: []Settle{
			{Key: "p1", Topic: "ct0", Kind: Nack, NackDelay: 100 * time.Millisecond, Outcome: OK, Sent: at(100), Answered: at(101)},
			{Key: "p2", Topic: "ct0", Kind: Nack, NackDelay: 100 * time.Millisecond, Outcome: OK, Sent: at(3100), Answered: at(3101)},
			{Key: "p3", Topic: "ct0", Kind: Nack, Outcome: OK, Sent: at(100), Answered: at(101)},
		},
		ScheduleOps: []ScheduleOp{
			{Name: "a", Op: "create", Epoch: 1, Period: time.Second, Outcome: OK, Sent: at(20), Answered: at(21), Next: at(1000)},
			{Name: "b", Op: "create", Epoch: 1, Period: time.Second, Outcome: OK, Sent: at(5000), Answered: at(5001), Next: at(6000)},
		},
	}
	skipped := func(body string, ms, run int) Violation {
		return Violation{Kind: VOccurrenceSkipped, Key: body, Occ: at(ms), At: at(ms), Run: run}
	}
	// The commitlog span 120..200 was appended after k100 was sent (0 ms)
	// and before k300 was answered (3001 ms): a's arming records then may
	// be in it, b did not exist.
	lostSpan := DamageEvent{Cycle: 1, At: at(4000), Outcome: RestartRefused, DamagePlan: DamagePlan{Kind: DCommitlogDelete, Path: clPath, Offset: -1},
		Repair: &RepairResult{Lost: []LostSpan{{File: clPath, From: 120, To: 200}}}}
	for _, tc := range []struct {
		name    string
		evs     []DamageEvent
		vs      []Violation
		allowed []bool
	}{
		{"a_lost_reschedule_record",
			[]DamageEvent{lostSpan},
			[]Violation{{Kind: VRescheduledLost, Key: "k100"}, {Kind: VAfterReschedule, Key: "k100"}, {Kind: VRescheduledLost, Key: "k300"}, {Kind: VEarly, Key: "k100"}},
			[]bool{true, true, false, false}},
		{"a_nacks_retry_the_span_may_hold",
			[]DamageEvent{lostSpan},
			[]Violation{{Kind: VNotDeadLettered, Key: "p1"}, {Kind: VNotDeadLettered, Key: "p2"}, {Kind: VNotDeadLettered, Key: "p3"}},
			[]bool{true, false, false}},
		{"a_schedule_in_force_while_the_span_was_appended",
			[]DamageEvent{lostSpan},
			// The break of a's run is at most two periods (and the
			// lead) after the span's last append: from then on all of a's.
			[]Violation{skipped("a#1", 2000, 1), skipped("a#1", 60000, 5), {Kind: VOccurrenceUnexpected, Key: "a#1", Occ: at(70500)}, skipped("b#1", 7000, 1),
				{Kind: VOccurrenceTwice, Key: "a#1", Occ: at(2000)}},
			[]bool{true, true, true, false, false}},
		{"an_occurrence_armed_in_the_span_armed_again",
			// Its first ID's record (seq 150) was in the lost span: routed
			// before the loss, delivered, and armed again under a new ID.
			// One first armed after the span (seq 300) is not the span's.
			[]DamageEvent{lostSpan},
			[]Violation{{Kind: VOccurrenceTwice, Key: "a#1", ID: occID(2000, 150), Occ: at(2000)},
				{Kind: VOccurrenceTwice, Key: "a#1", ID: occID(3000, 300), Occ: at(3000)}},
			[]bool{true, false}},
		{"a_break_two_periods_after_the_span",
			// The span's last record (up to 3001) may have armed an
			// occurrence a period later; that one fired after the restart
			// but armed nothing, as the restored definition did not name
			// it: the first missing is up to two periods (with the lead
			// and a second of slack) after the span (crashtest --damage
			// --seed 2, a 2 s schedule).
			[]DamageEvent{lostSpan},
			[]Violation{skipped("a#1", 6000, 3)},
			[]bool{true}},
		{"a_break_after_the_span_is_not_its",
			[]DamageEvent{lostSpan},
			[]Violation{skipped("a#1", 9000, 1)},
			[]bool{false}},
		{"an_armed_occurrence_entry_lost",
			[]DamageEvent{{Cycle: 1, At: at(8000), Outcome: RestartStarted, DamagePlan: DamagePlan{Kind: DSchedFlip},
				Held: Held{Keys: []string{"b#1"}, IDs: []string{occID(7000, 400)}}}},
			[]Violation{skipped("b#1", 6000, 1), skipped("b#1", 7000, 3), skipped("b#1", 12000, 1), skipped("a#1", 7000, 1)},
			[]bool{false, true, true, false}},
		{"an_occurrence_lost_from_the_queue",
			[]DamageEvent{{Cycle: 1, At: at(8000), Outcome: RestartRefused, DamagePlan: DamagePlan{Kind: DQueueLogFlip, Path: qPath, Offset: 40, RecOff: 32},
				Held:   Held{What: "queue message", Keys: []string{"b#1"}, IDs: []string{occID(7000, 400)}},
				Repair: &RepairResult{Lost: []LostSpan{{File: qPath, From: 0, To: 100}}}}},
			[]Violation{skipped("b#1", 7000, 1), skipped("b#1", 7000, 2), skipped("b#1", 8000, 1)},
			[]bool{true, false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := append([]Violation(nil), tc.vs...)
			markDamage(vs, damageAllowance(tc.evs, ev, data, time.Second), ev)
			for i, v := range vs {
				if (v.Damage != "") != tc.allowed[i] {
					t.Errorf("%s of %s at %v: allowed by %q, want allowed %v", v.Kind, v.Key, v.Occ.Sub(t0), v.Damage, tc.allowed[i])
				}
			}
		})
	}
	// A pending definition is owed unless a damage may have broken it.
	al := damageAllowance([]DamageEvent{lostSpan}, ev, data, time.Second)
	if al.owes("a#1") || !al.owes("b#1") || al.owes("k100") || !al.owes("k200") {
		t.Errorf("owes a#1 %v, b#1 %v, k100 %v, k200 %v; want false, true, false, true", al.owes("a#1"), al.owes("b#1"), al.owes("k100"), al.owes("k200"))
	}
}
