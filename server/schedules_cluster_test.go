package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/recur"
)

// fakeSchedules is a cluster node's recurring schedules: it records each
// call in f.manage; the name "missing" is not found, "moved" answers the
// owner's Unavailable (a forwarded call's).
type fakeSchedules struct {
	f         *fakeCluster
	forwarded bool
}

var fakeNext = time.UnixMilli(1 << 41).UTC()

func (s fakeSchedules) note(op, name string) error {
	s.f.mmu.Lock()
	s.f.manage = append(s.f.manage, fmt.Sprintf("%s %s %v", op, name, s.forwarded))
	s.f.mmu.Unlock()
	switch name {
	case "missing":
		return fmt.Errorf("%w: %q", recur.ErrNotFound, name)
	case "moved":
		return status.Error(codes.Unavailable, "partition 3 has no owner at the moment")
	}
	return nil
}

func (s fakeSchedules) Create(_ context.Context, d *recur.Def) (time.Time, error) {
	return fakeNext, s.note("Create", d.Name+"/"+d.Spec+"/"+string(d.Misfire))
}
func (s fakeSchedules) Update(_ context.Context, d *recur.Def) (time.Time, error) {
	return fakeNext, s.note("Update", d.Name)
}
func (s fakeSchedules) Pause(_ context.Context, name string) error { return s.note("Pause", name) }
func (s fakeSchedules) Resume(_ context.Context, name string) (time.Time, error) {
	return fakeNext, s.note("Resume", name)
}
func (s fakeSchedules) Delete(_ context.Context, name string) error { return s.note("Delete", name) }
func (s fakeSchedules) Get(_ context.Context, name string, n int) (recur.Info, error) {
	return recur.Info{Def: &recur.Def{Name: name, Topic: "t", Spec: "@daily"}, Next: []time.Time{fakeNext}}, s.note(fmt.Sprintf("Get/%d", n), name)
}
func (s fakeSchedules) List(_ context.Context, after, topic string, n, nextN int) ([]recur.Info, string, error) {
	err := s.note(fmt.Sprintf("List/%s/%d/%d", topic, n, nextN), after)
	return []recur.Info{{Def: &recur.Def{Name: "a", Topic: "t", Spec: "@daily"}}}, "a", err
}

func (s fakeSchedules) Backfill(_ context.Context, name string, from, to time.Time) (recur.Backfilled, error) {
	return recur.Backfilled{Stored: 2, Existing: 1}, s.note(fmt.Sprintf("Backfill/%d", to.Sub(from)/time.Hour), name)
}

