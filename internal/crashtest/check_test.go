package crashtest

import (
	"strings"
	"testing"
	"time"
)

// t0 is an arbitrary harness-clock origin for synthetic histories.
var t0 = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// hb builds synthetic histories.
type hb struct{ ev Events }

func (b *hb) sched(key, id string, out Outcome, sentMs, dueMs int) *hb {
	b.ev.Schedules = append(b.ev.Schedules, Schedule{Key: key, Topic: "t", Cycle: 1, Sent: at(sentMs), Answered: at(sentMs + 1),
		Outcome: out, ID: id, NotBefore: at(dueMs), Kind: "delay"})
	return b
}

func (b *hb) deliver(key, id, origin string, issuedMs, recvMs int) *hb {
	b.ev.Deliveries = append(b.ev.Deliveries, Delivery{Key: key, ID: id, OriginID: origin, Topic: "t", Cycle: 2,
		Issued: at(issuedMs), Received: at(recvMs)})
	return b
}

func (b *hb) settle(key, id string, kind SettleKind, delayMs int, out Outcome, sentMs, answeredMs int) *hb {
	b.ev.Settles = append(b.ev.Settles, Settle{Key: key, ID: id, Topic: "t", Kind: kind, NackDelay: time.Duration(delayMs) * time.Millisecond,
		Cycle: 2, Sent: at(sentMs), Answered: at(answeredMs), Outcome: out})
	return b
}

func (b *hb) cancel(key, id string, out Outcome, ans CancelAnswer, sentMs, answeredMs int) *hb {
	b.ev.Cancels = append(b.ev.Cancels, Cancel{Key: key, ID: id, Cycle: 1, Sent: at(sentMs), Answered: at(answeredMs), Outcome: out, Answer: ans})
	return b
}

// clean is a history with every allowed oddity: a redelivery after an
// expired lease, one after an ack in doubt, a Nack with delay and its
// retry, an in-doubt Schedule never delivered and one delivered, a Cancel
// that worked, one too late, and one in doubt whose message came anyway.
func clean() *hb {
	b := &hb{}
	b.sched("a", "A", OK, 0, 100).deliver("a", "A", "A", 90, 101).settle("a", "A", Ack, 0, OK, 102, 103)
	// b: first lease expired (no settle), redelivered, acked.
	b.sched("b", "B", OK, 0, 100).deliver("b", "B", "B", 100, 105).deliver("b", "B", "B", 900, 1000).settle("b", "B", Ack, 0, OK, 1001, 1002)
	// c: ack in doubt (kill), redelivered after the restart, acked.
	b.sched("c", "C", OK, 0, 100).deliver("c", "C", "C", 100, 110).settle("c", "C", Ack, 0, InDoubt, 111, 150).
		deliver("c", "C", "C", 400, 401).settle("c", "C", Ack, 0, OK, 402, 403)
	// d: nacked with 500 ms, the retry (new ID, same origin) came 600 ms later.
	b.sched("d", "D", OK, 0, 100).deliver("d", "D", "D", 100, 101).settle("d", "D", Nack, 500, OK, 102, 103).
		deliver("d", "D2", "D", 600, 700).settle("d", "D2", Ack, 0, OK, 701, 702)
	// e, f: in doubt; f turned out durable.
	b.sched("e", "", InDoubt, 0, 100)
	b.sched("f", "", InDoubt, 0, 100).deliver("f", "F", "F", 100, 120).settle("f", "F", Ack, 0, OK, 121, 122)
	// g: cancelled, never delivered. h: cancel too late, delivered.
	b.sched("g", "G", OK, 0, 5000).cancel("g", "G", OK, CancelCancelled, 10, 11)
	b.sched("h", "H", OK, 0, 100).cancel("h", "H", OK, CancelAlreadyDelivered, 150, 151).deliver("h", "H", "H", 100, 105).settle("h", "H", Ack, 0, OK, 106, 107)
	// i: cancel in doubt, delivered anyway.
	b.sched("i", "I", OK, 0, 100).cancel("i", "I", InDoubt, CancelNone, 50, 60).deliver("i", "I", "I", 100, 101).settle("i", "I", Ack, 0, OK, 102, 103)
	// j: acked while a Receive sent before the ack answered returned it again.
	b.sched("j", "J", OK, 0, 100).deliver("j", "J", "J", 100, 101).deliver("j", "J", "J", 102, 110).settle("j", "J", Ack, 0, OK, 103, 104).
		settle("j", "J", Ack, 0, Rejected, 111, 112)
	// k: rejected Schedule (server down), never delivered.
	b.sched("k", "", Rejected, 0, 100)
	// l: cancel in doubt that took effect: never delivered, not lost.
	b.sched("l", "L", OK, 0, 100).cancel("l", "L", InDoubt, CancelNone, 50, 60)
	// m: nacked with a delay, then cancelled by its first ID: the Cancel
	// cancelled the retry, which never came.
	b.sched("m", "M", OK, 0, 100).deliver("m", "M", "M", 100, 101).settle("m", "M", Nack, 5000, OK, 102, 103).
		cancel("m", "M", OK, CancelCancelled, 200, 201)
	return b
}

