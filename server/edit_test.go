package server

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// TestEditRPC: Edit by the first ID and by key replaces the content that
// Get by the first ID shows, keeps the time, answers truthfully for an ID
// that names nothing, and refuses what it cannot do with the field named.
func TestEditRPC(t *testing.T) {
	s := serveTest(t, Options{}, nil)
	c := s.grpcClient(t)
	ctx := testCtx(t)
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	sr, err := c.Schedule(ctx, &hourglassv1.ScheduleRequest{Topic: "ed", Body: []byte("old"), IdempotencyKey: "k",
		Headers: []*hourglassv1.Header{{Key: "a", Value: "1"}}, When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(at)}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Edit(ctx, &hourglassv1.EditRequest{Id: sr.Id, Body: []byte("new")})
	if err != nil || r.Result != hourglassv1.EditResult_EDIT_RESULT_EDITED || r.Id == sr.Id || !r.DeliverAt.AsTime().Equal(at) {
		t.Fatalf("Edit body = %v, %v; want edited under a new id at %v", r, err, at)
	}
	// By key: the headers only, the body edited before is kept.
	r, err = c.Edit(ctx, &hourglassv1.EditRequest{Topic: "ed", Key: "k", SetHeaders: true, Headers: []*hourglassv1.Header{{Key: "b", Value: "2"}}})
	if err != nil || r.Result != hourglassv1.EditResult_EDIT_RESULT_EDITED {
		t.Fatalf("Edit headers by key = %v, %v", r, err)
	}
	g, err := c.Get(ctx, &hourglassv1.GetRequest{Id: sr.Id})
	if err != nil || g.State != hourglassv1.MessageState_MESSAGE_STATE_PENDING || string(g.Message.GetBody()) != "new" || g.RescheduledTo != r.Id {
		t.Fatalf("Get by the first id = %v, %v; want pending with the new body under %s", g, err, r.Id)
	}
	hs := map[string]string{}
	for _, h := range g.Message.Headers {
		hs[h.Key] = h.Value
	}
	if hs["b"] != "2" || hs["a"] != "" || hs["hourglass-idempotency-key"] != "k" || g.Message.OriginId != sr.Id {
		t.Fatalf("headers %v, origin %s; want b=2, no a, the key kept, origin %s", hs, g.Message.OriginId, sr.Id)
	}
	if c, err := c.Cancel(ctx, &hourglassv1.CancelRequest{Id: sr.Id}); err != nil || c.Result != hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Fatalf("Cancel by the first id = %v, %v", c, err)
	}
	r, err = c.Edit(ctx, &hourglassv1.EditRequest{Id: sr.Id, Body: []byte("late")})
	if err != nil || r.Result != hourglassv1.EditResult_EDIT_RESULT_ALREADY_CANCELLED {
		t.Fatalf("Edit of a cancelled message = %v, %v", r, err)
	}
	r, err = c.Edit(ctx, &hourglassv1.EditRequest{Topic: "ed", Key: "none", Body: []byte("x")})
	if err != nil || r.Result != hourglassv1.EditResult_EDIT_RESULT_UNKNOWN {
		t.Fatalf("Edit of an unknown key = %v, %v", r, err)
	}
	for _, tc := range []struct {
		name string
		req  *hourglassv1.EditRequest
		want string
	}{
		{"nothing", &hourglassv1.EditRequest{Id: sr.Id}, "nothing to edit"},
		{"headers_without_set", &hourglassv1.EditRequest{Id: sr.Id, Headers: []*hourglassv1.Header{{Key: "x"}}}, "set_headers"},
		{"reserved_header", &hourglassv1.EditRequest{Id: sr.Id, SetHeaders: true, Headers: []*hourglassv1.Header{{Key: "Hourglass-X"}}}, "reserved"},
		{"body_too_big", &hourglassv1.EditRequest{Id: sr.Id, Body: make([]byte, 2<<20)}, "max-body"},
		{"no_target", &hourglassv1.EditRequest{Body: []byte("x")}, "name the message"},
	} {
		_, err := c.Edit(ctx, tc.req)
		wantStatus(t, tc.name, err, codes.InvalidArgument, tc.want)
	}
}

// TestEditCluster: a cluster node refuses Edit with FailedPrecondition
// and says why.
func TestEditCluster(t *testing.T) {
	s := serveTest(t, Options{Cluster: newFakeCluster(true, nil), ExternalSink: "nats"}, nil)
	_, err := s.grpcClient(t).Edit(testCtx(t), &hourglassv1.EditRequest{Id: fakeKeyed.String(), Body: []byte("x")})
	wantStatus(t, "Edit in cluster mode", err, codes.FailedPrecondition, "cluster mode")
}
