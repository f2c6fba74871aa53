package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// setFlow sets topic's policy through SetPolicy.
func setFlow(t *testing.T, c hourglassv1connect.HourglassServiceClient, topic string, p *hourglassv1.Policy) {
	t.Helper()
	if _, err := c.SetPolicy(ctxT(t), connect.NewRequest(&hourglassv1.SetPolicyRequest{Topic: topic, Policy: p})); err != nil {
		t.Fatalf("SetPolicy(%s): %v", topic, err)
	}
}

// scheduleKeyed schedules n messages of flow key key on topic, bodies
// "<key>/<i>", due at the times at(i) gives, in batches of 1000, and
// returns their IDs.
func scheduleKeyed(t *testing.T, c hourglassv1connect.HourglassServiceClient, topic, key string, n int, at func(i int) time.Time) []string {
	t.Helper()
	var ids []string
	for start := 0; start < n; start += 1000 {
		var ms []*hourglassv1.ScheduleRequest
		for i := start; i < min(n, start+1000); i++ {
			ms = append(ms, &hourglassv1.ScheduleRequest{Topic: topic, FlowKey: key, Body: []byte(key + "/" + strconv.Itoa(i)),
				When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(at(i))}})
		}
		res, err := c.ScheduleBatch(ctxT(t), connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: ms}))
		if err != nil {
			t.Fatalf("ScheduleBatch(%s, %s): %v", topic, key, err)
		}
		for _, r := range res.Msg.Results {
			ids = append(ids, r.Id)
		}
	}
	return ids
}

// keyIndex splits a body "<key>/<i>".
func keyIndex(t *testing.T, body []byte) (string, int) {
	k, i, ok := strings.Cut(string(body), "/")
	n, err := strconv.Atoi(i)
	if !ok || err != nil {
		t.Errorf("body %q is not KEY/INDEX", body)
	}
	return k, n
}

// consume runs workers consumers on topic until done returns true or the
// deadline passes: each receives up to max messages, calls handle with
// each and the time the Receive returned, and acks those handle returns
// true for, with one AckBatch; ackSent is called with each before its
// ack is sent.
func consume(t *testing.T, c hourglassv1connect.HourglassServiceClient, topic string, workers, max int, within time.Duration,
	handle func(m *hourglassv1.Message, at time.Time) bool, ackSent func(m *hourglassv1.Message), done func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil && !done() {
				res, err := c.Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: topic, MaxMessages: int32(max), WaitMs: 200, LeaseMs: 60_000}))
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("Receive(%s): %v", topic, err)
					}
					return
				}
				now := time.Now()
				var receipts []string
				var acks []*hourglassv1.Message
				for _, m := range res.Msg.Messages {
					if handle(m, now) {
						acks = append(acks, m)
						receipts = append(receipts, m.Receipt)
					}
				}
				for _, m := range acks {
					if ackSent != nil {
						ackSent(m)
					}
				}
				if len(receipts) == 0 {
					continue
				}
				if _, err := c.AckBatch(ctx, connect.NewRequest(&hourglassv1.AckBatchRequest{Topic: topic, Receipts: receipts})); err != nil && ctx.Err() == nil {
					t.Errorf("AckBatch(%s): %v", topic, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if !done() {
		t.Fatalf("topic %s: not done within %v", topic, within)
	}
}

// TestFlowFair: a topic with 1,000 flow keys under a fair policy, one key
// with 100,000 messages due at once and 999 with 10 each coming due with
// them or over the second after, stored behind them, and 4 consumers: every message of the 999 keys is received
// within 2 s of its due time, and the big key still had messages waiting
// when the last of them was received.
func TestFlowFair(t *testing.T) {
	if testing.Short() {
		t.Skip("schedules and drains 110,000 messages (about a minute); -short skips it")
	}
	p := start(t, t.TempDir(), nil)
	const topic, big, bigN, small, smallN = "fair", "big", 100_000, 999, 10
	// The topic is paused while the messages are stored (due ones wait),
	// so that however long storing takes, the big key's 100,000 are all
	// due and none received when the small keys' come due: at the
	// resume, or over the second after it.
	setFlow(t, p.client, topic, &hourglassv1.Policy{FlowFair: new(true), Paused: new(true)})
	now := time.Now()
	scheduleKeyed(t, p.client, topic, big, bigN, func(int) time.Time { return now })
	for k := range small {
		key := fmt.Sprintf("k%03d", k)
		scheduleKeyed(t, p.client, topic, key, smallN, func(i int) time.Time {
			return now.Add(time.Duration(k*smallN+i) * time.Second / (small * smallN))
		})
	}
	setFlow(t, p.client, topic, &hourglassv1.Policy{Paused: new(false)})
	resumed := time.Now()
	var mu sync.Mutex
	bigGot, smallGot := 0, 0
	var late []string
	bigLeftAtLast := -1
	consume(t, p.client, topic, 4, 100, 5*time.Minute, func(m *hourglassv1.Message, at time.Time) bool {
		mu.Lock()
		defer mu.Unlock()
		if key, _ := keyIndex(t, m.Body); key == big {
			bigGot++
			return true
		}
		smallGot++
		if wait := at.Sub(later(m.DeliverAt.AsTime(), resumed)); wait > 2*time.Second && len(late) < 10 {
			late = append(late, fmt.Sprintf("%s after %v", m.Body, wait))
		}
		if smallGot == small*smallN {
			bigLeftAtLast = bigN - bigGot
		}
		return true
	}, nil, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return bigGot >= bigN && smallGot >= small*smallN
	})
	if len(late) > 0 {
		t.Errorf("messages of the small keys received more than 2 s after due (or the resume): %v", late)
	}
	if bigLeftAtLast <= 0 {
		t.Errorf("the big key had %d messages left when the last small key's message was received; want some still draining", bigLeftAtLast)
	}
	t.Logf("the big key had %d of %d messages left when the last of the small keys' was received", bigLeftAtLast, bigN)
}

