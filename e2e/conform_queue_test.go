package e2e

import (
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// The queue's cases of the conformance suite (conform_test.go).

// caseReceiveSettle: four due messages received; one acked through
// another node (and again), one nacked with a delay, one released, one
// left until its lease ends; each comes back as the target says, and
// nothing acked comes back.
func caseReceiveSettle(t *testing.T, tg *conformTarget, topic string) {
	for _, b := range []string{"ack", "delay", "release", "expire"} {
		cfAt(t, tg, topic, b, 0)
	}
	got := cfReceive(t, tg.c(), topic, 4, 15*time.Second)
	for _, m := range got {
		want := m.ReceivedAt.AsTime().Add(conformLease)
		if tg.differs(t, "lease-start") {
			want = want.Add(-20 * time.Millisecond)
		}
		if !m.LeaseExpiresAt.AsTime().Equal(want) {
			t.Errorf("%s: lease ends %v after it was received; want %v", m.Id, m.LeaseExpiresAt.AsTime().Sub(m.ReceivedAt.AsTime()), want.Sub(m.ReceivedAt.AsTime()))
		}
	}
	acked, delayed, released, expired := cfBody(got, "ack"), cfBody(got, "delay"), cfBody(got, "release"), cfBody(got, "expire")
	if acked == nil || delayed == nil || released == nil || expired == nil {
		t.Fatalf("received %v", got)
	}
	cfAck(t, tg, acked)
	_, err := tg.c().Ack(ctxT(t), connect.NewRequest(&hourglassv1.AckRequest{Topic: topic, Receipt: acked.Receipt}))
	if tg.differs(t, "ack-twice") {
		if err != nil {
			t.Errorf("Ack twice: %v; want OK", err)
		}
	} else {
		wantCode(t, "Ack twice", err, connect.CodeFailedPrecondition)
	}
	const delay = 1500 * time.Millisecond
	nackedAt := time.Now()
	if _, err := tg.c().Nack(ctxT(t), connect.NewRequest(&hourglassv1.NackRequest{Topic: topic, Receipt: delayed.Receipt, DelayMs: delay.Milliseconds(), Reason: "busy"})); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.c().Nack(ctxT(t), connect.NewRequest(&hourglassv1.NackRequest{Topic: topic, Receipt: released.Receipt, Release: true})); err != nil {
		t.Fatal(err)
	}
	// One at a time, each acked at once: the first must not outlive its
	// lease while the last is waited for.
	for range 3 {
		m := cfReceive(t, tg.c(), topic, 1, conformLease+10*time.Second)[0]
		switch string(m.Body) {
		case "ack":
			t.Errorf("the acked message came back: %v", m)
		case "delay":
			if m.ReceivedAt.AsTime().Before(nackedAt.Add(delay)) {
				t.Errorf("nacked with a delay of %v, back after %v", delay, m.ReceivedAt.AsTime().Sub(nackedAt))
			}
			ok := m.Id != delayed.Id && m.OriginId == delayed.Id // a retry under a new ID
			if tg.differs(t, "nack-delay") {
				ok = m.Id == delayed.Id
			}
			if !ok || m.Attempt != 1 {
				t.Errorf("nacked with a delay, back as %s attempt %d origin %q (first %s)", m.Id, m.Attempt, m.OriginId, delayed.Id)
			}
		case "release":
			want := uint32(0)
			if tg.differs(t, "nack-release") {
				want = 1
			}
			if m.Attempt != want || m.Id != released.Id {
				t.Errorf("released, back as %s attempt %d; want %s attempt %d", m.Id, m.Attempt, released.Id, want)
			}
		case "expire":
			if m.Attempt != 1 || m.Id != expired.Id || m.ReceivedAt.AsTime().Before(expired.LeaseExpiresAt.AsTime()) {
				t.Errorf("lease ended, back as %s attempt %d at %v (lease ended %v)", m.Id, m.Attempt, m.ReceivedAt.AsTime(), expired.LeaseExpiresAt.AsTime())
			}
		}
		cfAck(t, tg, m)
	}
	cfNone(t, tg.c(), topic, 500*time.Millisecond)
}

// caseByID: Extend, Nack and Ack naming the message's ID.
func caseByID(t *testing.T, tg *conformTarget, topic string) {
	id := cfAt(t, tg, topic, "x", 0)
	m := cfReceive(t, tg.c(), topic, 1, 15*time.Second)[0]
	ctx := ctxT(t)
	_, errE := tg.c().Extend(ctx, connect.NewRequest(&hourglassv1.ExtendRequest{Topic: topic, Id: id, LeaseMs: conformLease.Milliseconds()}))
	_, errN := tg.c().Nack(ctx, connect.NewRequest(&hourglassv1.NackRequest{Topic: topic, Id: id}))
	if tg.differs(t, "by-id") {
		wantCode(t, "Extend by id", errE, connect.CodeFailedPrecondition, "receipt")
		wantCode(t, "Nack by id", errN, connect.CodeFailedPrecondition, "receipt")
		_, err := tg.c().Ack(ctx, connect.NewRequest(&hourglassv1.AckRequest{Topic: topic, Id: id}))
		wantCode(t, "Ack by id", err, connect.CodeFailedPrecondition, "receipt")
		cfAck(t, tg, m)
		return
	}
	if errE != nil || errN != nil {
		t.Fatalf("Extend, Nack by id: %v, %v", errE, errN)
	}
	m = cfReceive(t, tg.c(), topic, 1, 15*time.Second)[0]
	if _, err := tg.c().Ack(ctx, connect.NewRequest(&hourglassv1.AckRequest{Topic: topic, Id: m.Id})); err != nil {
		t.Errorf("Ack by id: %v", err)
	}
	cfNone(t, tg.c(), topic, 300*time.Millisecond)
}

// caseLease: a Receive's and an Extend's lease_ms.
func caseLease(t *testing.T, tg *conformTarget, topic string) {
	cfAt(t, tg, topic, "x", 0)
	ctx := ctxT(t)
	cfEventually(t, 15*time.Second, "the message due", func() bool { return cfTopic(t, tg.one(), topic).Due == 1 })
	res, err := tg.c().Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: topic, MaxMessages: 1, WaitMs: 10_000, LeaseMs: 5_000}))
	other := tg.differs(t, "lease")
	if other {
		wantCode(t, "Receive with another lease than the topic's", err, connect.CodeFailedPrecondition, "lease_ms")
		res, err = tg.c().Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: topic, MaxMessages: 1, WaitMs: 10_000}))
	}
	if err != nil || len(res.Msg.Messages) != 1 {
		t.Fatalf("Receive = %v, %v", res, err)
	}
	m := res.Msg.Messages[0]
	if l := m.LeaseExpiresAt.AsTime().Sub(m.ReceivedAt.AsTime()); !other && l != 5*time.Second {
		t.Errorf("leased for %v, want 5s", l)
	}
	ex, err := tg.c().Extend(ctx, connect.NewRequest(&hourglassv1.ExtendRequest{Topic: topic, Receipt: m.Receipt, LeaseMs: 10_000}))
	if other {
		wantCode(t, "Extend by another lease than the topic's", err, connect.CodeInvalidArgument, "lease_ms")
		ex, err = tg.c().Extend(ctx, connect.NewRequest(&hourglassv1.ExtendRequest{Topic: topic, Receipt: m.Receipt, LeaseMs: conformLease.Milliseconds()}))
	}
	if err != nil || !ex.Msg.LeaseExpiresAt.AsTime().After(m.LeaseExpiresAt.AsTime()) {
		t.Fatalf("Extend = %v, %v; want a lease beyond %v", ex, err, m.LeaseExpiresAt.AsTime())
	}
	cfAck(t, tg, m)
}

