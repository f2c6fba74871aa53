package client

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/server"
)

// both makes one call through each service and compares what the callers
// get: equal errors, or answers that same says are the same, with the
// same headers. It returns the two answers (nil on error).
func both[Res any](t *testing.T, name string, viaConnect, viaDirect hourglassv1connect.HourglassServiceClient,
	call func(hourglassv1connect.HourglassServiceClient) (*connect.Response[Res], error), same func(a, b *Res) bool) (a, b *Res) {
	t.Helper()
	r0, err0 := call(viaConnect)
	r1, err1 := call(viaDirect)
	if (err0 == nil) != (err1 == nil) {
		t.Errorf("%s: connect-go gave %v, direct %v", name, err0, err1)
		return nil, nil
	}
	if err0 != nil {
		sameError(t, name, err0, err1)
		return nil, nil
	}
	// Content-Length differs where the two answers do (same says).
	h0, h1 := r0.Header().Clone(), r1.Header().Clone()
	h0.Del("Content-Length")
	h1.Del("Content-Length")
	if !sameMeta(h0, h1) || !sameMeta(r0.Trailer(), r1.Trailer()) {
		t.Errorf("%s: headers through connect-go %v %v, direct %v %v", name, r0.Header(), r0.Trailer(), r1.Header(), r1.Trailer())
	}
	if !same(r0.Msg, r1.Msg) {
		t.Errorf("%s: connect-go gave %v, direct %v", name, r0.Msg, r1.Msg)
	}
	return r0.Msg, r1.Msg
}

func protoEqual[M proto.Message](a, b M) bool { return proto.Equal(a, b) }

