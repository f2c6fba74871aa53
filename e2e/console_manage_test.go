package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// unknownID is a well-formed ID that no server holds.
const unknownID = "0000000000000001000000000000002a"

// TestConsoleOverview: the overview shows readiness, the engine's counts,
// the disk's allocated and file sizes, a row per topic with its pending
// and queue counts, and rate charts from the first second; the leased
// view offers nothing to select; an error notice goes away by itself and
// does not follow to another page; on a phone-sized window nothing is
// wider than the screen and every tab is on it.
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
	pg.waitText("#rates-note", "Sampled every 2 s since")
	pg.wait("orders: 3 pending, 2 due, 1 leased", `(() => { const r = document.querySelector('#topics tr[data-topic="orders"]');
		return !!r && r.cells[1].innerText === "3" && r.cells[2].innerText === "2" && r.cells[3].innerText === "1"; })()`)
	pg.wait("emails: 1 pending", `document.querySelector('#topics tr[data-topic="emails"]')?.cells[1].innerText === "1"`)
	pg.waitText("#health", "7 scheduled")
	pg.waitText("#disk", "on disk (allocated, as du counts)")
	pg.waitText("#disk", "of file size")
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
		pg.wait("orders: the age of its oldest due message", `/\d/.test(document.querySelector('#topics tr[data-topic="orders"]')?.cells[5].innerText || "")`)
	}
	// A second sample gives the rates.
	pg.wait("a rate per topic", `/\/s/.test(document.querySelector('#topics tr[data-topic="orders"]')?.cells[6].innerText || "")`)
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

	// The leased view: the consumer holds the message; nothing to select.
	pg.show("#/messages?topic=orders&state=leased")
	pg.wait("the leased message", `document.querySelectorAll("#msg-table tbody tr").length === 1`)
	pg.waitText("#leased-note", "only a consumer, with its receipt")
	if n := pg.count("#msg-table input[type=checkbox], #bulk-cancel, #bulk-purge"); n != 0 {
		t.Errorf("the leased view has %d checkboxes or bulk buttons, want none", n)
	}

	// An error notice goes away by itself, and one left when the page
	// changes goes with it.
	pg.click("#lookup-go")
	pg.waitText("#notices", "Give an ID")
	pg.wait("the notice to go away by itself", `document.querySelectorAll("#notices .notice").length === 0`)
	pg.click("#lookup-go")
	pg.waitText("#notices", "Give an ID")
	pg.show("#/schedules")
	if n := pg.count("#notices .notice"); n != 0 {
		t.Errorf("%d notices followed to the schedules page", n)
	}

	phone := openConsole(t, p, 390, 844)
	for _, hash := range []string{"#/overview", "#/timeline?topic=orders", "#/messages?topic=orders", "#/deadletters?topic=orders", "#/schedules"} {
		phone.show(hash)
		phone.wait(hash+" loaded", `/updated/.test(document.querySelector("#live-status")?.innerText || "")`)
		phone.wait(hash+" no wider than the phone", `document.documentElement.scrollWidth <= window.innerWidth`)
		phone.wait(hash+": every tab on the screen", `[...document.querySelectorAll("#nav a")].every((a) => {
			const r = a.getBoundingClientRect(); return r.width > 0 && r.left >= 0 && r.right <= window.innerWidth; })`)
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

// TestConsoleEdit: a message edited from its detail keeps its time, and
// its next delivery carries the new body and headers; the first ID goes on
// naming it.
func TestConsoleEdit(t *testing.T) {
	p := start(t, t.TempDir(), nil, "--segment-duration", "1h")
	id := schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "ed", Body: []byte("old body"), When: delayMs(3_600_000),
		Headers: []*hourglassv1.Header{{Key: "a", Value: "1"}}})
	due := getState(t, p, id).Message.DeliverAt.AsTime()
	pg := openConsole(t, p, 1280, 900)
	pg.show("#/messages?topic=ed")
	pg.click(fmt.Sprintf(`#msg-table tr[data-id="%s"] a.open`, id))
	pg.waitText("#detail-state", "PENDING")
	pg.click("#act-edit")
	pg.wait("the body in the form", `document.querySelector('dialog[open] textarea[name="body"]')?.value === "old body"`)
	pg.wait("the headers in the form", `document.querySelector('dialog[open] textarea[name="headers"]')?.value === "a=1"`)
	pg.setValue(`dialog[open] textarea[name="body"]`, "new body")
	pg.setValue(`dialog[open] textarea[name="headers"]`, "b=2")
	pg.click("dialog[open] .dialog-ok")
	pg.waitText("#notices", "Edited")
	got := getState(t, p, id)
	if got.State != hourglassv1.MessageState_MESSAGE_STATE_PENDING || got.RescheduledTo == "" {
		t.Fatalf("Get(%s) after the page's edit: %v as %q; want pending under a new ID", id, got.State, got.RescheduledTo)
	}
	m := got.Message
	if string(m.Body) != "new body" || !m.DeliverAt.AsTime().Equal(due) {
		t.Errorf("edited message: body %q at %v; want %q at %v (its time kept)", m.Body, m.DeliverAt.AsTime(), "new body", due)
	}
	var a, b string
	for _, h := range m.Headers {
		switch h.Key {
		case "a":
			a = h.Value
		case "b":
			b = h.Value
		}
	}
	if a != "" || b != "2" {
		t.Errorf("edited headers %v; want b=2 only", m.Headers)
	}
	pg.wait("the edited message shown", fmt.Sprintf(`document.querySelector("#detail h2")?.innerText.includes(%q)`, got.RescheduledTo))
}

