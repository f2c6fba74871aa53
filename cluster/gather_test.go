package cluster

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

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

// TestGatherLingers: callers that each send their next Schedule as soon as
// the last is answered go together, one intake message a round, rather
// than in halves that publish in turn; once callers leave, the rest go
// after one linger.
func TestGatherLingers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const callers, rounds = 8, 20
		var mu sync.Mutex
		var sizes []int // guarded by mu
		g := &gather{limit: gatherBytes, publish: func(ms []message.Message) ([]message.ID, error) {
			time.Sleep(time.Millisecond) // an R3 round trip, on the bubble's clock
			mu.Lock()
			sizes = append(sizes, len(ms))
			mu.Unlock()
			ids := make([]message.ID, len(ms))
			for i, m := range ms {
				ids[i] = message.ID{DeliverAt: m.DeliverAt}
			}
			return ids, nil
		}}
		var wg sync.WaitGroup
		for c := range callers {
			wg.Go(func() {
				for r := range rounds {
					want := int64(c*rounds + r)
					id, err := g.schedule(context.Background(), &message.Message{DeliverAt: want, Topic: []byte("t")})
					if err != nil || id.DeliverAt != want {
						t.Errorf("caller %d round %d: %v, %v; want its own ID", c, r, id, err)
					}
				}
			})
		}
		wg.Wait()
		// With nobody left, the leader ends after one linger.
		time.Sleep(gatherMaxLinger)
		synctest.Wait()
		g.mu.Lock()
		if g.mu.leading {
			t.Errorf("the leader still runs a linger after the last caller left")
		}
		g.mu.Unlock()
		mu.Lock()
		defer mu.Unlock()
		// The first publish carries those that arrived before the leader
		// ran; the next waits for the rest and for those it answered.
		if len(sizes) > rounds+1 {
			t.Fatalf("%d callers of %d rounds took %d publishes %v; want at most %d", callers, rounds, len(sizes), sizes, rounds+1)
		}
		for i, n := range sizes[1 : len(sizes)-1] {
			if n != callers {
				t.Errorf("publish %d carried %d of %d callers: %v", i+1, n, callers, sizes)
			}
		}
	})
}
