package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// unknownID is a well-formed ID that no server holds.
const unknownID = "0000000000000001000000000000002a"

// TestConsoleOverview: the overview shows readiness, the engine's counts,
// a row per topic with its queue counts, and rate charts; on a
// phone-sized window nothing is wider than the screen.
func TestConsoleOverview(t *testing.T) {
	p := start(t, t.TempDir(), nil, "--segment-duration", "1h")
	for i := range 3 {
		schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "orders", Body: []byte("due"), When: delayMs(0)})
		schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "orders", Body: []byte("later"), When: delayMs(int64(i+1) * 3_600_000)})
	}
	schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "emails", Body: []byte("x"), When: delayMs(86_400_000)})
	receive(t, p.client, "orders", 1, 10*time.Second) // one leased

	pg := openConsole(t, p, 1280, 900)
	pg.waitText("#readiness", "ready")
	pg.wait("orders: 2 due, 1 leased", `(() => { const r = document.querySelector('#topics tr[data-topic="orders"]');
		return !!r && r.cells[1].innerText === "2" && r.cells[2].innerText === "1"; })()`)
	pg.wait("a row for emails", `!!document.querySelector('#topics tr[data-topic="emails"]')`)
	pg.waitText("#health", "7 scheduled")
	pg.waitText("#disk", "free of")
	pg.waitText("#fsync", "p99")
	if n := pg.count(".overview .chart canvas"); n < 2 {
		t.Errorf("%d chart canvases on the overview, want the rates and the lateness charts", n)
	}
	// Where Topics is not built, the page says what it cannot show.
	_, terr := p.client.Topics(ctxT(t), connect.NewRequest(&hourglassv1.TopicsRequest{}))
	if connect.CodeOf(terr) == connect.CodeUnimplemented {
		pg.wait("the notice naming Topics", `!!document.querySelector('#topics .unimpl[data-rpc="Topics"]')`)
	} else if terr == nil {
		pg.wait("orders: the age of its oldest due message", `/\d/.test(document.querySelector('#topics tr[data-topic="orders"]')?.cells[4].innerText || "")`)
	}
	// A second sample gives the rates.
	pg.wait("a rate per topic", `/\/s/.test(document.querySelector('#topics tr[data-topic="orders"]')?.cells[5].innerText || "")`)
	if os.Getenv("HOURGLASS_CONSOLE_SCREENSHOTS") != "" {
		// Some traffic for the rate charts: a burst per sample the page takes.
		for i := 1; i <= 8; i++ {
			var batch []*hourglassv1.ScheduleRequest
			for range 20 * i {
				batch = append(batch, &hourglassv1.ScheduleRequest{Topic: "orders", Body: []byte("burst")})
			}
			if _, err := p.client.ScheduleBatch(ctxT(t), connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: batch})); err != nil {
				t.Fatal(err)
			}
			pg.wait("the next sample", fmt.Sprintf(`Number(document.querySelector("#rates-chart")?.dataset.samples) > %d`, i))
		}
	}
	pg.screenshot("overview")

	phone := openConsole(t, p, 390, 844)
	for _, hash := range []string{"#/overview", "#/timeline?topic=orders", "#/messages?topic=orders", "#/deadletters?topic=orders", "#/schedules"} {
		phone.show(hash)
		phone.wait(hash+" loaded", `/updated/.test(document.querySelector("#live-status")?.innerText || "")`)
		phone.wait(hash+" no wider than the phone", `document.documentElement.scrollWidth <= window.innerWidth`)
		if hash == "#/overview" {
			phone.wait("the topics on the phone", `!!document.querySelector('#topics tr[data-topic="orders"]')`)
			phone.screenshot("phone-overview")
		}
	}
}

