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

// caught delivers name's definition epoch at fromMs, fromMs+1000, ...,
// toMs as a server catching up does: all at once, the first received at
// recvMs and each next 1 ms later, and acked.
func (b *hb) caught(name string, epoch, fromMs, toMs, recvMs int) *hb {
	for ms := fromMs; ms <= toMs; ms += 1000 {
		id := fmt.Sprintf("%s-%d-%d", name, epoch, ms)
		r := recvMs + (ms-fromMs)/1000
		b.occ(name, epoch, ms, id, r-1, r).ackOcc(name, epoch, id, OK, r+1, r+2)
	}
	return b
}

// started records a server process started at beganMs and ready at upMs.
func (b *hb) started(beganMs, upMs int) *hb {
	b.ev.Starts = append(b.ev.Starts, ServerStart{Cycle: 2, Began: at(beganMs), Up: at(upMs)})
	return b
}

// TestCheckSchedulesMissedBound holds the checker to FIRE_ALL's bound
// (recur.MaxMissed, 100): after the server has delivered 100 missed
// occurrences in a row it arms the first one after now, so the grid times
// between are never delivered. Forged like crashtest --damage --seed 12:
// an @every 1s schedule, the server down for more than 100 s, every
// occurrence missed then delivered at once after it was ready, up to the
// 100th, then the next after that moment.
func TestCheckSchedulesMissedBound(t *testing.T) {
	s := time.Second
	// Live from 1 s to 20 s, down from 20.5 s; started again at 150 s,
	// ready at 152 s: the occurrences from 21 s to 120 s (100) delivered
	// from 152.1 s, the 100th at 152.199 s; the next armed is 153 s.
	down := func() *hb {
		return (&hb{}).sop("a", "create", 1, s, OK, 500, 510, 1000).started(0, 400).ticks("a", 1, 1000, 20000, 1000).started(150000, 152000)
	}
	capped := func() *hb { return down().caught("a", 1, 21000, 120000, 152100).ticks("a", 1, 153000, 160000, 1000) }
	twice := capped()
	// Killed at 152.5 s before 153 s fired, started again at 200 s: 153 s
	// is the 101st missed in a row, so the next is the first after 201.1 s.
	twice.ev.Deliveries, twice.ev.Settles = twice.ev.Deliveries[:len(twice.ev.Deliveries)-8], twice.ev.Settles[:len(twice.ev.Settles)-8]
	twice.started(200000, 201000).caught("a", 1, 153000, 153000, 201100).ticks("a", 1, 202000, 205000, 1000)
	// 153 s fired in time before the kill at 153.5 s: the row ended.
	ended := capped()
	ended.ev.Deliveries, ended.ev.Settles = ended.ev.Deliveries[:len(ended.ev.Deliveries)-7], ended.ev.Settles[:len(ended.ev.Settles)-7]
	ended.started(200000, 201000).caught("a", 1, 154000, 154000, 201100).ticks("a", 1, 202000, 205000, 1000)
	runCheckCases(t, []checkCase{
		{"fire_all_stops_after_100_missed_in_a_row", capped(), "", "",
			func(c Counts) bool { return c.OccurrenceMissedCap == 32 && c.OccurrenceSkipped == 0 && c.Pending == 0 }},
		{"the_row_goes_on_after_the_bound", twice, "", "",
			func(c Counts) bool { return c.OccurrenceMissedCap == 32+48 && c.OccurrenceSkipped == 0 }},
		{"the_row_ends_with_one_fired_in_time", ended, VOccurrenceSkipped, "08:02:35.000 to 08:03:21.000 (47 occurrences)",
			func(c Counts) bool { return c.OccurrenceMissedCap == 32 }},
		{"skipped_after_99_missed", down().caught("a", 1, 21000, 119000, 152100).ticks("a", 1, 153000, 160000, 1000),
			VOccurrenceSkipped, "08:02:00.000 to 08:02:32.000 (33 occurrences)",
			func(c Counts) bool { return c.OccurrenceMissedCap == 0 && c.OccurrenceSkipped == 33 }},
		{"skipped_past_the_moment_the_100th_fired", down().caught("a", 1, 21000, 120000, 152100).ticks("a", 1, 161000, 165000, 1000),
			VOccurrenceSkipped, "08:02:01.000 to 08:02:40.000 (40 occurrences)", nil},
		{"not_missed_when_no_server_started_after_them", (&hb{}).sop("a", "create", 1, s, OK, 500, 510, 1000).started(0, 400).
			ticks("a", 1, 1000, 20000, 1000).caught("a", 1, 21000, 120000, 152100).ticks("a", 1, 153000, 160000, 1000),
			VOccurrenceSkipped, "08:02:01.000 to 08:02:32.000 (32 occurrences)", nil},
		// Delivered in time, through two quick restarts: a chain that
		// stops is skipped, however long it ran before.
		{"a_live_chain_stopped", (&hb{}).sop("a", "create", 1, s, OK, 500, 510, 1000).started(0, 400).started(50200, 50600).started(90200, 90600).
			ticks("a", 1, 1000, 150000, 1000).ticks("a", 1, 170000, 175000, 1000),
			VOccurrenceSkipped, "08:02:31.000 to 08:02:49.000 (19 occurrences)", nil},
	})
}

// TestCheckSchedulesMissedBoundCluster: a cluster run records as starts
// each node it starts and each takeover of a killed node's partitions
// (from the kill until the harness found them owned again), since a
// partition's scheduler opens when the partition is taken; FIRE_ALL's
// bound is allowed from them as from a single server's starts. Forged: three
// nodes started one after the other, an @every 1s schedule live from 1 s
// to 20 s, the node owning its partition killed at 20.5 s and the
// partition opened again only at 152 s, every occurrence since delivered
// at once, up to the 100th, then the next after that moment.
func TestCheckSchedulesMissedBoundCluster(t *testing.T) {
	s := time.Second
	nodes := func() *hb {
		return (&hb{}).started(0, 300).started(300, 350).started(350, 400).
			sop("a", "create", 1, s, OK, 500, 510, 1000).ticks("a", 1, 1000, 20000, 1000)
	}
	caughtUp := func(b *hb) *hb { return b.caught("a", 1, 21000, 120000, 152100).ticks("a", 1, 153000, 160000, 1000) }
	capped := func(c Counts) bool { return c.OccurrenceMissedCap == 32 && c.OccurrenceSkipped == 0 && c.Pending == 0 }
	runCheckCases(t, []checkCase{
		{"taken_over_late", caughtUp(nodes().started(20500, 152000)), "", "", capped},
		{"taken_back_by_the_killed_node_restarted", caughtUp(nodes().started(20500, 23000).started(150000, 152000)), "", "", capped},
		{"no_start_after_the_kill_recorded", caughtUp(nodes()), VOccurrenceSkipped, "08:02:01.000 to 08:02:32.000 (32 occurrences)", nil},
		{"taken_over_in_time", caughtUp(nodes().started(20500, 23000)), VOccurrenceSkipped, "08:02:01.000 to 08:02:32.000 (32 occurrences)", nil},
	})
}
