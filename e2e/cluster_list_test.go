package e2e

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/hourglassmq/hourglass/cluster"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// TestClusterListAndKeys runs a 3-node NATS cluster and two `serve
// --cluster` nodes with a 6 s idempotency window. Messages scheduled
// through both nodes (single Schedules and a batch, on all 4 partitions)
// are listed, in pages of 7 through either node, exactly as scheduled and
// in (deliver_at, ID) order; a malformed page token is INVALID_ARGUMENT;
// a Purge of pending messages through one node cancels them all. Then a
// keyed Schedule on a key of node a's partitions, a's process killed -9,
// and the same Schedule on b within the window answers the first ID; once
// the window has passed, the key makes a new message.
func TestClusterListAndKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 nats-server and 2 hourglass processes; takes about 15 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const partitions, window = 4, 6 * time.Second
	_, nodes := startCluster(t, ctx, 2, partitions, "--idempotency-window", window.String())
	a, b := nodes[0], nodes[1]

	const topic = "lst"
	base := time.Now().Add(time.Hour).Truncate(time.Second)
	var want []string
	for i := range 24 {
		p := nodes[i%2]
		res, err := p.client.Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: topic, Body: []byte(fmt.Sprint(i)),
			When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: time.Until(base.Add(time.Duration(i%5) * time.Millisecond)).Milliseconds()}}))
		if err != nil {
			t.Fatalf("schedule %d: %v", i, err)
		}
		want = append(want, res.Msg.Id)
	}
	var batch []*hourglassv1.ScheduleRequest
	for i := range 10 {
		batch = append(batch, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("b"), When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 3_600_000 + int64(i)}})
	}
	br, err := b.client.ScheduleBatch(ctx, connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: batch}))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range br.Msg.Results {
		want = append(want, r.Id)
	}
	if _, err := a.client.Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "other", When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 3_600_000}})); err != nil {
		t.Fatal(err)
	}
	slices.Sort(want) // 32 hex digits, deliver_at first: the string order is List's
	list := func(p *proc) []string {
		t.Helper()
		var got []string
		token := ""
		for range 100 {
			res, err := p.client.List(ctx, connect.NewRequest(&hourglassv1.ListRequest{Topic: topic, PageSize: 7, PageToken: token}))
			if err != nil {
				t.Fatalf("List on %s: %v", p.addr, err)
			}
			for _, m := range res.Msg.Messages {
				got = append(got, m.Id)
			}
			if token = res.Msg.NextPageToken; token == "" {
				return got
			}
		}
		t.Fatal("List never ended")
		return nil
	}
	for _, p := range nodes {
		if got := list(p); !slices.Equal(got, want) {
			t.Errorf("List on %s = %v;\nwant %v", p.addr, got, want)
		}
	}
	_, err = a.client.List(ctx, connect.NewRequest(&hourglassv1.ListRequest{Topic: topic, PageToken: want[0]}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("List with a single node's token: %v; want INVALID_ARGUMENT", err)
	}
	pr, err := b.client.Purge(ctx, connect.NewRequest(&hourglassv1.PurgeRequest{Topic: topic, State: hourglassv1.MessageState_MESSAGE_STATE_PENDING}))
	if err != nil || pr.Msg.Purged != int64(len(want)) {
		t.Errorf("Purge of pending = %v, %v; want %d", pr, err, len(want))
	}
	if got := list(a); len(got) != 0 {
		t.Errorf("List after the purge = %v; want nothing", got)
	}

	// A key on one of a's partitions, a killed, the retry on b.
	onA := owned(a)
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("key%d", i); onA[cluster.KeyPartition(topic, k, partitions)] {
			key = k
		}
	}
	keyed := &hourglassv1.ScheduleRequest{Topic: topic, IdempotencyKey: key, When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 3_600_000}}
	sent := time.Now()
	first, err := a.client.Schedule(ctx, connect.NewRequest(keyed))
	if err != nil {
		t.Fatal(err)
	}
	a.stop(syscall.SIGKILL)
	again, err := b.client.Schedule(ctx, connect.NewRequest(keyed))
	if time.Since(sent) > window-time.Second {
		t.Fatalf("the retry came %v after the first Schedule; the window is %v", time.Since(sent), window)
	}
	if err != nil || again.Msg.Id != first.Msg.Id {
		t.Errorf("the retry on b after a was killed = %v, %v; want the first ID %s", again, err, first.Msg.Id)
	}
	// After the window (bounded polling; a retry within it stores nothing).
	var fresh string
	end := time.Now().Add(window + 30*time.Second)
	for fresh == "" && time.Now().Before(end) {
		res, err := b.client.Schedule(ctx, connect.NewRequest(keyed))
		switch {
		case err != nil:
			t.Logf("a retry during the takeover: %v", err) // Unavailable while partitions move
		case res.Msg.Id != first.Msg.Id:
			fresh = res.Msg.Id
		}
		time.Sleep(200 * time.Millisecond) // polling the server's answer, not waiting for time
	}
	if fresh == "" {
		t.Fatalf("the key never made a new message after the %v window", window)
	}
	if since := time.Since(sent); since < window {
		t.Errorf("a new message for the key %v after the first; want at least the window %v", since, window)
	}
}