// TestDirectConsumerCallsMatchConnect drives Receive, AckBatch, Ack and
// Nack through connect-go and the direct path against a real server:
// answers with messages, empty long polls, acks that succeed and fail,
// and every argument the server refuses.
func TestDirectConsumerCallsMatchConnect(t *testing.T) {
	addr := startServer(t, server.Options{AuthToken: "secret"})
	hc := NewHTTPClient(8)
	defer hc.CloseIdleConnections()
	viaConnect, viaDirect := services(t, addr, hc, "secret")
	if d := viaDirect.(*direct); d.recv.post == nil || d.ackBatch.post == nil || d.ack.post == nil || d.nack.post == nil {
		t.Fatal("the direct path does not post the consumer calls itself")
	}
	ctx := context.Background()
	batch := &hourglassv1.ScheduleBatchRequest{}
	for i := range 40 {
		batch.Messages = append(batch.Messages, &hourglassv1.ScheduleRequest{Topic: "c", Body: []byte(strings.Repeat("b", i))})
	}
	batch.Messages[7].Headers = []*hourglassv1.Header{{Key: "k", Value: "v"}}
	if _, err := viaDirect.ScheduleBatch(ctx, connect.NewRequest(batch)); err != nil {
		t.Fatal(err)
	}

	receive := func(m *hourglassv1.ReceiveRequest) func(hourglassv1connect.HourglassServiceClient) (*connect.Response[hourglassv1.ReceiveResponse], error) {
		return func(svc hourglassv1connect.HourglassServiceClient) (*connect.Response[hourglassv1.ReceiveResponse], error) {
			return svc.Receive(ctx, connect.NewRequest(m))
		}
	}
	// Two Receives get different messages: compare their shape.
	sameShape := func(a, b *hourglassv1.ReceiveResponse) bool {
		if len(a.Messages) != len(b.Messages) {
			return false
		}
		for i := range a.Messages {
			x, y := a.Messages[i], b.Messages[i]
			if x.Topic != y.Topic || len(x.Id) != 32 || len(y.Id) != 32 || x.Receipt == "" || y.Receipt == "" || x.DeliverAt == nil || y.LeaseExpiresAt == nil {
				return false
			}
		}
		return true
	}
	got := map[string]*hourglassv1.Message{}
	var leased [2][]string // receipts: via connect-go, direct
	for range 10 {
		a, b := both(t, "receive", viaConnect, viaDirect, receive(&hourglassv1.ReceiveRequest{Topic: "c", MaxMessages: 2, WaitMs: 1000}), sameShape)
		if a == nil {
			break
		}
		for i, res := range []*hourglassv1.ReceiveResponse{a, b} {
			for _, m := range res.Messages {
				got[m.Id] = m
				leased[i] = append(leased[i], m.Receipt)
			}
		}
	}
	if len(got) != 40 {
		t.Fatalf("received %d distinct messages of 40", len(got))
	}
	for _, m := range got {
		var want *hourglassv1.ScheduleRequest
		for _, s := range batch.Messages {
			if string(s.Body) == string(m.Body) {
				want = s
			}
		}
		if want == nil || len(want.Headers) != len(m.Headers) || (len(m.Headers) == 1 && (m.Headers[0].Key != "k" || m.Headers[0].Value != "v")) {
			t.Errorf("received %v, not as scheduled", m)
		}
	}
	both(t, "receive_empty_no_wait", viaConnect, viaDirect, receive(&hourglassv1.ReceiveRequest{Topic: "c", MaxMessages: 5}), protoEqual)
	both(t, "receive_empty_long_poll", viaConnect, viaDirect, receive(&hourglassv1.ReceiveRequest{Topic: "c", MaxMessages: 5, WaitMs: 50}), protoEqual)
	for _, tc := range []struct {
		name string
		m    *hourglassv1.ReceiveRequest
	}{
		{"receive_no_topic", &hourglassv1.ReceiveRequest{}},
		{"receive_bad_topic", &hourglassv1.ReceiveRequest{Topic: "a b"}},
		{"receive_too_many", &hourglassv1.ReceiveRequest{Topic: "c", MaxMessages: 1001}},
		{"receive_negative_wait", &hourglassv1.ReceiveRequest{Topic: "c", WaitMs: -1}},
		{"receive_lease_too_long", &hourglassv1.ReceiveRequest{Topic: "c", LeaseMs: 13 * 3600 * 1000}},
	} {
		both(t, tc.name, viaConnect, viaDirect, receive(tc.m), protoEqual)
	}
	// A deadline that ends during the long poll: the server's copy of it
	// or the client's may end the call first, so only the codes compare.
	for _, svc := range []hourglassv1connect.HourglassServiceClient{viaConnect, viaDirect} {
		short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		_, err := svc.Receive(short, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: "c", WaitMs: 10_000}))
		cancel()
		if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
			t.Errorf("receive_deadline_in_poll: %v, want DeadlineExceeded", err)
		}
	}

	ackBatch := func(receipts ...string) func(hourglassv1connect.HourglassServiceClient) (*connect.Response[hourglassv1.AckBatchResponse], error) {
		return func(svc hourglassv1connect.HourglassServiceClient) (*connect.Response[hourglassv1.AckBatchResponse], error) {
			return svc.AckBatch(ctx, connect.NewRequest(&hourglassv1.AckBatchRequest{Topic: "c", Receipts: receipts}))
		}
	}
	// Each path acks its own receipts, and a bad one and one acked already.
	r0, r1 := leased[0], leased[1]
	var calls int
	callOwn := func(svc hourglassv1connect.HourglassServiceClient) (*connect.Response[hourglassv1.AckBatchResponse], error) {
		own := [][]string{r0[1 : len(r0)-2], r1[1 : len(r1)-2]}[calls%2]
		calls++
		return svc.AckBatch(ctx, connect.NewRequest(&hourglassv1.AckBatchRequest{Topic: "c", Receipts: append([]string{"nonsense", r0[0]}, own...)}))
	}
	a, b := both(t, "ack_batch", viaConnect, viaDirect, callOwn, func(a, b *hourglassv1.AckBatchResponse) bool {
		// r0[0] is acked by the first call (connect-go's) and not the second.
		return len(a.Results) == len(b.Results) && proto.Equal(a.Results[0], b.Results[0]) && a.Results[0].Error != "" &&
			a.Results[1].Acked && !b.Results[1].Acked && b.Results[1].Error != ""
	})
	if a != nil {
		for i, res := range append(a.Results[2:], b.Results[2:]...) {
			if !res.Acked {
				t.Errorf("ack_batch: result %d not acked: %v", i, res)
			}
		}
	}
	both(t, "ack_batch_empty", viaConnect, viaDirect, ackBatch(), protoEqual)
	both(t, "ack_batch_too_many", viaConnect, viaDirect, ackBatch(make([]string, 1001)...), protoEqual)
	both(t, "ack_batch_unknown", viaConnect, viaDirect, ackBatch("nonsense", r0[0]), protoEqual)

	ack := func(m *hourglassv1.AckRequest) func(hourglassv1connect.HourglassServiceClient) (*connect.Response[hourglassv1.AckResponse], error) {
		return func(svc hourglassv1connect.HourglassServiceClient) (*connect.Response[hourglassv1.AckResponse], error) {
			return svc.Ack(ctx, connect.NewRequest(m))
		}
	}
	calls = 0
	both(t, "ack_own", viaConnect, viaDirect, func(svc hourglassv1connect.HourglassServiceClient) (*connect.Response[hourglassv1.AckResponse], error) {
		r := []string{r0[len(r0)-1], r1[len(r1)-1]}[calls%2]
		calls++
		return svc.Ack(ctx, connect.NewRequest(&hourglassv1.AckRequest{Topic: "c", Receipt: r}))
	}, protoEqual)
	both(t, "ack_acked", viaConnect, viaDirect, ack(&hourglassv1.AckRequest{Topic: "c", Receipt: r0[0]}), protoEqual)
	both(t, "ack_both_set", viaConnect, viaDirect, ack(&hourglassv1.AckRequest{Topic: "c", Receipt: r0[0], Id: strings.Repeat("0", 32)}), protoEqual)
	both(t, "ack_bad_id", viaConnect, viaDirect, ack(&hourglassv1.AckRequest{Topic: "c", Id: "x"}), protoEqual)

	nack := func(m *hourglassv1.NackRequest) func(hourglassv1connect.HourglassServiceClient) (*connect.Response[hourglassv1.NackResponse], error) {
		return func(svc hourglassv1connect.HourglassServiceClient) (*connect.Response[hourglassv1.NackResponse], error) {
			return svc.Nack(ctx, connect.NewRequest(m))
		}
	}
	calls = 0
	both(t, "nack_own", viaConnect, viaDirect, func(svc hourglassv1connect.HourglassServiceClient) (*connect.Response[hourglassv1.NackResponse], error) {
		r := []string{r0[len(r0)-2], r1[len(r1)-2]}[calls%2]
		calls++
		return svc.Nack(ctx, connect.NewRequest(&hourglassv1.NackRequest{Topic: "c", Receipt: r, DelayMs: 60_000}))
	}, protoEqual)
	both(t, "nack_acked", viaConnect, viaDirect, nack(&hourglassv1.NackRequest{Topic: "c", Receipt: r0[0]}), protoEqual)
	both(t, "nack_negative_delay", viaConnect, viaDirect, nack(&hourglassv1.NackRequest{Topic: "c", Receipt: r0[0], DelayMs: -1}), protoEqual)

	wrongConnect, wrongDirect := services(t, addr, hc, "wrong")
	both(t, "receive_wrong_token", wrongConnect, wrongDirect, receive(&hourglassv1.ReceiveRequest{Topic: "c"}), protoEqual)
}

