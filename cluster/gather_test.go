package cluster

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// TestGatheredSchedules: concurrent single Schedules without a key share
// intake messages, and each answered ID names its own message (partition,
// sequence and index lead to its body).
func TestGatheredSchedules(t *testing.T) {
	ns := startNATS(t)
	ctx := ctxT(t)
	sink := engine.SinkFunc(func(context.Context, string, []engine.Delivery) error { return nil })
	n, err := openNode(t, ns.ClientURL(), "a", 2, sink)
	if err != nil {
		t.Fatal(err)
	}
	const count = 200
	ids := make([]message.ID, count)
	errs := make([]error, count)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range count {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got, err := n.ScheduleBatch(ctx, []engine.Request{{Topic: "t", Body: fmt.Appendf(nil, "m%d", i), Delay: 3600e9}})
			if err == nil {
				ids[i] = got[0]
			}
			errs[i] = err
		}()
	}
	close(start)
	wg.Wait()
	seen := map[message.ID]bool{}
	for i, id := range ids {
		if errs[i] != nil {
			t.Fatalf("schedule %d: %v", i, errs[i])
		}
		if seen[id] {
			t.Fatalf("ID %v answered twice", id)
		}
		seen[id] = true
		p, seq, idx := SplitID(id)
		raw, err := n.inStreams[p].GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("intake message %d of partition %d: %v", seq, p, err)
		}
		ms, err := DecodeIntake(raw.Data, nil)
		if err != nil || idx >= len(ms) {
			t.Fatalf("intake message %d of partition %d: %d messages, err %v; ID index %d", seq, p, len(ms), err, idx)
		}
		if string(ms[idx].Body) != fmt.Sprintf("m%d", i) || ms[idx].DeliverAt != id.DeliverAt {
			t.Fatalf("ID %v of m%d names %q due %d", id, i, ms[idx].Body, ms[idx].DeliverAt)
		}
	}
	js := jsConnect(t, ns.ClientURL())
	if stored := intakeMsgs(t, js, 2); stored >= count {
		t.Fatalf("%d concurrent Schedules took %d intake messages; want them gathered into fewer", count, stored)
	} else {
		t.Logf("%d concurrent Schedules in %d intake messages", count, stored)
	}
}
