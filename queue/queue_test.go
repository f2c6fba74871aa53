package queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/record"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testOpts are small, fast options for tests: small segments so that
// rotation and retention happen, fsync always unless a test says otherwise.
func testOpts(dir string) Options {
	return Options{Dir: dir, SegmentSize: 64 << 10, AckSegmentSize: 16 << 10, Logger: quiet}
}

func openQ(t testing.TB, dir string, mod func(*Options)) *Queue {
	t.Helper()
	opts := testOpts(dir)
	if mod != nil {
		mod(&opts)
	}
	q, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

var nextSeq atomic.Uint64

// deliver delivers one message per body to topic and returns their IDs.
func deliver(t testing.TB, q *Queue, topic string, bodies ...string) []message.ID {
	t.Helper()
	batch := make([]engine.Delivery, len(bodies))
	ids := make([]message.ID, len(bodies))
	// Due a second ago: the queue keeps messages until their deliverAt.
	due := time.Now().UnixMilli() - 1000
	for i, b := range bodies {
		ids[i] = message.ID{DeliverAt: due + int64(i), Seq: nextSeq.Add(1)}
		m := &message.Message{DeliverAt: ids[i].DeliverAt, Topic: []byte(topic), Body: []byte(b),
			Headers: []message.Header{{Key: []byte("k"), Value: []byte("v" + b)}}}
		batch[i] = engine.Delivery{ID: ids[i], Message: m}
	}
	if err := q.Deliver(context.Background(), topic, batch); err != nil {
		t.Fatal(err)
	}
	return ids
}

// recv receives up to max messages without waiting.
func recv(t testing.TB, q *Queue, topic string, max int, lease time.Duration) []Message {
	t.Helper()
	ms, err := q.Receive(context.Background(), topic, max, 0, lease)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func bodies(ms []Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Body))
	}
	return out
}

// drain receives everything receivable now, with a long lease.
func drain(t testing.TB, q *Queue, topic string) []Message {
	t.Helper()
	var all []Message
	for {
		ms := recv(t, q, topic, 1000, time.Hour)
		if len(ms) == 0 {
			return all
		}
		all = append(all, ms...)
	}
}