// caseListQueue: List of due, leased and dead-lettered messages.
func caseListQueue(t *testing.T, tg *conformTarget, topic string) {
	first := cfAt(t, tg, topic, "a", 0)
	cfEventually(t, 15*time.Second, "the first message due", func() bool { return cfTopic(t, tg.one(), topic).Due == 1 })
	second := cfAt(t, tg, topic, "b", 0)
	cfEventually(t, 15*time.Second, "both messages due", func() bool { return cfTopic(t, tg.one(), topic).Due == 2 })
	due, err := cfList(t, tg, topic, hourglassv1.MessageState_MESSAGE_STATE_DUE, 1)
	if err != nil || len(due) != 2 || due[0].Id != first || due[1].Id != second || due[0].Receipt != "" {
		t.Errorf("List due = %v, %v; want %s, %s without receipts", due, err, first, second)
	}
	_, err = tg.c().List(ctxT(t), connect.NewRequest(&hourglassv1.ListRequest{Topic: topic, State: hourglassv1.MessageState_MESSAGE_STATE_DUE, PageToken: "x"}))
	wantCode(t, "List due with a made-up token", err, connect.CodeInvalidArgument, "token")
	m := cfReceive(t, tg.c(), topic, 1, 15*time.Second)[0]
	leased, err := cfList(t, tg, topic, hourglassv1.MessageState_MESSAGE_STATE_LEASED, 0)
	if tg.differs(t, "list-leased") {
		wantCode(t, "List leased", err, connect.CodeFailedPrecondition, "Topics")
	} else if err != nil || len(leased) != 1 || leased[0].Id != m.Id || !leased[0].LeaseExpiresAt.AsTime().Equal(m.LeaseExpiresAt.AsTime()) {
		t.Errorf("List leased = %v, %v; want %s until %v", leased, err, m.Id, m.LeaseExpiresAt.AsTime())
	}
	if _, err := tg.c().Nack(ctxT(t), connect.NewRequest(&hourglassv1.NackRequest{Topic: topic, Receipt: m.Receipt, DeadLetter: true, Reason: "poison"})); err != nil {
		t.Fatal(err)
	}
	cfEventually(t, 15*time.Second, "the dead letter counted", func() bool { return cfTopic(t, tg.one(), topic).DeadLettered == 1 })
	dead, err := cfList(t, tg, topic, hourglassv1.MessageState_MESSAGE_STATE_DEAD_LETTERED, 0)
	if err != nil || len(dead) != 1 || dead[0].Id != m.Id || dead[0].DeadLetter.GetReason() != "nacked" || dead[0].DeadLetter.GetLastError() != "poison" ||
		dead[0].DeadLetter.GetOriginTopic() != topic {
		t.Errorf("List dead-lettered = %v, %v; want %s nacked for poison", dead, err, m.Id)
	}
	// The other one received and nacked: due again on one node; in a
	// cluster waiting to come again, which List does not see.
	m = cfReceive(t, tg.c(), topic, 1, 15*time.Second)[0]
	if _, err := tg.c().Nack(ctxT(t), connect.NewRequest(&hourglassv1.NackRequest{Topic: topic, Receipt: m.Receipt})); err != nil {
		t.Fatal(err)
	}
	want := []string{m.Id}
	if tg.differs(t, "list-due") {
		want = nil
	}
	if due, err := cfList(t, tg, topic, hourglassv1.MessageState_MESSAGE_STATE_DUE, 0); err != nil || !slices.Equal(cfIDs(due), want) {
		t.Errorf("List due after a Nack = %v, %v; want %v", cfIDs(due), err, want)
	}
}