// TestConsoleFreezeMessage: Freeze in a pending message's detail holds it
// (Get shows it frozen under a new ID, the page its remaining delay);
// Thaw there makes it due again.
func TestConsoleFreezeMessage(t *testing.T) {
	p := start(t, t.TempDir(), nil, "--segment-duration", "1h")
	id := schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "fz", Body: []byte("b"), When: delayMs(3_600_000)})
	pg := openConsole(t, p, 1280, 900)
	pg.show("#/messages?topic=fz")
	pg.click(fmt.Sprintf(`#msg-table tr[data-id="%s"] a.open`, id))
	pg.waitText("#detail-state", "PENDING")
	pg.click("#act-freeze")
	pg.waitText("#notices", "Frozen")
	got := getState(t, p, id)
	if got.State != hourglassv1.MessageState_MESSAGE_STATE_PENDING || got.RescheduledTo == "" || !got.Message.GetFrozen() || got.Message.FrozenRemainingMs == nil {
		t.Fatalf("Get(%s) after the page's freeze: %v", id, got)
	}
	pg.wait("the frozen message shown", fmt.Sprintf(`document.querySelector("#detail h2")?.innerText.includes(%q)`, got.RescheduledTo))
	pg.waitText("#detail-frozen", "left")
	pg.click("#act-thaw")
	pg.waitText("#notices", "Thawed")
	got = getState(t, p, id)
	if got.State != hourglassv1.MessageState_MESSAGE_STATE_PENDING || got.Message.GetFrozen() || got.Message.DeliverAt.AsTime().After(time.Now().Add(time.Hour)) {
		t.Fatalf("Get(%s) after the page's thaw: %v; want pending, not frozen, due within the hour", id, got)
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

// TestConsoleDeadLetters: the dead-letters page opens on the first topic
// with dead letters; a dead letter opened there shows its state, reason
// and a Redrive button that brings it back. A message nacked three times
// under a backoff policy (each retry under an ID of its own) looked up by
// its first ID is shown dead-lettered, with the reason, the consumer's
// error and the ID it is now, and "redrive all" brings it back.
func TestConsoleDeadLetters(t *testing.T) {
	p := start(t, t.TempDir(), nil, "--segment-duration", "1h", "--max-attempts", "1")
	ctx := ctxT(t)
	poison := schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "dl", Body: []byte("poison"), When: delayMs(0)})
	m := receive(t, p.client, "dl", 1, 10*time.Second)[0].m
	if _, err := p.client.Nack(ctx, connect.NewRequest(&hourglassv1.NackRequest{Topic: "dl", Receipt: m.Receipt})); err != nil {
		t.Fatal(err)
	}
	if _, err := p.client.SetPolicy(ctx, connect.NewRequest(&hourglassv1.SetPolicyRequest{Topic: "work",
		Policy: &hourglassv1.Policy{MaxAttempts: ptr(int32(3)), Backoff: &hourglassv1.Backoff{InitialMs: 50, MaxMs: 50, Multiplier: 1}}})); err != nil {
		t.Fatal(err)
	}
	first := schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "work", Body: []byte("job"), When: delayMs(0)})
	var last string
	for range 3 {
		w := receive(t, p.client, "work", 1, 10*time.Second)[0].m
		if _, err := p.client.Nack(ctx, connect.NewRequest(&hourglassv1.NackRequest{Topic: "work", Receipt: w.Receipt, Reason: "boom"})); err != nil {
			t.Fatal(err)
		}
		last = w.Id
	}

	pg := openConsole(t, p, 1280, 900)
	pg.wait("one dead letter of dl in the overview", `document.querySelector('#topics tr[data-topic="dl"]')?.cells[4].innerText === "1"`)

	// No topic asked for: the first one with dead letters.
	pg.show("#/deadletters")
	pg.wait("the page on dl", `location.hash.includes("topic=dl") && document.querySelector("#dlq-topic")?.value === "dl"`)
	if opts := value(pg, "the topic picker", chromedp.Evaluate[string](`[...document.querySelectorAll("#dlq-topic option")].map((o) => o.value).join(",")`)); opts != "dl,work" {
		t.Errorf("the dead-letter topic picker offers %q, want dl,work", opts)
	}
	pg.wait("the dead letter with its reason", fmt.Sprintf(`document.querySelector('#dlq-table tr[data-id="%s"]')?.innerText.includes("max-attempts")`, m.Id))
	pg.screenshot("deadletters")

	// Its detail: dead-lettered, why, and a Redrive button.
	pg.click(fmt.Sprintf(`#dlq-table tr[data-id="%s"] a.open`, m.Id))
	pg.waitText("#detail-state", "DEAD_LETTERED")
	pg.waitText("#detail-dead-letter", "max-attempts on dl after 1 attempts")
	pg.click("#act-redrive")
	pg.waitText("dialog[open]", "goes back to dl")
	pg.confirm()
	pg.waitText("#notices", "is back in dl")
	back := receive(t, p.client, "dl", 1, 10*time.Second)[0].m
	if string(back.Body) != "poison" || back.OriginId != poison {
		t.Errorf("after the redrive from the detail: %q, origin %s; want poison, origin %s", back.Body, back.OriginId, poison)
	}

	// The retried one, by the ID Schedule answered.
	pg.show("#/messages?topic=work")
	pg.setValue("#lookup-id", first)
	pg.click("#lookup-go")
	pg.waitText("#detail-state", "DEAD_LETTERED")
	pg.waitText("#detail-dead-letter", "max-attempts on work after 3 attempts: boom")
	pg.waitText("#detail-now-as", last)
	pg.screenshot("deadletter-detail")
	if n := pg.count("#act-redrive"); n != 1 {
		t.Errorf("%d Redrive buttons in the detail of a dead letter, want 1", n)
	}

	pg.show("#/deadletters?topic=work")
	pg.wait("work's dead letter", fmt.Sprintf(`!!document.querySelector('#dlq-table tr[data-id="%s"]')`, last))
	pg.setValue("#redrive-rate", "10")
	pg.click("#redrive-go")
	pg.waitText("dialog[open]", "every dead letter of work")
	pg.confirm()
	pg.waitText("#redrive-progress", "1 of 1 redriven")
	again := receive(t, p.client, "work", 1, 10*time.Second)[0].m
	if string(again.Body) != "job" || again.OriginId != first {
		t.Errorf("after redrive all: %q, origin %s; want job, origin %s", again.Body, again.OriginId, first)
	}
}