func TestDeliverReceiveAck(t *testing.T) {
	q := openQ(t, t.TempDir(), nil)
	defer q.Close()
	ctx := context.Background()
	ids := deliver(t, q, "orders", "a", "b", "c")
	first := recv(t, q, "orders", 2, 0)
	if got := bodies(first); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("first receive: %q", got)
	}
	m := first[0]
	if m.ID != ids[0] || m.Topic != "orders" || m.Attempt != 0 || string(m.Headers[0].Value) != "va" ||
		m.DeliverAt != ids[0].DeliverAt || m.LeaseUntil.Sub(m.ReceivedAt) != DefaultLease || !m.Origin.IsZero() {
		t.Fatalf("message: %+v", m)
	}
	if got := bodies(recv(t, q, "orders", 10, 0)); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("second receive: %q", got)
	}
	if got := recv(t, q, "orders", 10, 0); len(got) != 0 {
		t.Fatalf("third receive: %q", bodies(got))
	}
	st := q.Stats()["orders"]
	if st.Delivered != 3 || st.Leased != 3 || st.Backlog != 0 {
		t.Fatalf("stats after receive: %+v", st)
	}
	for _, tc := range []struct {
		name string
		ack  func() error
		want error
	}{
		{"by_id", func() error { return q.Ack(ctx, "orders", ids[0]) }, nil},
		{"again", func() error { return q.Ack(ctx, "orders", ids[0]) }, ErrNotLeased},
		{"by_receipt", func() error { return q.AckReceipt(ctx, "orders", first[1].Receipt) }, nil},
		{"unknown_id", func() error { return q.Ack(ctx, "orders", message.ID{Seq: 1 << 50}) }, ErrNotLeased},
		{"unknown_topic", func() error { return q.Ack(ctx, "nope", ids[2]) }, ErrNotLeased},
		{"bad_receipt", func() error { return q.AckReceipt(ctx, "orders", "xyz") }, ErrInvalid},
		{"wrong_serial", func() error { return q.AckReceipt(ctx, "orders", ids[2].String()+".ffff") }, ErrNotLeased},
		{"invalid_topic", func() error { return q.Ack(ctx, "a b", ids[2]) }, ErrInvalidTopic},
		{"last", func() error { return q.Ack(ctx, "orders", ids[2]) }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.ack(); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	st = q.Stats()["orders"]
	if st.Acked != 3 || st.Leased != 0 || st.Backlog != 0 {
		t.Fatalf("stats after acks: %+v", st)
	}
}

func TestReceiveArguments(t *testing.T) {
	q := openQ(t, t.TempDir(), func(o *Options) { o.maxLease = time.Minute })
	defer q.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		name        string
		topic       string
		max         int
		wait, lease time.Duration
		want        error
	}{
		{"zero_max", "t", 0, 0, 0, ErrInvalid},
		{"huge_max", "t", MaxReceive + 1, 0, 0, ErrInvalid},
		{"negative_wait", "t", 1, -1, 0, ErrInvalid},
		{"negative_lease", "t", 1, 0, -1, ErrInvalid},
		{"lease_over_max", "t", 1, 0, time.Hour, ErrInvalid},
		{"bad_topic", ".t", 1, 0, 0, ErrInvalidTopic},
		{"ok_missing_topic", "t", 1, 0, time.Minute, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := q.Receive(ctx, tc.topic, tc.max, tc.wait, tc.lease)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(q.opts.Dir, "topics", "t")); !os.IsNotExist(err) {
		t.Fatalf("Receive created the topic on disk: %v", err)
	}
}

func TestValidateTopic(t *testing.T) {
	long := strings.Repeat("a", MaxTopicLen)
	for _, tc := range []struct {
		topic string
		ok    bool
		why   string // in the error, if not ok and not ""
	}{
		{"orders", true, ""},
		{"Orders.v2_eu-west", true, ""},
		{"_private", true, ""},
		{"9lives", true, ""},
		{long, true, ""},
		{long + ".dlq", true, ""},
		{"orders.dlq", true, ""},
		{"", false, "empty"},
		{".hidden", false, "character 1 ('.') not allowed: a topic must start with a letter, a digit or _"},
		{"-flag", false, "character 1 ('-')"},
		{"a/b", false, "character 2 ('/') not allowed: a topic may only hold A-Z a-z 0-9 . _ -"},
		{"my orders", false, "character 3 (' ')"},
		{"ü", false, "character 1 ('ü')"},
		{"ordérs", false, "character 4 ('é')"},
		{"ab\xc3", false, "byte 3 (0xc3, not UTF-8)"},
		{"..", false, ""},
		{long + "a", false, "bytes; at most"},
		{long + ".dlq.dlq", false, ""},
		{long + "x.dl", false, ""},
	} {
		name := tc.topic
		if len(name) > 20 {
			name = fmt.Sprintf("%.10s...%d", name, len(name))
		}
		t.Run(name, func(t *testing.T) {
			err := ValidateTopic(tc.topic)
			if (err == nil) != tc.ok {
				t.Fatalf("ValidateTopic(%q) = %v, want ok=%v", tc.topic, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidTopic) {
				t.Fatalf("error %v does not wrap ErrInvalidTopic", err)
			}
			if err != nil && !strings.Contains(err.Error(), tc.why) {
				t.Errorf("error %q does not say %q", err, tc.why)
			}
		})
	}
}

func TestDeliverRejects(t *testing.T) {
	q := openQ(t, t.TempDir(), nil)
	defer q.Close()
	big := &message.Message{Body: make([]byte, 64<<10)}
	for _, tc := range []struct {
		name  string
		topic string
		batch []engine.Delivery
		want  error
	}{
		{"bad_topic", "a/b", []engine.Delivery{{Message: &message.Message{}}}, ErrInvalidTopic},
		{"too_large", "t", []engine.Delivery{{Message: &message.Message{}}, {Message: big}}, ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := q.Deliver(context.Background(), tc.topic, tc.batch); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	if n := len(drain(t, q, "t")); n != 0 {
		t.Fatalf("a rejected batch left %d messages", n)
	}
}

func TestLongPollWakesOnDeliver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQ(t, t.TempDir(), nil)
		defer q.Close()
		for _, tc := range []struct {
			name  string
			topic string
		}{
			{"existing_topic", "a"},
			{"new_topic", "b"},
		} {
			if tc.topic == "a" {
				deliver(t, q, "a", "x")
				recv(t, q, "a", 1, 0)
			}
			start := time.Now()
			type result struct {
				ms  []Message
				err error
			}
			done := make(chan result)
			go func() {
				ms, err := q.Receive(context.Background(), tc.topic, 10, time.Minute, 0)
				done <- result{ms, err}
			}()
			time.Sleep(7 * time.Second)
			synctest.Wait()
			select {
			case <-done:
				t.Fatalf("%s: Receive returned before anything was delivered", tc.name)
			default:
			}
			deliver(t, q, tc.topic, "late")
			r := <-done
			if r.err != nil || len(r.ms) != 1 || string(r.ms[0].Body) != "late" {
				t.Fatalf("%s: got %q, %v", tc.name, bodies(r.ms), r.err)
			}
			if waited := time.Since(start); waited != 7*time.Second {
				t.Fatalf("%s: waited %v, want 7s", tc.name, waited)
			}
		}
		// Nothing arrives: the wait runs out.
		start := time.Now()
		ms, err := q.Receive(context.Background(), "a", 10, 3*time.Second, 0)
		if err != nil || len(ms) != 0 || time.Since(start) != 3*time.Second {
			t.Fatalf("empty wait: %q, %v after %v", bodies(ms), err, time.Since(start))
		}
		// Cancelled.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := q.Receive(ctx, "a", 1, time.Minute, 0); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("cancelled receive: %v", err)
		}
	})
}

