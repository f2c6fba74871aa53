package e2e

import (
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hourglassmq/hourglass/access"
	"github.com/hourglassmq/hourglass/cluster"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/message"
)

// More cases of the conformance suite (conform_test.go): a recurring
// schedule's update and backfill, the caller and the audit trail, and the
// order of single messages due one after another.

// caseScheduleUpdateBackfill: UpdateSchedule replaces the spec and body
// and the next occurrence follows the new spec; BackfillSchedule stores
// the past occurrences of a range once, delivered at once with the
// backfill header; the mistakes of either get the same codes.
func caseScheduleUpdateBackfill(t *testing.T, tg *conformTarget, topic string) {
	ctx := ctxT(t)
	name := topic
	if _, err := tg.c().CreateSchedule(ctx, connect.NewRequest(&hourglassv1.CreateScheduleRequest{Schedule: &hourglassv1.RecurringSchedule{
		Name: name, Topic: topic, Spec: "0 * * * *", Body: []byte("hourly")}})); err != nil {
		t.Fatalf("CreateSchedule: %v", err)
	}
	defer tg.c().DeleteSchedule(ctx, connect.NewRequest(&hourglassv1.DeleteScheduleRequest{Name: name}))
	up, err := tg.c().UpdateSchedule(ctx, connect.NewRequest(&hourglassv1.UpdateScheduleRequest{Schedule: &hourglassv1.RecurringSchedule{
		Name: name, Topic: topic, Spec: "30 * * * *", Body: []byte("half")}}))
	if err != nil {
		t.Fatalf("UpdateSchedule: %v", err)
	}
	next := up.Msg.Next.AsTime().UTC()
	if next.Minute() != 30 || next.Second() != 0 || !next.After(time.Now().Add(-time.Second)) || next.After(time.Now().Add(time.Hour)) {
		t.Errorf("UpdateSchedule to minute 30: next %v; want the next :30:00", next)
	}
	g, err := tg.c().GetSchedule(ctx, connect.NewRequest(&hourglassv1.GetScheduleRequest{Name: name, NextCount: 2}))
	if err != nil || g.Msg.Schedule.GetSpec() != "30 * * * *" || string(g.Msg.Schedule.GetBody()) != "half" || len(g.Msg.Next) != 2 ||
		g.Msg.Next[0].AsTime().Minute() != 30 || g.Msg.Next[1].AsTime().Sub(g.Msg.Next[0].AsTime()) != time.Hour || g.Msg.ArmedId == "" {
		t.Errorf("GetSchedule after the update = %v, %v; want spec 30 * * * *, body half, the next two :30s, armed", g, err)
	}
	_, err = tg.c().UpdateSchedule(ctx, connect.NewRequest(&hourglassv1.UpdateScheduleRequest{Schedule: &hourglassv1.RecurringSchedule{
		Name: name + "-nobody", Topic: topic, Spec: "@daily"}}))
	wantCode(t, "UpdateSchedule of an unknown name", err, connect.CodeNotFound)
	_, err = tg.c().UpdateSchedule(ctx, connect.NewRequest(&hourglassv1.UpdateScheduleRequest{Schedule: &hourglassv1.RecurringSchedule{
		Name: name, Topic: topic, Spec: "61 * * * *"}}))
	wantCode(t, "UpdateSchedule with a bad spec", err, connect.CodeInvalidArgument)

	// The two occurrences before the last :30 that passed.
	now := time.Now().UTC()
	to := now.Truncate(time.Hour).Add(30 * time.Minute)
	if to.After(now) {
		to = to.Add(-time.Hour)
	}
	from := to.Add(-2 * time.Hour)
	backfill := func() *hourglassv1.BackfillScheduleResponse {
		t.Helper()
		res, err := tg.c().BackfillSchedule(ctx, connect.NewRequest(&hourglassv1.BackfillScheduleRequest{Name: name,
			From: timestamppb.New(from), To: timestamppb.New(to)}))
		if err != nil {
			t.Fatalf("BackfillSchedule(%v, %v): %v", from, to, err)
		}
		return res.Msg
	}
	if b := backfill(); b.Stored != 2 || b.Existing != 0 {
		t.Errorf("BackfillSchedule of two past occurrences: stored %d, existing %d; want 2, 0", b.Stored, b.Existing)
	}
	if b := backfill(); b.Stored != 0 || b.Existing != 2 {
		t.Errorf("BackfillSchedule again: stored %d, existing %d; want 0, 2", b.Stored, b.Existing)
	}
	got := cfReceive(t, tg.c(), topic, 2, 15*time.Second)
	var at []time.Time
	for _, m := range got {
		o, err := time.Parse(time.RFC3339Nano, headerFold(m.Headers, "hourglass-occurrence"))
		if err != nil || string(m.Body) != "half" || headerFold(m.Headers, "hourglass-backfill") != "true" || headerFold(m.Headers, "hourglass-schedule") != name {
			t.Errorf("backfilled %s: body %q, headers %v; want body half, the schedule, its occurrence and the backfill header", m.Id, m.Body, m.Headers)
		}
		at = append(at, o)
		cfAck(t, tg, m)
	}
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	if len(at) != 2 || !at[0].Equal(from) || !at[1].Equal(from.Add(time.Hour)) {
		t.Errorf("backfilled occurrences %v; want %v and an hour later", at, from)
	}
	cfNone(t, tg.c(), topic, 300*time.Millisecond)
	_, err = tg.c().BackfillSchedule(ctx, connect.NewRequest(&hourglassv1.BackfillScheduleRequest{Name: name,
		From: timestamppb.New(now.Add(-time.Hour)), To: timestamppb.New(now.Add(time.Hour))}))
	wantCode(t, "BackfillSchedule into the future", err, connect.CodeInvalidArgument, "after now")
	_, err = tg.c().BackfillSchedule(ctx, connect.NewRequest(&hourglassv1.BackfillScheduleRequest{Name: name + "-nobody",
		From: timestamppb.New(from), To: timestamppb.New(to)}))
	wantCode(t, "BackfillSchedule of an unknown name", err, connect.CodeNotFound)
}