// orderedCheck follows an ordered topic's keys from the consumers' side:
// a key's message is received only while no other of the key is leased,
// and only the lowest one not yet acked.
type orderedCheck struct {
	t      *testing.T
	mu     sync.Mutex
	next   map[string]int  // the lowest index not acked, per key
	leased map[string]bool // a message of the key is held by a consumer
	dups   int             // messages received again after their ack (at least once)
	acked  int
}

func (o *orderedCheck) received(m *hourglassv1.Message, _ time.Time) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	key, i := keyIndex(o.t, m.Body)
	switch {
	case i < o.next[key]:
		o.dups++
		return true
	case o.leased[key]:
		o.t.Errorf("key %s: %s received while another message of the key is leased", key, m.Body)
	case i != o.next[key]:
		o.t.Errorf("key %s: %s received before %s/%d was acked (out of order)", key, m.Body, key, o.next[key])
	}
	o.leased[key] = true
	return true
}

// ackSent: the consumer lets the message go before its ack is sent, so
// that the next one received after the ack is not taken for an overlap.
func (o *orderedCheck) ackSent(m *hourglassv1.Message) {
	o.mu.Lock()
	defer o.mu.Unlock()
	key, i := keyIndex(o.t, m.Body)
	if i == o.next[key] {
		o.next[key]++
		o.acked++
		o.leased[key] = false
	}
}

// TestFlowOrdered: under an ordered policy no two messages of a key are
// leased at once and none is received before the one before it is acked,
// before and after a kill -9 (the policy and the order come back from
// disk; the leases end with the process).
func TestFlowOrdered(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, dir, nil)
	const topic, keys, n = "ord", 20, 50
	setFlow(t, p.client, topic, &hourglassv1.Policy{FlowOrdered: new(true)})
	now := time.Now()
	for k := range keys {
		scheduleKeyed(t, p.client, topic, fmt.Sprint("o", k), n, func(int) time.Time { return now })
	}
	o := &orderedCheck{t: t, next: map[string]int{}, leased: map[string]bool{}}
	done := func(want int) func() bool {
		return func() bool { o.mu.Lock(); defer o.mu.Unlock(); return o.acked >= want }
	}
	// Consumers that hold what they received when the server is killed:
	// those leases end with it.
	consume(t, p.client, topic, 4, 10, time.Minute, o.received, o.ackSent, done(keys*n/2))
	p.stop(syscall.SIGKILL)
	o.mu.Lock()
	clear(o.leased)
	o.mu.Unlock()
	p = start(t, dir, nil)
	consume(t, p.client, topic, 4, 10, time.Minute, o.received, o.ackSent, done(keys*n))
	t.Logf("%d messages received again after their ack", o.dups)
}

