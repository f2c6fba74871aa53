package jsqueue

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
)

// TestExtend: a receipt extended through other nodes, again and again,
// keeps its message from being handed out again well past its first
// lease (each wait below is a Receive that would get the redelivery),
// and still acks on a third node once its own lease is over; a lease
// other than the consumer's is refused, and so is a receipt past its
// extended lease by a node's clock.
func TestExtend(t *testing.T) {
	e := newEnv(t)
	a, b, c := e.node(Options{Lease: time.Second}), e.node(Options{Lease: time.Second}), e.node(Options{Lease: time.Second})
	none(t, a, "long", 0)
	e.deliver("long", "l")
	m := receive(t, a, "long", 1, 5*time.Second)[0]
	if _, err := b.ExtendReceipt(ctxT(t), "long", m.Receipt, 2*time.Second); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), "send lease_ms 1000") {
		t.Errorf("Extend by 2s of a 1s consumer: %v; want InvalidArgument naming 1000", err)
	}
	for i := range 4 {
		// 600 ms of waiting on a Receive: without the extensions the
		// message would come back after 1 s.
		none(t, a, "long", 600*time.Millisecond)
		ext := []*Queue{b, c}[i%2]
		before := time.Now()
		until, err := ext.ExtendReceipt(ctxT(t), "long", m.Receipt, time.Second)
		if err != nil {
			t.Fatalf("extension %d: %v", i, err)
		}
		if until.Before(before.Add(time.Second)) || until.After(time.Now().Add(time.Second)) {
			t.Errorf("extension %d: lease until %v, want a second from the call", i, until)
		}
	}
	if since := time.Since(m.ReceivedAt); since < 2*time.Second {
		t.Fatalf("only %v after the receive: the test did not outlast the first lease", since)
	}
	later := e.node(Options{Lease: time.Second, Now: func() time.Time { return time.Now().Add(5 * time.Second) }})
	if err := later.AckReceipt(ctxT(t), "long", m.Receipt); !errors.Is(err, queue.ErrNotLeased) {
		t.Errorf("ack past the extended lease by the node's clock: %v, want ErrNotLeased", err)
	}
	if err := c.AckReceipt(ctxT(t), "long", m.Receipt); err != nil {
		t.Fatalf("ack of the extended receipt after its first lease: %v", err)
	}
	none(t, a, "long", 1500*time.Millisecond)
}

