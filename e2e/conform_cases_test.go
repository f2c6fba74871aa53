package e2e

import (
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
)

// conformCases is the suite (conform_test.go runs it); the queue's cases
// are in conform_queue_test.go, the schedules' update and backfill, the
// caller, the audit trail and order in conform_admin_test.go.
var conformCases = []conformCase{
	{"schedule-get-cancel", caseScheduleGetCancel},
	{"keys", caseKeys},
	{"batch-order", caseBatchOrder},
	{"reschedule", caseReschedule},
	{"list-pending", caseListPending},
	{"edit", caseEdit},
	{"freeze-message", caseFreezeMessage},
	{"validation", caseValidation},
	{"schedules", caseSchedules},
	{"receive-settle", caseReceiveSettle},
	{"by-id", caseByID},
	{"lease", caseLease},
	{"list-queue", caseListQueue},
	{"dead-letters", caseDeadLetters},
	{"policy", casePolicy},
	{"purge-due", casePurgeDue},
	{"flow", caseFlow},
	{"backoff", caseBackoff},
	{"streams", caseStreams},
	{"expiry", caseExpiry},
	{"calendars", caseCalendars},
	{"schedule-update-backfill", caseScheduleUpdateBackfill},
	{"whoami-audit", caseWhoAmIAudit},
	{"order", caseOrder},
}

// caseScheduleGetCancel: Get of a pending message; Cancel, twice; Cancel
// of an ID nobody was answered; a delivered message through Get and
// Cancel.
func caseScheduleGetCancel(t *testing.T, tg *conformTarget, topic string) {
	id := cfSchedule(t, tg, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("a"), When: delayMs(3_600_000),
		Headers: []*hourglassv1.Header{{Key: "x-k", Value: "v"}}}).Id
	g := cfGet(t, tg, &hourglassv1.GetRequest{Id: id})
	if g.State != hourglassv1.MessageState_MESSAGE_STATE_PENDING || string(g.Message.GetBody()) != "a" || g.Message.GetTopic() != topic ||
		len(g.Message.GetHeaders()) != 1 || g.Message.Headers[0].Key != "x-k" || g.Message.Headers[0].Value != "v" || g.Message.GetId() != id {
		t.Errorf("Get(pending) = %v", g)
	}
	// An ID nobody was answered: a sequence far beyond any stored (on
	// one node the commitlog's offset; in a cluster the same partition's
	// intake sequence).
	mid, _ := message.ParseID(id)
	other := message.ID{DeliverAt: mid.DeliverAt, Seq: mid.Seq + 1<<40}.String()
	if r := cfCancel(t, tg, &hourglassv1.CancelRequest{Id: other}); r != hourglassv1.CancelResult_CANCEL_RESULT_UNKNOWN {
		t.Errorf("Cancel of an ID never answered = %v", r)
	}
	if g := cfGet(t, tg, &hourglassv1.GetRequest{Id: other}); g.State != hourglassv1.MessageState_MESSAGE_STATE_NOT_FOUND {
		t.Errorf("Get of an ID never answered = %v", g)
	}
	if r := cfCancel(t, tg, &hourglassv1.CancelRequest{Id: id}); r != hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Errorf("Cancel = %v", r)
	}
	if r := cfCancel(t, tg, &hourglassv1.CancelRequest{Id: id}); r != hourglassv1.CancelResult_CANCEL_RESULT_ALREADY_CANCELLED {
		t.Errorf("Cancel again = %v", r)
	}
	if g := cfGet(t, tg, &hourglassv1.GetRequest{Id: id}); g.State != hourglassv1.MessageState_MESSAGE_STATE_CANCELLED {
		t.Errorf("Get(cancelled) = %v", g)
	}
	_, err := tg.c().Cancel(ctxT(t), connect.NewRequest(&hourglassv1.CancelRequest{Id: "nope"}))
	wantCode(t, "Cancel of a malformed ID", err, connect.CodeInvalidArgument)

	d := cfAt(t, tg, topic, "d", 0)
	m := cfReceive(t, tg.c(), topic, 1, 15*time.Second)[0]
	if m.Id != d || m.Attempt != 0 || string(m.Body) != "d" || m.Topic != topic {
		t.Fatalf("received %v, want %s", m, d)
	}
	states := []hourglassv1.MessageState{hourglassv1.MessageState_MESSAGE_STATE_LEASED, hourglassv1.MessageState_MESSAGE_STATE_ACKED}
	if tg.differs(t, "get-queue-state") {
		states = []hourglassv1.MessageState{hourglassv1.MessageState_MESSAGE_STATE_DELIVERED, hourglassv1.MessageState_MESSAGE_STATE_DELIVERED}
	}
	if g := cfGet(t, tg, &hourglassv1.GetRequest{Id: d}); g.State != states[0] {
		t.Errorf("Get(received) = %v; want %v", g.State, states[0])
	}
	cfAck(t, tg, m)
	// The engine notes the delivery done a moment after the queue took it.
	cfEventually(t, 10*time.Second, "Get(acked) = "+states[1].String(), func() bool {
		return cfGet(t, tg, &hourglassv1.GetRequest{Id: d}).State == states[1]
	})
	if r := cfCancel(t, tg, &hourglassv1.CancelRequest{Id: d}); r != hourglassv1.CancelResult_CANCEL_RESULT_ALREADY_DELIVERED {
		t.Errorf("Cancel of a delivered message = %v", r)
	}
}

