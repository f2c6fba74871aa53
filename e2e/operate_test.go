package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

func ptr[T any](v T) *T { return &v }

// TestReschedule through the binary: by ID and by key, earlier and later,
// promote; the old time never fires, the new one once; Get tells the old
// ID rescheduled and names the new; all of it across kill -9.
func TestReschedule(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir, nil)
	c := p.client
	ctx := ctxT(t)
	a := schedule(t, c, &hourglassv1.ScheduleRequest{Topic: "rs", Body: []byte("a"), When: delayMs(60_000), IdempotencyKey: "order-a"})
	b := schedule(t, c, &hourglassv1.ScheduleRequest{Topic: "rs", Body: []byte("b"), When: delayMs(1_500)})
	z := schedule(t, c, &hourglassv1.ScheduleRequest{Topic: "rs", Body: []byte("z"), When: delayMs(3_600_000)})
	// a: by key, to 2 s from now.
	ra, err := c.Reschedule(ctx, connect.NewRequest(&hourglassv1.RescheduleRequest{Topic: "rs", Key: "order-a",
		When: &hourglassv1.RescheduleRequest_DelayMs{DelayMs: 2_000}}))
	if err != nil || ra.Msg.Result != hourglassv1.RescheduleResult_RESCHEDULE_RESULT_RESCHEDULED {
		t.Fatalf("Reschedule by key: %v, %v", ra, err)
	}
	// b: later, by ID.
	rb, err := c.Reschedule(ctx, connect.NewRequest(&hourglassv1.RescheduleRequest{Id: b,
		When: &hourglassv1.RescheduleRequest_DeliverAt{DeliverAt: timestamppb.New(time.Now().Add(4 * time.Second))}}))
	if err != nil || rb.Msg.Result != hourglassv1.RescheduleResult_RESCHEDULE_RESULT_RESCHEDULED {
		t.Fatalf("Reschedule later: %v, %v", rb, err)
	}
	// z: promoted.
	rz, err := c.Reschedule(ctx, connect.NewRequest(&hourglassv1.RescheduleRequest{Id: z, When: &hourglassv1.RescheduleRequest_Now{Now: true}}))
	if err != nil || rz.Msg.Result != hourglassv1.RescheduleResult_RESCHEDULE_RESULT_RESCHEDULED {
		t.Fatalf("promote: %v, %v", rz, err)
	}
	if g := getState(t, p, a); g.State != hourglassv1.MessageState_MESSAGE_STATE_PENDING || g.RescheduledTo != ra.Msg.Id || g.Message.GetId() != ra.Msg.Id {
		t.Fatalf("Get(old a) = %v as %q, want pending as %s", g.State, g.RescheduledTo, ra.Msg.Id)
	}
	if g, err := c.Get(ctx, connect.NewRequest(&hourglassv1.GetRequest{Topic: "rs", Key: "order-a"})); err != nil || g.Msg.Message.Id != ra.Msg.Id {
		t.Fatalf("Get by key = %v, %v; want the replacement", g, err)
	}
	// The replaced ID itself is done; Reschedule by the first ID would
	// move its replacement (one message, one ID).
	again, err := c.Reschedule(ctx, connect.NewRequest(&hourglassv1.RescheduleRequest{Id: rb.Msg.Id, When: &hourglassv1.RescheduleRequest_DelayMs{DelayMs: 4_000}}))
	if err != nil || again.Msg.Result != hourglassv1.RescheduleResult_RESCHEDULE_RESULT_RESCHEDULED {
		t.Fatalf("Reschedule of b's replacement: %v, %v", again, err)
	}
	rb = again
	if _, err := c.Reschedule(ctx, connect.NewRequest(&hourglassv1.RescheduleRequest{Id: ra.Msg.Id})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("Reschedule without a time: %v", err)
	}
	p.stop(syscall.SIGKILL)
	p = start(t, dir, nil)
	got := receive(t, p.client, "rs", 3, 15*time.Second)
	want := map[string]string{"z": rz.Msg.Id, "a": ra.Msg.Id, "b": rb.Msg.Id}
	for i, r := range got {
		if want[string(r.m.Body)] != r.m.Id {
			t.Errorf("received %s as %s, want its replacement %s", r.m.Body, r.m.Id, want[string(r.m.Body)])
		}
		if r.at.Before(r.m.DeliverAt.AsTime()) {
			t.Errorf("%s early", r.m.Body)
		}
		if i == 0 && string(r.m.Body) != "z" {
			t.Errorf("first received %s, want the promoted z", r.m.Body)
		}
		ack(t, p.client, "rs", r.m.Id)
	}
	receiveNone(t, p.client, "rs", 2*time.Second) // b's old time (1.5 s) and a's (60 s) never fire
}

