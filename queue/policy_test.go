package queue

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

func TestBackoffDelay(t *testing.T) {
	mid := func() float64 { return 0.5 }
	for _, tc := range []struct {
		name    string
		b       Backoff
		attempt uint32
		want    time.Duration
	}{
		{"none", Backoff{}, 3, 0},
		{"fixed", Backoff{Initial: time.Second}, 5, time.Second},
		{"exponential", Backoff{Initial: time.Second, Multiplier: 2}, 4, 8 * time.Second},
		{"capped", Backoff{Initial: time.Second, Multiplier: 2, Max: 5 * time.Second}, 10, 5 * time.Second},
		{"jitter_takes_off_up_to_its_share", Backoff{Initial: 10 * time.Second, Jitter: 0.2}, 1, 9 * time.Second},
		{"huge_attempt_does_not_overflow", Backoff{Initial: time.Second, Multiplier: 10}, 1000, time.Duration(1<<62) / 2 * 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.b.Delay(tc.attempt, mid)
			if tc.name == "huge_attempt_does_not_overflow" {
				if got <= 0 {
					t.Fatalf("Delay = %v, want positive", got)
				}
				return
			}
			if got != tc.want {
				t.Fatalf("Delay(%d) = %v, want %v", tc.attempt, got, tc.want)
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	for _, p := range []Policy{
		{MaxAttempts: -1}, {MaxAttempts: 1001}, {Backoff: Backoff{Initial: -1}}, {Backoff: Backoff{Initial: 1, Multiplier: 0.5}},
		{Backoff: Backoff{Jitter: 2}}, {Rate: -1}, {Lease: 13 * time.Hour},
	} {
		if err := p.Validate(12 * time.Hour); !errors.Is(err, ErrInvalid) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalid", p, err)
		}
	}
	q := openQ(t, t.TempDir(), nil)
	defer q.Close()
	if err := q.SetPolicy("t", Policy{MaxAttempts: 5000}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("SetPolicy with 5000 attempts: %v", err)
	}
	if err := q.SetPolicy("t", Policy{MaxAttempts: 2, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if e := q.Effective("t"); e.MaxAttempts != 2 || e.Lease != time.Minute {
		t.Fatalf("Effective = %+v", e)
	}
	if e := q.Effective("other"); e.MaxAttempts != q.opts.MaxAttempts || e.Lease != q.opts.DefaultLease {
		t.Fatalf("Effective of a topic without a policy = %+v", e)
	}
}

// A topic's max attempts and lease default apply to it alone.
func TestPolicyMaxAttemptsAndLease(t *testing.T) {
	ctx := context.Background()
	q := openQ(t, t.TempDir(), func(o *Options) { o.MaxAttempts = 5 })
	defer q.Close()
	if err := q.SetPolicy("t", Policy{MaxAttempts: 1, Lease: 7 * time.Second}); err != nil {
		t.Fatal(err)
	}
	deliver(t, q, "t", "a")
	deliver(t, q, "u", "b")
	ms := recv(t, q, "t", 1, 0)
	if len(ms) != 1 || ms[0].LeaseUntil.Sub(ms[0].ReceivedAt) != 7*time.Second {
		t.Fatalf("received %+v, want a 7 s lease", ms)
	}
	if err := q.Nack(ctx, "t", ms[0].ID, NackOptions{Reason: "bad input"}); err != nil {
		t.Fatal(err)
	}
	dl := recv(t, q, "t.dlq", 1, 0)
	if len(dl) != 1 {
		t.Fatalf("dead-letter topic holds %d messages after one failure with max attempts 1", len(dl))
	}
	if got := dlHeaders(dl[0]); got[DeadLetterReasonHeader] != ReasonMaxAttempts || got[DeadLetterErrorHeader] != "bad input" ||
		got[DeadLetterOriginHeader] != "t" || got[DeadLetterAtHeader] == "" {
		t.Fatalf("dead-letter headers %v", got)
	}
	u := recv(t, q, "u", 1, 0)
	if err := q.Nack(ctx, "u", u[0].ID, NackOptions{}); err != nil {
		t.Fatal(err)
	}
	if again := recv(t, q, "u", 1, 0); len(again) != 1 || again[0].Attempt != 1 {
		t.Fatalf("topic u (default max attempts 5) after one nack: %+v", again)
	}
}

func dlHeaders(m Message) map[string]string {
	out := map[string]string{}
	for _, h := range m.Headers {
		out[string(h.Key)] = string(h.Value)
	}
	return out
}

// A Nack with DeadLetter moves the message at once with reason "nacked";
// an expired lease past max attempts says "lease expired".
func TestDeadLetterReasons(t *testing.T) {
	ctx := context.Background()
	var c stepClock
	q := openQ(t, t.TempDir(), func(o *Options) { c.opts(o); o.MaxAttempts = 1 })
	defer q.Close()
	ids := deliver(t, q, "t", "a", "b")
	recv(t, q, "t", 2, 30*time.Second)
	if err := q.Nack(ctx, "t", ids[0], NackOptions{DeadLetter: true, Reason: "poison", Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	c.step(0, 31*time.Second)
	topicOf(t, q, "t").expire()
	waitFor(t, func() bool { return q.Stats()["t"].DeadLettered == 2 })
	dl := drain(t, q, "t.dlq")
	if len(dl) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dl))
	}
	byBody := map[string]map[string]string{}
	for _, m := range dl {
		byBody[string(m.Body)] = dlHeaders(m)
	}
	if h := byBody["a"]; h[DeadLetterReasonHeader] != ReasonNacked || h[DeadLetterErrorHeader] != "poison" {
		t.Errorf("dead letter of a nack with DeadLetter: %v", h)
	}
	if h := byBody["b"]; h[DeadLetterReasonHeader] != ReasonMaxAttempts || h[DeadLetterErrorHeader] != errExpired {
		t.Errorf("dead letter of an expired lease: %v", h)
	}
}

// A Nack without a delay takes the topic's backoff: the message is
// rescheduled through the engine with the backoff's delay and the error
// as LastErrorHeader, as an expired lease is.
func TestPolicyBackoff(t *testing.T) {
	ctx := context.Background()
	var c stepClock
	q := openQ(t, t.TempDir(), func(o *Options) { c.opts(o) })
	defer q.Close()
	fe := &fakeEngine{}
	q.SetReschedule(fe.schedule)
	if err := q.SetPolicy("t", Policy{Backoff: Backoff{Initial: 2 * time.Second, Multiplier: 3}}); err != nil {
		t.Fatal(err)
	}
	ids := deliver(t, q, "t", "a", "b")
	recv(t, q, "t", 2, 10*time.Second)
	if err := q.Nack(ctx, "t", ids[0], NackOptions{Reason: "timeout"}); err != nil {
		t.Fatal(err)
	}
	c.step(0, 11*time.Second)
	topicOf(t, q, "t").expire()
	waitFor(t, func() bool { fe.mu.Lock(); defer fe.mu.Unlock(); return len(fe.reqs) == 2 })
	fe.mu.Lock()
	defer fe.mu.Unlock()
	r0, r1 := fe.reqs[0], fe.reqs[1]
	if r0.Delay != 2*time.Second || r0.Attempt != 1 || message.HeaderValue(r0.Headers, LastErrorHeader) != "timeout" {
		t.Errorf("retry of the nack: delay %v attempt %d headers %v", r0.Delay, r0.Attempt, r0.Headers)
	}
	if r1.Delay != 2*time.Second || r1.Attempt != 1 || message.HeaderValue(r1.Headers, LastErrorHeader) != errExpired {
		t.Errorf("retry of the expired lease: delay %v attempt %d headers %v", r1.Delay, r1.Attempt, r1.Headers)
	}
	if n := len(drain(t, q, "t")); n != 0 {
		t.Errorf("%d messages receivable again at once despite the backoff", n)
	}
}

// waitFor waits up to 10 s for cond (work done by queue goroutines).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}

// Pause holds due messages back and a waiting Receive wakes on resume; a
// rate lets that many messages out per second.
func TestPolicyPauseAndRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := openQ(t, t.TempDir(), nil)
		defer q.Close()
		if err := q.SetPolicy("t", Policy{Paused: true}); err != nil {
			t.Fatal(err)
		}
		deliver(t, q, "t", "a", "b", "c", "d", "e")
		if ms := recv(t, q, "t", 10, 0); len(ms) != 0 {
			t.Fatalf("a paused topic handed out %d", len(ms))
		}
		got := make(chan []Message)
		go func() {
			ms, _ := q.Receive(ctx, "t", 10, time.Minute, 0)
			got <- ms
		}()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		select {
		case ms := <-got:
			t.Fatalf("a Receive on a paused topic returned %d", len(ms))
		default:
		}
		if err := q.SetPolicy("t", Policy{Rate: 2}); err != nil {
			t.Fatal(err)
		}
		if ms := <-got; len(ms) != 2 {
			t.Fatalf("resumed at 2/s: the waiting Receive got %d, want 2 (a burst of one second)", len(ms))
		}
		start := time.Now()
		ms, err := q.Receive(ctx, "t", 10, time.Minute, 0)
		if err != nil || len(ms) != 1 || time.Since(start) != 500*time.Millisecond {
			t.Fatalf("next Receive: %d messages after %v (%v); want 1 after 500ms", len(ms), time.Since(start), err)
		}
	})
}

