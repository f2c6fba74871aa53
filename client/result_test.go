package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/server"
)

func TestActionOf(t *testing.T) {
	long := strings.Repeat("x", maxReason-1) + "é" // the 2-byte é straddles the limit
	for _, tc := range []struct {
		name    string
		err     error
		want    action
		outcome Outcome
	}{
		{"nil_acks", nil, action{}, OutcomeAck},
		{"plain_error_nacks_with_backoff", errors.New("boom"), action{nack: true, reason: "boom", plain: true}, OutcomeNack},
		{"retry", Retry(2 * time.Second), action{nack: true, delay: 2 * time.Second, reason: "retry after 2s"}, OutcomeRetry},
		{"retry_rounds_up", Retry(1500 * time.Microsecond), action{nack: true, delay: 2 * time.Millisecond, reason: "retry after 1.5ms"}, OutcomeRetry},
		{"retry_negative_is_backoff", Retry(-time.Second), action{nack: true, reason: "retry after 0s"}, OutcomeRetry},
		{"wrapped_retry", fmt.Errorf("db busy: %w", Retry(time.Minute)), action{nack: true, delay: time.Minute, reason: "db busy: retry after 1m0s"}, OutcomeRetry},
		{"dead_letter", DeadLetter("bad json"), action{nack: true, deadLetter: true, reason: "bad json"}, OutcomeDeadLetter},
		{"wrapped_dead_letter", fmt.Errorf("order 42: %w", DeadLetter("bad json")), action{nack: true, deadLetter: true, reason: "order 42: bad json"}, OutcomeDeadLetter},
		{"panic", &PanicError{Value: "nil map"}, action{nack: true, reason: "panic: nil map", plain: true}, OutcomeNack},
		{"long_reason_cut_on_a_character", errors.New(long), action{nack: true, reason: long[:maxReason-1], plain: true}, OutcomeNack},
		{"invalid_utf8_replaced", errors.New("bad \xff byte"), action{nack: true, reason: "bad \uFFFD byte", plain: true}, OutcomeNack},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := actionOf(tc.err); got != tc.want {
				t.Errorf("actionOf(%v) = %+v, want %+v", tc.err, got, tc.want)
			}
			if got := OutcomeOf(tc.err); got != tc.outcome {
				t.Errorf("OutcomeOf(%v) = %q, want %q", tc.err, got, tc.outcome)
			}
			if r := actionOf(tc.err).reason; len(r) > maxReason || !utf8.ValidString(r) {
				t.Errorf("reason of %d bytes, valid UTF-8 %v; want at most %d valid bytes", len(r), utf8.ValidString(r), maxReason)
			}
		})
	}
}

// pushService serves Consume streams of any topic: the first stream gets
// msgs pushed at once; settles are recorded and answered, and Extend calls
// are recorded and answered with a lease from now.
type pushService struct {
	hourglassv1.UnimplementedHourglassServiceServer
	msgs []*hourglassv1.Message

	// extended, if set, is closed at the third Extend call.
	extended chan struct{}

	nums pushNumbers

	mu      sync.Mutex
	pushed  bool
	acks    []string
	nacks   []*hourglassv1.ConsumeNack
	extends []extendCall
}

type extendCall struct {
	at      time.Time
	receipt string
	leaseMs int64
}

func (s *pushService) Consume(st consumeServer) error {
	if _, err := st.Recv(); err != nil {
		return err
	}
	s.mu.Lock()
	first := !s.pushed
	s.pushed = true
	s.mu.Unlock()
	if first {
		now := time.Now()
		for _, m := range s.msgs {
			if m.ReceivedAt != nil {
				m.ReceivedAt, m.LeaseExpiresAt = timestamppb.New(now), timestamppb.New(now.Add(m.LeaseExpiresAt.AsTime().Sub(m.ReceivedAt.AsTime())))
			}
		}
		if err := st.Send(s.nums.batch(s.msgs)); err != nil {
			return err
		}
	}
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		if ext := req.GetExtend(); ext != nil {
			s.mu.Lock()
			for _, r := range s.nums.ranges(ext.Seqs) {
				s.extends = append(s.extends, extendCall{time.Now(), r, ext.LeaseMs})
			}
			if len(s.extends) == 3 && s.extended != nil {
				close(s.extended)
			}
			s.mu.Unlock()
			out := &hourglassv1.ConsumeExtended{Ref: ext.Ref, LeaseExpiresAtMs: time.Now().Add(time.Duration(ext.LeaseMs) * time.Millisecond).UnixMilli()}
			if err := st.Send(&hourglassv1.ConsumeResponse{Kind: &hourglassv1.ConsumeResponse_Extended{Extended: out}}); err != nil {
				return nil
			}
			continue
		}
		set := req.GetSettle()
		if set == nil {
			continue
		}
		out := &hourglassv1.ConsumeSettled{Ref: set.Ref}
		s.mu.Lock()
		s.acks = append(s.acks, s.nums.ranges(set.Acks)...)
		for _, n := range set.Nacks {
			s.nacks = append(s.nacks, n)
		}
		s.mu.Unlock()
		if err := st.Send(&hourglassv1.ConsumeResponse{Kind: &hourglassv1.ConsumeResponse_Settled{Settled: out}}); err != nil {
			return nil
		}
	}
}

