package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hourglassmq/hourglass/cluster"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
)

// TestClusterManage runs a 3-node NATS cluster and two `serve --cluster`
// nodes and manages scheduled messages through the API as on one node,
// each request on a node that owns the message's partition or on one
// that does not (which forwards it): keyed messages scheduled on node a
// are pending in a Get on b; some are rescheduled by key through b (a Get
// on a then names the replacement), others cancelled by key through a,
// including a later message of a keyed batch, whose key hashes to another
// partition than the batch's. Received from the delivery stream: each
// rescheduled message once under its new ID, not before its new time and
// never under its old ID; the untouched ones once; no cancelled one.
func TestClusterManage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 nats-server and 2 hourglass processes; takes about 15 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const partitions = 4
	_, nodes := startCluster(t, ctx, 2, partitions)
	a, b := nodes[0], nodes[1]
	onA := owned(a)
	const topic = "mgmt"
	// keyOn returns a key not in used whose partition a owns (or not).
	used := map[string]bool{}
	keyOn := func(ofA bool) string {
		for i := 0; ; i++ {
			k := fmt.Sprintf("k%d", i)
			if !used[k] && onA[cluster.KeyPartition(topic, k, partitions)] == ofA {
				used[k] = true
				return k
			}
		}
	}
	// One key of each kind on each node's partitions.
	type keyed struct {
		key, role string
		id        string
		at        time.Time
	}
	var ks []*keyed
	for _, role := range []string{"rescheduled", "cancelled", "untouched"} {
		for _, ofA := range []bool{true, false} {
			ks = append(ks, &keyed{key: keyOn(ofA), role: role})
		}
	}
	for _, k := range ks {
		res, err := a.client.Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: topic, Body: []byte(k.key), IdempotencyKey: k.key,
			When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 3000}}))
		if err != nil {
			t.Fatalf("schedule %s: %v", k.key, err)
		}
		k.id, k.at = res.Msg.Id, res.Msg.DeliverAt.AsTime()
	}
	// A keyed batch lands on its first key's partition; its second key
	// hashes to a partition of the other node.
	first := keyOn(true)
	second := keyOn(false)
	br, err := a.client.ScheduleBatch(ctx, connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{
		{Topic: topic, Body: []byte(first), IdempotencyKey: first, When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 4000}},
		{Topic: topic, Body: []byte(second), IdempotencyKey: second, When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 4000}},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	ks = append(ks, &keyed{key: first, role: "untouched", id: br.Msg.Results[0].Id, at: br.Msg.Results[0].DeliverAt.AsTime()},
		&keyed{key: second, role: "cancelled", id: br.Msg.Results[1].Id, at: br.Msg.Results[1].DeliverAt.AsTime()})

	get := func(p *proc, req *hourglassv1.GetRequest) *hourglassv1.GetResponse {
		t.Helper()
		res, err := p.client.Get(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatalf("Get %v on %s: %v", req, p.addr, err)
		}
		return res.Msg
	}
	// Every message is pending in a Get on b, by ID and by key.
	for _, k := range ks {
		g := get(b, &hourglassv1.GetRequest{Id: k.id})
		if g.State != hourglassv1.MessageState_MESSAGE_STATE_PENDING || string(g.Message.GetBody()) != k.key || g.Message.GetTopic() != topic {
			t.Errorf("Get %s (%s) on b = %v; want pending with its body", k.id, k.key, g)
		}
		if g := get(b, &hourglassv1.GetRequest{Topic: topic, Key: k.key}); g.Message.GetId() != k.id {
			t.Errorf("Get by key %s on b = %v; want %s", k.key, g, k.id)
		}
	}

	// Reschedule by key through b, two seconds later than they were due;
	// cancel by key through a.
	moved := map[string]*keyed{} // new ID -> its message
	for _, k := range ks {
		switch k.role {
		case "rescheduled":
			newAt := k.at.Add(2 * time.Second)
			res, err := b.client.Reschedule(ctx, connect.NewRequest(&hourglassv1.RescheduleRequest{Topic: topic, Key: k.key,
				When: &hourglassv1.RescheduleRequest_DeliverAt{DeliverAt: timestamppb.New(newAt)}}))
			if err != nil || res.Msg.Result != hourglassv1.RescheduleResult_RESCHEDULE_RESULT_RESCHEDULED || !res.Msg.DeliverAt.AsTime().Equal(newAt) {
				t.Fatalf("Reschedule %s by key on b = %v, %v; want rescheduled to %v", k.key, res, err, newAt)
			}
			g := get(a, &hourglassv1.GetRequest{Id: k.id})
			if g.State != hourglassv1.MessageState_MESSAGE_STATE_RESCHEDULED || g.RescheduledTo != res.Msg.Id {
				t.Errorf("Get %s on a after its reschedule = %v; want rescheduled to %s", k.id, g, res.Msg.Id)
			}
			if g := get(a, &hourglassv1.GetRequest{Topic: topic, Key: k.key}); g.Message.GetId() != res.Msg.Id || g.Message.GetOriginId() != k.id {
				t.Errorf("Get by key %s on a after its reschedule = %v; want %s from %s", k.key, g, res.Msg.Id, k.id)
			}
			moved[res.Msg.Id] = k
		case "cancelled":
			res, err := a.client.Cancel(ctx, connect.NewRequest(&hourglassv1.CancelRequest{Topic: topic, Key: k.key}))
			if err != nil || res.Msg.Result != hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED {
				t.Fatalf("Cancel %s by key on a = %v, %v; want cancelled", k.key, res, err)
			}
			if g := get(b, &hourglassv1.GetRequest{Id: k.id}); g.State != hourglassv1.MessageState_MESSAGE_STATE_CANCELLED {
				t.Errorf("Get %s on b after its cancel = %v; want cancelled", k.id, g)
			}
		}
	}

	// What arrives: the untouched ones at their time, the rescheduled ones
	// at their new time under their new IDs, each once.
	want := map[string]time.Time{}
	for _, k := range ks {
		if k.role == "untouched" {
			want[k.id] = k.at
		}
	}
	for id, k := range moved {
		want[id] = k.at.Add(2 * time.Second)
	}
	got := map[string]bool{}
	end := time.Now().Add(30 * time.Second)
	for len(got) < len(want) && time.Now().Before(end) {
		res, err := b.client.Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: topic, MaxMessages: 10, WaitMs: 1000}))
		if err != nil {
			t.Fatalf("Receive: %v", err)
		}
		for _, m := range res.Msg.Messages {
			at, ok := want[m.Id]
			switch {
			case !ok:
				t.Errorf("received %s (%s), which was cancelled or rescheduled away", m.Id, m.Body)
			case got[m.Id]:
				t.Errorf("received %s twice", m.Id)
			case m.ReceivedAt.AsTime().Before(at):
				t.Errorf("received %s at %v, before its time %v", m.Id, m.ReceivedAt.AsTime(), at)
			}
			got[m.Id] = true
			if _, err := a.client.Ack(ctx, connect.NewRequest(&hourglassv1.AckRequest{Topic: topic, Receipt: m.Receipt})); err != nil {
				t.Errorf("ack %s: %v", m.Id, err)
			}
		}
	}
	if len(got) != len(want) {
		t.Fatalf("received %d of %d messages within 30s: %v of %v", len(got), len(want), got, want)
	}
	// Nothing more: the old times of the rescheduled ones and the times of
	// the cancelled ones have all passed.
	latest := time.Time{}
	for _, k := range ks {
		if k.at.After(latest) {
			latest = k.at
		}
	}
	if time.Now().Before(latest) {
		t.Fatalf("received everything before the last old time %v", latest)
	}
	res, err := a.client.Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: topic, MaxMessages: 10, WaitMs: 1500}))
	if err != nil || len(res.Msg.Messages) != 0 {
		t.Errorf("a last Receive = %v, %v; want nothing", res, err)
	}
	for id := range moved {
		mid, _ := message.ParseID(id)
		if g := get(a, &hourglassv1.GetRequest{Id: id}); g.State != hourglassv1.MessageState_MESSAGE_STATE_DELIVERED {
			t.Errorf("Get %s (partition %v) after its delivery = %v; want delivered", id, mid, g)
		}
	}
}