// caseKeys: a keyed Schedule and a keyed batch, retried, answer the first
// IDs; a key is per topic; Get and Cancel by key.
func caseKeys(t *testing.T, tg *conformTarget, topic string) {
	keyed := &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("k"), IdempotencyKey: "k1", When: delayMs(3_600_000)}
	first := cfSchedule(t, tg, keyed).Id
	if again := cfSchedule(t, tg, keyed).Id; again != first {
		t.Errorf("a retry with the key: %s, want the first ID %s", again, first)
	}
	if other := cfSchedule(t, tg, &hourglassv1.ScheduleRequest{Topic: topic + "-other", IdempotencyKey: "k1", When: delayMs(3_600_000)}).Id; other == first {
		t.Errorf("the same key on another topic answered the first topic's ID")
	}
	batch := &hourglassv1.ScheduleBatchRequest{}
	for _, k := range []string{"b1", "b2", "b3"} {
		batch.Messages = append(batch.Messages, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte(k), IdempotencyKey: k, When: delayMs(3_600_000)})
	}
	var ids [2][]string
	for i := range ids {
		res, err := tg.c().ScheduleBatch(ctxT(t), connect.NewRequest(batch))
		if err != nil {
			t.Fatalf("ScheduleBatch: %v", err)
		}
		for _, r := range res.Msg.Results {
			ids[i] = append(ids[i], r.Id)
		}
	}
	if !slices.Equal(ids[0], ids[1]) || len(ids[0]) != 3 {
		t.Errorf("a keyed batch resent: %v then %v; want the same IDs", ids[0], ids[1])
	}
	for i, k := range []string{"k1", "b1", "b3"} {
		want := first
		if i > 0 {
			want = ids[0][i*2-2]
		}
		if g := cfGet(t, tg, &hourglassv1.GetRequest{Topic: topic, Key: k}); g.Message.GetId() != want || g.State != hourglassv1.MessageState_MESSAGE_STATE_PENDING {
			t.Errorf("Get by key %s = %v; want %s pending", k, g, want)
		}
	}
	if r := cfCancel(t, tg, &hourglassv1.CancelRequest{Topic: topic, Key: "b3"}); r != hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Errorf("Cancel by key of a batch's last message = %v", r)
	}
	if g := cfGet(t, tg, &hourglassv1.GetRequest{Id: ids[0][2]}); g.State != hourglassv1.MessageState_MESSAGE_STATE_CANCELLED {
		t.Errorf("Get after Cancel by key = %v", g)
	}
	if g := cfGet(t, tg, &hourglassv1.GetRequest{Topic: topic, Key: "nobody"}); g.State != hourglassv1.MessageState_MESSAGE_STATE_NOT_FOUND {
		t.Errorf("Get of an unknown key = %v", g)
	}
	if r := cfCancel(t, tg, &hourglassv1.CancelRequest{Topic: topic, Key: "nobody"}); r != hourglassv1.CancelResult_CANCEL_RESULT_UNKNOWN {
		t.Errorf("Cancel of an unknown key = %v", r)
	}
}

