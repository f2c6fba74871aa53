package crashtest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// sop records an attempt of a recurring-schedule call of name: create
// and update begin definition epoch (@every period), answered with the
// first occurrence at nextMs (-1: none).
func (b *hb) sop(name, op string, epoch int, period time.Duration, out Outcome, sentMs, answeredMs, nextMs int) *hb {
	x := ScheduleOp{Name: name, Op: op, Epoch: epoch, Period: period, Topic: SchedTopic, Cycle: 1, Sent: at(sentMs), Answered: at(answeredMs), Outcome: out}
	if nextMs >= 0 {
		x.Next = at(nextMs)
	}
	b.ev.ScheduleOps = append(b.ev.ScheduleOps, x)
	return b
}

// occ records a delivery of the occurrence at occMs of name's definition
// epoch, under id.
func (b *hb) occ(name string, epoch, occMs int, id string, issuedMs, recvMs int) *hb {
	b.ev.Deliveries = append(b.ev.Deliveries, Delivery{Key: EpochBody(name, epoch), ID: id, OriginID: id, Topic: SchedTopic, Cycle: 2,
		Issued: at(issuedMs), Received: at(recvMs), Schedule: name, Occurrence: at(occMs).UTC().Format(time.RFC3339Nano)})
	return b
}

// ackOcc records an Ack of the occurrence id of name's definition epoch.
func (b *hb) ackOcc(name string, epoch int, id string, out Outcome, sentMs, answeredMs int) *hb {
	b.ev.Settles = append(b.ev.Settles, Settle{Key: EpochBody(name, epoch), ID: id, Topic: SchedTopic, Kind: Ack, Cycle: 2,
		Sent: at(sentMs), Answered: at(answeredMs), Outcome: out, Sched: name})
	return b
}

// ticks delivers name's definition epoch at fromMs, fromMs+stepMs, ...,
// toMs, each received 5 ms after its time and acked, except those at
// skipMs.
func (b *hb) ticks(name string, epoch, fromMs, toMs, stepMs int, skipMs ...int) *hb {
	for ms := fromMs; ms <= toMs; ms += stepMs {
		if slices.Contains(skipMs, ms) {
			continue
		}
		id := fmt.Sprintf("%s-%d-%d", name, epoch, ms)
		b.occ(name, epoch, ms, id, ms-10, ms+5).ackOcc(name, epoch, id, OK, ms+6, ms+7)
	}
	return b
}