// Extend moves a lease's end: the message is not handed out again at the
// old deadline, and is at the new one.
func TestExtend(t *testing.T) {
	ctx := context.Background()
	var c stepClock
	q := openQ(t, t.TempDir(), func(o *Options) { c.opts(o) })
	defer q.Close()
	deliver(t, q, "t", "a")
	ms := recv(t, q, "t", 1, 10*time.Second)
	until, err := q.ExtendReceipt(ctx, "t", ms[0].Receipt, time.Minute)
	if err != nil || until.Before(ms[0].LeaseUntil) {
		t.Fatalf("Extend = %v, %v", until, err)
	}
	c.step(0, 30*time.Second)
	topicOf(t, q, "t").expire()
	if n := len(recv(t, q, "t", 1, 0)); n != 0 {
		t.Fatalf("handed out again at the old deadline")
	}
	c.step(0, 31*time.Second)
	topicOf(t, q, "t").expire()
	if n := len(recv(t, q, "t", 1, 0)); n != 1 {
		t.Fatalf("not handed out again after the extended lease")
	}
	if _, err := q.ExtendReceipt(ctx, "t", ms[0].Receipt, time.Minute); !errors.Is(err, ErrNotLeased) {
		t.Fatalf("Extend of a lease that ran out: %v", err)
	}
	if _, err := q.Extend(ctx, "t", ms[0].ID, 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Extend by 0: %v", err)
	}
}

// A released message comes back at once with its attempt unchanged: no
// backoff, no dead-lettering, even at the last attempt.
func TestRelease(t *testing.T) {
	ctx := context.Background()
	q := openQ(t, t.TempDir(), func(o *Options) { o.MaxAttempts = 1 })
	defer q.Close()
	fe := &fakeEngine{}
	q.SetReschedule(fe.schedule)
	if err := q.SetPolicy("t", Policy{Backoff: Backoff{Initial: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	deliver(t, q, "t", "a")
	for range 3 {
		ms := recv(t, q, "t", 1, time.Minute)
		if len(ms) != 1 || ms[0].Attempt != 0 {
			t.Fatalf("received %+v, want a at attempt 0", ms)
		}
		if err := q.NackReceipt(ctx, "t", ms[0].Receipt, NackOptions{Release: true}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(fe.reqs); n != 0 {
		t.Fatalf("%d reschedules after releases", n)
	}
	if st := q.Stats()["t"]; st.DeadLettered != 0 {
		t.Fatalf("dead-lettered after releases: %+v", st)
	}
}
