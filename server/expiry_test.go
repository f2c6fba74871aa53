package server

import (
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
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