// TestCheckSchedules holds each recurring-schedule rule to histories that
// keep it and ones that break it.
func TestCheckSchedules(t *testing.T) {
	s := time.Second
	a := func() *hb { return (&hb{}).sop("a", "create", 1, s, OK, 500, 510, 1000) }
	withDrain := func(b *hb, ms int) *hb { b.ev.DrainFrom = at(ms); return b }
	withDrainEnd := func(b *hb, ms int) *hb { b.ev.DrainEnd = at(ms); return b }
	runCheckCases(t, []checkCase{
		{"every_occurrence_once", a().ticks("a", 1, 1000, 5000, 1000), "", "",
			func(c Counts) bool {
				return c.Schedules == 1 && c.Occurrences == 5 && c.OccurrenceDeliveries == 5 && c.ScheduleCalls == 1
			}},
		{"one_occurrence_under_two_ids", a().ticks("a", 1, 1000, 3000, 1000).occ("a", 1, 2000, "other", 2500, 2501).ackOcc("a", 1, "other", OK, 2502, 2503),
			VOccurrenceTwice, "under 2 IDs: a-1-2000, other", func(c Counts) bool { return c.OccurrenceTwice == 1 }},
		{"one_skipped", a().ticks("a", 1, 1000, 5000, 1000, 3000), VOccurrenceSkipped, "08:00:03.000 never delivered",
			func(c Counts) bool { return c.OccurrenceSkipped == 1 && c.Pending == 1 }},
		{"a_run_skipped", a().ticks("a", 1, 1000, 5000, 1000, 2000, 3000), VOccurrenceSkipped, "08:00:02.000 to 08:00:03.000 (2 occurrences)",
			func(c Counts) bool { return c.OccurrenceSkipped == 2 }},
		{"nothing_owed_after_the_latest_before_the_drain", a().ticks("a", 1, 1000, 3000, 1000), "", "", nil},
		{"in_force_at_the_drain_owes_one_after_it", withDrain(a().ticks("a", 1, 1000, 3000, 1000), 3500), VOccurrenceSkipped, "08:00:04.000 never delivered",
			func(c Counts) bool { return c.Pending == 1 }},
		{"in_force_at_the_drain_delivered_after_it", withDrain(a().ticks("a", 1, 1000, 4000, 1000), 3500), "", "", nil},
		{"in_force_at_the_drain_never_delivered", withDrain((&hb{}).sop("a", "create", 1, s, OK, 500, 510, -1), 3500), VOccurrenceSkipped,
			"no occurrence of it was delivered", nil},
		{"deleted_owes_nothing_after_the_latest", withDrain(a().ticks("a", 1, 1000, 2000, 1000).sop("a", "delete", 1, 0, OK, 4500, 4510, -1), 6000), "", "", nil},
		{"due_after_the_delete_answered", a().ticks("a", 1, 1000, 3000, 1000).sop("a", "delete", 1, 0, OK, 2400, 2500, -1), VOccurrenceAfterDelete,
			"due 500ms after DeleteSchedule", func(c Counts) bool { return c.OccurrenceAfterDelete == 1 }},
		{"due_within_the_handoff_lead_of_the_delete", a().ticks("a", 1, 1000, 3000, 1000).sop("a", "delete", 1, 0, OK, 2950, 2990, -1), "", "",
			func(c Counts) bool { return c.OccurrenceAfterEnd == 1 }},
		{"due_just_past_the_handoff_lead_of_the_delete", a().ticks("a", 1, 1000, 3000, 1000).sop("a", "delete", 1, 0, OK, 2950, 2977, -1), VOccurrenceAfterDelete, "", nil},
		{"delete_in_doubt_then_not_found", a().ticks("a", 1, 1000, 3000, 1000).sop("a", "delete", 1, 0, InDoubt, 1500, 1600, -1).
			sop("a", "delete", 1, 0, OK, 2900, 2990, -1), "", "", nil},
		{"old_definition_after_the_update", (&hb{}).sop("a", "create", 1, 2*s, OK, 500, 510, 1000).ticks("a", 1, 1000, 3000, 2000).
			sop("a", "update", 2, s, OK, 2000, 2010, 3000).ticks("a", 2, 3000, 5000, 1000), VOccurrenceAfterUpdate, "UpdateSchedule",
			func(c Counts) bool { return c.OccurrenceAfterUpdate == 1 }},
		{"update_follows_the_new_spec", (&hb{}).sop("a", "create", 1, 2*s, OK, 500, 510, 1000).ticks("a", 1, 1000, 1000, 2000).
			sop("a", "update", 2, s, OK, 2000, 2010, 3000).ticks("a", 2, 3000, 5000, 1000), "", "", nil},
		{"off_the_grid", a().ticks("a", 1, 1000, 3000, 1000).occ("a", 1, 2500, "x", 2500, 2501).ackOcc("a", 1, "x", OK, 2502, 2503),
			VOccurrenceUnexpected, "not on the grid", nil},
		{"before_the_first_answered", a().ticks("a", 1, 1000, 3000, 1000).occ("a", 1, 0, "x", 600, 601).ackOcc("a", 1, "x", OK, 602, 603),
			VOccurrenceUnexpected, "before its CreateSchedule was sent", nil},
		{"a_schedule_never_made", a().ticks("a", 1, 1000, 2000, 1000).occ("zz", 1, 1000, "x", 1000, 1001), VOccurrenceUnexpected, "names no definition", nil},
		{"early", a().ticks("a", 1, 1000, 3000, 1000, 2000).occ("a", 1, 2000, "x", 1980, 1990).ackOcc("a", 1, "x", OK, 1991, 1992), VEarly, "before it was due", nil},
		{"handed_out_after_its_ack", a().ticks("a", 1, 1000, 3000, 1000).occ("a", 1, 2000, "a-1-2000", 2100, 2101).ackOcc("a", 1, "a-1-2000", OK, 2102, 2103),
			VAfterAck, "after its Ack", nil},
		{"redelivered_after_an_expired_lease", a().ticks("a", 1, 1000, 3000, 1000, 2000).occ("a", 1, 2000, "y", 2000, 2001).occ("a", 1, 2000, "y", 3000, 3001).
			ackOcc("a", 1, "y", OK, 3002, 3003), "", "", func(c Counts) bool { return c.DupUnacked == 1 && c.Duplicates == 1 }},
		{"never_acked", a().ticks("a", 1, 1000, 3000, 1000, 2000).occ("a", 1, 2000, "y", 2000, 2001), VLostRedelivery, "never durably acked", nil},
		{"handed_out_after_the_drain_was_done", withDrainEnd(a().ticks("a", 1, 1000, 3000, 1000, 3000).occ("a", 1, 3000, "y", 2990, 3001), 2900), "", "",
			func(c Counts) bool { return c.OccurrenceUnackedAtEnd == 1 && c.Lost == 0 }},
		{"handed_out_before_the_drain_was_done", withDrainEnd(a().ticks("a", 1, 1000, 3000, 1000, 3000).occ("a", 1, 3000, "y", 2990, 3001), 3100),
			VLostRedelivery, "never durably acked", nil},
		// A create in doubt armed another run before the create tried
		// again was answered: anything until that answer is allowed.
		{"a_call_in_doubt_tried_again", (&hb{}).sop("a", "create", 1, s, InDoubt, 100, 200, -1).sop("a", "create", 1, s, OK, 1600, 1610, 2000).
			ticks("a", 1, 1000, 1000, 1000).ticks("a", 1, 2000, 4000, 1000), "", "", nil},
		// ALREADY_EXISTS: its grid starts at its first occurrence delivered.
		{"created_in_an_attempt_in_doubt", (&hb{}).sop("a", "create", 1, s, InDoubt, 100, 200, -1).sop("a", "create", 1, s, OK, 600, 610, -1).
			ticks("a", 1, 1000, 4000, 1000, 3000), VOccurrenceSkipped, "08:00:03.000 never delivered", nil},
	})
	b := a().ticks("a", 1, 1000, 3000, 1000, 2000)
	b.ev.ScheduleOps[0].Earlier = true
	if res := Check(b.ev, CheckParams{SkewBound: time.Millisecond}); len(res.Violations) != 1 || !strings.Contains(res.Violations[0].Detail, "08:00:02.000") {
		t.Errorf("the grid of an earlier create: %v", res.Violations)
	}
	// Occurrences are not the workload's messages: no phantom, no loss.
	if res := Check(a().ticks("a", 1, 1000, 2000, 1000).ev, CheckParams{}); res.Counts.Delivered != 0 || len(res.Violations) != 0 {
		t.Errorf("occurrences judged as messages: delivered %d, %v", res.Counts.Delivered, res.Violations)
	}
}