// caseDeadLetters: max attempts from the policy; the dead letters with
// why; Topics counts them; Redrive by reason; Purge of dead letters.
func caseDeadLetters(t *testing.T, tg *conformTarget, topic string) {
	ctx := ctxT(t)
	cfSetPolicy(t, tg.one(), topic, &hourglassv1.Policy{MaxAttempts: ptr(int32(2))})
	x := cfAt(t, tg, topic, "x", 0)
	cfAt(t, tg, topic, "y", 0)
	nack := func(m *hourglassv1.Message, reason string, dead bool) {
		t.Helper()
		if _, err := tg.c().Nack(ctx, connect.NewRequest(&hourglassv1.NackRequest{Topic: topic, Receipt: m.Receipt, Reason: reason, DeadLetter: dead})); err != nil {
			t.Fatal(err)
		}
	}
	ms := cfReceive(t, tg.one(), topic, 2, 15*time.Second)
	nack(cfBody(ms, "x"), "e1", false)
	nack(cfBody(ms, "y"), "poison", true)
	m := cfReceive(t, tg.one(), topic, 1, 15*time.Second)[0]
	if m.Id != x || m.Attempt != 1 {
		t.Fatalf("after a Nack: %s attempt %d; want %s attempt 1", m.Id, m.Attempt, x)
	}
	nack(m, "e2", false)
	cfEventually(t, 15*time.Second, "2 dead letters counted", func() bool { return cfTopic(t, tg.c(), topic).DeadLettered == 2 })
	dead, err := cfList(t, tg, topic, hourglassv1.MessageState_MESSAGE_STATE_DEAD_LETTERED, 0)
	if err != nil || len(dead) != 2 {
		t.Fatalf("List dead-lettered = %v, %v", dead, err)
	}
	if d := cfBody(dead, "x").GetDeadLetter(); d.GetReason() != "max-attempts" || d.GetLastError() != "e2" || d.GetAttempts() != 2 || d.GetOriginTopic() != topic {
		t.Errorf("dead letter x: %v", d)
	}
	if d := cfBody(dead, "y").GetDeadLetter(); d.GetReason() != "nacked" || d.GetLastError() != "poison" {
		t.Errorf("dead letter y: %v", d)
	}
	rd, err := tg.c().Redrive(ctx, connect.NewRequest(&hourglassv1.RedriveRequest{DeadLetterTopic: topic + ".dlq", Reason: "max-attempts"}))
	if err != nil || rd.Msg.Redriven != 1 || rd.Msg.Skipped != 1 {
		t.Fatalf("Redrive = %v, %v; want 1 redriven, 1 skipped", rd, err)
	}
	back := cfReceive(t, tg.c(), topic, 1, 15*time.Second)[0]
	newID := back.Id != x // a new message from x
	if tg.differs(t, "redrive") {
		newID = back.Id == x
	}
	if string(back.Body) != "x" || back.Attempt != 0 || back.DeadLetter != nil || !newID || back.OriginId != x {
		t.Errorf("redriven: %s attempt %d origin %q dead letter %v (first %s)", back.Id, back.Attempt, back.OriginId, back.DeadLetter, x)
	}
	cfAck(t, tg, back)
	pu, err := tg.c().Purge(ctx, connect.NewRequest(&hourglassv1.PurgeRequest{Topic: topic, State: hourglassv1.MessageState_MESSAGE_STATE_DEAD_LETTERED}))
	if err != nil || pu.Msg.Purged != 1 {
		t.Errorf("Purge dead letters = %v, %v; want 1", pu, err)
	}
	if ti := cfTopic(t, tg.c(), topic); ti.DeadLettered != 0 || ti.Due != 0 {
		t.Errorf("Topics after the purge: %v", ti)
	}
	_, err = tg.c().Redrive(ctx, connect.NewRequest(&hourglassv1.RedriveRequest{DeadLetterTopic: topic}))
	wantCode(t, "Redrive of a topic that is not a dead-letter topic", err, connect.CodeInvalidArgument)
}