// TestSchedulesCluster: in cluster mode the recurring-schedule RPCs reach
// the node's schedules with the forwarded mark, and their errors come back
// as the status codes of one node (a forwarded owner's status as it is).
func TestSchedulesCluster(t *testing.T) {
	fc := newFakeCluster(true, nil)
	s := serveTest(t, Options{Cluster: fc, ExternalSink: "nats"}, nil)
	c := s.grpcClient(t)
	ctx := testCtx(t)
	fwd := metadata.AppendToOutgoingContext(ctx, ForwardedHeader, "a")
	rs := &hourglassv1.RecurringSchedule{Name: "s1", Topic: "t", Spec: "@every 1s", MisfirePolicy: hourglassv1.MisfirePolicy_MISFIRE_POLICY_FIRE_ALL}
	cr, err := c.CreateSchedule(ctx, &hourglassv1.CreateScheduleRequest{Schedule: rs})
	if err != nil || !cr.Next.AsTime().Equal(fakeNext) {
		t.Fatalf("CreateSchedule = %v, %v", cr, err)
	}
	if _, err := c.UpdateSchedule(fwd, &hourglassv1.UpdateScheduleRequest{Schedule: rs}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PauseSchedule(ctx, &hourglassv1.PauseScheduleRequest{Name: "s1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ResumeSchedule(fwd, &hourglassv1.ResumeScheduleRequest{Name: "s1"}); err != nil {
		t.Fatal(err)
	}
	g, err := c.GetSchedule(ctx, &hourglassv1.GetScheduleRequest{Name: "s1"})
	if err != nil || g.Schedule.Name != "s1" || len(g.Next) != 1 {
		t.Fatalf("GetSchedule = %v, %v", g, err)
	}
	l, err := c.ListSchedules(fwd, &hourglassv1.ListSchedulesRequest{Topic: "t", PageSize: 7, PageToken: "~1,2~x"})
	if err != nil || len(l.Schedules) != 1 || l.NextPageToken != "a" {
		t.Fatalf("ListSchedules = %v, %v", l, err)
	}
	_, err = c.DeleteSchedule(ctx, &hourglassv1.DeleteScheduleRequest{Name: "missing"})
	wantStatus(t, "DeleteSchedule of a missing one", err, codes.NotFound, "missing")
	_, err = c.GetSchedule(ctx, &hourglassv1.GetScheduleRequest{Name: "moved"})
	wantStatus(t, "GetSchedule forwarded to no owner", err, codes.Unavailable, "no owner")
	_, err = c.CreateSchedule(ctx, &hourglassv1.CreateScheduleRequest{Schedule: &hourglassv1.RecurringSchedule{Name: "bad", Topic: "t", Spec: "@daily", MisfirePolicy: 9}})
	wantStatus(t, "CreateSchedule with a bad misfire policy", err, codes.InvalidArgument, "misfire_policy")
	from := time.Now().Add(-3 * time.Hour)
	b, err := c.BackfillSchedule(fwd, &hourglassv1.BackfillScheduleRequest{Name: "s1", From: timestamppb.New(from), To: timestamppb.New(from.Add(2 * time.Hour))})
	if err != nil || b.Stored != 2 || b.Existing != 1 {
		t.Fatalf("BackfillSchedule = %v, %v", b, err)
	}
	// Calendars are one node's for now: refused, saying so.
	_, err = c.CreateSchedule(ctx, &hourglassv1.CreateScheduleRequest{Schedule: &hourglassv1.RecurringSchedule{Name: "cal", Topic: "t", Spec: "@daily", Calendar: "office"}})
	wantStatus(t, "CreateSchedule with a calendar", err, codes.Unimplemented, "cluster mode")
	_, err = c.CreateSchedule(ctx, &hourglassv1.CreateScheduleRequest{Schedule: &hourglassv1.RecurringSchedule{Name: "ov", Topic: "t", Spec: "@daily",
		OverlapPolicy: hourglassv1.OverlapPolicy_OVERLAP_POLICY_SKIP}})
	wantStatus(t, "CreateSchedule with an overlap policy", err, codes.Unimplemented, "cluster mode")
	_, err = c.CreateCalendar(ctx, &hourglassv1.CreateCalendarRequest{Calendar: &hourglassv1.Calendar{Name: "office"}})
	wantStatus(t, "CreateCalendar", err, codes.Unimplemented, "cluster mode")
	_, err = c.Schedule(ctx, &hourglassv1.ScheduleRequest{Topic: "t", When: &hourglassv1.ScheduleRequest_Working{Working: &hourglassv1.WorkingTime{Calendar: "office"}}})
	wantStatus(t, "Schedule in working time", err, codes.Unimplemented, "cluster mode")

	fc.mmu.Lock()
	defer fc.mmu.Unlock()
	want := []string{"Create s1/@every 1s/fire-all false", "Update s1 true", "Pause s1 false", "Resume s1 true", "Get/5 s1 false",
		"List/t/7/3 ~1,2~x true", "Delete missing false", "Get/5 moved false", "Backfill/2 s1 true"}
	if fmt.Sprint(fc.manage) != fmt.Sprint(want) {
		t.Errorf("calls\n%q\nwant\n%q", fc.manage, want)
	}
}