// TestConsoleReschedule: a message rescheduled from the page moves (a new
// id; the old one answers RESCHEDULED), and one promoted from the page is
// delivered at once.
func TestConsoleReschedule(t *testing.T) {
	p := start(t, t.TempDir(), nil, "--segment-duration", "1h")
	_, err := p.client.Reschedule(ctxT(t), connect.NewRequest(&hourglassv1.RescheduleRequest{Id: unknownID, When: &hourglassv1.RescheduleRequest_Now{Now: true}}))
	needRPC(t, "Reschedule", err)
	moved := schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "rs", Body: []byte("move me"), When: delayMs(3_600_000)})
	promoted := schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "rs", Body: []byte("now please"), When: delayMs(3_600_000)})

	pg := openConsole(t, p, 1280, 900)
	pg.show("#/messages?topic=rs")
	pg.click(fmt.Sprintf(`#msg-table tr[data-id="%s"] a.open`, moved))
	pg.waitText("#detail-state", "PENDING")
	pg.click("#act-reschedule")
	pg.setValue(`dialog[open] input[name="delay"]`, "2h")
	pg.click("dialog[open] .dialog-ok")
	pg.waitText("#notices", "Rescheduled")
	old := getState(t, p, moved)
	if old.State != hourglassv1.MessageState_MESSAGE_STATE_PENDING || old.RescheduledTo == "" || old.Message.GetId() != old.RescheduledTo {
		t.Fatalf("Get(%s) after the page's reschedule: %v as %q; want pending as its replacement", moved, old.State, old.RescheduledTo)
	}
	pg.wait("the new message shown", fmt.Sprintf(`document.querySelector("#detail h2")?.innerText.includes(%q)`, old.RescheduledTo))
	at := old.Message.DeliverAt.AsTime()
	if d := time.Until(at); d < 110*time.Minute || d > 2*time.Hour {
		t.Errorf("rescheduled to %v, %v from now: want 2h", at, d)
	}

	pg.click(fmt.Sprintf(`#msg-table tr[data-id="%s"] a.open`, promoted))
	pg.waitText("#detail-state", "PENDING")
	pg.click("#act-promote")
	pg.confirm()
	pg.waitText("#notices", "Rescheduled")
	got := receive(t, p.client, "rs", 1, 10*time.Second)
	if string(got[0].m.Body) != "now please" || got[0].m.OriginId != promoted {
		t.Errorf("received %q (origin %s) after promoting %s", got[0].m.Body, got[0].m.OriginId, promoted)
	}
}

// TestConsoleBulkReschedule: every pending message of a topic shifted by
// an hour from the page, each from its own time; then the selected ones
// delivered now.
func TestConsoleBulkReschedule(t *testing.T) {
	p := start(t, t.TempDir(), nil, "--segment-duration", "1h")
	_, err := p.client.Reschedule(ctxT(t), connect.NewRequest(&hourglassv1.RescheduleRequest{Id: unknownID, When: &hourglassv1.RescheduleRequest_Now{Now: true}}))
	needRPC(t, "Reschedule", err)
	var ids []string
	due := map[string]time.Time{}
	for i := range 3 {
		id := schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "bs", Body: []byte("x"), When: delayMs(int64(i+1) * 600_000)})
		ids = append(ids, id)
		due[id] = getState(t, p, id).Message.DeliverAt.AsTime()
	}
	pg := openConsole(t, p, 1280, 900)
	pg.show("#/messages?topic=bs")
	pg.wait("the three messages", `document.querySelectorAll("#msg-table tbody tr").length === 3`)
	pg.setValue("#bulk-scope", "all")
	pg.click("#bulk-reschedule")
	pg.setValue(`dialog[open] input[name="shift"]`, "+1h")
	pg.click("dialog[open] .dialog-ok")
	pg.waitText("dialog[open]", "Shift all 3 pending messages of bs?")
	pg.confirm()
	pg.waitText("#bulk-progress", "3 done, 0 not")
	var rows []string
	for _, id := range ids {
		old := getState(t, p, id)
		if old.State != hourglassv1.MessageState_MESSAGE_STATE_PENDING || old.RescheduledTo == "" {
			t.Fatalf("Get(%s) after the shift: %v as %q; want pending as its replacement", id, old.State, old.RescheduledTo)
		}
		moved := old.Message.DeliverAt.AsTime()
		if d := moved.Sub(due[id]); d != time.Hour {
			t.Errorf("%s shifted by %v to %s, want 1h", id, d, old.RescheduledTo)
		}
		rows = append(rows, fmt.Sprintf(`#msg-table tr[data-id="%s"]`, old.RescheduledTo))
	}
	pg.wait("the three moved messages listed", fmt.Sprintf(`document.querySelectorAll("#msg-table tbody tr").length === 3 && document.querySelectorAll(%q).length === 3`, strings.Join(rows, ", ")))
	pg.click("#sel-all")
	pg.setValue("#bulk-scope", "selected")
	pg.click("#bulk-promote")
	pg.waitText("dialog[open]", "the 3 selected messages")
	pg.confirm()
	pg.waitText("#bulk-progress", "3 done, 0 not")
	receive(t, p.client, "bs", 3, 10*time.Second)
}