func (s *pushService) settled() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.acks) + len(s.nacks)
}

func (s *pushService) extendCalls() []extendCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]extendCall(nil), s.extends...)
}

// TestWorkerSettlesOnTheWire checks the settle requests a worker sends
// for each kind of result, through middleware: Recover turns a panic
// into a nack, Hooks see every call and result in Use order, and Logging
// logs each.
func TestWorkerSettlesOnTheWire(t *testing.T) {
	bodies := []string{"ok", "retry", "dead", "fail", "panic"}
	svc := &pushService{}
	for i, b := range bodies {
		svc.msgs = append(svc.msgs, &hourglassv1.Message{Id: fakeID(b), Topic: "t", Body: []byte(b), Receipt: fmt.Sprint("r", i)})
	}
	c := newClient(t, startFake(t, svc))
	var mu sync.Mutex
	var order []string
	ends := map[string]Outcome{}
	hook := func(name string) Middleware {
		return Hooks{
			Start: func(ctx context.Context, d Delivery) context.Context {
				mu.Lock()
				defer mu.Unlock()
				if string(d.Body) == "ok" {
					order = append(order, name)
				}
				return context.WithValue(ctx, hookKey(name), true)
			},
			End: func(ctx context.Context, d Delivery, err error, _ time.Duration) {
				mu.Lock()
				defer mu.Unlock()
				if ctx.Value(hookKey(name)) == nil {
					t.Errorf("hook %s: End did not get Start's ctx", name)
				}
				if name == "inner" {
					ends[string(d.Body)] = OutcomeOf(err)
				}
			},
		}.Middleware()
	}
	var logs strings.Builder
	var logMu sync.Mutex
	w := NewWorker(c, WorkerOptions{Concurrency: 2, OnError: func(err error) { t.Errorf("OnError: %v", err) }})
	w.Use(Recover(), hook("outer"), hook("inner"), Logging(slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	w.HandleFunc("t", func(ctx context.Context, d Delivery) error {
		if ctx.Value(hookKey("outer")) == nil || ctx.Value(hookKey("inner")) == nil {
			t.Error("the handler's ctx lacks what the hooks added")
		}
		switch string(d.Body) {
		case "retry":
			return Retry(1500 * time.Millisecond)
		case "dead":
			return fmt.Errorf("order 7: %w", DeadLetter("unparsable"))
		case "fail":
			return errors.New("boom")
		case "panic":
			panic("oops")
		}
		return nil
	})
	stop := runWorker(t, w)
	waitFor(t, "every message settled", func() bool { return svc.settled() == len(bodies) })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if len(svc.acks) != 1 || svc.acks[0] != "r0" {
		t.Errorf("acks %v, want [r0]", svc.acks)
	}
	want := map[string]*hourglassv1.ConsumeNack{
		"r1": {DelayMs: 1500, Reason: "retry after 1.5s"},
		"r2": {DeadLetter: true, Reason: "order 7: unparsable"},
		"r3": {Reason: "boom"},
		"r4": {Reason: "panic: oops"},
	}
	for _, n := range svc.nacks {
		r := svc.nums.receipt(n.Seq)
		w := want[r]
		if w == nil || n.DelayMs != w.DelayMs || n.DeadLetter != w.DeadLetter || n.Reason != w.Reason {
			t.Errorf("nack of %s: %v, want %v", r, n, w)
		}
		delete(want, r)
	}
	if len(want) != 0 {
		t.Errorf("not nacked: %v", want)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(order, ",") != "outer,inner" {
		t.Errorf("middleware ran in the order %v, want outer,inner (Use order)", order)
	}
	wantEnds := map[string]Outcome{"ok": OutcomeAck, "retry": OutcomeRetry, "dead": OutcomeDeadLetter, "fail": OutcomeNack}
	for b, o := range wantEnds {
		if ends[b] != o {
			t.Errorf("Hooks.End of %s saw %q, want %q", b, ends[b], o)
		}
	}
	if _, ok := ends["panic"]; ok {
		t.Error("a hook inside Recover saw a result from the panicking handler")
	}
	logMu.Lock()
	defer logMu.Unlock()
	for _, want := range []string{"level=DEBUG", "outcome=ack", "level=WARN", "outcome=dead-letter", "error=boom", "id=" + fakeID("fail")} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}

// hookKey keys what a test hook adds to a ctx.
type hookKey string

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// TestWorkerExtendsLeaseOnTheWire: while a handler runs, the worker
// extends its message's lease by the lease, two thirds into each lease.
func TestWorkerExtendsLeaseOnTheWire(t *testing.T) {
	const lease = 300 * time.Millisecond
	epoch := time.Unix(0, 0)
	svc := &pushService{msgs: []*hourglassv1.Message{{
		Id: fakeID("long"), Topic: "t", Receipt: "r0",
		ReceivedAt: timestamppb.New(epoch), LeaseExpiresAt: timestamppb.New(epoch.Add(lease)), // the service sets them when it pushes
	}}, extended: make(chan struct{})}
	c := newClient(t, startFake(t, svc))
	w := NewWorker(c, WorkerOptions{Lease: lease, OnError: func(err error) { t.Errorf("OnError: %v", err) }})
	var started time.Time
	w.HandleFunc("t", func(ctx context.Context, d Delivery) error {
		started = time.Now()
		select {
		case <-svc.extended:
		case <-time.After(testTimeout):
			t.Error("no three extensions")
		}
		return nil
	})
	stop := runWorker(t, w)
	waitFor(t, "the ack", func() bool { return svc.settled() == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	calls := svc.extendCalls()
	prev := started
	for i, call := range calls {
		if call.receipt != "r0" || call.leaseMs != lease.Milliseconds() {
			t.Errorf("Extend %d: receipt %q lease %dms, want r0 and %v", i, call.receipt, call.leaseMs, lease)
		}
		// Not before two thirds of the lease (a timer never fires early;
		// the first counts from when the message came, before started).
		if i > 0 && call.at.Sub(prev) < lease*2/3 {
			t.Errorf("Extend %d came %v after the one before; want two thirds of the lease, %v", i, call.at.Sub(prev), lease*2/3)
		}
		prev = call.at
	}
	if n := len(calls); n < 3 {
		t.Errorf("%d Extend calls, want 3 or more", n)
	}
}

// TestSettleAndExtend: Settle maps results to acks and nacks like a
// Worker, for messages got with Receive; Extend moves a lease's end.
func TestSettleAndExtend(t *testing.T) {
	rs := startServer(t, server.Options{})
	c := newClient(t, rs.addr)
	ctx := context.Background()
	for _, b := range []string{"ack", "retry", "fail"} {
		if _, err := c.Schedule(ctx, Message{Topic: "s", Body: []byte(b)}); err != nil {
			t.Fatal(err)
		}
	}
	byBody := map[string]Delivery{}
	for len(byBody) < 3 {
		ds, err := c.Receive(ctx, "s", ReceiveOptions{MaxMessages: 3, Wait: testTimeout, Lease: time.Minute})
		if err != nil || len(ds) == 0 {
			t.Fatalf("Receive: %v, %v", ds, err)
		}
		for _, d := range ds {
			byBody[string(d.Body)] = d
		}
	}
	t.Run("extend", func(t *testing.T) {
		d := byBody["ack"]
		until, err := c.Extend(ctx, d, 2*time.Minute)
		if err != nil || !until.After(d.LeaseExpiresAt) {
			t.Errorf("Extend = %v, %v; want a lease end after %v", until, err, d.LeaseExpiresAt)
		}
	})
	if err := c.Settle(ctx, byBody["ack"], nil); err != nil {
		t.Errorf("Settle(nil): %v", err)
	}
	if err := c.Settle(ctx, byBody["retry"], Retry(200*time.Millisecond)); err != nil {
		t.Errorf("Settle(Retry): %v", err)
	}
	if err := c.Settle(ctx, byBody["fail"], errors.New("boom")); err != nil {
		t.Errorf("Settle(error): %v", err)
	}
	wantCode(t, "Settle of an acked message", c.Settle(ctx, byBody["ack"], nil), codes.FailedPrecondition)
	again := map[string]Delivery{}
	for len(again) < 2 {
		ds, err := c.Receive(ctx, "s", ReceiveOptions{MaxMessages: 2, Wait: testTimeout})
		if err != nil || len(ds) == 0 {
			t.Fatalf("Receive of the nacked messages: %v, %v", ds, err)
		}
		for _, d := range ds {
			again[string(d.Body)] = d
		}
	}
	if d := again["retry"]; d.Attempt != 1 || d.DeliverAt.Sub(byBody["retry"].ReceivedAt) < 200*time.Millisecond {
		t.Errorf("retry came back as attempt %d due %v after its receive; want attempt 1, 200ms or more", d.Attempt, d.DeliverAt.Sub(byBody["retry"].ReceivedAt))
	}
	if d := again["fail"]; d.Attempt != 1 {
		t.Errorf("fail came back as attempt %d, want 1", d.Attempt)
	}
	if _, ok := again["ack"]; ok {
		t.Error("the acked message came back")
	}
}