// caseWhoAmIAudit: WhoAmI answers the same caller on every node; a change
// is in the audit trail of the node that took it (in a cluster, only
// there).
func caseWhoAmIAudit(t *testing.T, tg *conformTarget, topic string) {
	ctx := ctxT(t)
	for range tg.nodes {
		w, err := tg.c().WhoAmI(ctx, connect.NewRequest(&hourglassv1.WhoAmIRequest{}))
		if err != nil || w.Msg.Name != "anonymous" || w.Msg.Role != "admin" || w.Msg.Method != "none" || len(w.Msg.Verbs) != len(access.Verbs) {
			t.Errorf("WhoAmI without credentials = %v, %v; want anonymous, admin, method none, every verb", w, err)
		}
	}
	n := int32(2)
	if _, err := tg.one().SetPolicy(ctx, connect.NewRequest(&hourglassv1.SetPolicyRequest{Topic: topic, Policy: &hourglassv1.Policy{MaxAttempts: &n}})); err != nil {
		t.Fatal(err)
	}
	if !cfAudited(t, tg.one(), "SetPolicy", topic) {
		t.Errorf("the trail of the node that took SetPolicy(%s) does not have it", topic)
	}
	other := tg.nodes[1%len(tg.nodes)].client
	want := true
	if tg.differs(t, "audit") {
		want = false
	}
	if got := cfAudited(t, other, "SetPolicy", topic); got != want {
		t.Errorf("SetPolicy(%s) in another node's trail: %v; want %v", topic, got, want)
	}
	_, err := tg.c().ListAudit(ctx, connect.NewRequest(&hourglassv1.ListAuditRequest{Limit: 1001}))
	wantCode(t, "ListAudit limit 1001", err, connect.CodeInvalidArgument, "limit")
}

// cfAudited reports whether c's audit trail has an entry of action on
// target that succeeded.
func cfAudited(t *testing.T, c hourglassv1connect.HourglassServiceClient, action, target string) bool {
	t.Helper()
	before := uint64(0)
	for range 20 {
		res, err := c.ListAudit(ctxT(t), connect.NewRequest(&hourglassv1.ListAuditRequest{Limit: 1000, BeforeSeq: before}))
		if err != nil {
			t.Fatalf("ListAudit: %v", err)
		}
		for _, e := range res.Msg.Entries {
			if e.Action == action && e.Target == target && e.Result == "OK" {
				return true
			}
		}
		if before = res.Msg.NextBeforeSeq; before == 0 {
			return false
		}
	}
	t.Fatalf("ListAudit: more than 20 pages")
	return false
}

// caseOrder: single Schedules due 150 ms apart, through rotating nodes,
// each its own request: one node hands them out in deliver_at order; a
// cluster puts them on several partitions and keeps that order within
// each, and hands each out once and not early (cfReceive checks that).
func caseOrder(t *testing.T, tg *conformTarget, topic string) {
	base := time.Now().Add(1500 * time.Millisecond)
	var want []string
	for i := range 8 {
		want = append(want, cfSchedule(t, tg, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte(itoa(i)),
			When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(base.Add(time.Duration(i) * 150 * time.Millisecond))}}).Id)
	}
	got := cfReceive(t, tg.c(), topic, len(want), 15*time.Second)
	for _, m := range got {
		cfAck(t, tg, m)
	}
	ids := cfIDs(got)
	if !tg.differs(t, "order") {
		if !slices.Equal(ids, want) {
			t.Errorf("received %v; want deliver_at order %v", ids, want)
		}
		return
	}
	byPart := map[int][]string{}
	for _, s := range ids {
		id, err := message.ParseID(s)
		if err != nil {
			t.Fatalf("received ID %q: %v", s, err)
		}
		p, _, _ := cluster.SplitID(id)
		byPart[p] = append(byPart[p], s)
	}
	if len(byPart) < 2 {
		t.Fatalf("the messages %v are on %d partition; the case needs several", ids, len(byPart))
	}
	for p, in := range byPart {
		// The ID's text starts with deliver_at: sorted text is deliver_at order.
		if !slices.IsSorted(in) {
			t.Errorf("partition %d handed out %v; want deliver_at order", p, in)
		}
	}
	slices.Sort(ids)
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("received %v; want each of %v once", ids, want)
	}
}
