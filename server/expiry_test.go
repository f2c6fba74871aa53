package server

import (
	"context"
	"io"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/queue"
)

// TestScheduleExpiry: a Schedule's expiry is stored as the reserved header
// Get shows; one not after the delivery time, a TTL out of range, or too
// many headers beside it is refused with the field named.
func TestScheduleExpiry(t *testing.T) {
	s := serveTest(t, Options{}, nil)
	c := s.grpcClient(t)
	ctx := testCtx(t)
	r, err := c.Schedule(ctx, &hourglassv1.ScheduleRequest{Topic: "x", When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 60_000},
		Expiry: &hourglassv1.ScheduleRequest_TtlMs{TtlMs: 5000}})
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.Get(ctx, &hourglassv1.GetRequest{Id: r.Id})
	if err != nil {
		t.Fatal(err)
	}
	want := r.DeliverAt.AsTime().Add(5 * time.Second).UnixMilli()
	var got string
	for _, h := range g.Message.GetHeaders() {
		if h.Key == "hourglass-expire-at" {
			got = h.Value
		}
	}
	if got != timeMs(want) {
		t.Fatalf("hourglass-expire-at = %q; want %d", got, want)
	}
	many := make([]*hourglassv1.Header, 64)
	for i := range many {
		many[i] = &hourglassv1.Header{Key: "h" + timeMs(int64(i)), Value: "v"}
	}
	for _, tc := range []struct {
		name string
		req  *hourglassv1.ScheduleRequest
		want string
	}{
		{"ttl_zero", &hourglassv1.ScheduleRequest{Topic: "x", Expiry: &hourglassv1.ScheduleRequest_TtlMs{TtlMs: 0}}, "ttl_ms"},
		{"ttl_beyond_max_delay", &hourglassv1.ScheduleRequest{Topic: "x", Expiry: &hourglassv1.ScheduleRequest_TtlMs{TtlMs: 1 << 50}}, "max-delay"},
		{"expire_before_due", &hourglassv1.ScheduleRequest{Topic: "x", When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 60_000},
			Expiry: &hourglassv1.ScheduleRequest_ExpireAt{ExpireAt: timestamppb.New(time.Now())}}, "not after its delivery time"},
		{"too_many_headers", &hourglassv1.ScheduleRequest{Topic: "x", Headers: many[:64], Expiry: &hourglassv1.ScheduleRequest_TtlMs{TtlMs: 1}}, "expiry"},
	} {
		_, err := c.Schedule(ctx, tc.req)
		wantStatus(t, tc.name, err, codes.InvalidArgument, tc.want)
	}
}

func timeMs(ms int64) string { return strconv.FormatInt(ms, 10) }

// TestExpiryPolicyRPC sets a topic's expiry policy through SetPolicy on
// an injected clock: GetPolicy shows it (and its defaults), an Ack after
// the expiry of a message received before it is refused with
// FailedPrecondition saying why, the message is dropped (counted in
// hourglass_expired_dropped_total, nothing dead-lettered), and naming
// the fields in defaults clears them; an unknown default lists them.
func TestExpiryPolicyRPC(t *testing.T) {
	t0 := time.Date(2030, 1, 2, 9, 0, 0, 0, time.UTC)
	var now atomic.Int64
	now.Store(t0.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	ts := newTestServerClock(t, Options{MaxDelay: 24 * time.Hour}, clock)
	ctx := context.Background()
	set := func(req *hourglassv1.SetPolicyRequest) *hourglassv1.SetPolicyResponse {
		t.Helper()
		r, err := ts.client.SetPolicy(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatal(err)
		}
		return r.Msg
	}
	r := set(&hourglassv1.SetPolicyRequest{Topic: "t", Policy: &hourglassv1.Policy{ExpiryDrop: ptr(true), ExpiryUnacked: ptr(true)}})
	if !r.Policy.GetExpiryDrop() || !r.Policy.GetExpiryUnacked() || !r.Effective.GetExpiryDrop() || !r.Effective.GetExpiryUnacked() {
		t.Fatalf("SetPolicy answered %v, effective %v; want expiry_drop and expiry_unacked set", r.Policy, r.Effective)
	}
	g, err := ts.client.GetPolicy(ctx, connect.NewRequest(&hourglassv1.GetPolicyRequest{Topic: "other"}))
	if err != nil || g.Msg.Effective.ExpiryDrop == nil || g.Msg.Effective.GetExpiryDrop() || g.Msg.Policy.ExpiryUnacked != nil {
		t.Fatalf("GetPolicy of another topic = %v, %v; want the defaults: expiry_drop false in effective, unset in policy", g, err)
	}

	if _, err := ts.client.Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "t", Body: []byte("m"),
		Expiry: &hourglassv1.ScheduleRequest_TtlMs{TtlMs: 5000}})); err != nil {
		t.Fatal(err)
	}
	rr, err := ts.client.Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: "t", WaitMs: 10_000, LeaseMs: 60_000}))
	if err != nil || len(rr.Msg.Messages) != 1 {
		t.Fatalf("Receive = %v, %v; want the message", rr, err)
	}
	now.Add(int64(6 * time.Second)) // past its expiry, within its lease
	_, err = ts.client.Ack(ctx, connect.NewRequest(&hourglassv1.AckRequest{Topic: "t", Receipt: rr.Msg.Messages[0].Receipt}))
	wantCode(t, "Ack after the expiry", err, connect.CodeFailedPrecondition, "expired at", "expiry_unacked", "dropped")
	if d, err := ts.client.Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: "t.dlq"})); err != nil || len(d.Msg.Messages) != 0 {
		t.Errorf("dead letters = %v, %v; want none (dropped)", d, err)
	}
	resp, err := ts.http.Client().Get(ts.http.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`hourglass_expired_dropped_total{topic="t"} 1`, `hourglass_expired_total{topic="t"} 0`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	r = set(&hourglassv1.SetPolicyRequest{Topic: "t", Defaults: []string{"expiry_drop", "expiry_unacked"}})
	if r.Policy.ExpiryDrop != nil || r.Policy.ExpiryUnacked != nil {
		t.Errorf("after defaults: %v; want neither field set", r.Policy)
	}
	_, err = ts.client.SetPolicy(ctx, connect.NewRequest(&hourglassv1.SetPolicyRequest{Topic: "t", Defaults: []string{"expiry"}}))
	wantCode(t, "unknown default", err, connect.CodeInvalidArgument, "expiry_drop and expiry_unacked")
}

// TestClusterExpiry: cluster mode refuses either expiry policy field,
// naming it, and takes the default.
func TestClusterExpiry(t *testing.T) {
	if err := clusterExpiry(queue.Expiry{}); err != nil {
		t.Errorf("the default: %v; want nil", err)
	}
	for field, e := range map[string]queue.Expiry{"expiry_drop": {Drop: true}, "expiry_unacked": {Unacked: true, Drop: true}} {
		wantStatus(t, field, clusterExpiry(e), codes.FailedPrecondition, field)
	}
}
