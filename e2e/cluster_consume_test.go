package e2e

import (
	"context"
	"maps"
	"strconv"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/hourglassmq/hourglass/cluster"
	"github.com/hourglassmq/hourglass/cluster/jsqueue"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
)

// TestClusterConsume runs a 3-node NATS cluster and two `serve --cluster`
// nodes (lease 2 s, 3 attempts) and consumes through the API as on one
// node: messages scheduled on one node are received from the other, not
// before their time; some are acked through the node that did not hand
// them out, some nacked with a delay (not handed out again before it has
// passed), some left to their lease (handed out again after it), and a
// poison message fails its 3 attempts and lands on jobs.dlq. Meanwhile
// the node they were received from is killed -9: what it handed out and
// what its partitions held comes from the survivor, and nothing acked
// comes back.
func TestClusterConsume(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 nats-server and 2 hourglass processes; takes about 30 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const lease = 2 * time.Second
	// Partitions spread two per node, so that b holds some when it dies.
	_, nodes := startCluster(t, ctx, 2, 4, "--default-lease", lease.String(), "--max-attempts", "3")
	a, b := nodes[0], nodes[1]

	// schedule schedules n messages of topic through p, due from first to
	// first+spread from now, and returns their IDs and delivery times.
	schedule := func(p *proc, topic string, n int, first, spread time.Duration) map[string]time.Time {
		req := &hourglassv1.ScheduleBatchRequest{}
		for i := range n {
			d := first + spread*time.Duration(i)/time.Duration(max(n, 1))
			req.Messages = append(req.Messages, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte(topic + "-" + strconv.Itoa(i)),
				When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: d.Milliseconds()}})
		}
		res, err := p.client.ScheduleBatch(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatalf("schedule %s: %v", topic, err)
		}
		out := map[string]time.Time{}
		for _, r := range res.Msg.Results {
			out[r.Id] = r.DeliverAt.AsTime()
		}
		return out
	}
	// receive long-polls p for topic until it has want messages, or fails
	// after within without the next one.
	receive := func(p *proc, topic string, want int, within time.Duration) []*hourglassv1.Message {
		t.Helper()
		var out []*hourglassv1.Message
		end := time.Now().Add(within)
		for len(out) < want {
			wait := time.Until(end)
			if wait <= 0 {
				t.Fatalf("Receive %s from %s: %d of %d messages within %v", topic, p.addr, len(out), want, within)
			}
			res, err := p.client.Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: topic, MaxMessages: int32(want - len(out)), WaitMs: wait.Milliseconds()}))
			if err != nil {
				t.Fatalf("Receive %s from %s: %v", topic, p.addr, err)
			}
			for _, m := range res.Msg.Messages {
				if got := m.ReceivedAt.AsTime(); got.Before(m.DeliverAt.AsTime()) {
					t.Errorf("%s handed out at %v, before its time %v", m.Id, got, m.DeliverAt.AsTime())
				}
				// A cluster lease starts jsqueue.DeliveryMargin before the
				// message arrived (JetStream's AckWait starts when it sends;
				// CLUSTER.md).
				if l := m.LeaseExpiresAt.AsTime().Sub(m.ReceivedAt.AsTime()); l != lease-jsqueue.DeliveryMargin {
					t.Errorf("%s leased for %v, want %v less %v", m.Id, l, lease, jsqueue.DeliveryMargin)
				}
			}
			out = append(out, res.Msg.Messages...)
		}
		return out
	}
	ack := func(p *proc, m *hourglassv1.Message) {
		t.Helper()
		if _, err := p.client.Ack(ctx, connect.NewRequest(&hourglassv1.AckRequest{Topic: m.Topic, Receipt: m.Receipt})); err != nil {
			t.Fatalf("ack %s through %s: %v", m.Id, p.addr, err)
		}
	}
	nack := func(p *proc, m *hourglassv1.Message, delay time.Duration, reason string) {
		t.Helper()
		if _, err := p.client.Nack(ctx, connect.NewRequest(&hourglassv1.NackRequest{Topic: m.Topic, Receipt: m.Receipt, DelayMs: delay.Milliseconds(), Reason: reason})); err != nil {
			t.Fatalf("nack %s through %s: %v", m.Id, p.addr, err)
		}
	}

	// Wave 1 through a, received from b.
	wave1 := schedule(a, "orders", 20, 300*time.Millisecond, time.Second)
	poison := schedule(a, "jobs", 1, 0, 0)
	got := receive(b, "orders", 20, 30*time.Second)
	seen := map[string]bool{}
	for _, m := range got {
		if _, ok := wave1[m.Id]; !ok || seen[m.Id] || m.Attempt != 0 {
			t.Fatalf("received %s (attempt %d): not scheduled, or twice", m.Id, m.Attempt)
		}
		seen[m.Id] = true
	}
	acked, nacked, expired := got[:10], got[10:15], got[15:]
	for _, m := range acked {
		ack(a, m) // through the node that did not hand it out
	}
	const delay = 3 * time.Second // longer than the lease: JetStream holds it, not the lease
	nackedAt := time.Now()
	for _, m := range nacked {
		nack(b, m, delay, "busy")
	}
	// The poison message fails its 3 attempts, received and nacked through
	// either node.
	for attempt := range 3 {
		m := receive(nodes[attempt%2], "jobs", 1, 10*time.Second)[0]
		if _, ok := poison[m.Id]; !ok || m.Attempt != uint32(attempt) {
			t.Fatalf("jobs: %s as attempt %d, want the poison message as attempt %d", m.Id, m.Attempt, attempt)
		}
		nack(nodes[(attempt+1)%2], m, 0, "cannot parse "+strconv.Itoa(attempt))
	}
	// Wave 2 through a in 4 batches (one per partition: each batch goes to
	// the next), pending when b dies; b's partitions move to a.
	wave2 := map[string]time.Time{}
	for range 4 {
		maps.Copy(wave2, schedule(a, "orders", 3, 2*time.Second, time.Second))
	}
	victim := owned(b)
	onVictim := 0
	for id := range wave2 {
		mid, _ := message.ParseID(id)
		if p, _, _ := cluster.SplitID(mid); victim[p] {
			onVictim++
		}
	}
	if onVictim == 0 {
		t.Fatalf("no message of wave 2 on hg1's partitions %v", victim)
	}
	if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-b.exited
	killedAt := time.Now()
	t.Logf("killed hg1 with %d messages leased through it and %d pending, %d of them on its partitions %v", len(expired), len(wave2), onVictim, victim)

	dead := receive(a, "jobs.dlq", 1, 10*time.Second)[0]
	if _, ok := poison[dead.Id]; !ok || dead.DeadLetter == nil || dead.DeadLetter.Reason != "max-attempts" ||
		dead.DeadLetter.OriginTopic != "jobs" || dead.DeadLetter.LastError != "cannot parse 2" || dead.DeadLetter.Attempts != 3 {
		t.Errorf("jobs.dlq: %v, want the poison message dead after 3 attempts", dead)
	}
	ack(a, dead)

	// The survivor hands out: the nacked (after their delay), the expired
	// (after their lease), wave 2 (after the takeover); never an acked one.
	want := map[string]string{}
	for _, m := range nacked {
		want[m.Id] = "nacked"
	}
	for _, m := range expired {
		want[m.Id] = "expired"
	}
	for id := range wave2 {
		want[id] = "wave 2"
	}
	wasAcked := map[string]bool{}
	for _, m := range acked {
		wasAcked[m.Id] = true
	}
	// One message a Receive, acked at once: collecting them all first
	// would let the first leases (2 s) end while the takeover is waited
	// for, and those would be handed out again.
	end := time.Now().Add(60 * time.Second)
	for len(want) > 0 {
		m := receive(a, "orders", 1, time.Until(end))[0]
		why, ok := want[m.Id]
		switch {
		case wasAcked[m.Id]:
			t.Errorf("%s handed out again after its ack", m.Id)
		case !ok:
			t.Errorf("%s handed out twice or never scheduled", m.Id)
		case why == "nacked" && (m.Attempt != 1 || m.ReceivedAt.AsTime().Before(nackedAt.Add(delay))):
			t.Errorf("nacked %s handed out again at %v as attempt %d: before its delay ended at %v", m.Id, m.ReceivedAt.AsTime(), m.Attempt, nackedAt.Add(delay))
		case why == "expired" && m.Attempt != 1:
			t.Errorf("expired %s handed out again as attempt %d, want 1", m.Id, m.Attempt)
		case why == "wave 2" && (m.Attempt != 0 || m.ReceivedAt.AsTime().Before(wave2[m.Id])):
			t.Errorf("wave 2 %s: attempt %d at %v, due %v", m.Id, m.Attempt, m.ReceivedAt.AsTime(), wave2[m.Id])
		}
		delete(want, m.Id)
		ack(a, m)
	}
	t.Logf("all handed out again by the survivor within %v of the kill", time.Since(killedAt).Round(time.Millisecond))
	// Nothing more: a poll longer than the lease gets nothing.
	res, err := a.client.Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: "orders", MaxMessages: 100, WaitMs: (lease + time.Second).Milliseconds()}))
	if err != nil || len(res.Msg.Messages) != 0 {
		t.Errorf("after everything was acked: %v, %v; want nothing", res.Msg, err)
	}
	a.stop(syscall.SIGTERM)
}