// TestConsoleDeadLetters: a message dead-lettered after its attempts shows
// in the overview's count, with its reason on the dead-letters page, and a
// redrive from the page brings it back to its topic.
func TestConsoleDeadLetters(t *testing.T) {
	p := start(t, t.TempDir(), nil, "--segment-duration", "1h", "--max-attempts", "1")
	id := schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "dl", Body: []byte("poison"), When: delayMs(0)})
	m := receive(t, p.client, "dl", 1, 10*time.Second)[0].m
	if _, err := p.client.Nack(ctxT(t), connect.NewRequest(&hourglassv1.NackRequest{Topic: "dl", Receipt: m.Receipt})); err != nil {
		t.Fatal(err)
	}

	pg := openConsole(t, p, 1280, 900)
	pg.wait("one dead letter of dl in the overview", `document.querySelector('#topics tr[data-topic="dl"]')?.cells[3].innerText === "1"`)

	pg.show("#/deadletters?topic=dl")
	_, lerr := p.client.List(ctxT(t), connect.NewRequest(&hourglassv1.ListRequest{Topic: "dl", State: hourglassv1.MessageState_MESSAGE_STATE_DEAD_LETTERED}))
	if lerr != nil {
		pg.wait("the page to say why it cannot list", `/List/.test(document.querySelector("#dlq-list .unimpl, #dlq-list .error")?.innerText || "")`)
		pg.screenshot("deadletters")
	}
	needListState(t, "DEAD_LETTERED", lerr)
	_, err := p.client.Redrive(ctxT(t), connect.NewRequest(&hourglassv1.RedriveRequest{DeadLetterTopic: "nothing-here.dlq"}))
	needRPC(t, "Redrive", err)

	pg.wait("the dead letter with its reason", fmt.Sprintf(`document.querySelector('#dlq-table tr[data-id="%s"]')?.innerText.includes("max-attempts")`, m.Id))
	pg.screenshot("deadletters")
	pg.setValue("#redrive-rate", "10")
	pg.click("#redrive-go")
	pg.waitText("dialog[open]", "every dead letter of dl")
	pg.confirm()
	pg.waitText("#redrive-progress", "1 of 1 redriven")
	back := receive(t, p.client, "dl", 1, 10*time.Second)[0].m
	if string(back.Body) != "poison" || back.OriginId != id {
		t.Errorf("after the redrive: %q, origin %s; want poison, origin %s", back.Body, back.OriginId, id)
	}
}

// TestConsolePauseTopic: a topic paused from the overview is paused (the
// API's policy says so), and resumed again.
func TestConsolePauseTopic(t *testing.T) {
	p := start(t, t.TempDir(), nil, "--segment-duration", "1h")
	_, err := p.client.SetPolicy(ctxT(t), connect.NewRequest(&hourglassv1.SetPolicyRequest{}))
	needRPC(t, "SetPolicy", err)
	// The overview learns that a topic is paused from Topics.
	_, err = p.client.Topics(ctxT(t), connect.NewRequest(&hourglassv1.TopicsRequest{}))
	needRPC(t, "Topics", err)
	schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "pz", Body: []byte("x"), When: delayMs(0)})
	paused := func() bool {
		res, err := p.client.GetPolicy(ctxT(t), connect.NewRequest(&hourglassv1.GetPolicyRequest{Topic: "pz"}))
		needRPC(t, "GetPolicy", err)
		if err != nil {
			t.Fatalf("GetPolicy(pz): %v", err)
		}
		return res.Msg.Effective.GetPaused()
	}

	pg := openConsole(t, p, 1280, 900)
	pg.click(`#topics tr[data-topic="pz"] button.pause`)
	pg.waitText("dialog[open]", "Pause pz?")
	pg.confirm()
	pg.waitText("#notices", "pz paused")
	if !paused() {
		t.Fatal("GetPolicy(pz) after pausing from the page: not paused")
	}
	pg.click(`#topics tr[data-topic="pz"] button.resume`)
	pg.waitText("#notices", "pz resumed")
	if paused() {
		t.Fatal("GetPolicy(pz) after resuming from the page: paused")
	}
}

