package crashtest

// Flow-keyed topics: a small workload of its own beside the main one (on
// one node; cluster mode refuses flow policies), whose history the
// checker in flowcheck.go holds to each policy's bound across kill -9.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// The flow topics and their policies. Each has flowKeys keys.
const (
	FlowOrderedTopic = "cf-ord"  // flow_ordered
	FlowConcTopic    = "cf-conc" // flow_concurrency FlowConc
	FlowRateTopic    = "cf-rate" // flow_rate FlowRate, flow_burst FlowBurst
	FlowConc         = 3
	FlowRate         = 20
	FlowBurst        = 5
	flowKeys         = 4
	flowLease        = 3 * time.Second
)

var flowTopics = []string{FlowOrderedTopic, FlowConcTopic, FlowRateTopic}

// flowPolicy is the policy of flow topic t.
func flowPolicy(t string) *hourglassv1.Policy {
	switch t {
	case FlowOrderedTopic:
		return &hourglassv1.Policy{FlowOrdered: new(true)}
	case FlowConcTopic:
		return &hourglassv1.Policy{FlowConcurrency: new(int32(FlowConc))}
	}
	return &hourglassv1.Policy{FlowRate: new(float64(FlowRate)), FlowBurst: new(int32(FlowBurst))}
}

// FlowSchedule is one Schedule of a flow topic: body "<topic>/<key>/<seq>",
// seq counting per topic and key, each due after the one before.
type FlowSchedule struct {
	Topic, Key string
	Seq        int
	Outcome    Outcome
}

// FlowDelivery is one message of a flow topic a consumer received.
type FlowDelivery struct {
	Topic, Key string
	Seq        int
	Receipt    string
	Issued     time.Time // when the Receive was sent (harness clock)
	Received   time.Time // when it returned
	ServerAt   time.Time // received_at, the server's clock
}

// FlowSettle is one Ack or Nack of a flow delivery, by receipt.
type FlowSettle struct {
	Receipt string
	Nack    bool
	Sent    time.Time
	Outcome Outcome
}

// flowWork is the flow topics' producers and consumers and what they did.
type flowWork struct {
	mu       sync.Mutex
	next     map[string]int // next seq per "topic/key"; guarded by mu
	set      bool           // the policies are set (answered OK); guarded by mu
	scheds   []FlowSchedule
	dels     []FlowDelivery
	settles  []FlowSettle
	stops    []time.Time // when a server was stopped: every lease ended by then
	lastDue  time.Time   // the latest due time asked for
	lastTime map[string]time.Time
	nacked   map[string]bool // bodies nacked once: never again, so none is dead-lettered on purpose
}

func newFlowWork() *flowWork {
	return &flowWork{next: map[string]int{}, lastTime: map[string]time.Time{}, nacked: map[string]bool{}}
}

// stopped records that the server was stopped at (or before) at.
func (f *flowWork) stopped(at time.Time) {
	f.mu.Lock()
	f.stops = append(f.stops, at)
	f.mu.Unlock()
}

// setPolicies sets the flow topics' policies until answered OK (they are
// durable: once is enough).
func (f *flowWork) setPolicies(ctx context.Context, c hourglassv1.HourglassServiceClient) bool {
	f.mu.Lock()
	done := f.set
	f.mu.Unlock()
	if done {
		return true
	}
	for _, t := range flowTopics {
		if _, err := call(ctx, c.SetPolicy, &hourglassv1.SetPolicyRequest{Topic: t, Policy: flowPolicy(t)}); err != nil {
			return false
		}
	}
	f.mu.Lock()
	f.set = true
	f.mu.Unlock()
	return true
}