// caseBatchOrder: a batch's messages come at their times, earliest first,
// under the IDs the batch answered.
func caseBatchOrder(t *testing.T, tg *conformTarget, topic string) {
	batch := &hourglassv1.ScheduleBatchRequest{}
	for i := range 6 {
		batch.Messages = append(batch.Messages, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte(itoa(i)), When: delayMs(int64(900 - 150*i))})
	}
	res, err := tg.c().ScheduleBatch(ctxT(t), connect.NewRequest(batch))
	if err != nil || len(res.Msg.Results) != 6 {
		t.Fatalf("ScheduleBatch = %v, %v", res, err)
	}
	var want []string
	for i := 5; i >= 0; i-- {
		want = append(want, res.Msg.Results[i].Id)
	}
	got := cfReceive(t, tg.c(), topic, 6, 15*time.Second)
	if ids := cfIDs(got); !slices.Equal(ids, want) {
		t.Errorf("received %v; want the batch's IDs latest-first as scheduled, earliest due first: %v", ids, want)
	}
	for i, m := range got {
		if !m.DeliverAt.AsTime().Equal(res.Msg.Results[5-i].DeliverAt.AsTime()) {
			t.Errorf("%s: deliver_at %v, the batch answered %v", m.Id, m.DeliverAt.AsTime(), res.Msg.Results[5-i].DeliverAt.AsTime())
		}
		cfAck(t, tg, m)
	}
	// Single Schedules due at the same moment, through every node: each
	// comes once.
	at := time.Now().Add(800 * time.Millisecond)
	var same []string
	for i := range 6 {
		same = append(same, cfSchedule(t, tg, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("s" + itoa(i)),
			When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(at)}}).Id)
	}
	got = cfReceive(t, tg.c(), topic, 6, 15*time.Second)
	ids := cfIDs(got)
	// Due in the same millisecond: no order is promised (on one node the
	// engine hands such messages over concurrently), only each once.
	slices.Sort(ids)
	slices.Sort(same)
	if !slices.Equal(ids, same) {
		t.Errorf("received %v; want %v", ids, same)
	}
	for _, m := range got {
		cfAck(t, tg, m)
	}
}