// TestPolicy: a paused topic hands nothing out, also after kill -9, and
// resumes; max attempts per topic; Extend keeps a lease.
func TestPolicy(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir, nil)
	c := p.client
	ctx := ctxT(t)
	sp, err := c.SetPolicy(ctx, connect.NewRequest(&hourglassv1.SetPolicyRequest{Topic: "pz", Policy: &hourglassv1.Policy{Paused: ptr(true), MaxAttempts: ptr(int32(7))}}))
	if err != nil || !sp.Msg.Effective.GetPaused() || sp.Msg.Effective.GetMaxAttempts() != 7 || sp.Msg.Effective.GetLeaseMs() == 0 {
		t.Fatalf("SetPolicy = %v, %v", sp, err)
	}
	schedule(t, c, &hourglassv1.ScheduleRequest{Topic: "pz", Body: []byte("p"), When: delayMs(0)})
	receiveNone(t, c, "pz", time.Second)
	p.stop(syscall.SIGKILL)
	p = start(t, dir, nil)
	c = p.client
	receiveNone(t, c, "pz", time.Second)
	gp, err := c.GetPolicy(ctx, connect.NewRequest(&hourglassv1.GetPolicyRequest{Topic: "pz"}))
	if err != nil || !gp.Msg.Policy.GetPaused() || gp.Msg.Policy.GetMaxAttempts() != 7 {
		t.Fatalf("GetPolicy after kill -9 = %v, %v", gp, err)
	}
	if _, err := c.SetPolicy(ctx, connect.NewRequest(&hourglassv1.SetPolicyRequest{Topic: "pz", Defaults: []string{"paused"}})); err != nil {
		t.Fatal(err)
	}
	r := receive(t, c, "pz", 1, 10*time.Second)[0]
	ex, err := c.Extend(ctx, connect.NewRequest(&hourglassv1.ExtendRequest{Topic: "pz", Receipt: r.m.Receipt, LeaseMs: 120_000}))
	if err != nil || !ex.Msg.LeaseExpiresAt.AsTime().After(r.m.LeaseExpiresAt.AsTime()) {
		t.Fatalf("Extend = %v, %v", ex, err)
	}
	if _, err := c.SetPolicy(ctx, connect.NewRequest(&hourglassv1.SetPolicyRequest{Topic: "pz", Defaults: []string{"nope"}})); connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "max_attempts") {
		t.Fatalf("SetPolicy with an unknown field: %v", err)
	}
	if _, err := c.SetPolicy(ctx, connect.NewRequest(&hourglassv1.SetPolicyRequest{Topic: "pz", Policy: &hourglassv1.Policy{MaxAttempts: ptr(int32(0))}})); err != nil {
		t.Fatalf("max_attempts 0 (the default): %v", err)
	}
	if _, err := c.SetPolicy(ctx, connect.NewRequest(&hourglassv1.SetPolicyRequest{Topic: "pz", Policy: &hourglassv1.Policy{MaxAttempts: ptr(int32(5000))}})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("max_attempts 5000: %v", err)
	}
	dt, err := c.DeleteTopic(ctx, connect.NewRequest(&hourglassv1.DeleteTopicRequest{Topic: "pz"}))
	if err != nil || dt.Msg.Removed != 1 {
		t.Fatalf("DeleteTopic = %v, %v", dt, err)
	}
	if gp, err := c.GetPolicy(ctx, connect.NewRequest(&hourglassv1.GetPolicyRequest{Topic: "pz"})); err != nil || gp.Msg.Policy.MaxAttempts != nil {
		t.Fatalf("policy after DeleteTopic = %v, %v", gp, err)
	}
}