func TestCheckCleanHistoryPasses(t *testing.T) {
	res := Check(clean().ev, CheckParams{Fsync: "always", SkewBound: time.Millisecond})
	if len(res.Violations) > 0 || res.Failed("always") {
		t.Fatalf("clean history: %v", res.Violations)
	}
	c := res.Counts
	want := Counts{Scheduled: 10, ScheduleInDoubt: 2, ScheduleRejected: 1, InDoubtDelivered: 1, Delivered: 9, Deliveries: 13,
		Cancelled: 2, CancelOther: 1, CancelInDoubt: 2, CancelledInDoubt: 1, Acked: 8, AckInDoubt: 1, AckRejected: 1, Nacked: 2,
		Duplicates: 3, DupUnacked: 2, DupAckInDoubt: 1}
	if c != want {
		t.Errorf("counts\n got %+v\nwant %+v", c, want)
	}
}

// TestCheckFindsEachViolation adds one violation to the clean history per
// case and checks it is found, named by its message, and the only one.
func TestCheckFindsEachViolation(t *testing.T) {
	for _, tc := range []struct {
		name, kind, key string
		add             func(b *hb)
		detail          string
	}{
		{"never_delivered", VLost, "x", func(b *hb) { b.sched("x", "X", OK, 0, 100) }, "never delivered"},
		{"cancel_answered_unknown_and_lost", VLost, "x", func(b *hb) {
			b.sched("x", "X", OK, 0, 100).cancel("x", "X", OK, CancelUnknown, 10, 11)
		}, "Cancel answered unknown"},
		{"retry_never_came", VLostRetry, "x", func(b *hb) {
			b.sched("x", "X", OK, 0, 100).deliver("x", "X", "X", 100, 101).settle("x", "X", Nack, 300, OK, 102, 103)
		}, "retry never arrived"},
		{"unacked_never_redelivered", VLostRedelivery, "x", func(b *hb) {
			b.sched("x", "X", OK, 0, 100).deliver("x", "X", "X", 100, 101)
		}, "never handed out again"},
		{"ack_refused_never_redelivered", VLostRedelivery, "x", func(b *hb) {
			b.sched("x", "X", OK, 0, 100).deliver("x", "X", "X", 100, 101).settle("x", "X", Ack, 0, Rejected, 2000, 2001)
		}, "never durably acked"},
		{"early", VEarly, "x", func(b *hb) {
			b.sched("x", "X", OK, 0, 100).deliver("x", "X", "X", 90, 95).settle("x", "X", Ack, 0, OK, 96, 97)
		}, "before it was due"},
		{"retry_early", VEarly, "x", func(b *hb) {
			b.sched("x", "X", OK, 0, 100).deliver("x", "X", "X", 100, 101).settle("x", "X", Nack, 1000, OK, 102, 103).
				deliver("x", "X2", "X", 200, 300).settle("x", "X2", Ack, 0, OK, 301, 302)
		}, "attempt"},
		{"redelivered_after_ack", VAfterAck, "x", func(b *hb) {
			b.sched("x", "X", OK, 0, 100).deliver("x", "X", "X", 100, 101).settle("x", "X", Ack, 0, OK, 102, 103).
				deliver("x", "X", "X", 104, 105).settle("x", "X", Ack, 0, OK, 106, 107)
		}, "after its Ack"},
		{"original_after_nack", VAfterAck, "x", func(b *hb) {
			b.sched("x", "X", OK, 0, 100).deliver("x", "X", "X", 100, 101).settle("x", "X", Nack, 50, OK, 102, 103).
				deliver("x", "X", "X", 200, 201).deliver("x", "X2", "X", 200, 201).
				settle("x", "X", Ack, 0, OK, 202, 203).settle("x", "X2", Ack, 0, OK, 202, 203)
		}, "Nack"},
		{"delivered_after_cancel", VAfterCancel, "x", func(b *hb) {
			b.sched("x", "X", OK, 0, 100).cancel("x", "X", OK, CancelCancelled, 10, 11).
				deliver("x", "X", "X", 100, 101).settle("x", "X", Ack, 0, OK, 102, 103)
		}, "answered cancelled"},
		{"cancel_after_delivery", VCancelUntruthful, "x", func(b *hb) {
			b.sched("x", "X", OK, 0, 100).deliver("x", "X", "X", 100, 101).settle("x", "X", Ack, 0, OK, 102, 103).
				cancel("x", "X", OK, CancelCancelled, 200, 201)
		}, "after a Receive had returned it"},
		{"phantom_body", VPhantom, "zz", func(b *hb) { b.deliver("zz", "Z", "Z", 100, 101) }, "never scheduled"},
		{"rejected_then_delivered", VPhantom, "k", func(b *hb) { b.deliver("k", "K", "K", 100, 101) }, "rejected"},
		{"wrong_id", VIDMismatch, "x", func(b *hb) {
			b.sched("x", "X", OK, 0, 100).deliver("x", "Y", "Y", 100, 101).settle("x", "Y", Ack, 0, OK, 102, 103)
		}, "Schedule answered X"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := clean()
			tc.add(b)
			res := Check(b.ev, CheckParams{Fsync: "always", SkewBound: time.Millisecond})
			if len(res.Violations) != 1 {
				t.Fatalf("want exactly one violation, got %d: %v", len(res.Violations), res.Violations)
			}
			v := res.Violations[0]
			if v.Kind != tc.kind || v.Key != tc.key || !strings.Contains(v.Detail, tc.detail) {
				t.Errorf("got %v; want kind %s, key %s, detail containing %q", v, tc.kind, tc.key, tc.detail)
			}
			if !res.Failed("always") {
				t.Error("Failed is false")
			}
			if f, ok := res.First("always"); !ok || f.Key != tc.key {
				t.Errorf("First = %v %v", f, ok)
			}
		})
	}
}