// TestConsolePauseTopic: a topic paused from the overview is paused (the
// API's policy says so), and resumed again; its policy edited in the
// policy dialog (Save and Close, no two buttons of one name) is the one
// GetPolicy answers, and a field emptied goes back to the default.
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
	// The pause dialog's other choice: a frozen pause.
	pg.click(`#topics tr[data-topic="pz"] button.pause`)
	pg.waitText("dialog[open]", "Pause pz?")
	pg.setValue(`dialog[open] select[name="mode"]`, "freeze")
	pg.confirm()
	pg.waitText("#notices", "pz frozen")
	if res, err := p.client.GetPolicy(ctxT(t), connect.NewRequest(&hourglassv1.GetPolicyRequest{Topic: "pz"})); err != nil || !res.Msg.Effective.GetFreeze() || len(res.Msg.Freezes) != 1 {
		t.Fatalf("GetPolicy(pz) after freezing from the page: %v, %v; want frozen, one freeze", res, err)
	}
	pg.click(`#topics tr[data-topic="pz"] button.resume`)
	pg.waitText("#notices", "pz resumed")
	if paused() {
		t.Fatal("GetPolicy(pz) after resuming the freeze from the page: paused")
	}

	policy := func() *hourglassv1.Policy {
		res, err := p.client.GetPolicy(ctxT(t), connect.NewRequest(&hourglassv1.GetPolicyRequest{Topic: "pz"}))
		if err != nil {
			t.Fatalf("GetPolicy(pz): %v", err)
		}
		return res.Msg.Policy
	}
	pg.click(`#topics tr[data-topic="pz"] button.policy`)
	pg.waitText("dialog[open]", "Policy of pz")
	if got := pg.text("dialog[open] .dialog-buttons"); got != "Close\nSave" && got != "CloseSave" && got != "Close Save" {
		t.Errorf("the policy dialog's buttons: %q, want Close and Save", got)
	}
	pg.setValue(`dialog[open] input[name="maxAttempts"]`, "5")
	pg.setValue(`dialog[open] input[name="lease"]`, "45s")
	pg.setValue(`dialog[open] input[name="backoffInitial"]`, "2s")
	pg.setValue(`dialog[open] input[name="backoffMax"]`, "1m")
	pg.setValue(`dialog[open] input[name="backoffMultiplier"]`, "2")
	pg.setValue(`dialog[open] select[name="expiry"]`, "drop")
	pg.setValue(`dialog[open] select[name="expireUnless"]`, "acked")
	pg.screenshot("policy")
	pg.click("dialog[open] .dialog-ok")
	pg.waitText("#notices", "Policy of pz saved")
	got := policy()
	if got.GetMaxAttempts() != 5 || got.GetLeaseMs() != 45_000 || got.GetBackoff().GetInitialMs() != 2000 ||
		got.GetBackoff().GetMaxMs() != 60_000 || got.GetBackoff().GetMultiplier() != 2 || got.MaxDispatchRate != nil ||
		!got.GetExpiryDrop() || !got.GetExpiryUnacked() {
		t.Errorf("GetPolicy(pz) after saving the dialog: %v; want 5 attempts, lease 45s, backoff 2s ×2 up to 1m, no rate, expired dropped unless acked", got)
	}
	pg.click(`#topics tr[data-topic="pz"] button.policy`)
	pg.wait("the dialog showing the policy set", `document.querySelector('dialog[open] input[name="maxAttempts"]')?.value === "5" &&
		document.querySelector('dialog[open] input[name="lease"]')?.value === "45s"`)
	pg.setValue(`dialog[open] input[name="maxAttempts"]`, "")
	pg.wait("the first save's notice gone", `document.querySelectorAll("#notices .notice").length === 0`)
	pg.click("dialog[open] .dialog-ok")
	pg.waitText("#notices", "Policy of pz saved")
	if got := policy(); got.MaxAttempts != nil || got.GetLeaseMs() != 45_000 || !got.GetExpiryDrop() || !got.GetExpiryUnacked() {
		t.Errorf("GetPolicy(pz) after emptying max attempts: %v; want it back to the default, the lease and expiry policy kept", got)
	}
}