// TestConsoleSchedules: a recurring schedule created from the page is
// listed with its next fire times, paused and deleted from the page, and
// the API agrees at each step. Where ListSchedules is not built the page
// says so.
func TestConsoleSchedules(t *testing.T) {
	p := start(t, t.TempDir(), nil, "--segment-duration", "1h")
	pg := openConsole(t, p, 1280, 900)
	pg.show("#/schedules")
	_, lerr := p.client.ListSchedules(ctxT(t), connect.NewRequest(&hourglassv1.ListSchedulesRequest{}))
	if connect.CodeOf(lerr) == connect.CodeUnimplemented {
		pg.wait("the notice naming ListSchedules", `!!document.querySelector('#sch-list .unimpl[data-rpc="ListSchedules"]')`)
		pg.screenshot("schedules")
	}
	needRPC(t, "ListSchedules", lerr)
	// Harmless calls (nothing to create, pause, get or delete) tell
	// whether the server implements the rest.
	ctx := ctxT(t)
	_, err := p.client.CreateSchedule(ctx, connect.NewRequest(&hourglassv1.CreateScheduleRequest{}))
	needRPC(t, "CreateSchedule", err)
	_, err = p.client.PauseSchedule(ctx, connect.NewRequest(&hourglassv1.PauseScheduleRequest{Name: "no-such-schedule"}))
	needRPC(t, "PauseSchedule", err)
	_, err = p.client.GetSchedule(ctx, connect.NewRequest(&hourglassv1.GetScheduleRequest{Name: "no-such-schedule"}))
	needRPC(t, "GetSchedule", err)
	_, err = p.client.DeleteSchedule(ctx, connect.NewRequest(&hourglassv1.DeleteScheduleRequest{Name: "no-such-schedule"}))
	needRPC(t, "DeleteSchedule", err)

	pg.setValue(`#sch-form input[name="name"]`, "nightly")
	pg.setValue(`#sch-form input[name="topic"]`, "reports")
	pg.setValue(`#sch-form input[name="spec"]`, "@every 1h")
	pg.setValue(`#sch-form textarea[name="body"]`, `{"report":"nightly"}`)
	pg.click("#sch-create")
	pg.waitText("#notices", "Created nightly")
	pg.wait("the schedule listed with its next times", `document.querySelectorAll('#sch-table tr[data-name="nightly"] .next > div').length > 0`)
	pg.screenshot("schedules")
	get := func() (*hourglassv1.GetScheduleResponse, error) {
		res, err := p.client.GetSchedule(ctxT(t), connect.NewRequest(&hourglassv1.GetScheduleRequest{Name: "nightly"}))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
	if g, err := get(); err != nil || g.Schedule.Topic != "reports" || g.Schedule.Spec != "@every 1h" {
		t.Fatalf("GetSchedule(nightly) after creating it from the page: %v, %v", g, err)
	}

	pg.click(`#sch-table tr[data-name="nightly"] button.pause`)
	pg.confirm()
	pg.wait("the schedule shown paused", `!!document.querySelector('#sch-table tr[data-name="nightly"] .badge.paused')`)
	if g, err := get(); err != nil || !g.Schedule.Paused {
		t.Fatalf("GetSchedule(nightly) after pausing it from the page: %v, %v", g, err)
	}

	pg.click(`#sch-table tr[data-name="nightly"] button.delete`)
	pg.waitText("dialog[open]", "Delete nightly?")
	pg.confirm()
	pg.wait("the schedule gone", `!document.querySelector('#sch-table tr[data-name="nightly"]')`)
	if _, err := get(); connect.CodeOf(err) != connect.CodeNotFound && !strings.Contains(fmt.Sprint(err), "not found") {
		t.Errorf("GetSchedule(nightly) after deleting it from the page: %v, want NOT_FOUND", err)
	}
}