// casePolicy: GetPolicy and SetPolicy, refusals, pause and resume,
// DeleteTopic taking the policy.
func casePolicy(t *testing.T, tg *conformTarget, topic string) {
	ctx := ctxT(t)
	c := tg.one()
	gp, err := c.GetPolicy(ctx, connect.NewRequest(&hourglassv1.GetPolicyRequest{Topic: topic}))
	if err != nil || gp.Msg.Policy.GetLeaseMs() != 0 || gp.Msg.Effective.GetLeaseMs() != conformLease.Milliseconds() || gp.Msg.Effective.GetMaxAttempts() != 3 {
		t.Fatalf("GetPolicy of a new topic = %v, %v; want the flags' lease and max attempts", gp, err)
	}
	sp := cfSetPolicy(t, c, topic, &hourglassv1.Policy{LeaseMs: ptr(int64(2000)), MaxAttempts: ptr(int32(5))})
	if sp.Effective.GetLeaseMs() != 2000 || sp.Effective.GetMaxAttempts() != 5 {
		t.Errorf("SetPolicy = %v", sp)
	}
	last := tg.nodes[len(tg.nodes)-1].client // another node in a cluster
	if gp, err := last.GetPolicy(ctx, connect.NewRequest(&hourglassv1.GetPolicyRequest{Topic: topic})); err != nil ||
		gp.Msg.Policy.GetLeaseMs() != 2000 || gp.Msg.Policy.GetMaxAttempts() != 5 || gp.Msg.Effective.GetPaused() {
		t.Errorf("GetPolicy after SetPolicy, through the last node = %v, %v", gp, err)
	}
	_, err = c.SetPolicy(ctx, connect.NewRequest(&hourglassv1.SetPolicyRequest{Topic: topic, Policy: &hourglassv1.Policy{Backoff: &hourglassv1.Backoff{InitialMs: 100, MaxMs: 1000, Multiplier: 2}}}))
	if err != nil {
		t.Errorf("SetPolicy backoff: %v", err)
	}
	_, err = c.SetPolicy(ctx, connect.NewRequest(&hourglassv1.SetPolicyRequest{Topic: topic, Policy: &hourglassv1.Policy{MaxDispatchRate: ptr(100.0)}}))
	if tg.differs(t, "policy-rate") {
		wantCode(t, "SetPolicy max_dispatch_rate", err, connect.CodeInvalidArgument, "max_dispatch_rate")
	} else if err != nil {
		t.Errorf("SetPolicy max_dispatch_rate: %v", err)
	}
	_, err = c.SetPolicy(ctx, connect.NewRequest(&hourglassv1.SetPolicyRequest{Topic: topic, Defaults: []string{"nope"}}))
	wantCode(t, "SetPolicy defaults nope", err, connect.CodeInvalidArgument, "max_attempts")
	_, err = c.SetPolicy(ctx, connect.NewRequest(&hourglassv1.SetPolicyRequest{Topic: topic, Policy: &hourglassv1.Policy{MaxAttempts: ptr(int32(5000))}}))
	wantCode(t, "SetPolicy max_attempts 5000", err, connect.CodeInvalidArgument, "max attempts")

	// Paused: nothing handed out through any node, the message waits.
	cfSetPolicy(t, c, topic, &hourglassv1.Policy{Paused: ptr(true)})
	id := cfAt(t, tg, topic, "p", 0)
	cfEventually(t, 15*time.Second, "the message due while paused", func() bool { return cfTopic(t, c, topic).Due == 1 })
	for range len(tg.nodes) {
		cfNone(t, tg.c(), topic, 500*time.Millisecond)
	}
	ti := cfTopic(t, c, topic)
	if !ti.Policy.GetPaused() {
		t.Errorf("Topics while paused: %v", ti)
	}
	if tg.differs(t, "oldest-due") {
		if ti.OldestDueAgeSeconds != 0 {
			t.Errorf("Topics oldest due age = %v; want 0", ti.OldestDueAgeSeconds)
		}
	} else if ti.OldestDueAgeSeconds < 0.4 {
		t.Errorf("Topics oldest due age = %v after waiting at least 0.5 s", ti.OldestDueAgeSeconds)
	}
	sp = cfSetPolicy(t, c, topic, nil, "paused")
	if sp.Effective.GetPaused() || sp.Policy.GetLeaseMs() != 2000 {
		t.Errorf("resumed: %v; want the lease kept", sp)
	}
	m := cfReceive(t, c, topic, 1, 15*time.Second)[0]
	if m.Id != id || m.LeaseExpiresAt.AsTime().Sub(m.ReceivedAt.AsTime()) > 2*time.Second {
		t.Errorf("after the resume: %s leased until %v; want %s for the policy's 2s", m.Id, m.LeaseExpiresAt.AsTime().Sub(m.ReceivedAt.AsTime()), id)
	}
	cfAck(t, tg, m)
	if _, err := c.DeleteTopic(ctx, connect.NewRequest(&hourglassv1.DeleteTopicRequest{Topic: topic})); err != nil {
		t.Fatal(err)
	}
	gp, err = c.GetPolicy(ctx, connect.NewRequest(&hourglassv1.GetPolicyRequest{Topic: topic}))
	if err != nil || gp.Msg.Policy.LeaseMs != nil || gp.Msg.Policy.MaxAttempts != nil || gp.Msg.Effective.GetLeaseMs() != conformLease.Milliseconds() {
		t.Errorf("GetPolicy after DeleteTopic = %v, %v; want the flags' defaults", gp, err)
	}
}