// TestDirectReceiveNotPipelined checks that a Receive waiting on the
// server does not hold up a Schedule of a client that pipelines: the
// Schedules are answered while the Receive still waits. (The Receive is
// most likely on the wire before the Schedules; if not, the test proves
// less, never fails wrongly.)
func TestDirectReceiveNotPipelined(t *testing.T) {
	addr := startServer(t, server.Options{})
	hc := NewPipelinedHTTPClient(8, 1)
	defer hc.CloseIdleConnections()
	c := New(addr, WithHTTPClient(hc), WithMaxCalls(0))
	ctx := context.Background()
	// A first Schedule opens the one pipelined connection.
	if _, err := c.Schedule(ctx, Message{Topic: "s"}); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	received := make(chan error, 1)
	go func() {
		_, err := c.Receive(rctx, "empty", ReceiveOptions{Wait: time.Minute})
		received <- err
	}()
	for range 20 {
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := c.Schedule(sctx, Message{Topic: "s"})
		scancel()
		if err != nil {
			t.Fatalf("Schedule while a Receive waits: %v", err)
		}
	}
	select {
	case err := <-received:
		t.Fatalf("the Receive ended before its wait: %v", err)
	default:
	}
	cancel()
	if err := <-received; connect.CodeOf(err) != connect.CodeCanceled {
		t.Fatalf("cancelled Receive: %v, want Canceled", err)
	}
}