// TestPolicy: a policy set on one node is the consumer's lease and max
// attempts on every node (read again by another node that used the topic
// before), and so is a backoff; rate is refused naming the field; pause makes
// Receive empty (not waiting, and waiting) on any node while messages
// wait, and resume hands them out; defaults bring back the node's flags.
func TestPolicy(t *testing.T) {
	e := newEnv(t)
	a := e.node(Options{Lease: 5 * time.Second, MaxAttempts: 5})
	b := e.node(Options{Lease: 5 * time.Second, MaxAttempts: 5, Refresh: 100 * time.Millisecond})
	none(t, b, "pol", 0)
	if _, _, err := a.SetPolicy(ctxT(t), "pol", queue.Policy{Lease: 1500 * time.Millisecond, MaxAttempts: 2}); err != nil {
		t.Fatal(err)
	}
	set, eff, err := b.Policy(ctxT(t), "pol")
	if err != nil || set != (queue.Policy{Lease: 1500 * time.Millisecond, MaxAttempts: 2}) || eff != set {
		t.Errorf("policy on the other node: set %+v effective %+v, %v", set, eff, err)
	}
	bo := queue.Backoff{Initial: 250 * time.Millisecond, Max: 4 * time.Second, Multiplier: 2.5, Jitter: 0.1}
	if _, _, err := a.SetPolicy(ctxT(t), "bo", queue.Policy{Backoff: bo}); err != nil {
		t.Fatal(err)
	}
	if set, eff, err := b.Policy(ctxT(t), "bo"); err != nil || set.Backoff != bo || eff.Backoff != bo {
		t.Errorf("backoff on the other node: set %+v effective %+v, %v; want %+v", set, eff, err, bo)
	}
	if _, _, err := a.SetPolicy(ctxT(t), "bo", queue.Policy{}); err != nil {
		t.Fatal(err)
	}
	if set, eff, err := b.Policy(ctxT(t), "bo"); err != nil || !set.Backoff.IsZero() || !eff.Backoff.IsZero() {
		t.Errorf("backoff after it was set back: set %+v effective %+v, %v; want none", set, eff, err)
	}
	for _, bad := range []struct {
		p     queue.Policy
		field string
	}{
		{queue.Policy{Rate: 10}, "max_dispatch_rate"},
		{queue.Policy{MaxAttempts: 1001}, "max attempts"},
	} {
		if _, _, err := a.SetPolicy(ctxT(t), "pol", bad.p); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), bad.field) {
			t.Errorf("SetPolicy %+v: %v; want InvalidArgument naming %s", bad.p, err, bad.field)
		}
	}
	ids := e.deliver("pol", "p")
	for attempt := range 2 {
		m := receive(t, b, "pol", 1, 5*time.Second)[0]
		if l := m.LeaseUntil.Sub(m.ReceivedAt); l != 1500*time.Millisecond-DeliveryMargin {
			t.Errorf("leased for %v on the other node, want the policy's 1.5s", l)
		}
		if err := b.NackReceipt(ctxT(t), "pol", m.Receipt, queue.NackOptions{Reason: "no"}); err != nil {
			t.Fatalf("nack %d: %v", attempt, err)
		}
	}
	if d := receive(t, a, "pol.dlq", 1, 5*time.Second)[0]; d.ID != ids[0] {
		t.Errorf("after 2 attempts pol.dlq got %v, want %v", d.ID, ids[0])
	}

	// Pause.
	if _, _, err := b.SetPolicy(ctxT(t), "pol", queue.Policy{Lease: 1500 * time.Millisecond, MaxAttempts: 2, Paused: true}); err != nil {
		t.Fatal(err)
	}
	ids = e.deliver("pol", "q1", "q2")
	none(t, a, "pol", 0)
	none(t, a, "pol", 700*time.Millisecond)
	none(t, b, "pol", 0)
	if _, eff, err := a.Policy(ctxT(t), "pol"); err != nil || !eff.Paused {
		t.Errorf("paused policy read on a: %+v, %v", eff, err)
	}
	ts, err := a.Topics(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if i := topicIndex(ts, "pol"); i < 0 || ts[i].Due != 2 || ts[i].Leased != 0 || ts[i].DeadLettered != 1 || !ts[i].Policy.Paused {
		t.Errorf("Topics while paused: %+v; want pol with 2 due, 1 dead letter, paused", ts)
	}
	if _, _, err := a.SetPolicy(ctxT(t), "pol", queue.Policy{}); err != nil {
		t.Fatal(err)
	}
	got := receive(t, a, "pol", 2, 5*time.Second)
	if got[0].ID != ids[0] || got[1].ID != ids[1] {
		t.Errorf("after resume: %v %v, want %v", got[0].ID, got[1].ID, ids)
	}
	if l := got[0].LeaseUntil.Sub(got[0].ReceivedAt); l != 5*time.Second-DeliveryMargin {
		t.Errorf("lease back to the default: %v, want the node's 5s", l)
	}
	if set, _, _ := a.Policy(ctxT(t), "pol"); set != (queue.Policy{}) {
		t.Errorf("policy as set after defaults: %+v, want none", set)
	}

	// A node with other flags setting one field leaves the others as the
	// consumer has them.
	c := e.node(Options{Lease: 3 * time.Second, MaxAttempts: 9})
	if _, _, err := c.SetPolicy(ctxT(t), "pol", queue.Policy{MaxAttempts: 4}); err != nil {
		t.Fatal(err)
	}
	if set, eff, err := a.Policy(ctxT(t), "pol"); err != nil || set != (queue.Policy{MaxAttempts: 4}) || eff.Lease != 5*time.Second {
		t.Errorf("after a SetPolicy of max attempts by a node with a 3s lease: set %+v, effective %+v, %v; want the lease kept at 5s", set, eff, err)
	}
}

func topicIndex(ts []TopicStats, topic string) int {
	for i, s := range ts {
		if s.Topic == topic {
			return i
		}
	}
	return -1
}

