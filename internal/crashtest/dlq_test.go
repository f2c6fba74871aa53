package crashtest

import (
	"strings"
	"testing"
	"time"
)

// on records a delivery on topic in cycle with attempt.
func (b *hb) on(topic, key, id, origin string, attempt uint32, cycle, issuedMs, recvMs int) *hb {
	b.ev.Deliveries = append(b.ev.Deliveries, Delivery{Key: key, ID: id, OriginID: origin, Topic: topic, Attempt: attempt,
		Cycle: cycle, Issued: at(issuedMs), Received: at(recvMs)})
	return b
}

// settleOn records an Ack or Nack on topic.
func (b *hb) settleOn(topic, key, id string, kind SettleKind, out Outcome, cycle, sentMs, answeredMs int) *hb {
	b.ev.Settles = append(b.ev.Settles, Settle{Key: key, ID: id, Topic: topic, Kind: kind, Cycle: cycle,
		Sent: at(sentMs), Answered: at(answeredMs), Outcome: out})
	return b
}

// rfail records a Receive of topic that failed in doubt.
func (b *hb) rfail(topic string, cycle, issuedMs, failedMs int) *hb {
	b.ev.ReceiveFails = append(b.ev.ReceiveFails, ReceiveFail{Topic: topic, Cycle: cycle, Issued: at(issuedMs), Failed: at(failedMs)})
	return b
}

// poisoned marks the last schedule as a poison message.
func (b *hb) poisoned() *hb {
	b.ev.Schedules[len(b.ev.Schedules)-1].Poison = true
	return b
}

// failed delivers key on "t" n times (attempts 0..n-1, cycle 2, 100 ms
// apart from 100 ms) and nacks each with no delay.
func (b *hb) failed(key, id string, n int) *hb {
	for i := range n {
		ms := 100 + 100*i
		b.on("t", key, id, id, uint32(i), 2, ms, ms+1).settleOn("t", key, id, Nack, OK, 2, ms+2, ms+3)
	}
	return b
}

// expired delivers key on "t" n times (attempts 0..n-1, cycle 2) and lets
// every lease run out.
func (b *hb) expired(key, id string, n int) *hb {
	for i := range n {
		ms := 100 + 100*i
		b.on("t", key, id, id, uint32(i), 2, ms, ms+1)
	}
	return b
}

// deadLettered delivers key on "t.dlq" at ms (cycle, attempt 4) and acks it.
func (b *hb) deadLettered(key, id string, cycle, ms int) *hb {
	return b.on("t.dlq", key, id, id, 4, cycle, ms, ms+1).settleOn("t.dlq", key, id, Ack, OK, cycle, ms+2, ms+3)
}