// TestCheckCountsWithDeliverycheck: the verdict's lost, early, delivered
// and duplicate counts are deliverycheck's, and an injected duplicate (a
// copy handed out again after its durable Ack), an injected loss and an
// injected early delivery are each caught as the violation that names it.
func TestCheckCountsWithDeliverycheck(t *testing.T) {
	base := Check(clean().ev, CheckParams{Fsync: "always", SkewBound: time.Millisecond}).Counts
	for _, tc := range []struct {
		name, kind string
		add        func(b *hb)
		// want is the clean history's counts changed as the injection
		// must change them.
		want func(c Counts) Counts
	}{
		{"duplicate", VAfterAck, func(b *hb) {
			b.sched("x", "X", OK, 0, 100).deliver("x", "X", "X", 100, 101).settle("x", "X", Ack, 0, OK, 102, 103).
				deliver("x", "X", "X", 200, 201).settle("x", "X", Ack, 0, OK, 202, 203)
		}, func(c Counts) Counts {
			c.Delivered, c.Deliveries, c.Duplicates, c.DupAfterAck = c.Delivered+1, c.Deliveries+2, c.Duplicates+1, c.DupAfterAck+1
			return c
		}},
		{"lost", VLost, func(b *hb) { b.sched("x", "X", OK, 0, 100) }, func(c Counts) Counts {
			c.Lost, c.Pending = c.Lost+1, c.Pending+1
			return c
		}},
		{"early", VEarly, func(b *hb) {
			b.sched("x", "X", OK, 0, 100).deliver("x", "X", "X", 50, 60).settle("x", "X", Ack, 0, OK, 61, 62)
		}, func(c Counts) Counts {
			c.Delivered, c.Deliveries, c.Early = c.Delivered+1, c.Deliveries+1, c.Early+1
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := clean()
			tc.add(b)
			res := Check(b.ev, CheckParams{Fsync: "always", SkewBound: time.Millisecond})
			if len(res.Violations) != 1 || res.Violations[0].Kind != tc.kind || res.Violations[0].Key != "x" {
				t.Fatalf("violations %v; want one %s of x", res.Violations, tc.kind)
			}
			want := tc.want(base)
			want.Scheduled, want.Acked = base.Scheduled+1, res.Counts.Acked // the injected Schedule; its acks
			if res.Counts != want {
				t.Errorf("counts\n got %+v\nwant %+v", res.Counts, want)
			}
		})
	}
}

