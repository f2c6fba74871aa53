package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// deliverKeyed delivers one message per body to topic under flow key key
// ("" for none), due dueIn from now (negative: already due).
func deliverKeyed(t testing.TB, q *Queue, topic, key string, dueIn time.Duration, bodies ...string) []message.ID {
	t.Helper()
	batch := make([]engine.Delivery, len(bodies))
	ids := make([]message.ID, len(bodies))
	due := q.now().Add(dueIn).UnixMilli()
	for i, b := range bodies {
		ids[i] = message.ID{DeliverAt: due, Seq: nextSeq.Add(1)}
		m := &message.Message{DeliverAt: due, Topic: []byte(topic), Body: []byte(b)}
		if key != "" {
			m.Headers = []message.Header{{Key: []byte(message.FlowKeyHeader), Value: []byte(key)}}
		}
		batch[i] = engine.Delivery{ID: ids[i], Message: m}
	}
	if err := q.Deliver(context.Background(), topic, batch); err != nil {
		t.Fatal(err)
	}
	return ids
}

// keyBodies is n bodies "<key>-<i>".
func keyBodies(key string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", key, i)
	}
	return out
}

func setPolicy(t testing.TB, q *Queue, topic string, p Policy) {
	t.Helper()
	if err := q.SetPolicy(topic, p); err != nil {
		t.Fatal(err)
	}
}

// keyCount counts ms by the prefix of their body before '-'.
func keyCount(ms []Message) map[string]int {
	n := map[string]int{}
	for _, m := range ms {
		k, _, _ := strings.Cut(string(m.Body), "-")
		n[k]++
	}
	return n
}

// TestFlowConcurrency: at most Concurrency messages of one key are leased;
// the others wait, due, and are counted held; another key and messages
// without a key are not held by it; an ack lets the next one go; Lookup
// says why a held message waits.
func TestFlowConcurrency(t *testing.T) {
	ctx := context.Background()
	q := openQ(t, t.TempDir(), nil)
	defer q.Close()
	ids := deliverKeyed(t, q, "t", "a", -time.Second, keyBodies("a", 5)...)
	deliverKeyed(t, q, "t", "b", -time.Second, keyBodies("b", 2)...)
	deliverKeyed(t, q, "t", "", -time.Second, keyBodies("none", 3)...)
	setPolicy(t, q, "t", Policy{Flow: Flow{Concurrency: 2}})
	ms := recv(t, q, "t", 100, time.Hour)
	if got := keyCount(ms); got["a"] != 2 || got["b"] != 2 || got["none"] != 3 || len(ms) != 7 {
		t.Fatalf("received %v; want 2 of a, 2 of b and the 3 without a key", bodies(ms))
	}
	if more := recv(t, q, "t", 100, time.Hour); len(more) != 0 {
		t.Fatalf("received %v with a's concurrency used up", bodies(more))
	}
	st := q.Stats()["t"]
	if st.FlowHeld != 3 || st.FlowKeysHeld != 1 || st.Backlog != 3 || st.Leased != 7 {
		t.Fatalf("stats %+v; want 3 held by 1 key, backlog 3, 7 leased", st)
	}
	lk, err := q.Lookup(ctx, "t", ids[4])
	if err != nil || lk.Held != Waiting || !strings.Contains(lk.FlowWait, `flow key "a" has 2 messages leased, its concurrency`) {
		t.Fatalf("Lookup of a held message: %+v %v; want Waiting with why", lk, err)
	}
	top := q.FlowBacklogs("t", 20)
	if len(top) != 3 || top[0] != (FlowBacklog{Key: "a", Due: 3, Leased: 2, HeldBy: "concurrency"}) {
		t.Fatalf("FlowBacklogs = %+v; want a first, 3 due, 2 leased, held by concurrency", top)
	}
	var a0 Message
	for _, m := range ms {
		if string(m.Body) == "a-0" {
			a0 = m
		}
	}
	ackAll(t, q, []Message{a0})
	next := recv(t, q, "t", 100, time.Hour)
	if !slices.Equal(bodies(next), []string{"a-2"}) {
		t.Fatalf("after acking a-0 received %v; want a-2 alone", bodies(next))
	}
}

