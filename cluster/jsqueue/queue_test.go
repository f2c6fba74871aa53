package jsqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/internal/natstest"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
	"github.com/hourglassmq/hourglass/sink/natsjs"
)

var quiet = slog.New(slog.DiscardHandler)

// env is a nats-server with the delivery stream, a NATS sink publishing to
// it, and a way to make Queues on connections of their own (as nodes).
type env struct {
	t    *testing.T
	url  string
	sink *natsjs.Sink
	seq  uint64
}

func newEnv(t *testing.T) *env {
	ns := natstest.Start(t)
	s, err := natsjs.Open(context.Background(), natsjs.Options{URL: ns.ClientURL(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &env{t: t, url: ns.ClientURL(), sink: s}
}

// node returns a Queue on a connection of its own.
func (e *env) node(o Options) *Queue {
	nc, err := nats.Connect(e.url)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		e.t.Fatal(err)
	}
	o.JS, o.Stream, o.Prefix, o.Logger = js, natsjs.DefaultStream, natsjs.DefaultPrefix, quiet
	q, err := New(o)
	if err != nil {
		e.t.Fatal(err)
	}
	return q
}

// deliver publishes due messages of topic as a cluster node's sink does,
// and returns their IDs.
func (e *env) deliver(topic string, bodies ...string) []message.ID {
	var ds []engine.Delivery
	for _, b := range bodies {
		e.seq++
		id := message.ID{DeliverAt: time.Now().UnixMilli(), Seq: e.seq}
		ds = append(ds, engine.Delivery{ID: id, Message: &message.Message{DeliverAt: id.DeliverAt, Topic: []byte(topic), Body: []byte(b),
			Headers: []message.Header{{Key: []byte("X-Order"), Value: []byte(b)}}}})
	}
	if err := e.sink.Deliver(context.Background(), topic, ds); err != nil {
		e.t.Fatal(err)
	}
	ids := make([]message.ID, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	return ids
}

// waitingPulls returns a func counting the pulls waiting on topic's
// consumer (-1 if it cannot be read), asked on a connection of its own,
// and that connection's JetStream.
func (e *env) waitingPulls(topic string) (func() int, jetstream.JetStream) {
	nc, err := nats.Connect(e.url)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	return func() int {
		c, err := js.Consumer(ctxT(e.t), natsjs.DefaultStream, ConsumerName(topic))
		if err != nil {
			return -1
		}
		info, err := c.Info(ctxT(e.t))
		if err != nil {
			return -1
		}
		return info.NumWaiting
	}, js
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// receive receives until it has want messages of topic, or fails after
// wait without any.
func receive(t *testing.T, q *Queue, topic string, want int, wait time.Duration) []queue.Message {
	t.Helper()
	var out []queue.Message
	for len(out) < want {
		got, err := q.Receive(ctxT(t), topic, want-len(out), wait, 0)
		if err != nil {
			t.Fatalf("Receive %s: %v", topic, err)
		}
		if len(got) == 0 {
			t.Fatalf("Receive %s: nothing within %v; have %d of %d", topic, wait, len(out), want)
		}
		out = append(out, got...)
	}
	return out
}

// none checks that a Receive of topic that waits wait gets nothing.
func none(t *testing.T, q *Queue, topic string, wait time.Duration) {
	t.Helper()
	got, err := q.Receive(ctxT(t), topic, 10, wait, 0)
	if err != nil || len(got) != 0 {
		t.Fatalf("Receive %s = %d messages, %v; want none", topic, len(got), err)
	}
}

// TestReceiveAckOnAnotherNode: messages delivered to a topic are handed
// out by one node's Receive with the fields of one node's queue, and acked
// through another node; acked, they are not handed out again.
func TestReceiveAckOnAnotherNode(t *testing.T) {
	e := newEnv(t)
	a, b := e.node(Options{Lease: 5 * time.Second}), e.node(Options{Lease: 5 * time.Second})
	none(t, a, "orders", 0) // creates the consumer: a message delivered before it is still handed out
	ids := e.deliver("orders", "m0", "m1", "m2")
	e.deliver("orders.eu", "other") // another subject: not in orders
	got := receive(t, a, "orders", 3, 5*time.Second)
	for i, m := range got {
		if m.ID != ids[i] || string(m.Body) != fmt.Sprintf("m%d", i) || m.Topic != "orders" || m.Attempt != 0 || m.DeliverAt != ids[i].DeliverAt {
			t.Errorf("message %d = %+v, want ID %v, body m%d, attempt 0", i, m, ids[i], i)
		}
		if len(m.Headers) != 1 || string(m.Headers[0].Key) != "X-Order" || string(m.Headers[0].Value) != string(m.Body) {
			t.Errorf("message %d headers %v, want only the producer's X-Order", i, m.Headers)
		}
		if lease := m.LeaseUntil.Sub(m.ReceivedAt); lease != 5*time.Second-DeliveryMargin {
			t.Errorf("message %d leased for %v, want the consumer's AckWait 5s less the delivery margin", i, lease)
		}
	}
	res, err := b.AckBatch(ctxT(t), "orders", []string{got[0].Receipt, got[1].Receipt, got[2].Receipt})
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range res {
		if err != nil {
			t.Errorf("ack %d on the other node: %v", i, err)
		}
	}
	// Acked twice: JetStream's acks are idempotent.
	if err := a.AckReceipt(ctxT(t), "orders", got[0].Receipt); err != nil {
		t.Errorf("second ack: %v", err)
	}
	none(t, b, "orders", 0)
	if m := receive(t, b, "orders.eu", 1, 5*time.Second); string(m[0].Body) != "other" {
		t.Errorf("orders.eu got %q", m[0].Body)
	}
}

// TestNackWithDelay: a message nacked with a delay is not handed out
// again before the delay has passed (measured from before the Nack), and
// then is, as attempt 1; a Nack without delay hands it out again at once.
func TestNackWithDelay(t *testing.T) {
	e := newEnv(t)
	q := e.node(Options{Lease: 30 * time.Second})
	none(t, q, "retry", 0)
	e.deliver("retry", "r")
	m := receive(t, q, "retry", 1, 5*time.Second)[0]
	const delay = 1500 * time.Millisecond
	nacked := time.Now()
	if err := q.NackReceipt(ctxT(t), "retry", m.Receipt, queue.NackOptions{Delay: delay, Reason: "busy"}); err != nil {
		t.Fatal(err)
	}
	again := receive(t, q, "retry", 1, 10*time.Second)[0]
	if since := time.Since(nacked); since < delay {
		t.Errorf("handed out again %v after the Nack, before its delay %v", since, delay)
	}
	if again.ID != m.ID || again.Attempt != 1 || again.Receipt == m.Receipt {
		t.Errorf("after the Nack: %+v, want the same ID as attempt 1 with a new receipt", again)
	}
	// A Nack without delay hands it out again at once.
	if err := q.NackReceipt(ctxT(t), "retry", again.Receipt, queue.NackOptions{}); err != nil {
		t.Fatal(err)
	}
	third := receive(t, q, "retry", 1, 5*time.Second)[0]
	if third.Attempt != 2 {
		t.Errorf("after a Nack without delay: attempt %d, want 2", third.Attempt)
	}
	if err := q.AckReceipt(ctxT(t), "retry", third.Receipt); err != nil {
		t.Fatal(err)
	}
	none(t, q, "retry", 0)
}

// TestLeaseExpires: a message not acked within its lease is handed out
// again as the next attempt; the old receipt no longer acts.
func TestLeaseExpires(t *testing.T) {
	e := newEnv(t)
	q := e.node(Options{Lease: time.Second})
	none(t, q, "slow", 0)
	e.deliver("slow", "s")
	m := receive(t, q, "slow", 1, 5*time.Second)[0]
	again := receive(t, q, "slow", 1, 10*time.Second)[0]
	if again.ID != m.ID || again.Attempt != 1 || again.ReceivedAt.Before(m.LeaseUntil) {
		t.Errorf("handed out again: %+v; want attempt 1 after the first lease ended at %v", again, m.LeaseUntil)
	}
	err := q.AckReceipt(ctxT(t), "slow", m.Receipt)
	if !errors.Is(err, queue.ErrNotLeased) {
		t.Errorf("ack of the expired receipt: %v, want ErrNotLeased", err)
	}
	if err := q.AckReceipt(ctxT(t), "slow", again.Receipt); err != nil {
		t.Fatal(err)
	}
}

// TestDeadLetters: a message that fails max attempts times, by Nacks or by
// expired leases, moves to <topic>.dlq, received there with why it died;
// a Nack with dead_letter moves it at once.
func TestDeadLetters(t *testing.T) {
	e := newEnv(t)
	q := e.node(Options{Lease: time.Second, MaxAttempts: 2})
	none(t, q, "jobs", 0)
	ids := e.deliver("jobs", "poison")
	for attempt := range 2 {
		m := receive(t, q, "jobs", 1, 5*time.Second)[0]
		if m.Attempt != uint32(attempt) {
			t.Fatalf("attempt %d handed out as %d", attempt, m.Attempt)
		}
		if err := q.NackReceipt(ctxT(t), "jobs", m.Receipt, queue.NackOptions{Reason: "bad input " + strconv.Itoa(attempt)}); err != nil {
			t.Fatal(err)
		}
	}
	d := receive(t, q, "jobs.dlq", 1, 5*time.Second)[0]
	wantDead(t, d, ids[0], "poison", queue.ReasonMaxAttempts, "bad input 1", 2)
	ack(t, q, "jobs.dlq", d)
	none(t, q, "jobs", 0)

	// Two leases run out: the third fetch moves it.
	ids = e.deliver("jobs", "sleeper")
	for range 2 {
		receive(t, q, "jobs", 1, 5*time.Second)
	}
	none(t, q, "jobs", 3*time.Second) // the redelivery is moved, not handed out
	d = receive(t, q, "jobs.dlq", 1, 5*time.Second)[0]
	wantDead(t, d, ids[0], "sleeper", queue.ReasonMaxAttempts, "lease expired", 2)
	ack(t, q, "jobs.dlq", d)

	ids = e.deliver("jobs", "refused")
	m := receive(t, q, "jobs", 1, 5*time.Second)[0]
	if err := q.NackReceipt(ctxT(t), "jobs", m.Receipt, queue.NackOptions{DeadLetter: true, Reason: "no such customer"}); err != nil {
		t.Fatal(err)
	}
	d = receive(t, q, "jobs.dlq", 1, 5*time.Second)[0]
	wantDead(t, d, ids[0], "refused", queue.ReasonNacked, "no such customer", 1)

	// A dead-letter topic keeps its failures: nacked past max attempts,
	// a dead letter comes back.
	for range 3 {
		if err := q.NackReceipt(ctxT(t), "jobs.dlq", d.Receipt, queue.NackOptions{}); err != nil {
			t.Fatal(err)
		}
		d = receive(t, q, "jobs.dlq", 1, 5*time.Second)[0]
	}
	if d.ID != ids[0] {
		t.Errorf("jobs.dlq handed out %v, want %v again", d.ID, ids[0])
	}
}

func ack(t *testing.T, q *Queue, topic string, m queue.Message) {
	t.Helper()
	if err := q.AckReceipt(ctxT(t), topic, m.Receipt); err != nil {
		t.Fatalf("ack %v on %s: %v", m.ID, topic, err)
	}
}

func wantDead(t *testing.T, d queue.Message, id message.ID, body, reason, lastErr string, attempts uint32) {
	t.Helper()
	h := func(k string) string { return message.HeaderValue(d.Headers, k) }
	if d.ID != id || string(d.Body) != body || d.Topic != "jobs.dlq" || d.Attempt != attempts ||
		h(queue.DeadLetterReasonHeader) != reason || h(queue.DeadLetterErrorHeader) != lastErr || h(queue.DeadLetterOriginHeader) != "jobs" {
		t.Errorf("dead letter %+v; want %v %q, reason %s, last error %q, %d attempts", d, id, body, reason, lastErr, attempts)
	}
	if at, err := strconv.ParseInt(h(queue.DeadLetterAtHeader), 10, 64); err != nil || time.Since(time.UnixMilli(at)) > time.Minute {
		t.Errorf("dead-lettered at %q", h(queue.DeadLetterAtHeader))
	}
}

// TestRefusals: a lease other than the consumer's, a receipt of another
// topic, one that is not a receipt, and one whose lease ended by the
// node's clock are refused; a node whose flags differ uses the consumer's
// lease.
func TestRefusals(t *testing.T) {
	e := newEnv(t)
	q := e.node(Options{Lease: 5 * time.Second})
	_, err := q.Receive(ctxT(t), "a", 1, 0, 7*time.Second)
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("Receive with lease 7s: %v, want FailedPrecondition", err)
	}
	if _, err := q.Receive(ctxT(t), "a", 1, 0, 5*time.Second); err != nil {
		t.Errorf("Receive with the consumer's lease: %v", err)
	}
	e.deliver("a", "x")
	m := receive(t, q, "a", 1, 5*time.Second)[0]
	if err := q.AckReceipt(ctxT(t), "b", m.Receipt); !errors.Is(err, queue.ErrNotLeased) {
		t.Errorf("ack on topic b of a receipt of a: %v, want ErrNotLeased", err)
	}
	if err := q.AckReceipt(ctxT(t), "a", "1/$JS.ACK.HOURGLASS.hg_a.1.1.1.1.>"); status.Code(err) != codes.InvalidArgument {
		t.Errorf("ack of a made-up subject: %v, want InvalidArgument", err)
	}
	later := e.node(Options{Lease: time.Minute, Now: func() time.Time { return time.Now().Add(6 * time.Second) }})
	if l, err := later.Lease(ctxT(t), "a"); err != nil || l != 5*time.Second {
		t.Errorf("a node with another --default-lease: lease %v, %v; want the consumer's 5s", l, err)
	}
	if err := later.AckReceipt(ctxT(t), "a", m.Receipt); !errors.Is(err, queue.ErrNotLeased) {
		t.Errorf("ack after the lease ended by the node's clock: %v, want ErrNotLeased", err)
	}
	if err := q.AckReceipt(ctxT(t), "a", m.Receipt); err != nil {
		t.Errorf("ack within the lease: %v", err)
	}
}

// TestLongPoll: a Receive waiting with idle heartbeats (shortened here to
// 50 ms, so that the watchdog would end a pull without them after 125 ms)
// gets a message delivered while it waits, long after the watchdog's
// time; a Receive whose consumer was deleted meanwhile makes it again.
func TestLongPoll(t *testing.T) {
	e := newEnv(t)
	q := e.node(Options{Lease: 5 * time.Second})
	q.hb = 50 * time.Millisecond
	none(t, q, "later", 0)
	waiting, js := e.waitingPulls("later")
	type result struct {
		msgs []queue.Message
		err  error
		took time.Duration
	}
	got := make(chan result, 1)
	start := time.Now()
	go func() {
		m, err := q.Receive(ctxT(t), "later", 10, 20*time.Second, 0)
		got <- result{m, err, time.Since(start)}
	}()
	// Wait (bounded polling of the consumer) until the pull is waiting and
	// several heartbeat periods have passed by the server's count: the
	// same pull is still there, so heartbeats kept it.
	deadline := time.Now().Add(10 * time.Second)
	for waiting() != 1 || time.Since(start) < 500*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("no pull waiting on the consumer (%d waiting)", waiting())
		}
		time.Sleep(20 * time.Millisecond) // polling the consumer's state
	}
	ids := e.deliver("later", "l")
	r := <-got
	if r.err != nil || len(r.msgs) != 1 || r.msgs[0].ID != ids[0] {
		t.Fatalf("long poll: %v, %v; want the message delivered while it waited", r.msgs, r.err)
	}
	ack(t, q, "later", r.msgs[0])

	// The consumer deleted behind the node's back: made again.
	if err := js.DeleteConsumer(ctxT(t), natsjs.DefaultStream, ConsumerName("later")); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Receive(ctxT(t), "later", 1, time.Second, 0); err != nil {
		t.Errorf("Receive after the consumer was deleted: %v", err)
	}
	if waiting() < 0 {
		t.Errorf("the consumer was not made again")
	}
}

// TestAbandonedPullGivesBack: the messages a pull got for a Receive that
// was cancelled (a client gone, a Consume stream ended) before it handed
// them out are given back at once, not leased to nobody until the AckWait
// (30 s here) ends; and a pull still waiting on the server when its
// Receive is cancelled takes nothing more.
func TestAbandonedPullGivesBack(t *testing.T) {
	e := newEnv(t)
	q := e.node(Options{Lease: 30 * time.Second})
	none(t, q, "gone", 0)
	c, err := q.consumer(ctxT(t), "gone")
	if err != nil {
		t.Fatal(err)
	}
	ids := e.deliver("gone", "a", "b", "c")
	// A pull as fetch sends it, whose messages arrive on ch.
	ch := make(chan *nats.Msg, 16)
	inbox := q.nc.NewInbox()
	sub, err := q.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(pullRequest{Batch: 3, NoWait: true, Expires: 5 * time.Second})
	if err := q.nc.PublishRequest(c.next, inbox, body); err != nil {
		t.Fatal(err)
	}
	var first *nats.Msg
	select {
	case first = <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the pull got nothing")
	}
	// Its caller goes away holding the first; the others are on ch or
	// still coming.
	q.giveBack(sub, ch, []delivery{{msg: first}})
	got := receive(t, q, "gone", 3, 5*time.Second)
	seen := map[message.ID]uint32{}
	for _, m := range got {
		seen[m.ID] = m.Attempt
		ack(t, q, "gone", m)
	}
	// The first was handed to the pull and is given back (attempt 1);
	// each other one either was too, or the server had not sent it yet
	// when the pull's interest ended, and hands it to the next pull as
	// its first delivery (attempt 0). None waits out the AckWait.
	again := 0
	for i, id := range ids {
		a, ok := seen[id]
		switch {
		case !ok || a > 1 || (i == 0 && a != 1):
			t.Errorf("%v: received %v at attempt %d; want it given back (attempt 1), or, unless it is the first, never sent to the pull (attempt 0)", id, ok, a)
		case a == 1:
			again++
		}
	}
	if n := q.gaveBack.Load(); n != int64(again) {
		t.Errorf("%d messages given back; %d came again at attempt 1", n, again)
	}

	// A long poll cancelled while its pull waits on the server: the next
	// message goes to the next Receive, as attempt 0.
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() {
		_, err := q.Receive(ctx, "gone", 10, 20*time.Second, 0)
		done <- err
	}()
	waiting, _ := e.waitingPulls("gone")
	deadline := time.Now().Add(10 * time.Second)
	for waiting() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no pull waiting on the consumer (%d waiting)", waiting())
		}
		time.Sleep(20 * time.Millisecond) // polling the consumer's state
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled Receive answered no error")
	}
	later := e.deliver("gone", "d")
	got = receive(t, q, "gone", 1, 5*time.Second)
	if got[0].ID != later[0] || got[0].Attempt != 0 {
		t.Fatalf("got %v attempt %d; want %v at attempt 0", got[0].ID, got[0].Attempt, later[0])
	}
}