func TestCheckSkewAllowance(t *testing.T) {
	b := &hb{}
	b.sched("x", "X", OK, 0, 100).deliver("x", "X", "X", 90, 97).settle("x", "X", Ack, 0, OK, 98, 99)
	if res := Check(b.ev, CheckParams{SkewBound: 2 * time.Millisecond}); len(res.Violations) != 0 {
		t.Errorf("3 ms early with 2 ms skew and 1 ms precision allowed: %v", res.Violations)
	}
	if res := Check(b.ev, CheckParams{SkewBound: time.Millisecond}); len(res.Violations) != 1 || res.Counts.Early != 1 {
		t.Errorf("3 ms early with 1 ms skew: %v", res.Violations)
	}
}

// TestCheckCutAttribution: a loss of a message whose record was cut is
// marked, allowed under interval and counted against always.
func TestCheckCutAttribution(t *testing.T) {
	b := clean()
	b.sched("x", "X", OK, 0, 100)
	b.sched("y", "Y", OK, 0, 100).deliver("y", "Y", "Y", 100, 101).settle("y", "Y", Ack, 0, OK, 102, 103).
		deliver("y", "Y", "Y", 500, 501).settle("y", "Y", Ack, 0, OK, 502, 503)
	b.ev.Cuts = []Cut{{Cycle: 1, At: at(50), Keys: []string{"x"}}, {Cycle: 2, At: at(300), AckTopic: "t"}}
	res := Check(b.ev, CheckParams{Fsync: "interval"})
	if len(res.Violations) != 2 || res.Counts.CutAttributed != 2 {
		t.Fatalf("want 2 violations attributed to cuts: %+v", res.Violations)
	}
	for _, v := range res.Violations {
		if !v.Cut {
			t.Errorf("not attributed to the cut: %v", v)
		}
	}
	if res.Failed("interval") {
		t.Error("losses attributable to a cut fail a run under interval")
	}
	if !res.Failed("always") {
		t.Error("losses attributable to a cut pass a run under always")
	}
	// An ack-log cut before the ack explains nothing.
	b.ev.Cuts[1].At = at(50)
	res = Check(b.ev, CheckParams{Fsync: "interval"})
	if !res.Failed("interval") {
		t.Errorf("a duplicate after an ack that followed the cut was excused: %+v", res.Violations)
	}
}

// TestCheckCutReuseAttribution: a cut's offsets are reused after the
// restart, so losses of later records in the same log are attributed too.
func TestCheckCutReuseAttribution(t *testing.T) {
	for _, tc := range []struct {
		name string
		cut  Cut
		want bool
	}{
		{"commitlog_offset_reused", Cut{CommitlogFrom: 0x100}, true},
		{"commitlog_cut_above", Cut{CommitlogFrom: 0x201}, false},
		{"queue_log_of_its_topic", Cut{CommitlogFrom: -1, QueueTopic: "t"}, true},
		{"queue_log_of_another_topic", Cut{CommitlogFrom: -1, QueueTopic: "u"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &hb{}
			b.sched("x", "00000000000000010000000000000200", OK, 0, 100)
			b.ev.Cuts = []Cut{tc.cut}
			res := Check(b.ev, CheckParams{Fsync: "interval"})
			if len(res.Violations) != 1 || res.Violations[0].Cut != tc.want {
				t.Errorf("violations %+v; want one, attributed to the cut: %v", res.Violations, tc.want)
			}
		})
	}
}

func TestCheckPendingDuringDrain(t *testing.T) {
	b := clean()
	b.sched("x", "X", OK, 0, 100)
	res := Check(b.ev, CheckParams{})
	if len(res.Pending) != 1 || res.Pending[0] != "x" {
		t.Errorf("Pending = %v, want [x]", res.Pending)
	}
}

// cdel records a cluster delivery of stream copy seq, by a Receive sent at
// issuedMs that returned at recvMs, with the server's deliver_at dueMs.
func (b *hb) cdel(key, id string, seq uint64, issuedMs, recvMs, dueMs int) *hb {
	b.ev.Deliveries = append(b.ev.Deliveries, Delivery{Key: key, ID: id, OriginID: id, Topic: "t", Cycle: 2,
		Issued: at(issuedMs), Received: at(recvMs), StreamSeq: seq, DeliverAt: at(dueMs)})
	return b
}

// cset records a cluster Ack or Nack of stream copy seq.
func (b *hb) cset(key, id string, seq uint64, kind SettleKind, delayMs int, out Outcome, sentMs, answeredMs int) *hb {
	b.settle(key, id, kind, delayMs, out, sentMs, answeredMs)
	b.ev.Settles[len(b.ev.Settles)-1].StreamSeq = seq
	return b
}