// TestCheckDeadLetters holds each dead-letter rule to a history that keeps
// it and one that breaks it (max-attempts 4).
func TestCheckDeadLetters(t *testing.T) {
	for _, tc := range []struct {
		name   string
		b      *hb
		kind   string // the one violation expected; "" for none
		detail string
		counts func(c Counts) bool
	}{
		{"poison_dead_lettered", (&hb{}).sched("p", "P", OK, 0, 100).poisoned().failed("p", "P", 4).deadLettered("p", "P", 2, 1000), "", "",
			func(c Counts) bool {
				return c.Poison == 1 && c.DeadLettered == 1 && c.DeadLetteredPoison == 1 && c.DLQDeliveries == 1
			}},
		// The Nack that dead-letters it is answered after the dead letter
		// was received and acked (it appends to t.dlq, then acks on t).
		{"poison_dead_lettered_before_its_nack_answered", (&hb{}).sched("p", "P", OK, 0, 100).poisoned().failed("p", "P", 3).
			on("t", "p", "P", "P", 3, 2, 500, 501).on("t.dlq", "p", "P", "P", 4, 2, 503, 504).settleOn("t.dlq", "p", "P", Ack, OK, 2, 505, 506).
			settleOn("t", "p", "P", Nack, OK, 2, 502, 507), "", "", nil},
		{"non_poison_dead_lettered_by_expired_leases", (&hb{}).sched("n", "N", OK, 0, 100).expired("n", "N", 4).deadLettered("n", "N", 2, 1000), "", "",
			func(c Counts) bool { return c.Poison == 0 && c.DeadLettered == 1 && c.DeadLetteredPoison == 0 }},
		{"phantom_dead_letter", (&hb{}).on("t.dlq", "zz", "Z", "Z", 4, 2, 1000, 1001), VPhantom, "never scheduled", nil},
		{"dead_letter_of_another_topic", (&hb{}).sched("n", "N", OK, 0, 100).expired("n", "N", 4).on("u.dlq", "n", "N", "N", 4, 2, 1000, 1001).
			settleOn("u.dlq", "n", "N", Ack, OK, 2, 1002, 1003), VPhantom, `handed out on topic "u.dlq"`, nil},
		// Two deliveries seen, two Receives of t lost in doubt while it
		// existed: the server may have leased it four times.
		{"dead_lettered_after_receives_in_doubt", (&hb{}).sched("n", "N", OK, 0, 100).expired("n", "N", 2).rfail("t", 2, 500, 600).rfail("t", 2, 700, 800).
			deadLettered("n", "N", 2, 1000), "", "", func(c Counts) bool { return c.ReceiveInDoubt == 2 }},
		{"dead_lettered_before_max_attempts", (&hb{}).sched("n", "N", OK, 0, 100).expired("n", "N", 2).rfail("u", 2, 500, 600).rfail("t", 2, 1500, 1600).
			deadLettered("n", "N", 2, 1000), VDeadLetterEarly, "after 2 deliveries on t and 0 Receives", nil},
		{"dead_letter_attempt_below_max", (&hb{}).sched("n", "N", OK, 0, 100).expired("n", "N", 4).on("t.dlq", "n", "N", "N", 3, 2, 1000, 1001).
			settleOn("t.dlq", "n", "N", Ack, OK, 2, 1002, 1003), VDeadLetterEarly, "with attempt 3", nil},
		{"poison_never_dead_lettered", (&hb{}).sched("p", "P", OK, 0, 100).poisoned().failed("p", "P", 4), VNotDeadLettered, "0 on t.dlq",
			func(c Counts) bool { return c.NotDeadLettered == 1 && c.Lost == 0 && c.Pending == 1 }},
		{"poison_acked_on_its_topic", (&hb{}).sched("p", "P", OK, 0, 100).poisoned().failed("p", "P", 2).on("t", "p", "P", "P", 2, 2, 500, 501).
			settleOn("t", "p", "P", Ack, OK, 2, 502, 503), VNotDeadLettered, "without its crashtest-poison header", nil},
		{"handed_out_at_max_attempts", (&hb{}).sched("n", "N", OK, 0, 100).expired("n", "N", 5).deadLettered("n", "N", 2, 1000), VNotDeadLettered, "with attempt 4", nil},
		// The dead letter is acked; the message comes back on t and again
		// on t.dlq, but only after a restart: the first dead-lettering's
		// ack on t was lost, and the message was dead-lettered twice.
		{"dead_lettered_twice_across_a_restart", (&hb{}).sched("n", "N", OK, 0, 100).expired("n", "N", 4).deadLettered("n", "N", 2, 1000).
			on("t", "n", "N", "N", 3, 3, 2000, 2001).deadLettered("n", "N", 3, 3000), "", "",
			func(c Counts) bool {
				return c.DupDeadLetterAgain == 1 && c.AfterDeadLetterRestart == 1 && c.DupAfterAck == 0
			}},
		{"dead_letter_again_after_durable_ack", (&hb{}).sched("n", "N", OK, 0, 100).expired("n", "N", 4).deadLettered("n", "N", 2, 1000).
			deadLettered("n", "N", 2, 1100), VAfterAck, "on t.dlq", func(c Counts) bool { return c.DupAfterAck == 1 }},
		{"handed_out_on_topic_after_restart", (&hb{}).sched("n", "N", OK, 0, 100).expired("n", "N", 4).deadLettered("n", "N", 2, 1000).
			on("t", "n", "N", "N", 3, 3, 2000, 2001).settleOn("t", "n", "N", Ack, OK, 3, 2002, 2003), "", "",
			func(c Counts) bool { return c.AfterDeadLetterRestart == 1 }},
		{"handed_out_on_topic_after_dead_letter_ack", (&hb{}).sched("n", "N", OK, 0, 100).expired("n", "N", 4).deadLettered("n", "N", 2, 1000).
			on("t", "n", "N", "N", 3, 2, 2000, 2001).settleOn("t", "n", "N", Ack, OK, 2, 2002, 2003), VAfterDeadLetter, "no restart since its first lease",
			func(c Counts) bool { return c.AfterDeadLetterRestart == 0 }},
	} {
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