// TestFlowOrdered: an ordered key hands out one message at a time, in
// order; a Nack keeps the key on that message (without a delay and with
// one, waited out in place), a restart hands the unsettled head out
// first, and only an ack moves the key on.
func TestFlowOrdered(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	clock := &stepClock{}
	q := openQ(t, dir, clock.opts)
	deliverKeyed(t, q, "t", "a", -time.Second, keyBodies("a", 3)...)
	deliverKeyed(t, q, "t", "b", -time.Second, keyBodies("b", 1)...)
	setPolicy(t, q, "t", Policy{Flow: Flow{Ordered: true}})
	ms := recv(t, q, "t", 100, time.Hour)
	if !slices.Equal(bodies(ms), []string{"a-0", "b-0"}) {
		t.Fatalf("received %v; want a-0 and b-0", bodies(ms))
	}
	if err := q.NackReceipt(ctx, "t", ms[0].Receipt, NackOptions{}); err != nil {
		t.Fatal(err)
	}
	again := recv(t, q, "t", 100, time.Hour)
	if !slices.Equal(bodies(again), []string{"a-0"}) || again[0].Attempt != 1 {
		t.Fatalf("after a Nack received %v; want a-0 again, attempt 1", bodies(again))
	}
	if err := q.NackReceipt(ctx, "t", again[0].Receipt, NackOptions{Delay: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if held := recv(t, q, "t", 100, time.Hour); len(held) != 0 {
		t.Fatalf("during a-0's retry delay received %v; want nothing of a", bodies(held))
	}
	if top := q.FlowBacklogs("t", 1); len(top) != 1 || top[0].HeldBy != "ordered" || top[0].Due != 3 {
		t.Fatalf("FlowBacklogs = %+v; want a held by ordered with 3 due", top)
	}
	clock.step(5*time.Second, 5*time.Second)
	retry := recv(t, q, "t", 100, time.Hour)
	if !slices.Equal(bodies(retry), []string{"a-0"}) || retry[0].Attempt != 2 {
		t.Fatalf("after the delay received %v; want a-0, attempt 2", bodies(retry))
	}
	ackAll(t, q, retry)
	a1 := recv(t, q, "t", 100, time.Hour)
	if !slices.Equal(bodies(a1), []string{"a-1"}) {
		t.Fatalf("after acking a-0 received %v; want a-1", bodies(a1))
	}
	// A restart ends the lease on a-1: it comes first again, alone.
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = openQ(t, dir, clock.opts)
	defer q.Close()
	setPolicy(t, q, "t", Policy{Flow: Flow{Ordered: true}})
	after := recv(t, q, "t", 100, time.Hour)
	if !slices.Equal(bodies(after), []string{"a-1", "b-0"}) {
		t.Fatalf("after a restart received %v; want a-1 and b-0", bodies(after))
	}
}

// TestFlowRate: a key hands out at most its burst at once and then Rate a
// second; its bucket fills from the queue's Open, so a restart gives no
// extra burst; keys have buckets of their own.
func TestFlowRate(t *testing.T) {
	clock := &stepClock{}
	q := openQ(t, t.TempDir(), clock.opts)
	defer q.Close()
	deliverKeyed(t, q, "t", "a", -time.Second, keyBodies("a", 10)...)
	deliverKeyed(t, q, "t", "b", -time.Second, keyBodies("b", 10)...)
	setPolicy(t, q, "t", Policy{Flow: Flow{Rate: 2, Burst: 3}})
	if ms := recv(t, q, "t", 100, time.Hour); len(ms) != 0 {
		t.Fatalf("right after Open received %v; want nothing (the buckets fill from Open)", bodies(ms))
	}
	clock.step(time.Hour, time.Hour)
	ms := recv(t, q, "t", 100, time.Hour)
	if got := keyCount(ms); got["a"] != 3 || got["b"] != 3 {
		t.Fatalf("with full buckets received %v; want the burst of 3 of each key", bodies(ms))
	}
	clock.step(500*time.Millisecond, 500*time.Millisecond)
	ms = recv(t, q, "t", 100, time.Hour)
	if got := keyCount(ms); got["a"] != 1 || got["b"] != 1 {
		t.Fatalf("half a second later received %v; want one of each key", bodies(ms))
	}
	if top := q.FlowBacklogs("t", 20); len(top) != 2 || top[0].HeldBy != "rate" {
		t.Fatalf("FlowBacklogs = %+v; want both keys held by rate", top)
	}
}

// TestFlowFair: under Fair a key with a large backlog ahead of others
// does not keep them waiting: one Receive serves every key; without Fair
// the keys are served in the order their messages came due.
func TestFlowFair(t *testing.T) {
	for _, fair := range []bool{true, false} {
		t.Run(fmt.Sprint("fair_", fair), func(t *testing.T) {
			q := openQ(t, t.TempDir(), nil)
			defer q.Close()
			deliverKeyed(t, q, "t", "big", -time.Second, keyBodies("big", 2000)...)
			for i := range 10 {
				deliverKeyed(t, q, "t", fmt.Sprint("s", i), -time.Second, keyBodies(fmt.Sprint("s", i), 2)...)
			}
			setPolicy(t, q, "t", Policy{Flow: Flow{Fair: fair, Concurrency: 5000}})
			ms := recv(t, q, "t", 30, time.Hour)
			got := keyCount(ms)
			small := 0
			for i := range 10 {
				small += got[fmt.Sprint("s", i)]
			}
			if fair && (small != 20 || got["big"] != 10) {
				t.Fatalf("fair: one Receive of 30 got %v; want the 20 of the small keys and 10 of big", got)
			}
			if !fair && got["big"] != 30 {
				t.Fatalf("not fair: one Receive of 30 got %v; want 30 of big, first due", got)
			}
		})
	}
}

// TestFlowKeysCostNothing: messages not yet due make no key state, and a
// key's state goes once nothing of it is due or leased.
func TestFlowKeysCostNothing(t *testing.T) {
	q := openQ(t, t.TempDir(), nil)
	defer q.Close()
	setPolicy(t, q, "t", Policy{Flow: Flow{Concurrency: 1}})
	deliverKeyed(t, q, "t", "now", -time.Second, "n")
	for i := range 100 {
		deliverKeyed(t, q, "t", fmt.Sprint("later-", i), time.Hour, "x")
	}
	ms := recv(t, q, "t", 100, time.Hour)
	tp := q.mustTopic(t, "t")
	tp.mu.Lock()
	keys := len(tp.mu.flow.keys)
	tp.mu.Unlock()
	if len(ms) != 1 || keys != 1 {
		t.Fatalf("received %v with %d keys in memory; want 1 message and its key alone", bodies(ms), keys)
	}
	ackAll(t, q, ms)
	tp.mu.Lock()
	keys = len(tp.mu.flow.keys)
	tp.mu.Unlock()
	if keys != 0 {
		t.Fatalf("%d keys in memory after the only due message was acked; want 0", keys)
	}
}

// TestFlowPolicyStored: the flow fields survive EncodePolicy and
// DecodePolicy, and Validate refuses what they do not allow.
func TestFlowPolicyStored(t *testing.T) {
	p := Policy{Flow: Flow{Concurrency: 3, Rate: 50, Burst: 10, Fair: true}}
	got, err := DecodePolicy(EncodePolicy(p))
	if err != nil || got != p {
		t.Fatalf("DecodePolicy(EncodePolicy(%+v)) = %+v, %v", p, got, err)
	}
	for _, bad := range []Flow{{Concurrency: -1}, {Concurrency: MaxFlowConcurrency + 1}, {Rate: -1}, {Burst: 5}, {Ordered: true, Concurrency: 2}} {
		if err := (Policy{Flow: bad}).Validate(time.Hour); !errors.Is(err, ErrInvalid) {
			t.Errorf("Validate(%+v) = %v; want ErrInvalid", bad, err)
		}
	}
}