// TestCheckCluster: in --cluster mode Receive, Ack and Nack are judged as
// on one node, except that a second copy of an ID in the delivery stream
// is a stream duplicate (its own Acks), a Nack with a delay keeps the ID
// (no ack: its redelivery is allowed, not before the delay), and the
// server's deliver_at is a not-before too.
func TestCheckCluster(t *testing.T) {
	p := CheckParams{Fsync: "always", SkewBound: time.Millisecond, Cluster: true}
	sched := func() *hb { return (&hb{}).sched("a", "A", OK, 0, 100) }
	cases := []struct {
		name    string
		b       *hb
		kind    string // expected single violation kind; "" for none
		dupes   int
		pending int
	}{
		{"acked", sched().cdel("a", "A", 7, 110, 120, 100).cset("a", "A", 7, Ack, 0, OK, 130, 140), "", 0, 0},
		{"never_acked", sched().cdel("a", "A", 7, 110, 120, 100), VLostRedelivery, 0, 1},
		{"never_delivered", sched(), VLost, 0, 1},
		{"stored_twice_each_acked", sched().cdel("a", "A", 7, 110, 120, 100).cset("a", "A", 7, Ack, 0, OK, 130, 140).
			cdel("a", "A", 9, 150, 160, 100).cset("a", "A", 9, Ack, 0, OK, 170, 180), "", 1, 0},
		// Each copy's redeliveries are judged on their own.
		{"second_copy_after_its_durable_ack", sched().cdel("a", "A", 7, 110, 120, 100).cset("a", "A", 7, Ack, 0, OK, 130, 140).
			cdel("a", "A", 9, 150, 160, 100).cset("a", "A", 9, Ack, 0, OK, 170, 180).cdel("a", "A", 9, 190, 200, 100).
			cset("a", "A", 9, Ack, 0, OK, 210, 220), VAfterAck, 2, 0},
		{"after_durable_ack", sched().cdel("a", "A", 7, 110, 120, 100).cset("a", "A", 7, Ack, 0, OK, 130, 140).
			cdel("a", "A", 7, 150, 160, 100).cset("a", "A", 7, Ack, 0, OK, 170, 180), VAfterAck, 0, 0},
		{"nack_delay_keeps_id", sched().cdel("a", "A", 7, 110, 120, 100).cset("a", "A", 7, Nack, 500, OK, 130, 140).
			cdel("a", "A", 7, 600, 640, 100).cset("a", "A", 7, Ack, 0, OK, 650, 660), "", 0, 0},
		{"before_nack_delay", sched().cdel("a", "A", 7, 110, 120, 100).cset("a", "A", 7, Nack, 500, OK, 130, 140).
			cdel("a", "A", 7, 200, 210, 100).cset("a", "A", 7, Ack, 0, OK, 650, 660), VEarly, 0, 0},
		{"nack_retry_never_came", sched().cdel("a", "A", 7, 110, 120, 100).cset("a", "A", 7, Nack, 500, OK, 130, 140), VLostRetry, 0, 1},
		{"early_by_server_time", sched().cdel("a", "A", 7, 140, 150, 200).cset("a", "A", 7, Ack, 0, OK, 160, 170), VEarly, 0, 0},
		{"after_cancel", (&hb{}).sched("a", "A", OK, 0, 1000).cancel("a", "A", OK, CancelCancelled, 10, 11).
			cdel("a", "A", 7, 1000, 1001, 1000).cset("a", "A", 7, Ack, 0, OK, 1002, 1003), VAfterCancel, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := Check(tc.b.ev, p)
			var kinds []string
			for _, v := range res.Violations {
				kinds = append(kinds, v.Kind)
			}
			want := []string{}
			if tc.kind != "" {
				want = []string{tc.kind}
			}
			if strings.Join(kinds, ",") != strings.Join(want, ",") {
				t.Errorf("violations %v, want %v", res.Violations, want)
			}
			if res.Counts.DupStream != tc.dupes || len(res.Pending) != tc.pending {
				t.Errorf("stream duplicates %d, pending %v; want %d, %d", res.Counts.DupStream, res.Pending, tc.dupes, tc.pending)
			}
		})
	}
	// On one node a delayed Nack acks the ID: the same redelivery is a
	// delivery after a durable ack.
	b := sched().cdel("a", "A", 0, 110, 120, 0).settle("a", "A", Nack, 500, OK, 130, 140).cdel("a", "A", 0, 600, 640, 0)
	if res := Check(b.ev, CheckParams{Fsync: "always", SkewBound: time.Millisecond}); res.Counts.DupAfterAck != 1 {
		t.Errorf("one node: %+v; want one delivery after a durable ack", res.Violations)
	}
}