// caseReschedule: by key and by ID; Get of the old ID names the new;
// what arrives is the replacement at its time; a delivered or cancelled
// message is not rescheduled.
func caseReschedule(t *testing.T, tg *conformTarget, topic string) {
	a := cfSchedule(t, tg, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("a"), IdempotencyKey: "ka", When: delayMs(3_600_000)}).Id
	b := cfAt(t, tg, topic, "b", time.Hour)
	ctx := ctxT(t)
	ra, err := tg.c().Reschedule(ctx, connect.NewRequest(&hourglassv1.RescheduleRequest{Topic: topic, Key: "ka", When: &hourglassv1.RescheduleRequest_DelayMs{DelayMs: 800}}))
	if err != nil || ra.Msg.Result != hourglassv1.RescheduleResult_RESCHEDULE_RESULT_RESCHEDULED || ra.Msg.Id == a {
		t.Fatalf("Reschedule by key = %v, %v", ra, err)
	}
	rb, err := tg.c().Reschedule(ctx, connect.NewRequest(&hourglassv1.RescheduleRequest{Id: b, When: &hourglassv1.RescheduleRequest_Now{Now: true}}))
	if err != nil || rb.Msg.Result != hourglassv1.RescheduleResult_RESCHEDULE_RESULT_RESCHEDULED {
		t.Fatalf("Reschedule now by ID = %v, %v", rb, err)
	}
	g := cfGet(t, tg, &hourglassv1.GetRequest{Id: a})
	if g.RescheduledTo != ra.Msg.Id || g.Message.GetId() != ra.Msg.Id || g.State != hourglassv1.MessageState_MESSAGE_STATE_PENDING {
		t.Errorf("Get(old) = %v; want pending as %s", g, ra.Msg.Id)
	}
	if g := cfGet(t, tg, &hourglassv1.GetRequest{Topic: topic, Key: "ka"}); g.Message.GetId() != ra.Msg.Id || g.Message.GetOriginId() != a {
		t.Errorf("Get by key after Reschedule = %v; want %s from %s", g, ra.Msg.Id, a)
	}
	got := cfReceive(t, tg.c(), topic, 2, 15*time.Second)
	if ids := cfIDs(got); !slices.Equal(ids, []string{rb.Msg.Id, ra.Msg.Id}) {
		t.Errorf("received %v; want b's replacement then a's: %s %s", ids, rb.Msg.Id, ra.Msg.Id)
	}
	for _, m := range got {
		cfAck(t, tg, m)
	}
	res, err := tg.c().Reschedule(ctx, connect.NewRequest(&hourglassv1.RescheduleRequest{Id: ra.Msg.Id, When: &hourglassv1.RescheduleRequest_DelayMs{DelayMs: 1000}}))
	if err != nil || res.Msg.Result != hourglassv1.RescheduleResult_RESCHEDULE_RESULT_ALREADY_DELIVERED {
		t.Errorf("Reschedule of a delivered message = %v, %v", res, err)
	}
	c := cfAt(t, tg, topic, "c", time.Hour)
	cfCancel(t, tg, &hourglassv1.CancelRequest{Id: c})
	res, err = tg.c().Reschedule(ctx, connect.NewRequest(&hourglassv1.RescheduleRequest{Id: c, When: &hourglassv1.RescheduleRequest_DelayMs{DelayMs: 1000}}))
	if err != nil || res.Msg.Result != hourglassv1.RescheduleResult_RESCHEDULE_RESULT_ALREADY_CANCELLED {
		t.Errorf("Reschedule of a cancelled message = %v, %v", res, err)
	}
	_, err = tg.c().Reschedule(ctx, connect.NewRequest(&hourglassv1.RescheduleRequest{Id: c}))
	wantCode(t, "Reschedule without a time", err, connect.CodeInvalidArgument)
}

// caseListPending: List in pages, in (deliver_at, ID) order, through any
// node; a token List did not hand out; Purge of pending.
func caseListPending(t *testing.T, tg *conformTarget, topic string) {
	var want []string
	for i := range 12 {
		want = append(want, cfAt(t, tg, topic, itoa(i), time.Hour+time.Duration(i%4)*time.Millisecond))
	}
	batch := &hourglassv1.ScheduleBatchRequest{}
	for i := range 5 {
		batch.Messages = append(batch.Messages, &hourglassv1.ScheduleRequest{Topic: topic, When: delayMs(3_600_000 + int64(i))})
	}
	res, err := tg.c().ScheduleBatch(ctxT(t), connect.NewRequest(batch))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Msg.Results {
		want = append(want, r.Id)
	}
	cfAt(t, tg, topic+"-other", "", time.Hour)
	slices.Sort(want) // deliver_at first in the ID's text: its order is List's
	got, err := cfList(t, tg, topic, hourglassv1.MessageState_MESSAGE_STATE_PENDING, 5)
	if err != nil || !slices.Equal(cfIDs(got), want) {
		t.Errorf("List pending = %v, %v;\nwant %v", cfIDs(got), err, want)
	}
	_, err = tg.c().List(ctxT(t), connect.NewRequest(&hourglassv1.ListRequest{Topic: topic, PageToken: "nope"}))
	wantCode(t, "List with a made-up token", err, connect.CodeInvalidArgument, "page_token")
	pr, err := tg.c().Purge(ctxT(t), connect.NewRequest(&hourglassv1.PurgeRequest{Topic: topic, State: hourglassv1.MessageState_MESSAGE_STATE_PENDING}))
	if err != nil || pr.Msg.Purged != int64(len(want)) {
		t.Errorf("Purge pending = %v, %v; want %d", pr, err, len(want))
	}
	if got, err := cfList(t, tg, topic, hourglassv1.MessageState_MESSAGE_STATE_PENDING, 0); err != nil || len(got) != 0 {
		t.Errorf("List after Purge = %v, %v", cfIDs(got), err)
	}
}

