package e2e

import (
	"strings"
	"testing"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// TestConsoleCalendars: in real Chromium, a calendar created from the
// Calendars page is listed with its hours, edited (its form filled with
// what the server holds) and deleted; a recurring schedule created from
// the Schedules page with jitter, an overlap policy and the calendar
// shows them; a calendar in use is not deleted, and the page says why;
// bad hours are refused before any call. The API agrees at each step.
func TestConsoleCalendars(t *testing.T) {
	p := start(t, t.TempDir(), nil, "--segment-duration", "1h")
	pg := openConsole(t, p, 1280, 900)
	getCal := func() (*hourglassv1.Calendar, error) {
		res, err := p.client.GetCalendar(ctxT(t), connect.NewRequest(&hourglassv1.GetCalendarRequest{Name: "office"}))
		if err != nil {
			return nil, err
		}
		return res.Msg.Calendar, nil
	}

	pg.show("#/calendars")
	pg.wait("the empty list", `((document.querySelector('#cal-list')||{}).innerText||"").includes("No calendars")`)
	pg.setValue(`#cal-form input[name="name"]`, "office")
	pg.setValue(`#cal-form textarea[name="hours"]`, "someday 09:00-17:00")
	pg.click("#cal-save")
	pg.waitText("#notices", `day "someday": want mon, tue`)

	pg.setValue(`#cal-form input[name="tz"]`, "Europe/Berlin")
	pg.setValue(`#cal-form textarea[name="hours"]`, "mon-fri 09:00-12:00,13:00-17:00\nsat 10:00-14:00")
	pg.setValue(`#cal-form textarea[name="closed"]`, "2030-12-26, 2030-12-25")
	pg.click("#cal-save")
	pg.waitText("#notices", "Created office")
	pg.wait("the calendar listed", `!!document.querySelector('#cal-table tr[data-name="office"]')`)
	if got := pg.text(`#cal-table tr[data-name="office"] .hours`); !strings.Contains(got, "mon-fri 09:00-12:00,13:00-17:00") || !strings.Contains(got, "sat 10:00-14:00") {
		t.Errorf("the listed hours: %q", got)
	}
	pg.screenshot("calendars")
	c, err := getCal()
	needRPC(t, "GetCalendar", err)
	if err != nil || c.TimeZone != "Europe/Berlin" || len(c.Hours) != 11 || strings.Join(c.ClosedDates, ",") != "2030-12-25,2030-12-26" {
		t.Fatalf("GetCalendar(office) after creating it from the page: %v, %v", c, err)
	}

	pg.click(`#cal-table tr[data-name="office"] button.edit`)
	pg.wait("the form filled", `document.querySelector('#cal-form textarea[name="hours"]').value === "mon-fri 09:00-12:00,13:00-17:00\nsat 10:00-14:00"`)
	pg.setValue(`#cal-form textarea[name="closed"]`, "2030-12-24")
	pg.click("#cal-save")
	pg.waitText("#notices", "Saved office")
	if c, err := getCal(); err != nil || strings.Join(c.ClosedDates, ",") != "2030-12-24" || len(c.Hours) != 11 {
		t.Fatalf("GetCalendar(office) after editing it from the page: %v, %v", c, err)
	}

	pg.show("#/schedules")
	pg.setValue(`#sch-form input[name="name"]`, "invoices")
	pg.setValue(`#sch-form input[name="topic"]`, "billing")
	pg.setValue(`#sch-form input[name="spec"]`, "0 8 * * *")
	pg.setValue(`#sch-form input[name="jitter"]`, "5m")
	pg.setValue(`#sch-form select[name="overlap"]`, "2") // OVERLAP_POLICY_SKIP
	pg.setValue(`#sch-form input[name="calendar"]`, "office")
	pg.setValue(`#sch-form select[name="outside"]`, "2") // CALENDAR_POLICY_SHIFT
	pg.click("#sch-create")
	pg.waitText("#notices", "Created invoices")
	pg.waitText(`#sch-table tr[data-name="invoices"] .policies`, "calendar office (shift outside)")
	if got := pg.text(`#sch-table tr[data-name="invoices"] .policies`); !strings.Contains(got, "jitter ≤ 5m") || !strings.Contains(got, "overlap: skip") {
		t.Errorf("the schedule's policies: %q", got)
	}
	g, err := p.client.GetSchedule(ctxT(t), connect.NewRequest(&hourglassv1.GetScheduleRequest{Name: "invoices"}))
	if err != nil || g.Msg.Schedule.JitterMs != 300000 || g.Msg.Schedule.OverlapPolicy != hourglassv1.OverlapPolicy_OVERLAP_POLICY_SKIP ||
		g.Msg.Schedule.Calendar != "office" || g.Msg.Schedule.CalendarPolicy != hourglassv1.CalendarPolicy_CALENDAR_POLICY_SHIFT {
		t.Fatalf("GetSchedule(invoices) after creating it from the page: %v, %v", g, err)
	}
	pg.screenshot("schedules-calendar")

	pg.show("#/calendars")
	pg.click(`#cal-table tr[data-name="office"] button.delete`)
	pg.waitText("dialog[open]", "Delete office?")
	pg.confirm()
	pg.waitText("#notices", `used by the recurring schedule "invoices"`)
	if _, err := getCal(); err != nil {
		t.Fatalf("GetCalendar(office) after a refused delete: %v", err)
	}
	if _, err := p.client.DeleteSchedule(ctxT(t), connect.NewRequest(&hourglassv1.DeleteScheduleRequest{Name: "invoices"})); err != nil {
		t.Fatal(err)
	}
	pg.click(`#cal-table tr[data-name="office"] button.delete`)
	pg.confirm()
	pg.wait("the calendar gone", `!document.querySelector('#cal-table tr[data-name="office"]')`)
	if _, err := getCal(); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetCalendar(office) after deleting it from the page: %v, want NOT_FOUND", err)
	}
}