func TestCloseWakesReceive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQ(t, t.TempDir(), nil)
		done := make(chan error)
		go func() {
			_, err := q.Receive(context.Background(), "t", 1, time.Hour, 0)
			done <- err
		}()
		synctest.Wait()
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; !errors.Is(err, ErrClosed) {
			t.Fatalf("Receive after Close: %v", err)
		}
		for name, err := range map[string]error{
			"deliver": q.Deliver(context.Background(), "t", []engine.Delivery{{Message: &message.Message{}}}),
			"ack":     q.Ack(context.Background(), "t", message.ID{}),
			"close":   q.Close(),
		} {
			if !errors.Is(err, ErrClosed) {
				t.Errorf("%s after Close: %v", name, err)
			}
		}
	})
}

func TestLeaseExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQ(t, t.TempDir(), nil)
		defer q.Close()
		ctx := context.Background()
		ids := deliver(t, q, "t", "a", "b")
		first := recv(t, q, "t", 2, 10*time.Second)
		time.Sleep(5 * time.Second)
		if err := q.Ack(ctx, "t", ids[1]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if err := q.Ack(ctx, "t", ids[0]); !errors.Is(err, ErrNotLeased) {
			t.Fatalf("ack after expiry: %v", err)
		}
		again := recv(t, q, "t", 10, 10*time.Second)
		if len(again) != 1 || again[0].ID != ids[0] || again[0].Attempt != 1 {
			t.Fatalf("after expiry: %+v", again)
		}
		if err := q.AckReceipt(ctx, "t", first[0].Receipt); !errors.Is(err, ErrNotLeased) {
			t.Fatalf("stale receipt: %v", err)
		}
		st := q.Stats()["t"]
		if st.Expired != 1 || st.Redelivered != 1 || st.Leased != 1 || st.Acked != 1 {
			t.Fatalf("stats: %+v", st)
		}
		// A waiting Receive is woken by the expiry.
		start := time.Now()
		ms, err := q.Receive(ctx, "t", 1, time.Minute, 0)
		if err != nil || len(ms) != 1 || ms[0].Attempt != 2 || time.Since(start) != 10*time.Second {
			t.Fatalf("woken by expiry: %+v %v after %v", ms, err, time.Since(start))
		}
		if err := q.AckReceipt(ctx, "t", ms[0].Receipt); err != nil {
			t.Fatal(err)
		}
	})
}