// caseEdit: Edit replaces a pending message's body.
func caseEdit(t *testing.T, tg *conformTarget, topic string) {
	id := cfAt(t, tg, topic, "old", time.Hour)
	res, err := tg.c().Edit(ctxT(t), connect.NewRequest(&hourglassv1.EditRequest{Id: id, Body: []byte("new")}))
	if tg.differs(t, "edit") {
		wantCode(t, "Edit", err, connect.CodeFailedPrecondition, "Cancel")
		return
	}
	if err != nil || res.Msg.Result != hourglassv1.EditResult_EDIT_RESULT_EDITED {
		t.Fatalf("Edit = %v, %v", res, err)
	}
	if g := cfGet(t, tg, &hourglassv1.GetRequest{Id: res.Msg.Id}); string(g.Message.GetBody()) != "new" {
		t.Errorf("Get after Edit = %v", g)
	}
}

// caseFreezeMessage: FreezeMessage holds a pending message that Get shows
// frozen; ThawMessage makes it due again.
func caseFreezeMessage(t *testing.T, tg *conformTarget, topic string) {
	id := cfAt(t, tg, topic, "b", time.Hour)
	res, err := tg.c().FreezeMessage(ctxT(t), connect.NewRequest(&hourglassv1.FreezeMessageRequest{Id: id}))
	if tg.differs(t, "freeze-message") {
		wantCode(t, "FreezeMessage", err, connect.CodeFailedPrecondition, "Cancel")
		_, err = tg.c().ThawMessage(ctxT(t), connect.NewRequest(&hourglassv1.ThawMessageRequest{Id: id}))
		wantCode(t, "ThawMessage", err, connect.CodeFailedPrecondition, "Cancel")
		return
	}
	if err != nil || res.Msg.Result != hourglassv1.FreezeResult_FREEZE_RESULT_FROZEN {
		t.Fatalf("FreezeMessage = %v, %v", res, err)
	}
	if g := cfGet(t, tg, &hourglassv1.GetRequest{Id: id}); !g.Message.GetFrozen() || g.Message.GetId() != res.Msg.Id {
		t.Errorf("Get after FreezeMessage = %v", g)
	}
	tr, err := tg.c().ThawMessage(ctxT(t), connect.NewRequest(&hourglassv1.ThawMessageRequest{Id: id}))
	if err != nil || tr.Msg.Result != hourglassv1.FreezeResult_FREEZE_RESULT_THAWED {
		t.Fatalf("ThawMessage = %v, %v", tr, err)
	}
	if g := cfGet(t, tg, &hourglassv1.GetRequest{Id: id}); g.Message.GetFrozen() || g.Message.GetId() != tr.Msg.Id {
		t.Errorf("Get after ThawMessage = %v", g)
	}
}