// TestRedrivePurgeDelete: dead letters are moved back (bounded, then
// filtered, the skipped one left receivable in the dead-letter topic)
// as attempt 0 with their IDs and without the dead-letter headers;
// Topics counts them; Purge empties a topic's subject, leased messages
// included; DeleteTopic removes the consumer with the policy.
func TestRedrivePurgeDelete(t *testing.T) {
	e := newEnv(t)
	q := e.node(Options{Lease: 5 * time.Second})
	none(t, q, "jobs", 0)
	ids := e.deliver("jobs", "j0", "j1", "j2")
	for _, m := range receive(t, q, "jobs", 3, 5*time.Second) {
		if err := q.NackReceipt(ctxT(t), "jobs", m.Receipt, queue.NackOptions{DeadLetter: true, Reason: "bad " + string(m.Body)}); err != nil {
			t.Fatal(err)
		}
	}
	none(t, q, "jobs", 0)
	ts, err := q.Topics(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if i := topicIndex(ts, "jobs"); i < 0 || ts[i].DeadLettered != 3 || ts[i].Due != 0 || topicIndex(ts, "jobs.dlq") >= 0 {
		t.Errorf("Topics: %+v; want jobs with 3 dead letters, and no jobs.dlq entry", ts)
	}

	res, err := q.Redrive(ctxT(t), "jobs.dlq", queue.RedriveOptions{Max: 1})
	if err != nil || res.Redriven != 1 || !res.More {
		t.Fatalf("Redrive max 1: %+v, %v; want 1 moved and more", res, err)
	}
	skip := ids[2]
	res, err = q.Redrive(ctxT(t), "jobs.dlq", queue.RedriveOptions{Match: func(m queue.Message) bool { return m.ID != skip }})
	if err != nil || res.Redriven != 1 || res.Skipped != 1 || res.More {
		t.Fatalf("Redrive but one: %+v, %v; want 1 moved, 1 skipped", res, err)
	}
	back := receive(t, q, "jobs", 2, 5*time.Second)
	for _, m := range back {
		if m.ID == skip || m.Attempt != 0 || m.Topic != "jobs" || message.HeaderValue(m.Headers, queue.DeadLetterReasonHeader) != "" ||
			message.HeaderValue(m.Headers, "X-Order") != string(m.Body) {
			t.Errorf("redriven: %+v; want attempt 0 without dead-letter headers, not %v", m, skip)
		}
	}
	if back[0].ID == back[1].ID {
		t.Errorf("the same message redriven twice: %v", back[0].ID)
	}
	if d := receive(t, q, "jobs.dlq", 1, 5*time.Second)[0]; d.ID != skip {
		t.Errorf("left in jobs.dlq: %v, want %v", d.ID, skip)
	}

	// Purge: one of the two is leased (back[0] is not acked), one acked.
	ack(t, q, "jobs", back[1])
	e.deliver("jobs", "j3", "j4")
	// Purge counts from the consumer's state (pending and ack pending),
	// which catches up with messages just stored a moment later; the
	// purge itself removes every message on the subject either way.
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, _, err := q.unacked(ctxT(t), "jobs")
		if err == nil && n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the consumer counts %d unacked (%v); want 3", n, err)
		}
		time.Sleep(20 * time.Millisecond) // polling the consumer's state
	}
	n, err := q.Purge(ctxT(t), "jobs")
	if err != nil || n != 3 {
		t.Errorf("Purge: %d, %v; want 3 (2 due, 1 leased)", n, err)
	}
	none(t, q, "jobs", 0)
	if err := q.AckReceipt(ctxT(t), "jobs", back[0].Receipt); err != nil {
		t.Errorf("ack of a purged, leased message: %v", err)
	}
	ids = e.deliver("jobs", "after")
	if m := receive(t, q, "jobs", 1, 5*time.Second)[0]; m.ID != ids[0] {
		t.Errorf("after the purge: %v, want %v", m.ID, ids[0])
	}

	// DeleteTopic: the consumer and its policy go.
	if _, _, err := q.SetPolicy(ctxT(t), "jobs", queue.Policy{MaxAttempts: 7}); err != nil {
		t.Fatal(err)
	}
	n, existed, err := q.DeleteTopic(ctxT(t), "jobs")
	if err != nil || !existed || n != 1 {
		t.Errorf("DeleteTopic: %d, %v, %v; want the leased one", n, existed, err)
	}
	if _, err := q.opts.JS.Consumer(ctxT(t), q.opts.Stream, ConsumerName("jobs")); err == nil {
		t.Errorf("the consumer of jobs is still there")
	}
	if set, _, err := q.Policy(ctxT(t), "jobs"); err != nil || set != (queue.Policy{}) {
		t.Errorf("policy after DeleteTopic: %+v, %v; want none", set, err)
	}
	none(t, q, "jobs", 0)
	if _, existed, err := q.DeleteTopic(ctxT(t), "never"); err != nil || existed {
		t.Errorf("DeleteTopic of a topic that never was: %v, %v", existed, err)
	}
}