func TestReceiptSeq(t *testing.T) {
	for rc, want := range map[string]uint64{
		"1700000000000/$JS.ACK.HOURGLASS.hg_ct0_0a1b2c3d.2.4711.55.1700000000000000000.0":               4711,
		"1700000000000/$JS.ACK.dom.ACCHASH.HOURGLASS.hg_ct0_0a1b2c3d.2.4711.55.1700000000000000000.0.r": 4711,
		"17/not-a-subject": 0,
		"":                 0,
	} {
		if got := receiptSeq(rc); got != want {
			t.Errorf("receiptSeq(%q) = %d, want %d", rc, got, want)
		}
	}
}

// con records a cluster delivery on topic of stream copy seq with attempt,
// in cycle 2, its deliver_at 0.
func (b *hb) con(topic, key, id string, seq uint64, attempt uint32, issuedMs, recvMs int) *hb {
	b.on(topic, key, id, id, attempt, 2, issuedMs, recvMs)
	b.ev.Deliveries[len(b.ev.Deliveries)-1].StreamSeq = seq
	return b
}

// from sets the origin ID of the last delivery.
func (b *hb) from(origin string) *hb {
	b.ev.Deliveries[len(b.ev.Deliveries)-1].OriginID = origin
	return b
}

// csetOn records a cluster Ack or Nack (no delay) on topic of stream copy
// seq, in cycle 2.
func (b *hb) csetOn(topic, key, id string, seq uint64, kind SettleKind, out Outcome, sentMs, answeredMs int) *hb {
	b.settleOn(topic, key, id, kind, out, 2, sentMs, answeredMs)
	b.ev.Settles[len(b.ev.Settles)-1].StreamSeq = seq
	return b
}

// cfailed delivers stream copy seq of key on "t" 4 times from ms (attempts
// 0 to 3, 100 ms apart) and nacks each: the last Nack dead-letters it.
func (b *hb) cfailed(key, id string, seq uint64, ms int) *hb {
	for i := range 4 {
		at := ms + 100*i
		b.con("t", key, id, seq, uint32(i), at, at+1).csetOn("t", key, id, seq, Nack, OK, at+2, at+3)
	}
	return b
}

// cdead delivers key's dead letter (stream copy seq on "t.dlq", attempt 4)
// at ms and acks it.
func (b *hb) cdead(key, id string, seq uint64, ms int) *hb {
	return b.con("t.dlq", key, id, seq, 4, ms, ms+1).csetOn("t.dlq", key, id, seq, Ack, OK, ms+2, ms+3)
}