// caseValidation: the same mistakes get the same codes.
func caseValidation(t *testing.T, tg *conformTarget, topic string) {
	ctx := ctxT(t)
	_, err := tg.c().Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{When: delayMs(0)}))
	wantCode(t, "Schedule without a topic", err, connect.CodeInvalidArgument, "topic")
	_, err = tg.c().Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: topic, When: delayMs(20 * 365 * 86_400_000)}))
	wantCode(t, "Schedule 20 years ahead", err, connect.CodeInvalidArgument, "max-delay")
	_, err = tg.c().Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: topic, When: delayMs(0),
		Headers: []*hourglassv1.Header{{Key: "hourglass-schedule", Value: "x"}}}))
	wantCode(t, "Schedule with a reserved header", err, connect.CodeInvalidArgument, "hourglass-")
	big := &hourglassv1.ScheduleBatchRequest{}
	for range 1001 {
		big.Messages = append(big.Messages, &hourglassv1.ScheduleRequest{Topic: topic, When: delayMs(0)})
	}
	_, err = tg.c().ScheduleBatch(ctx, connect.NewRequest(big))
	wantCode(t, "ScheduleBatch of 1001", err, connect.CodeInvalidArgument, "1000")
	_, err = tg.c().List(ctx, connect.NewRequest(&hourglassv1.ListRequest{Topic: topic, PageSize: -1}))
	wantCode(t, "List page_size -1", err, connect.CodeInvalidArgument, "page_size")
	tr, err := tg.c().Time(ctx, connect.NewRequest(&hourglassv1.TimeRequest{}))
	if err != nil || tr.Msg.Now.AsTime().Sub(time.Now()).Abs() > 5*time.Second {
		t.Errorf("Time = %v, %v", tr, err)
	}
}

// caseSchedules: a recurring schedule through any node: created, refused
// twice, read, listed, firing every second, paused, resumed, deleted.
func caseSchedules(t *testing.T, tg *conformTarget, topic string) {
	ctx := ctxT(t)
	name := topic
	def := &hourglassv1.RecurringSchedule{Name: name, Topic: topic, Spec: "@every 1s", Body: []byte("tick"),
		MisfirePolicy: hourglassv1.MisfirePolicy_MISFIRE_POLICY_FIRE_ALL}
	if _, err := tg.c().CreateSchedule(ctx, connect.NewRequest(&hourglassv1.CreateScheduleRequest{Schedule: def})); err != nil {
		t.Fatalf("CreateSchedule: %v", err)
	}
	_, err := tg.c().CreateSchedule(ctx, connect.NewRequest(&hourglassv1.CreateScheduleRequest{Schedule: def}))
	wantCode(t, "CreateSchedule of a taken name", err, connect.CodeAlreadyExists)
	for _, bad := range []*hourglassv1.RecurringSchedule{
		{Name: "b", Topic: topic, Spec: "61 * * * *"},
		{Name: "b", Topic: topic, Spec: "@daily", TimeZone: "Mars/Base"},
		{Name: "b c", Topic: topic, Spec: "@daily"},
	} {
		_, err := tg.c().CreateSchedule(ctx, connect.NewRequest(&hourglassv1.CreateScheduleRequest{Schedule: bad}))
		wantCode(t, "CreateSchedule("+bad.String()+")", err, connect.CodeInvalidArgument)
	}
	g, err := tg.c().GetSchedule(ctx, connect.NewRequest(&hourglassv1.GetScheduleRequest{Name: name, NextCount: 3}))
	if err != nil || len(g.Msg.Next) != 3 || g.Msg.ArmedId == "" || g.Msg.Schedule.Spec != "@every 1s" {
		t.Fatalf("GetSchedule = %v, %v", g, err)
	}
	ls, err := tg.c().ListSchedules(ctx, connect.NewRequest(&hourglassv1.ListSchedulesRequest{}))
	if err != nil || !slices.ContainsFunc(ls.Msg.Schedules, func(s *hourglassv1.GetScheduleResponse) bool { return s.Schedule.Name == name }) {
		t.Errorf("ListSchedules = %v, %v; want %s in it", ls, err, name)
	}
	got := cfReceive(t, tg.c(), topic, 2, 15*time.Second)
	var at []time.Time
	for _, m := range got {
		if headerFold(m.Headers, "hourglass-schedule") != name || string(m.Body) != "tick" {
			t.Errorf("occurrence %v: want schedule %s, body tick", m, name)
		}
		o, err := time.Parse(time.RFC3339Nano, headerFold(m.Headers, "hourglass-occurrence"))
		if err != nil {
			t.Errorf("occurrence %s without its time: %v", m.Id, err)
		}
		at = append(at, o)
		cfAck(t, tg, m)
	}
	if len(at) == 2 && at[1].Sub(at[0]) != time.Second {
		t.Errorf("occurrences at %v and %v; want a second apart", at[0], at[1])
	}
	if _, err := tg.c().PauseSchedule(ctx, connect.NewRequest(&hourglassv1.PauseScheduleRequest{Name: name})); err != nil {
		t.Fatal(err)
	}
	if g, err := tg.c().GetSchedule(ctx, connect.NewRequest(&hourglassv1.GetScheduleRequest{Name: name})); err != nil || !g.Msg.Schedule.Paused || g.Msg.ArmedId != "" {
		t.Errorf("GetSchedule after the pause = %v, %v", g, err)
	}
	rs, err := tg.c().ResumeSchedule(ctx, connect.NewRequest(&hourglassv1.ResumeScheduleRequest{Name: name}))
	if err != nil || rs.Msg.Next.AsTime().Before(time.Now().Add(-time.Second)) {
		t.Errorf("ResumeSchedule = %v, %v", rs, err)
	}
	if _, err := tg.c().DeleteSchedule(ctx, connect.NewRequest(&hourglassv1.DeleteScheduleRequest{Name: name})); err != nil {
		t.Fatal(err)
	}
	_, err = tg.c().GetSchedule(ctx, connect.NewRequest(&hourglassv1.GetScheduleRequest{Name: name}))
	wantCode(t, "GetSchedule after the delete", err, connect.CodeNotFound)
	_, err = tg.c().DeleteSchedule(ctx, connect.NewRequest(&hourglassv1.DeleteScheduleRequest{Name: name}))
	wantCode(t, "DeleteSchedule twice", err, connect.CodeNotFound)
}

