package queue

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// retired reports whether topic name has been retired: known, not open,
// and not being opened or closed.
func retired(q *Queue, name string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := q.mu.topics[name]
	return s != nil && s.t == nil && s.busy == nil
}

func ctx() context.Context { return context.Background() }

// deliveries builds a batch of one message per body for topic, with ids.
func deliveries(topic string, ids []message.ID, bodies ...string) []engine.Delivery {
	batch := make([]engine.Delivery, len(bodies))
	for i, b := range bodies {
		m := &message.Message{DeliverAt: ids[i].DeliverAt, Topic: []byte(topic), Body: []byte(b)}
		batch[i] = engine.Delivery{ID: ids[i], Message: m}
	}
	return batch
}

// TestIdleTopics checks that a topic with nothing receivable, leased or
// being written and no Receive waiting is retired after IdleTopic (its
// logs closed, its counters kept), that it is opened again by the next
// use without losing or repeating a message, and that a waiting Receive,
// a lease or an unreceived message keeps it open.
func TestIdleTopics(t *testing.T) {
	const idle = time.Second
	tests := []struct {
		name string
		run  func(t *testing.T, q *Queue)
	}{
		{"message_for_a_retired_topic_is_delivered", func(t *testing.T, q *Queue) {
			deliver(t, q, "t", "a")
			ackAll(t, q, recv(t, q, "t", 10, 0))
			time.Sleep(3 * idle)
			synctest.Wait()
			if !retired(q, "t") {
				t.Fatalf("topic still open after %v idle", 3*idle)
			}
			if st, ok := q.Stats()["t"]; !ok || st.Delivered != 1 || st.Acked != 1 {
				t.Fatalf("stats of the retired topic: %+v, %v; want its counters kept", st, ok)
			}
			ids := deliver(t, q, "t", "b")
			if retired(q, "t") {
				t.Fatal("Deliver to a retired topic did not open it")
			}
			ms := recv(t, q, "t", 10, 0)
			if len(ms) != 1 || ms[0].ID != ids[0] || string(ms[0].Body) != "b" {
				t.Fatalf("after reopening: received %q, want only b", bodies(ms))
			}
			ackAll(t, q, ms)
			if st := q.Stats()["t"]; st.Delivered != 2 || st.Acked != 2 || st.Backlog != 0 {
				t.Fatalf("stats across the retirement: %+v", st)
			}
		}},
		{"waiting_receive_keeps_the_topic", func(t *testing.T, q *Queue) {
			deliver(t, q, "t", "a")
			ackAll(t, q, recv(t, q, "t", 10, 0))
			got := make(chan []Message, 1)
			go func() {
				ms, err := q.Receive(ctx(), "t", 10, time.Hour, 0)
				if err != nil {
					t.Error(err)
				}
				got <- ms
			}()
			time.Sleep(5 * idle)
			synctest.Wait()
			if retired(q, "t") {
				t.Fatal("retired while a Receive waits on it")
			}
			select {
			case ms := <-got:
				t.Fatalf("the waiting Receive returned %q", bodies(ms))
			default:
			}
			deliver(t, q, "t", "b")
			if ms := <-got; !slices.Equal(bodies(ms), []string{"b"}) {
				t.Fatalf("the waiting Receive got %q, want b", bodies(ms))
			}
		}},
		{"lease_keeps_the_topic_backlog_does_not", func(t *testing.T, q *Queue) {
			deliver(t, q, "t", "a", "b", "c")
			ms := recv(t, q, "t", 1, 10*idle)
			if err := q.Nack(ctx(), "t", recv(t, q, "t", 1, 10*idle)[0].ID, NackOptions{}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * idle)
			synctest.Wait()
			if retired(q, "t") {
				t.Fatal("retired with a message leased")
			}
			ackAll(t, q, ms)
			time.Sleep(5 * idle)
			synctest.Wait()
			if !retired(q, "t") {
				t.Fatal("not retired with nothing leased: a backlog waits on disk")
			}
			if st := q.Stats()["t"]; st.Backlog != 2 || st.Leased != 0 {
				t.Fatalf("stats of the retired topic: %+v; want a backlog of 2 (b nacked, c never received)", st)
			}
			ms = recv(t, q, "t", 10, 0)
			if retired(q, "t") {
				t.Fatal("Receive did not open the retired topic")
			}
			if !slices.Equal(bodies(ms), []string{"b", "c"}) || ms[0].Attempt != 1 || ms[1].Attempt != 0 {
				t.Fatalf("received %q (attempts %d, %d), want b again with attempt 1, then c", bodies(ms), ms[0].Attempt, ms[1].Attempt)
			}
			ackAll(t, q, ms)
			time.Sleep(3 * idle)
			synctest.Wait()
			if !retired(q, "t") {
				t.Fatal("not retired once everything was acked")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := openQ(t, t.TempDir(), func(o *Options) { o.IdleTopic = idle })
				tt.run(t, q)
				if err := q.Close(); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// TestRetirementRacesDeliver delivers a message to a topic just as the
// sweeper retires it: Deliver waits for the logs to close, opens them
// again and appends, and the message is received once, before and after
// a restart.
func TestRetirementRacesDeliver(t *testing.T) {
	const idle = time.Second
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		var q *Queue
		var ids []message.ID
		raced := make(chan error, 1)
		q = openQ(t, dir, func(o *Options) {
			o.IdleTopic = idle
			o.beforeRetire = func(string) {
				if ids != nil {
					return
				}
				ids = []message.ID{{DeliverAt: time.Now().UnixMilli() - 1000, Seq: nextSeq.Add(1)}}
				go func() {
					raced <- q.Deliver(ctx(), "t", deliveries("t", ids, "b"))
				}()
				time.Sleep(idle) // Deliver finds the topic retiring and waits
			}
		})
		deliver(t, q, "t", "a")
		ackAll(t, q, recv(t, q, "t", 10, 0))
		time.Sleep(3 * idle)
		synctest.Wait()
		if err := <-raced; err != nil {
			t.Fatalf("Deliver racing the retirement: %v", err)
		}
		ms := recv(t, q, "t", 10, 0)
		if len(ms) != 1 || ms[0].ID != ids[0] {
			t.Fatalf("received %q, want only the message delivered during the retirement", bodies(ms))
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		q = openQ(t, dir, nil)
		defer q.Close()
		if ms := drain(t, q, "t"); len(ms) != 1 || ms[0].ID != ids[0] {
			t.Fatalf("after a restart: %q, want the unacked message once", bodies(ms))
		}
	})
}

// TestIdleTopicsUnderLoad runs producers and consumers on a few topics
// that retire whenever they fall idle for a few milliseconds, and checks
// that every message is received and acked exactly once.
func TestIdleTopicsUnderLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var retirements atomic.Int64
		q := openQ(t, t.TempDir(), func(o *Options) {
			o.IdleTopic = 5 * time.Millisecond
			o.beforeRetire = func(string) { retirements.Add(1) }
		})
		const topics, per = 4, 40
		var mu sync.Mutex
		got := map[message.ID]int{}
		var want []message.ID
		var wg sync.WaitGroup
		for i := range topics {
			name := fmt.Sprintf("t%d", i)
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(i), 1))
				for j := range per {
					time.Sleep(time.Duration(rng.IntN(30)) * time.Millisecond)
					ids := []message.ID{{DeliverAt: time.Now().UnixMilli() - 1000, Seq: nextSeq.Add(1)}}
					if err := q.Deliver(ctx(), name, deliveries(name, ids, fmt.Sprint(j))); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					want = append(want, ids...)
					mu.Unlock()
				}
			})
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(i), 2))
				for n := 0; n < per; {
					ms, err := q.Receive(ctx(), name, 10, time.Duration(rng.IntN(3))*time.Millisecond, time.Hour)
					if err != nil {
						t.Error(err)
						return
					}
					if len(ms) == 0 {
						time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
					}
					for _, m := range ms {
						if err := q.AckReceipt(ctx(), name, m.Receipt); err != nil {
							t.Error(err)
						}
						mu.Lock()
						got[m.ID]++
						mu.Unlock()
					}
					n += len(ms)
				}
			})
		}
		wg.Wait()
		for _, id := range want {
			if got[id] != 1 {
				t.Errorf("%v received %d times", id, got[id])
			}
		}
		if len(got) != len(want) {
			t.Errorf("%d distinct messages received, %d delivered", len(got), len(want))
		}
		if retirements.Load() == 0 {
			t.Error("no topic retired while the load ran")
		}
		t.Logf("%d retirements while %d messages went through", retirements.Load(), len(want))
		time.Sleep(time.Second)
		synctest.Wait()
		for i := range topics {
			if name := fmt.Sprintf("t%d", i); !retired(q, name) {
				t.Errorf("%s not retired once idle", name)
			}
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