// casePurgeDue: Purge of due messages while one is leased.
func casePurgeDue(t *testing.T, tg *conformTarget, topic string) {
	for _, b := range []string{"a", "b", "c"} {
		cfAt(t, tg, topic, b, 0)
	}
	cfEventually(t, 15*time.Second, "3 messages due", func() bool { return cfTopic(t, tg.one(), topic).Due == 3 })
	m := cfReceive(t, tg.c(), topic, 1, 15*time.Second)[0]
	want := int64(2)
	if tg.differs(t, "purge-due") {
		want = 3
	}
	pu, err := tg.c().Purge(ctxT(t), connect.NewRequest(&hourglassv1.PurgeRequest{Topic: topic, State: hourglassv1.MessageState_MESSAGE_STATE_DUE}))
	if err != nil || pu.Msg.Purged != want {
		t.Errorf("Purge due with one of 3 leased = %v, %v; want %d", pu, err, want)
	}
	if !tg.cluster {
		cfAck(t, tg, m)
	}
	cfNone(t, tg.c(), topic, 300*time.Millisecond)
}

// caseFlow: a message's flow key reaches the consumer as a header; a
// topic's per-key bound (flow_concurrency 1) holds a key's second message
// back until the first is acked.
func caseFlow(t *testing.T, tg *conformTarget, topic string) {
	ctx := ctxT(t)
	_, err := tg.one().SetPolicy(ctx, connect.NewRequest(&hourglassv1.SetPolicyRequest{Topic: topic, Policy: &hourglassv1.Policy{FlowConcurrency: ptr(int32(1))}}))
	bounded := !tg.differs(t, "policy-flow")
	if bounded && err != nil {
		t.Fatalf("SetPolicy flow_concurrency 1: %v", err)
	} else if !bounded {
		wantCode(t, "SetPolicy flow_concurrency", err, connect.CodeFailedPrecondition, "flow_concurrency")
	}
	batch := &hourglassv1.ScheduleBatchRequest{} // one partition in a cluster: in order
	for _, b := range []string{"a1", "a2"} {
		batch.Messages = append(batch.Messages, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte(b), FlowKey: "tenant-a", When: delayMs(0)})
	}
	if _, err := tg.c().ScheduleBatch(ctx, connect.NewRequest(batch)); err != nil {
		t.Fatal(err)
	}
	first := cfReceive(t, tg.c(), topic, 1, 15*time.Second)[0]
	if string(first.Body) != "a1" || headerFold(first.Headers, "hourglass-flow-key") != "tenant-a" {
		t.Errorf("first: %q with headers %v; want a1 with its flow key", first.Body, first.Headers)
	}
	if bounded {
		cfNone(t, tg.c(), topic, 500*time.Millisecond) // a2 waits for a1
	}
	if !bounded {
		m := cfReceive(t, tg.c(), topic, 1, 15*time.Second)[0]
		if string(m.Body) != "a2" {
			t.Errorf("second: %q; want a2", m.Body)
		}
		cfAck(t, tg, m)
	}
	cfAck(t, tg, first)
	if bounded {
		cfAck(t, tg, cfReceive(t, tg.c(), topic, 1, 15*time.Second)[0])
	}
}