// caseCalendars: a calendar created, read, listed, refused twice, deleted.
func caseCalendars(t *testing.T, tg *conformTarget, topic string) {
	ctx := ctxT(t)
	cal := &hourglassv1.Calendar{Name: topic, TimeZone: "Europe/Berlin", ClosedDates: []string{"2027-01-01"},
		Hours: []*hourglassv1.WorkingHours{{Day: hourglassv1.Weekday_WEEKDAY_MONDAY, Start: "09:00", End: "17:00"}}}
	_, err := tg.c().CreateCalendar(ctx, connect.NewRequest(&hourglassv1.CreateCalendarRequest{Calendar: cal}))
	if tg.differs(t, "calendars") {
		wantCode(t, "CreateCalendar", err, connect.CodeUnimplemented, "cluster mode")
		return
	}
	if err != nil {
		t.Fatalf("CreateCalendar: %v", err)
	}
	_, err = tg.c().CreateCalendar(ctx, connect.NewRequest(&hourglassv1.CreateCalendarRequest{Calendar: cal}))
	wantCode(t, "CreateCalendar twice", err, connect.CodeAlreadyExists)
	g, err := tg.c().GetCalendar(ctx, connect.NewRequest(&hourglassv1.GetCalendarRequest{Name: topic}))
	if err != nil || g.Msg.Calendar.GetTimeZone() != "Europe/Berlin" || len(g.Msg.Calendar.GetHours()) != 1 || !slices.Equal(g.Msg.Calendar.GetClosedDates(), cal.ClosedDates) {
		t.Errorf("GetCalendar = %v, %v", g, err)
	}
	ls, err := tg.c().ListCalendars(ctx, connect.NewRequest(&hourglassv1.ListCalendarsRequest{}))
	if err != nil || !slices.ContainsFunc(ls.Msg.Calendars, func(c *hourglassv1.Calendar) bool { return c.Name == topic }) {
		t.Errorf("ListCalendars = %v, %v; want %s in it", ls, err, topic)
	}
	if _, err := tg.c().DeleteCalendar(ctx, connect.NewRequest(&hourglassv1.DeleteCalendarRequest{Name: topic})); err != nil {
		t.Fatal(err)
	}
	_, err = tg.c().GetCalendar(ctx, connect.NewRequest(&hourglassv1.GetCalendarRequest{Name: topic}))
	wantCode(t, "GetCalendar after the delete", err, connect.CodeNotFound)
}