// TestLostPull: a pull that JetStream never answers (its consumer's
// leader died holding it; here a subscriber swallows the request) ends
// pullGrace after its expiry when it has no heartbeats, and after two
// and a half missed heartbeats when it has them, not at the request
// timeout nor at a long pull's expiry: the Receive then pulls again from
// the consumer's new leader.
func TestLostPull(t *testing.T) {
	e := newEnv(t)
	q := e.node(Options{Timeout: time.Minute})
	hole, err := nats.Connect(e.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hole.Close)
	if _, err := hole.Subscribe("hg.test.lost.next", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := hole.Flush(); err != nil {
		t.Fatal(err)
	}
	c := &consumer{topic: "lost", name: "lost", next: "hg.test.lost.next"}
	if pullHeartbeat*5/2 >= 4*time.Second {
		t.Errorf("a lost long pull is noticed after %v, not before nats-server's earliest election (4 s)", pullHeartbeat*5/2)
	}
	for _, tc := range []struct {
		name      string
		wait, end time.Duration // the pull's wait; it must have ended by end
	}{
		{"short_without_heartbeats", 200 * time.Millisecond, 200*time.Millisecond + pullGrace},
		{"long_with_heartbeats", 30 * time.Second, pullHeartbeat * 5 / 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			type result struct {
				n   int
				err error
			}
			done := make(chan result, 1)
			start := time.Now()
			go func() {
				got, err := q.fetch(ctxT(t), c, 10, tc.wait)
				done <- result{len(got), err}
			}()
			select {
			case r := <-done:
				took := time.Since(start)
				if r.n != 0 || r.err != nil || took < tc.end {
					t.Errorf("lost pull ended after %v with %d messages, %v; want none, nil, not before %v", took, r.n, r.err, tc.end)
				}
			case <-time.After(tc.end + 3*time.Second):
				t.Fatalf("lost pull (wait %v) still waiting %v after %v", tc.wait, time.Since(start), tc.end)
			}
		})
	}
}

// TestUnansweredLookup: a lookup of a topic's consumer that JetStream never
// answers (here the node's API requests go to a prefix a subscriber
// swallows) fails the Receive with Unavailable after lookupTimeout, not
// after Options.Timeout.
func TestUnansweredLookup(t *testing.T) {
	e := newEnv(t)
	nc, err := nats.Connect(e.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := nc.Subscribe("hole.API.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.NewWithAPIPrefix(nc, "hole.API")
	if err != nil {
		t.Fatal(err)
	}
	q, err := New(Options{JS: js, Stream: natsjs.DefaultStream, Prefix: natsjs.DefaultPrefix, Logger: quiet, Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := q.Receive(ctxT(t), "lookup", 1, 200*time.Millisecond, 0)
		done <- err
	}()
	select {
	case err := <-done:
		if took := time.Since(start); status.Code(err) != codes.Unavailable || took < lookupTimeout {
			t.Errorf("Receive = %v after %v; want Unavailable after %v", err, took, lookupTimeout)
		}
	case <-time.After(lookupTimeout + 3*time.Second):
		t.Fatalf("Receive still waiting %v after an unanswered lookup", time.Since(start))
	}
}