// TestConsoleSchedules: a recurring schedule created from the page is
// listed with its time zone and its next fire times on that zone's
// clocks, paused and deleted from the page, and
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
	pg.setValue(`#sch-form input[name="spec"]`, "0 3 * * *")
	pg.setValue(`#sch-form input[name="tz"]`, "America/New_York")
	pg.setValue(`#sch-form textarea[name="body"]`, `{"report":"nightly"}`)
	pg.click("#sch-create")
	pg.waitText("#notices", "Created nightly")
	pg.wait("the schedule listed with its next times", `document.querySelectorAll('#sch-table tr[data-name="nightly"] .next > div').length > 0`)
	// Its zone has a column, and its next times are read on that zone's clocks.
	if tz := pg.text(`#sch-table tr[data-name="nightly"] .tz`); tz != "America/New_York" {
		t.Errorf("the time-zone column shows %q, want America/New_York", tz)
	}
	if next := pg.text(`#sch-table tr[data-name="nightly"] .next > div`); !strings.Contains(next, " 03:00:00") {
		t.Errorf("the next time %q: want 03:00:00 New York time", next)
	}
	pg.screenshot("schedules")
	get := func() (*hourglassv1.GetScheduleResponse, error) {
		res, err := p.client.GetSchedule(ctxT(t), connect.NewRequest(&hourglassv1.GetScheduleRequest{Name: "nightly"}))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
	if g, err := get(); err != nil || g.Schedule.Topic != "reports" || g.Schedule.Spec != "0 3 * * *" || g.Schedule.TimeZone != "America/New_York" {
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

// TestConsoleFlowHeld: the overview shows a topic's flow policy and what it
// holds back: with one message of a key leased under a concurrency of 1,
// the key's two others are held, and the list of backlogs names the key.
func TestConsoleFlowHeld(t *testing.T) {
	p := start(t, t.TempDir(), nil, "--segment-duration", "1h")
	setFlow(t, p.client, "fh", &hourglassv1.Policy{FlowConcurrency: new(int32(1))})
	scheduleKeyed(t, p.client, "fh", "acct-7", 3, func(int) time.Time { return time.Now() })
	got := receive(t, p.client, "fh", 1, 10*time.Second)
	if len(got) != 1 {
		t.Fatalf("received %d; want 1 (the key's concurrency)", len(got))
	}
	pg := openConsole(t, p, 1280, 900)
	pg.waitText(`#topics tr[data-topic="fh"]`, "per flow key: 1 at a time")
	pg.waitText(`#topics tr[data-topic="fh"] details.flow-held summary`, "2 held by 1 key")
	pg.click(`#topics tr[data-topic="fh"] details.flow-held summary`)
	pg.waitText(`#topics tr[data-topic="fh"] details.flow-held table`, "acct-7")
}
