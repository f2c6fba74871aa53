package server

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hourglassmq/hourglass/engine"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// TestFreezeMessageRPC: FreezeMessage by key holds a message that Get and
// List by the first ID show frozen with its remaining delay; the answers
// for a second freeze, a thaw of a message not frozen, and an unknown key
// are truthful; ThawMessage by the first ID makes it due its remaining
// delay from now; Cancel of a frozen message cancels it.
func TestFreezeMessageRPC(t *testing.T) {
	s := serveTest(t, Options{}, nil)
	c := s.grpcClient(t)
	ctx := testCtx(t)
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	sr, err := c.Schedule(ctx, &hourglassv1.ScheduleRequest{Topic: "fz", Body: []byte("b"), IdempotencyKey: "k",
		When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(at)}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.ThawMessage(ctx, &hourglassv1.ThawMessageRequest{Id: sr.Id}); err != nil || r.Result != hourglassv1.FreezeResult_FREEZE_RESULT_NOT_FROZEN {
		t.Fatalf("ThawMessage of a message not frozen = %v, %v", r, err)
	}
	before := time.Now()
	fr, err := c.FreezeMessage(ctx, &hourglassv1.FreezeMessageRequest{Topic: "fz", Key: "k"})
	if err != nil || fr.Result != hourglassv1.FreezeResult_FREEZE_RESULT_FROZEN || fr.Id == sr.Id {
		t.Fatalf("FreezeMessage by key = %v, %v; want frozen under a new id", fr, err)
	}
	if left := time.Duration(fr.RemainingMs) * time.Millisecond; left > time.Until(at)+time.Second || left < at.Sub(before)-time.Minute {
		t.Fatalf("remaining %v; want about %v", left, time.Until(at))
	}
	g, err := c.Get(ctx, &hourglassv1.GetRequest{Id: sr.Id})
	if err != nil || g.State != hourglassv1.MessageState_MESSAGE_STATE_PENDING || g.RescheduledTo != fr.Id || !g.Message.GetFrozen() ||
		g.Message.FrozenRemainingMs == nil || *g.Message.FrozenRemainingMs != fr.RemainingMs || g.Message.DueAt == nil {
		t.Fatalf("Get by the first id = %v, %v; want pending, frozen with %d ms left, under %s", g, err, fr.RemainingMs, fr.Id)
	}
	if !g.Message.DeliverAt.AsTime().Equal(time.UnixMilli(engine.FrozenAt)) {
		t.Fatalf("frozen deliver_at %v; want where frozen messages are held", g.Message.DeliverAt.AsTime())
	}
	l, err := c.List(ctx, &hourglassv1.ListRequest{Topic: "fz"})
	if err != nil || len(l.Messages) != 1 || l.Messages[0].Id != fr.Id || !l.Messages[0].Frozen || l.Messages[0].GetFrozenRemainingMs() != fr.RemainingMs {
		t.Fatalf("List = %v, %v; want %s frozen", l, err, fr.Id)
	}
	if r, err := c.FreezeMessage(ctx, &hourglassv1.FreezeMessageRequest{Id: sr.Id}); err != nil || r.Result != hourglassv1.FreezeResult_FREEZE_RESULT_ALREADY_FROZEN {
		t.Fatalf("FreezeMessage of a frozen message = %v, %v", r, err)
	}
	if r, err := c.FreezeMessage(ctx, &hourglassv1.FreezeMessageRequest{Topic: "fz", Key: "none"}); err != nil || r.Result != hourglassv1.FreezeResult_FREEZE_RESULT_UNKNOWN {
		t.Fatalf("FreezeMessage of an unknown key = %v, %v", r, err)
	}
	thawed := time.Now()
	tr, err := c.ThawMessage(ctx, &hourglassv1.ThawMessageRequest{Id: sr.Id})
	if err != nil || tr.Result != hourglassv1.FreezeResult_FREEZE_RESULT_THAWED {
		t.Fatalf("ThawMessage by the first id = %v, %v", tr, err)
	}
	want := thawed.Add(time.Duration(fr.RemainingMs) * time.Millisecond)
	if d := tr.DeliverAt.AsTime().Sub(want); d < 0 || d > time.Minute {
		t.Fatalf("thawed to %v; want its remaining delay from the thaw, %v", tr.DeliverAt.AsTime(), want)
	}
	g, err = c.Get(ctx, &hourglassv1.GetRequest{Topic: "fz", Key: "k"})
	if err != nil || g.Message.GetId() != tr.Id || g.Message.Frozen || g.Message.FrozenRemainingMs != nil {
		t.Fatalf("Get by key after the thaw = %v, %v; want %s not frozen", g, err, tr.Id)
	}
	// Another frozen message keeps the FrozenAt bucket from retiring once
	// the one below is cancelled (a retired entry answers unknown).
	other, err := c.Schedule(ctx, &hourglassv1.ScheduleRequest{Topic: "fz-other", Body: []byte("o"),
		When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(at)}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.FreezeMessage(ctx, &hourglassv1.FreezeMessageRequest{Id: other.Id}); err != nil || r.Result != hourglassv1.FreezeResult_FREEZE_RESULT_FROZEN {
		t.Fatalf("FreezeMessage of another = %v, %v", r, err)
	}
	fr, err = c.FreezeMessage(ctx, &hourglassv1.FreezeMessageRequest{Id: sr.Id})
	if err != nil || fr.Result != hourglassv1.FreezeResult_FREEZE_RESULT_FROZEN {
		t.Fatalf("FreezeMessage again = %v, %v", fr, err)
	}
	if r, err := c.Cancel(ctx, &hourglassv1.CancelRequest{Id: sr.Id}); err != nil || r.Result != hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Fatalf("Cancel of a frozen message = %v, %v", r, err)
	}
	if r, err := c.ThawMessage(ctx, &hourglassv1.ThawMessageRequest{Id: fr.Id}); err != nil || r.Result != hourglassv1.FreezeResult_FREEZE_RESULT_ALREADY_CANCELLED {
		t.Fatalf("ThawMessage of a cancelled message = %v, %v", r, err)
	}
	_, err = c.FreezeMessage(ctx, &hourglassv1.FreezeMessageRequest{Id: sr.Id, Topic: "fz"})
	wantStatus(t, "id and topic", err, codes.InvalidArgument, "both id and topic")
	_, err = c.ThawMessage(ctx, &hourglassv1.ThawMessageRequest{})
	wantStatus(t, "no target", err, codes.InvalidArgument, "name the message")
}

// TestFreezeMessageCluster: a cluster node refuses FreezeMessage and
// ThawMessage with FailedPrecondition and says why.
func TestFreezeMessageCluster(t *testing.T) {
	s := serveTest(t, Options{Cluster: newFakeCluster(true, nil), ExternalSink: "nats"}, nil)
	c := s.grpcClient(t)
	_, err := c.FreezeMessage(testCtx(t), &hourglassv1.FreezeMessageRequest{Id: fakeKeyed.String()})
	wantStatus(t, "FreezeMessage in cluster mode", err, codes.FailedPrecondition, "cluster mode")
	_, err = c.ThawMessage(testCtx(t), &hourglassv1.ThawMessageRequest{Id: fakeKeyed.String()})
	wantStatus(t, "ThawMessage in cluster mode", err, codes.FailedPrecondition, "cluster mode")
}