// TestFlowConcurrency: with flow_concurrency 3, no key has more than 3
// messages leased at once, and some key had 3.
func TestFlowConcurrency(t *testing.T) {
	t.Parallel()
	p := start(t, t.TempDir(), nil)
	const topic, keys, n = "conc", 5, 60
	setFlow(t, p.client, topic, &hourglassv1.Policy{FlowConcurrency: new(int32(3))})
	now := time.Now()
	var last string
	for k := range keys {
		last = scheduleKeyed(t, p.client, topic, fmt.Sprint("c", k), n, func(int) time.Time { return now })[n-1]
	}
	// Three of each key leased: Get and Topics say what waits, and why.
	held := receive(t, p.client, topic, keys*3, 30*time.Second)
	got, err := p.client.Get(ctxT(t), connect.NewRequest(&hourglassv1.GetRequest{Id: last}))
	if err != nil || got.Msg.State != hourglassv1.MessageState_MESSAGE_STATE_DUE || got.Msg.FlowKey != fmt.Sprint("c", keys-1) ||
		!strings.Contains(got.Msg.FlowWait, "its concurrency") {
		t.Errorf("Get of a message held by its key: %v %v; want DUE with its flow key and why it waits", got, err)
	}
	ts, err := p.client.Topics(ctxT(t), connect.NewRequest(&hourglassv1.TopicsRequest{}))
	if err != nil || len(ts.Msg.Topics) != 1 || ts.Msg.Topics[0].FlowHeld != keys*(n-3) || ts.Msg.Topics[0].FlowKeysHeld != keys ||
		len(ts.Msg.Topics[0].FlowBacklogs) != keys || ts.Msg.Topics[0].FlowBacklogs[0].HeldBy != "concurrency" {
		t.Errorf("Topics with every key at its concurrency: %v %v; want %d held in %d keys, each key's backlog", ts, err, keys*(n-3), keys)
	}
	var receipts []string
	for _, r := range held {
		receipts = append(receipts, r.m.Receipt)
	}
	if _, err := p.client.AckBatch(ctxT(t), connect.NewRequest(&hourglassv1.AckBatchRequest{Topic: topic, Receipts: receipts})); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	leased, most := map[string]int{}, 0
	acked := 0
	consume(t, p.client, topic, 4, 20, time.Minute, func(m *hourglassv1.Message, _ time.Time) bool {
		mu.Lock()
		defer mu.Unlock()
		key, _ := keyIndex(t, m.Body)
		leased[key]++
		most = max(most, leased[key])
		if leased[key] > 3 {
			t.Errorf("key %s: %d messages leased at once; the concurrency is 3", key, leased[key])
		}
		return true
	}, func(m *hourglassv1.Message) {
		mu.Lock()
		defer mu.Unlock()
		key, _ := keyIndex(t, m.Body)
		leased[key]--
		acked++
	}, func() bool { mu.Lock(); defer mu.Unlock(); return acked >= keys*(n-3) })
	if most != 3 {
		t.Errorf("at most %d of a key were leased at once; want the bound, 3, reached", most)
	}
}

// TestFlowRate: with flow_rate 50 (its burst one second's worth, 50), no
// second-long window holds more than 100 deliveries of the key (by the
// server's received_at), and another key is not slowed by it.
func TestFlowRate(t *testing.T) {
	t.Parallel()
	p := start(t, t.TempDir(), nil)
	const topic, n = "rate", 300
	setFlow(t, p.client, topic, &hourglassv1.Policy{FlowRate: new(50.0)})
	now := time.Now()
	scheduleKeyed(t, p.client, topic, "r", n, func(int) time.Time { return now })
	var mu sync.Mutex
	var at []time.Time
	consume(t, p.client, topic, 4, 100, time.Minute, func(m *hourglassv1.Message, _ time.Time) bool {
		mu.Lock()
		defer mu.Unlock()
		at = append(at, m.ReceivedAt.AsTime())
		return true
	}, nil, func() bool { mu.Lock(); defer mu.Unlock(); return len(at) >= n })
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	worst := 0
	for i, j := 0, 0; i < len(at); i++ {
		for at[i].Sub(at[j]) >= time.Second {
			j++
		}
		worst = max(worst, i-j+1)
	}
	if worst > 100 {
		t.Errorf("%d deliveries of the key within one second; the rate 50/s and its burst 50 allow 100", worst)
	}
	if span := at[len(at)-1].Sub(at[0]); span < 3*time.Second {
		t.Errorf("%d messages handed out over %v; at 50/s with a burst of 50 that takes at least 5 s", n, span)
	}
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