// TestCheckClusterOperations: dead letters, Cancels by key, Reschedules,
// pauses and recurring schedules in --cluster mode are judged by one
// node's rules, with two differences (the redrive ones are
// TestCheckClusterRedrive's):
// a Nack with a delay makes no new incarnation (a Cancel or Reschedule by
// key is judged after one, where one node's check cannot name the
// incarnation), and a message stored twice in the delivery stream may be
// handed out on its topic from one copy after the other's dead letter was
// acked.
func TestCheckClusterOperations(t *testing.T) {
	p := CheckParams{Fsync: "always", SkewBound: time.Millisecond, Cluster: true}
	poison := func() *hb { return (&hb{}).sched("a", "A", OK, 0, 100).poisoned() }
	cases := []struct {
		name  string
		b     *hb
		kinds []string // expected violation kinds, in order
	}{
		{"poison_dead_lettered", poison().cfailed("a", "A", 7, 100).cdead("a", "A", 20, 600), nil},
		{"poison_not_dead_lettered", poison().cfailed("a", "A", 7, 100), []string{VNotDeadLettered}},
		{"dead_lettered_early", poison().con("t", "a", "A", 7, 0, 100, 101).csetOn("t", "a", "A", 7, Nack, OK, 102, 103).cdead("a", "A", 20, 600),
			[]string{VDeadLetterEarly}},
		// Consume streams of the topic (recorded in doubt: each may have
		// leased the message unseen) explain the missing deliveries.
		{"dead_lettered_after_unseen_leases", poison().rfail("t", 2, 50, 300).rfail("t", 2, 310, 400).rfail("t", 2, 410, 500).
			con("t", "a", "A", 7, 3, 510, 511).csetOn("t", "a", "A", 7, Nack, OK, 512, 513).cdead("a", "A", 20, 600), nil},
		{"after_dead_letter_same_copy", poison().cfailed("a", "A", 7, 100).cdead("a", "A", 20, 600).
			con("t", "a", "A", 7, 3, 700, 701).csetOn("t", "a", "A", 7, Nack, OK, 702, 703), []string{VAfterDeadLetter, VLostRetry}},
		{"after_dead_letter_other_copy", poison().cfailed("a", "A", 7, 100).cdead("a", "A", 20, 600).
			cfailed("a", "A", 9, 700).cdead("a", "A", 21, 1200), nil},
		// In a cluster a Nack with a delay keeps the incarnation, so a
		// Cancel by key answered cancelled after one is judged: untruthful
		// (it had been delivered) and delivered after.
		{"cancel_by_key_after_nack_delay", (&hb{}).sched("a", "A", OK, 0, 100).cdel("a", "A", 7, 110, 120, 100).
			cset("a", "A", 7, Nack, 500, OK, 130, 140).cancelKey("a", OK, CancelCancelled, 200, 210).
			cdel("a", "A", 7, 700, 710, 100).cset("a", "A", 7, Ack, 0, OK, 720, 730), []string{VCancelUntruthful, VAfterCancel}},
		{"rescheduled", (&hb{}).sched("a", "A", OK, 0, 1000).resched("a", "A", "later", OK, RescheduleRescheduled, "R", 10, 20, 2000).
			cdel("a", "R", 8, 1990, 2010, 2000).from("A").cset("a", "R", 8, Ack, 0, OK, 2020, 2030), nil},
		{"rescheduled_old_delivered", (&hb{}).sched("a", "A", OK, 0, 1000).resched("a", "A", "later", OK, RescheduleRescheduled, "R", 10, 20, 2000).
			cdel("a", "A", 7, 990, 1005, 1000).cset("a", "A", 7, Ack, 0, OK, 1010, 1020).
			cdel("a", "R", 8, 1990, 2010, 2000).from("A").cset("a", "R", 8, Ack, 0, OK, 2020, 2030), []string{VAfterReschedule}},
		{"rescheduled_by_key_early", (&hb{}).sched("a", "A", OK, 0, 1000).resched("a", "", "later", OK, RescheduleRescheduled, "R", 10, 20, 2000).
			cdel("a", "R", 8, 1490, 1500, 1000).from("A").cset("a", "R", 8, Ack, 0, OK, 1510, 1520), []string{VEarly}},
		// Pause and recurring schedules have no cluster allowance: a
		// pause answered OK holds on every node at once (JetStream's), and
		// FIRE_ALL delivers a takeover gap's occurrences late, every one.
		{"delivered_while_paused", (&hb{}).sched("a", "A", OK, 0, 100).policy("t", true, OK, 100, 110).policy("t", false, OK, 1000, 1010).
			cdel("a", "A", 7, 200, 210, 100).cset("a", "A", 7, Ack, 0, OK, 220, 230), []string{VDeliveredWhilePaused}},
		{"occurrences_of_a_takeover_gap_late", (&hb{}).sop("s", "create", 1, time.Second, OK, 500, 510, 1000).ticks("s", 1, 1000, 2000, 1000, 3000, 4000, 5000).
			occ("s", 1, 3000, "s3", 5500, 5510).ackOcc("s", 1, "s3", OK, 5520, 5530).occ("s", 1, 4000, "s4", 5500, 5510).ackOcc("s", 1, "s4", OK, 5520, 5530).
			ticks("s", 1, 5000, 6000, 1000), nil},
		{"occurrence_of_a_takeover_gap_skipped", (&hb{}).sop("s", "create", 1, time.Second, OK, 500, 510, 1000).ticks("s", 1, 1000, 6000, 1000, 3000),
			[]string{VOccurrenceSkipped}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := Check(tc.b.ev, p)
			var kinds []string
			for _, v := range res.Violations {
				kinds = append(kinds, v.Kind)
			}
			if strings.Join(kinds, ",") != strings.Join(tc.kinds, ",") {
				t.Errorf("violations %v, want kinds %v", res.Violations, tc.kinds)
			}
		})
	}
	// One node's check cannot name what a Cancel by key after a Nack with
	// a delay cancelled (a retry carries the key): counted, not judged.
	b := (&hb{}).sched("a", "A", OK, 0, 100).deliver("a", "A", "A", 110, 120).settle("a", "A", Nack, 500, OK, 130, 140).
		cancelKey("a", OK, CancelCancelled, 200, 210)
	if res := Check(b.ev, CheckParams{Fsync: "always", SkewBound: time.Millisecond}); len(res.Violations) > 0 || res.Counts.CancelByKeyUnjudged != 1 {
		t.Errorf("one node: %v, %d unjudged; want none, 1", res.Violations, res.Counts.CancelByKeyUnjudged)
	}
}

