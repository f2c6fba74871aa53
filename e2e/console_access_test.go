package e2e

import (
	"fmt"
	"path/filepath"
	"testing"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// hidden is JavaScript that is true when the element sel matches exists
// and is not shown.
func hidden(sel string) string {
	return fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && getComputedStyle(e).display === "none"; })()`, sel)
}

func shown(sel string) string {
	return fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && !!e.offsetParent; })()`, sel)
}

// TestConsoleViewer: logged in with a viewer's token, the console says
// who is logged in, shows what there is and the audit trail, and hides
// every action a viewer may not do (the policy dialog too); a producer
// sees the cancel it may do and neither the audit page nor the policy
// dialog; an admin opens the policy dialog.
func TestConsoleViewer(t *testing.T) {
	creds := filepath.Join(t.TempDir(), "credentials.yaml")
	writeCredentials(t, creds, "")
	p := start(t, t.TempDir(), nil, "--credentials", creds)
	ctx := ctxT(t)
	admin := protocolClients(p, "admin-token")["connect"]
	schedule(t, admin, &hourglassv1.ScheduleRequest{Topic: "shop", Body: []byte("due now")})
	id := schedule(t, admin, &hourglassv1.ScheduleRequest{Topic: "shop", Body: []byte("later"), When: delayMs(3_600_000)})
	if _, err := admin.CreateSchedule(ctx, req(&hourglassv1.CreateScheduleRequest{Schedule: &hourglassv1.RecurringSchedule{Name: "nightly", Topic: "shop", Spec: "@every 1h"}})); err != nil {
		t.Fatal(err)
	}

	pg := openConsole(t, p, 1280, 900)
	pg.wait("the login form", `!!document.querySelector("#login #token")`)
	pg.setValue("#token", "viewer-token")
	pg.click("#login-submit")
	pg.waitText("#whoami", "viewer-cred (viewer)")
	pg.wait("the topic in the overview", `!!document.querySelector('#topics tr[data-topic="shop"]')`)
	pg.wait("pause hidden", hidden(`#topics tr[data-topic="shop"] button.pause`))
	pg.wait("rate hidden", hidden(`#topics tr[data-topic="shop"] button.rate`))
	pg.wait("the policy dialog's button hidden", hidden(`#topics tr[data-topic="shop"] button.policy`))

	pg.show("#/messages?topic=shop")
	pg.wait("the pending message", fmt.Sprintf(`!!document.querySelector('#msg-table')?.innerText.includes(%q)`, id[:8]))
	pg.wait("bulk cancel hidden", hidden("#bulk-cancel"))
	pg.wait("bulk purge hidden", hidden("#bulk-purge"))
	pg.click("#msg-table tbody tr:first-child a.open")
	pg.waitText("#detail-state", "PENDING")
	pg.wait("cancel hidden", hidden("#act-cancel"))
	pg.wait("reschedule hidden", hidden("#act-reschedule"))

	pg.show("#/schedules")
	pg.waitText("#main", "nightly")
	pg.wait("the create form hidden", hidden("#sch-form"))
	pg.wait("delete hidden", hidden("button.delete"))

	pg.show("#/deadletters?topic=shop")
	pg.wait("redrive hidden", hidden("#redrive-go"))

	pg.wait("the audit link", shown(`#nav a[data-page="audit"]`))
	pg.show("#/audit")
	pg.wait("the schedule's creation in the audit trail", `(document.querySelector("#audit-table")?.innerText || "").includes("CreateSchedule")`)
	pg.waitText("#audit-table", "admin-cred")
	pg.screenshot("audit")

	// A producer: cancel shown, the audit page not.
	pg.click("#logout")
	pg.wait("the login form", `!!document.querySelector("#login #token")`)
	pg.setValue("#token", "producer-token")
	pg.click("#login-submit")
	pg.waitText("#whoami", "producer-cred (producer)")
	pg.wait("no audit link", hidden(`#nav a[data-page="audit"]`))
	pg.show("#/messages?topic=shop")
	pg.wait("the pending message", fmt.Sprintf(`!!document.querySelector('#msg-table')?.innerText.includes(%q)`, id[:8]))
	pg.wait("bulk cancel shown", shown("#bulk-cancel"))
	pg.wait("bulk purge hidden", hidden("#bulk-purge"))
	pg.show("#/")
	pg.wait("the topic in the overview", `!!document.querySelector('#topics tr[data-topic="shop"]')`)
	pg.wait("the policy dialog's button hidden from a producer", hidden(`#topics tr[data-topic="shop"] button.policy`))

	// An admin (the manage verb) has the policy dialog.
	pg.click("#logout")
	pg.wait("the login form", `!!document.querySelector("#login #token")`)
	pg.setValue("#token", "admin-token")
	pg.click("#login-submit")
	pg.waitText("#whoami", "admin-cred (admin)")
	pg.wait("the topic in the overview", `!!document.querySelector('#topics tr[data-topic="shop"]')`)
	pg.wait("the policy dialog's button shown to an admin", shown(`#topics tr[data-topic="shop"] button.policy`))
	pg.click(`#topics tr[data-topic="shop"] button.policy`)
	pg.wait("the policy dialog", `!!document.querySelector("dialog[open]")`)
}