// produce schedules a message on a flow topic every 10-40 ms until ctx
// ends, due 50-400 ms later and after the key's message before.
func (f *flowWork) produce(ctx context.Context, c hourglassv1.HourglassServiceClient, rng *rand.Rand) {
	for op := 0; op < maxLoopOps && ctx.Err() == nil; op++ {
		if !f.setPolicies(ctx, c) {
			sleep(ctx, 50*time.Millisecond)
			continue
		}
		topic, key := flowTopics[rng.IntN(len(flowTopics))], "k"+strconv.Itoa(rng.IntN(flowKeys))
		f.mu.Lock()
		tk := topic + "/" + key
		seq := f.next[tk]
		f.next[tk]++
		at := time.Now().Add(time.Duration(50+rng.IntN(350)) * time.Millisecond)
		if last := f.lastTime[tk]; !at.After(last) {
			at = last.Add(2 * time.Millisecond)
		}
		f.lastTime[tk] = at
		if at.After(f.lastDue) {
			f.lastDue = at
		}
		f.mu.Unlock()
		_, err := call(ctx, c.Schedule, &hourglassv1.ScheduleRequest{Topic: topic, FlowKey: key,
			Body: fmt.Appendf(nil, "%s/%d", tk, seq), When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(at)}})
		f.mu.Lock()
		f.scheds = append(f.scheds, FlowSchedule{Topic: topic, Key: key, Seq: seq, Outcome: classify(err)})
		f.mu.Unlock()
		sleep(ctx, time.Duration(10+rng.IntN(30))*time.Millisecond)
	}
}

// consume receives from the flow topics in turn until ctx ends, holds
// what it got for 0-60 ms, then settles it: an ordered topic's message is
// nacked (200 ms) one time in ten, the rest acked.
func (f *flowWork) consume(ctx context.Context, c hourglassv1.HourglassServiceClient, rng *rand.Rand) {
	for op := 0; op < maxLoopOps && ctx.Err() == nil; op++ {
		topic := flowTopics[op%len(flowTopics)]
		issued := time.Now()
		res, err := call(ctx, c.Receive, &hourglassv1.ReceiveRequest{Topic: topic, MaxMessages: 10, WaitMs: 100, LeaseMs: flowLease.Milliseconds()})
		if err != nil {
			sleep(ctx, 20*time.Millisecond)
			continue
		}
		got := time.Now()
		f.mu.Lock()
		for _, m := range res.Messages {
			parts := strings.Split(string(m.Body), "/")
			seq, _ := strconv.Atoi(parts[len(parts)-1])
			f.dels = append(f.dels, FlowDelivery{Topic: topic, Key: parts[1], Seq: seq, Receipt: m.Receipt, Issued: issued, Received: got, ServerAt: m.ReceivedAt.AsTime()})
		}
		f.mu.Unlock()
		sleep(ctx, time.Duration(rng.IntN(60))*time.Millisecond)
		for _, m := range res.Messages {
			nack := topic == FlowOrderedTopic && rng.IntN(10) == 0
			f.mu.Lock()
			if nack = nack && !f.nacked[string(m.Body)]; nack {
				f.nacked[string(m.Body)] = true
			}
			f.mu.Unlock()
			sent := time.Now()
			if nack {
				_, err = call(ctx, c.Nack, &hourglassv1.NackRequest{Topic: topic, Receipt: m.Receipt, DelayMs: 200})
			} else {
				_, err = call(ctx, c.Ack, &hourglassv1.AckRequest{Topic: topic, Receipt: m.Receipt})
			}
			f.mu.Lock()
			f.settles = append(f.settles, FlowSettle{Receipt: m.Receipt, Nack: nack, Sent: sent, Outcome: classify(err)})
			f.mu.Unlock()
		}
	}
}

// owed is how many flow messages answered OK are not acked yet.
func (f *flowWork) owed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(flowCheck(f.snapshot(), true).lost)
}

// snapshot copies the flow history. f.mu is held.
func (f *flowWork) snapshot() FlowEvents {
	return FlowEvents{Schedules: append([]FlowSchedule(nil), f.scheds...), Deliveries: append([]FlowDelivery(nil), f.dels...),
		Settles: append([]FlowSettle(nil), f.settles...), Stops: append([]time.Time(nil), f.stops...)}
}

// lastDueAt is the latest due time a flow message asked for.
func (f *flowWork) lastDueAt() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastDue
}