// fakeEngine records reschedules.
type fakeEngine struct {
	mu   sync.Mutex
	reqs []engine.Request
	fail error
}

func (f *fakeEngine) schedule(ctx context.Context, req engine.Request) (message.ID, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return message.ID{}, f.fail
	}
	f.reqs = append(f.reqs, req)
	return message.ID{DeliverAt: 1, Seq: uint64(len(f.reqs))}, nil
}

func TestNack(t *testing.T) {
	q := openQ(t, t.TempDir(), nil)
	defer q.Close()
	ctx := context.Background()
	ids := deliver(t, q, "t", "a", "b")
	ms := recv(t, q, "t", 2, 0)
	if err := q.Nack(ctx, "t", ids[0], NackOptions{Delay: time.Second}); !errors.Is(err, ErrNoReschedule) {
		t.Fatalf("nack without reschedule: %v", err)
	}
	fe := &fakeEngine{fail: errors.New("engine down")}
	q.SetReschedule(fe.schedule)
	if err := q.Nack(ctx, "t", ids[0], NackOptions{Delay: time.Second}); err == nil || !strings.Contains(err.Error(), "engine down") {
		t.Fatalf("nack with failing engine: %v", err)
	}
	fe.fail = nil
	if err := q.NackReceipt(ctx, "t", ms[0].Receipt, NackOptions{Delay: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if len(fe.reqs) != 1 {
		t.Fatalf("%d reschedules", len(fe.reqs))
	}
	r := fe.reqs[0]
	if r.Topic != "t" || string(r.Body) != "a" || r.Delay != 5*time.Second || r.Attempt != 1 || r.Origin != ids[0] ||
		len(r.Headers) != 1 || string(r.Headers[0].Value) != "va" {
		t.Fatalf("reschedule request: %+v", r)
	}
	if err := q.Ack(ctx, "t", ids[0]); !errors.Is(err, ErrNotLeased) {
		t.Fatalf("ack after nack: %v", err)
	}
	// A retry keeps the first attempt's ID as its origin.
	retry := message.ID{DeliverAt: 5, Seq: 999}
	orig := message.ID{DeliverAt: 4, Seq: 3}
	err := q.Deliver(ctx, "t", []engine.Delivery{{ID: retry, Message: &message.Message{Attempt: 1, Origin: orig, Body: []byte("r")}}})
	if err != nil {
		t.Fatal(err)
	}
	got := recv(t, q, "t", 1, 0)
	if len(got) != 1 || got[0].ID != retry || got[0].Attempt != 1 || got[0].Origin != orig {
		t.Fatalf("retry: %+v", got)
	}
	if err := q.Nack(ctx, "t", retry, NackOptions{Delay: time.Second}); err != nil {
		t.Fatal(err)
	}
	if r := fe.reqs[1]; r.Attempt != 2 || r.Origin != orig {
		t.Fatalf("second retry: %+v", r)
	}
	// Without delay: receivable again at once, attempt raised, no reschedule.
	if err := q.Nack(ctx, "t", ids[1], NackOptions{}); err != nil {
		t.Fatal(err)
	}
	again := recv(t, q, "t", 10, 0)
	if len(again) != 1 || again[0].ID != ids[1] || again[0].Attempt != 1 || len(fe.reqs) != 2 {
		t.Fatalf("after immediate nack: %+v, %d reschedules", again, len(fe.reqs))
	}
	if st := q.Stats()["t"]; st.Nacked != 3 || st.Redelivered != 1 || st.Leased != 1 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestDeadLetter(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		fail func(t *testing.T, q *Queue, m Message)
	}{
		{"expired", func(t *testing.T, q *Queue, m Message) {
			time.Sleep(time.Until(m.LeaseUntil))
			synctest.Wait()
		}},
		{"nack_now", func(t *testing.T, q *Queue, m Message) {
			if err := q.Nack(ctx, m.Topic, m.ID, NackOptions{}); err != nil {
				t.Fatal(err)
			}
		}},
		{"nack_delay", func(t *testing.T, q *Queue, m Message) {
			if err := q.Nack(ctx, m.Topic, m.ID, NackOptions{Delay: time.Minute}); err != nil {
				t.Fatal(err)
			}
			if m.Attempt < 2 { // the fake engine delivers the retry at once
				err := q.Deliver(ctx, "t", []engine.Delivery{{ID: message.ID{DeliverAt: 9, Seq: nextSeq.Add(1)},
					Message: &message.Message{Attempt: m.Attempt + 1, Origin: m.ID, Body: m.Body}}})
				if err != nil {
					t.Fatal(err)
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fe := &fakeEngine{}
				q := openQ(t, t.TempDir(), func(o *Options) { o.MaxAttempts = 3 })
				defer q.Close()
				q.SetReschedule(fe.schedule)
				ids := deliver(t, q, "t", "poison")
				var last Message
				for attempt := range 3 {
					ms := recv(t, q, "t", 10, time.Second)
					if len(ms) != 1 || ms[0].Attempt != uint32(attempt) {
						t.Fatalf("attempt %d: %+v", attempt, ms)
					}
					last = ms[0]
					tc.fail(t, q, ms[0])
				}
				if ms := recv(t, q, "t", 10, 0); len(ms) != 0 {
					t.Fatalf("still in the topic: %+v", ms)
				}
				dl := recv(t, q, "t.dlq", 10, time.Second)
				if len(dl) != 1 || dl[0].ID != last.ID || dl[0].Attempt != 3 || string(dl[0].Body) != "poison" || dl[0].Topic != "t.dlq" {
					t.Fatalf("dead letters: %+v (first ID %s)", dl, ids[0])
				}
				if st := q.Stats()["t"]; st.DeadLettered != 1 || st.Leased != 0 || st.Backlog != 0 {
					t.Fatalf("stats: %+v", st)
				}
				// A dead-letter topic keeps its failures.
				tc.fail(t, q, dl[0])
				if tc.name == "nack_delay" {
					if r := fe.reqs[len(fe.reqs)-1]; r.Topic != "t.dlq" || r.Attempt != 4 {
						t.Fatalf("dead-letter retry: %+v", r)
					}
					return
				}
				again := recv(t, q, "t.dlq", 10, time.Second)
				if len(again) != 1 || again[0].Attempt != 4 {
					t.Fatalf("dead letter after failing: %+v", again)
				}
				if _, ok := q.Stats()["t.dlq.dlq"]; ok {
					t.Fatal("a dead-letter topic got its own dead-letter topic")
				}
			})
		})
	}
}

// TestIntegrationWithEngine runs the queue as the engine's sink: a message
// comes due, is received, nacked with a delay, comes back as a retry.
func TestIntegrationWithEngine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		q := openQ(t, filepath.Join(dir, "queue"), func(o *Options) { o.Fsync = commitlog.SyncNone })
		e, err := engine.Open(engine.Options{Dir: filepath.Join(dir, "engine"), Sink: q, Logger: quiet, Fsync: commitlog.SyncNone,
			SegmentDuration: 10 * time.Second, PreloadLead: 2 * time.Second, CommitlogSegmentSize: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		q.SetReschedule(e.Schedule)
		<-e.Ready()
		ctx := context.Background()
		start := time.Now()
		id, err := e.Schedule(ctx, engine.Request{Topic: "jobs", Body: []byte("work"), Delay: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		ms, err := q.Receive(ctx, "jobs", 1, time.Minute, 0)
		if err != nil || len(ms) != 1 || ms[0].ID != id {
			t.Fatalf("first delivery: %+v %v", ms, err)
		}
		if d := time.Since(start); d < 3*time.Second || d > 3*time.Second+50*time.Millisecond {
			t.Fatalf("delivered after %v, want 3s", d)
		}
		if err := q.Nack(ctx, "jobs", id, NackOptions{Delay: 5 * time.Second}); err != nil {
			t.Fatal(err)
		}
		nacked := time.Now()
		ms, err = q.Receive(ctx, "jobs", 1, time.Minute, 0)
		if err != nil || len(ms) != 1 || ms[0].Attempt != 1 || ms[0].Origin != id || string(ms[0].Body) != "work" {
			t.Fatalf("retry: %+v %v", ms, err)
		}
		if d := time.Since(nacked); d < 5*time.Second || d > 5*time.Second+50*time.Millisecond {
			t.Fatalf("retry after %v, want 5s", d)
		}
		if err := q.Ack(ctx, "jobs", ms[0].ID); err != nil {
			t.Fatal(err)
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestConcurrentConsumers: producers and consumers run at once; no message
// is handed to two consumers while leased, and every one is acked once.
func TestConcurrentConsumers(t *testing.T) {
	const producers, batches, perBatch, consumers = 4, 25, 20, 8
	q := openQ(t, t.TempDir(), func(o *Options) { o.checkpointEvery = 50 })
	defer q.Close()
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[message.ID]int{}
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for b := range batches {
				bs := make([]string, perBatch)
				for i := range bs {
					bs[i] = fmt.Sprintf("%d/%d/%d", p, b, i)
				}
				deliver(t, q, "c", bs...)
			}
		})
	}
	total := producers * batches * perBatch
	var acked atomic.Int64
	for range consumers {
		wg.Go(func() {
			for acked.Load() < int64(total) {
				ms, err := q.Receive(ctx, "c", 7, 10*time.Millisecond, time.Hour)
				if err != nil {
					t.Error(err)
					return
				}
				for _, m := range ms {
					mu.Lock()
					seen[m.ID]++
					n := seen[m.ID]
					mu.Unlock()
					if n > 1 {
						t.Errorf("message %s handed out %d times", m.ID, n)
					}
					if err := q.Ack(ctx, "c", m.ID); err != nil {
						t.Error(err)
					}
					acked.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != total {
		t.Fatalf("%d distinct messages received, want %d", len(seen), total)
	}
	if st := q.Stats()["c"]; st.Acked != uint64(total) || st.Backlog != 0 || st.Leased != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

// TestNotReceivedBeforeDue: the engine may hand a message over before its
// deliverAt (HandoffLead); no Receive gets it before then, a waiting one
// gets it at that moment, and a restart in between keeps it.
func TestNotReceivedBeforeDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		q := openQ(t, dir, nil)
		ctx := context.Background()
		at := func(d time.Duration) *message.Message {
			return &message.Message{DeliverAt: time.Now().Add(d).UnixMilli(), Topic: []byte("t"), Body: []byte(d.String())}
		}
		var batch []engine.Delivery
		for _, d := range []time.Duration{20 * time.Millisecond, 30 * time.Millisecond, time.Second} {
			m := at(d)
			batch = append(batch, engine.Delivery{ID: message.ID{DeliverAt: m.DeliverAt, Seq: nextSeq.Add(1)}, Message: m})
		}
		if err := q.Deliver(ctx, "t", batch); err != nil {
			t.Fatal(err)
		}
		if ms := recv(t, q, "t", 10, 0); len(ms) != 0 {
			t.Fatalf("received %q before it was due", bodies(ms))
		}
		for _, want := range batch[:2] {
			ms, err := q.Receive(ctx, "t", 10, time.Minute, 0)
			if err != nil || len(ms) != 1 || string(ms[0].Body) != string(want.Message.Body) {
				t.Fatalf("got %q, %v; want %s", bodies(ms), err, want.Message.Body)
			}
			if now := time.Now().UnixMilli(); now != want.Message.DeliverAt {
				t.Fatalf("%s received at %d, due at %d", want.Message.Body, now, want.Message.DeliverAt)
			}
			if err := q.Ack(ctx, "t", ms[0].ID); err != nil {
				t.Fatal(err)
			}
		}
		// The third is peeked and not due: a restart must keep it.
		if ms := recv(t, q, "t", 10, 0); len(ms) != 0 {
			t.Fatalf("received %q before it was due", bodies(ms))
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		q = openQ(t, dir, nil)
		defer q.Close()
		if ms := recv(t, q, "t", 10, 0); len(ms) != 0 {
			t.Fatalf("after restart, received %q before it was due", bodies(ms))
		}
		ms, err := q.Receive(ctx, "t", 10, time.Minute, 0)
		if err != nil || len(ms) != 1 || string(ms[0].Body) != "1s" || time.Now().UnixMilli() != batch[2].Message.DeliverAt {
			t.Fatalf("after restart: got %q, %v at %d, want 1s at %d", bodies(ms), err, time.Now().UnixMilli(), batch[2].Message.DeliverAt)
		}
	})
}

// TestAckBatch: one call acks several leases with one record; bad and
// repeated receipts are reported one by one; a restart redelivers only
// what was not acked.
func TestAckBatch(t *testing.T) {
	dir := t.TempDir()
	q := openQ(t, dir, nil)
	ctx := context.Background()
	deliver(t, q, "t", "a", "b", "c", "d")
	ms := recv(t, q, "t", 4, time.Minute)
	if len(ms) != 4 {
		t.Fatalf("received %d, want 4", len(ms))
	}
	appends := q.mustTopic(t, "t").acks.WrittenOffset()
	res, err := q.AckBatch(ctx, "t", []string{ms[0].Receipt, ms[2].Receipt, "nonsense", ms[0].Receipt})
	if err != nil {
		t.Fatal(err)
	}
	if res[0] != nil || res[1] != nil || res[2] == nil || !errors.Is(res[3], ErrNotLeased) {
		t.Fatalf("results %v: want nil, nil, a parse error, not leased", res)
	}
	if n := q.mustTopic(t, "t").mu.stats.Acked; n != 2 {
		t.Fatalf("%d acked, want 2", n)
	}
	// One ack record of two offsets: 1 version byte + 16, framed.
	if grew := q.mustTopic(t, "t").acks.WrittenOffset() - appends; grew != int64(record.Size(17)) {
		t.Fatalf("the ack log grew by %d bytes, want one record of 2 offsets (%d)", grew, record.Size(17))
	}
	if _, err := q.AckBatch(ctx, "t", make([]string, MaxAckBatch+1)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("oversized batch: %v", err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = openQ(t, dir, nil)
	defer q.Close()
	if got := bodies(recv(t, q, "t", 10, time.Minute)); !slices.Equal(got, []string{"b", "d"}) {
		t.Fatalf("after restart received %q, want the two not acked: b, d", got)
	}
}

func (q *Queue) mustTopic(t *testing.T, name string) *topic {
	t.Helper()
	tp, err := q.topic(name, false)
	if err != nil || tp == nil {
		t.Fatalf("topic %s: %v", name, err)
	}
	return tp
}

// TestRedeliveryAfterRestartIsDropped: the engine delivers again what it
// had delivered just before a crash (its done-records were not durable);
// the queue must not hand out a second copy, even after the first was
// acked, and even when the copies span a segment boundary behind an ack
// checkpoint and retention.
func TestRedeliveryAfterRestartIsDropped(t *testing.T) {
	dir := t.TempDir()
	q := openQ(t, dir, nil)
	ctx := context.Background()
	// About 3 segments of 64 KiB.
	var batch []engine.Delivery
	for i := range 1500 {
		id := message.ID{DeliverAt: time.Now().UnixMilli() - 1000, Seq: nextSeq.Add(1)}
		batch = append(batch, engine.Delivery{ID: id, Message: &message.Message{DeliverAt: id.DeliverAt, Topic: []byte("t"), Body: []byte(fmt.Sprintf("%0100d", i))}})
	}
	for i := 0; i < len(batch); i += 100 {
		if err := q.Deliver(ctx, "t", batch[i:i+100]); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	// The restart: consumers receive and ack everything, a checkpoint
	// runs (retention), then the engine delivers the last 1200 again.
	q = openQ(t, dir, nil)
	for {
		ms := recv(t, q, "t", 1000, time.Minute)
		if len(ms) == 0 {
			break
		}
		rs := make([]string, len(ms))
		for i, m := range ms {
			rs[i] = m.Receipt
		}
		if _, err := q.AckBatch(ctx, "t", rs); err != nil {
			t.Fatal(err)
		}
	}
	tp := q.mustTopic(t, "t")
	if err := tp.checkpoint(); err != nil {
		t.Fatal(err)
	}
	if n := len(tp.log.SegmentBases()); n < 2 {
		t.Fatalf("%d queue-log segments after retention; the newest sealed one must stay", n)
	}
	fresh := message.ID{DeliverAt: time.Now().UnixMilli() - 1000, Seq: nextSeq.Add(1)}
	again := append(batch[300:], engine.Delivery{ID: fresh, Message: &message.Message{DeliverAt: fresh.DeliverAt, Topic: []byte("t"), Body: []byte("new")}})
	if err := q.Deliver(ctx, "t", again); err != nil {
		t.Fatal(err)
	}
	ms := recv(t, q, "t", 1000, time.Minute)
	if len(ms) != 1 || ms[0].ID != fresh {
		t.Fatalf("after redelivery of 1200 acked messages and one new: received %d (%v), want only the new one", len(ms), bodies(ms)[:min(3, len(ms))])
	}
	q.Close()
}

// TestIntervalWakesReceiveWhenVisible: under the interval policy the
// queue log's readers see a record only after the next fsync; a waiting
// Receive must get a delivered message then, not at the end of its wait.
func TestIntervalWakesReceiveWhenVisible(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQ(t, t.TempDir(), func(o *Options) { o.Fsync = commitlog.SyncInterval })
		defer q.Close()
		deliver(t, q, "t", "first") // creates the topic
		recv(t, q, "t", 1, time.Minute)
		got := make(chan []Message, 1)
		go func() {
			ms, _ := q.Receive(context.Background(), "t", 10, 20*time.Second, time.Minute)
			got <- ms
		}()
		synctest.Wait()
		start := time.Now()
		deliver(t, q, "t", "second")
		ms := <-got
		if len(ms) != 1 || string(ms[0].Body) != "second" {
			t.Fatalf("got %q", bodies(ms))
		}
		if waited := time.Since(start); waited > 2*commitlog.DefaultSyncInterval {
			t.Fatalf("Receive got the message %v after Deliver; the interval is %v", waited, commitlog.DefaultSyncInterval)
		}
	})
}

// Under SyncInterval a Deliver does not wait for the interval's next
// fsync: the messages are receivable, and Deliver returned, with no time
// passing (under a 1 h interval); an Ack is synced at the interval.
func TestDeliverUnderIntervalSyncsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQ(t, t.TempDir(), func(o *Options) { o.Fsync, o.syncInterval = commitlog.SyncInterval, time.Hour })
		defer q.Close()
		deliver(t, q, "t", "a") // the topic's logs exist, and their syncers sleep out the interval
		start := time.Now()
		deliver(t, q, "t", "b", "c")
		if d := time.Since(start); d != 0 {
			t.Fatalf("Deliver took %v: it waited for the interval's fsync", d)
		}
		ms, err := q.Receive(context.Background(), "t", 10, 0, time.Minute)
		if err != nil || len(ms) != 3 {
			t.Fatalf("Receive: %d messages, %v; want 3", len(ms), err)
		}
		if err := q.AckReceipt(context.Background(), "t", ms[0].Receipt); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("Ack took %v under SyncInterval, want no wait", d)
		}
	})
}