// caseBackoff: a topic's backoff holds a message nacked without a delay
// back, and one whose lease ended.
func caseBackoff(t *testing.T, tg *conformTarget, topic string) {
	const backoff = 3 * time.Second
	c := tg.one() // the node that set the policy uses it at once
	sp := cfSetPolicy(t, c, topic, &hourglassv1.Policy{Backoff: &hourglassv1.Backoff{InitialMs: backoff.Milliseconds(), Multiplier: 1}})
	if sp.Effective.GetBackoff().GetInitialMs() != backoff.Milliseconds() {
		t.Fatalf("SetPolicy backoff = %v", sp)
	}
	cfAt(t, tg, topic, "nacked", 0)
	cfAt(t, tg, topic, "expired", 0)
	got := cfReceive(t, c, topic, 2, 15*time.Second)
	nacked, expired := cfBody(got, "nacked"), cfBody(got, "expired")
	if nacked == nil || expired == nil {
		t.Fatalf("received %v", got)
	}
	nackedAt := time.Now()
	if _, err := c.Nack(ctxT(t), connect.NewRequest(&hourglassv1.NackRequest{Topic: topic, Receipt: nacked.Receipt})); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		m := cfReceive(t, c, topic, 1, conformLease+backoff+10*time.Second)[0]
		at := m.ReceivedAt.AsTime()
		switch string(m.Body) {
		case "nacked":
			if at.Before(nackedAt.Add(backoff)) {
				t.Errorf("nacked without a delay: back after %v; want the backoff %v", at.Sub(nackedAt), backoff)
			}
		case "expired":
			end := expired.LeaseExpiresAt.AsTime()
			if tg.differs(t, "backoff-expired") {
				// JetStream hands it out again when its AckWait ends.
				if at.Before(end) || !at.Before(end.Add(backoff)) {
					t.Errorf("lease ended at %v, back at %v; want within the backoff %v after", end, at, backoff)
				}
			} else if at.Before(end.Add(backoff)) {
				t.Errorf("lease ended at %v, back at %v; want the backoff %v after", end, at, backoff)
			}
		}
		if m.Attempt != 1 {
			t.Errorf("%s back as attempt %d", m.Body, m.Attempt)
		}
		cfAck(t, tg, m)
	}
}