// TestCheckClusterRedrive: in --cluster mode a Redrive publishes the dead
// letter to its topic again under the same ID as attempt 0 (another
// stream copy), so the redrive rules follow stream copies: each needs
// every copy before it dead-lettered (VRedriveUnfounded, VRedrivenTwice
// within the delivery stream's 2-minute duplicate window), and a poison
// copy must be dead-lettered again and acked there, or redriven again.
func TestCheckClusterRedrive(t *testing.T) {
	p := CheckParams{Fsync: "always", SkewBound: time.Millisecond, Cluster: true}
	poison := func() *hb { return (&hb{}).sched("a", "A", OK, 0, 100).poisoned() }
	// failed: the message (copy 7) failed 4 times and its dead letter was
	// redriven by a Redrive answered OK.
	failed := func() *hb { return poison().cfailed("a", "A", 7, 100).redrive(OK, 1, 500, 510) }
	min := 60 * 1000
	cases := []struct {
		name   string
		b      *hb
		kinds  []string
		copies int // redriven copies counted
		dupes  int // stream duplicates counted
	}{
		{"redriven_and_dead_lettered_again", failed().cfailed("a", "A", 30, 600).cdead("a", "A", 40, 1100), nil, 1, 0},
		{"redriven_twice_in_a_chain", failed().cfailed("a", "A", 30, 600).redrive(OK, 1, 1050, 1060).cfailed("a", "A", 50, 1100).cdead("a", "A", 60, 1600), nil, 2, 0},
		// A kill between the publish and the ack left the dead letter in
		// both topics: a consumer acked it on the .dlq, and the topic got
		// the copy too.
		{"in_both_topics", poison().cfailed("a", "A", 7, 100).redrive(InDoubt, 0, 500, 550).cdead("a", "A", 20, 560).
			cfailed("a", "A", 30, 600).cdead("a", "A", 40, 1100), nil, 1, 0},
		{"copy_not_dead_lettered_again", poison().cfailed("a", "A", 7, 100).redrive(InDoubt, 0, 500, 550).cdead("a", "A", 20, 560).
			con("t", "a", "A", 30, 0, 600, 601).csetOn("t", "a", "A", 30, Ack, OK, 602, 603), []string{VNotDeadLettered}, 1, 0},
		{"moved_back_twice", failed().con("t", "a", "A", 30, 0, 600, 601).cfailed("a", "A", 31, 700).cdead("a", "A", 40, 1200),
			[]string{VRedrivenTwice}, 2, 0},
		// Past the duplicate window a dead letter redriven again (a kill
		// between publish and ack) comes back a second time.
		{"moved_back_twice_after_the_window", failed().con("t", "a", "A", 30, 0, 600, 601).redrive(OK, 1, 2*min+650, 2*min+660).
			cfailed("a", "A", 31, 2*min+700).cdead("a", "A", 40, 2*min+1200), nil, 2, 0},
		{"copy_before_max_attempts", poison().con("t", "a", "A", 7, 0, 100, 101).csetOn("t", "a", "A", 7, Nack, OK, 102, 103).
			redrive(OK, 1, 500, 510).cfailed("a", "A", 30, 600).cdead("a", "A", 40, 1100), []string{VRedriveUnfounded}, 1, 0},
		// A second copy that no Redrive explains is a stream duplicate.
		{"copy_before_any_redrive", poison().cfailed("a", "A", 7, 100).cfailed("a", "A", 30, 600).cdead("a", "A", 40, 1100).redrive(OK, 1, 1500, 1510), nil, 0, 4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := Check(tc.b.ev, p)
			var kinds []string
			for _, v := range res.Violations {
				kinds = append(kinds, v.Kind)
			}
			if strings.Join(kinds, ",") != strings.Join(tc.kinds, ",") {
				t.Errorf("violations %v, want kinds %v", res.Violations, tc.kinds)
			}
			if res.Counts.RedrivenCopies != tc.copies || res.Counts.DupStream != tc.dupes {
				t.Errorf("redriven copies %d, stream duplicates %d; want %d, %d", res.Counts.RedrivenCopies, res.Counts.DupStream, tc.copies, tc.dupes)
			}
		})
	}
}