// caseExpiry: on a paused topic, a message past its expiry is never
// handed out but dead-lettered with reason expired once the topic
// resumes; one whose expiry is later is received.
func caseExpiry(t *testing.T, tg *conformTarget, topic string) {
	c := tg.one()
	for field, p := range map[string]*hourglassv1.Policy{"expiry_drop": {ExpiryDrop: ptr(true)}, "expiry_unacked": {ExpiryUnacked: ptr(true)}} {
		_, err := c.SetPolicy(ctxT(t), connect.NewRequest(&hourglassv1.SetPolicyRequest{Topic: topic, Policy: p}))
		if tg.differs(t, "policy-expiry") {
			wantCode(t, "SetPolicy "+field, err, connect.CodeFailedPrecondition, field)
		} else if err != nil {
			t.Fatalf("SetPolicy %s: %v", field, err)
		}
	}
	if !tg.cluster {
		cfSetPolicy(t, c, topic, nil, "expiry_drop", "expiry_unacked")
	}
	cfSetPolicy(t, c, topic, &hourglassv1.Policy{Paused: ptr(true)})
	stale := cfSchedule(t, tg, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("stale"), When: delayMs(0),
		Expiry: &hourglassv1.ScheduleRequest_TtlMs{TtlMs: 300}})
	fresh := cfSchedule(t, tg, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("fresh"), When: delayMs(0),
		Expiry: &hourglassv1.ScheduleRequest_TtlMs{TtlMs: 3_600_000}})
	_, err := tg.c().Schedule(ctxT(t), connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: topic, When: delayMs(0),
		Expiry: &hourglassv1.ScheduleRequest_TtlMs{TtlMs: -1}}))
	wantCode(t, "Schedule with ttl_ms -1", err, connect.CodeInvalidArgument, "ttl_ms")
	cfEventually(t, 15*time.Second, "both messages due", func() bool { return cfTopic(t, c, topic).Due == 2 })
	expires := stale.DeliverAt.AsTime().Add(300 * time.Millisecond)
	cfEventually(t, 10*time.Second, "the server's clock past the expiry", func() bool {
		res, err := c.Time(ctxT(t), connect.NewRequest(&hourglassv1.TimeRequest{}))
		return err == nil && res.Msg.Now.AsTime().After(expires.Add(100*time.Millisecond))
	})
	cfSetPolicy(t, c, topic, nil, "paused")
	m := cfReceive(t, c, topic, 1, 15*time.Second)[0]
	if m.Id != fresh.Id {
		t.Errorf("received %s %q; want only %s (fresh)", m.Id, m.Body, fresh.Id)
	}
	cfAck(t, tg, m)
	cfNone(t, c, topic, 300*time.Millisecond)
	d := cfReceive(t, c, topic+".dlq", 1, 15*time.Second)[0]
	if d.Id != stale.Id || d.DeadLetter.GetReason() != "expired" || d.DeadLetter.GetOriginTopic() != topic {
		t.Errorf("dead letter %s %v; want %s, reason expired, from %s", d.Id, d.DeadLetter, stale.Id, topic)
	}
	cfAck(t, tg, d)
}
