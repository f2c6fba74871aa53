package e2e

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// TestConsoleMounted: the binary serves the console at /ui/ from what it
// embeds, with a content security policy that lets the page load nothing
// from elsewhere, and revalidates by ETag. No browser needed.
func TestConsoleMounted(t *testing.T) {
	p := start(t, t.TempDir(), []string{"HOURGLASS_AUTH_TOKEN=tok"})
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(p.url + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode/100 != 3 || loc != "/ui/" {
		t.Errorf("GET /ui: %d to %q, want a redirect to /ui/", resp.StatusCode, loc)
	}
	// The page itself needs no token (it asks for one); the API does.
	resp, err = http.Get(p.url + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `src="console.js"`) {
		t.Fatalf("GET /ui/: %d %q", resp.StatusCode, body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("Content-Security-Policy %q: want default-src 'none' and connect-src 'self'", csp)
	}
	for _, name := range []string{"console.js", "console.css"} {
		resp, err := http.Get(p.url + "/ui/" + name)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		etag := resp.Header.Get("ETag")
		if resp.StatusCode != 200 || etag == "" {
			t.Fatalf("GET /ui/%s: %d, ETag %q", name, resp.StatusCode, etag)
		}
		req, _ := http.NewRequest("GET", p.url+"/ui/"+name, nil)
		req.Header.Set("If-None-Match", etag)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotModified {
			t.Errorf("GET /ui/%s with its ETag: %d, want 304", name, resp.StatusCode)
		}
	}
}

// TestConsoleLogin: with --auth-token the page shows nothing but the
// login form until it has the right token, then the server's topics; a
// reload keeps the token in the tab; logging out hides everything again.
func TestConsoleLogin(t *testing.T) {
	p := start(t, t.TempDir(), []string{"HOURGLASS_AUTH_TOKEN=s3cret"})
	c := tokenClient(p, "s3cret")
	schedule(t, c, &hourglassv1.ScheduleRequest{Topic: "secret-topic", Body: []byte("x"), When: delayMs(3_600_000)})
	schedule(t, c, &hourglassv1.ScheduleRequest{Topic: "secret-topic", Body: []byte("y")})

	pg := openConsole(t, p, 1280, 900)
	pg.wait("the login form", `!!document.querySelector("#login #token")`)
	pg.screenshot("login")
	if n := pg.count("#topics, #health"); n != 0 {
		t.Errorf("before the token, the page shows %d of the overview's sections", n)
	}
	pg.setValue("#token", "wrong")
	pg.click("#login-submit")
	pg.waitText("#login-error", "wrong bearer token")
	if strings.Contains(pg.text("body"), "secret-topic") {
		t.Error("the page shows a topic before the right token")
	}
	pg.setValue("#token", "s3cret")
	pg.click("#login-submit")
	pg.wait("the topic in the overview", `!!document.querySelector('#topics tr[data-topic="secret-topic"]')`)
	pg.waitText("#readiness", "ready")

	pg.run("reloading", chromedp.Reload())
	pg.wait("the topic after a reload", `!!document.querySelector('#topics tr[data-topic="secret-topic"]')`)
	pg.click("#logout")
	pg.wait("the login form after logging out", `!!document.querySelector("#login") && !document.querySelector("#topics")`)
}

// TestConsoleTimeline: pending messages show on the timeline of their
// topic (read with List) and of all topics (Stats' buckets); a second
// holding 500 of them stands out as a hot spot, each of the fullest bars
// named by its start and end with their dates; over 30 days of a steady
// load, only the burst among the fullest bars is a hot spot.
func TestConsoleTimeline(t *testing.T) {
	p := start(t, t.TempDir(), nil, "--segment-duration", "1h")
	now := time.Now()
	hot := now.Add(30 * time.Minute).Truncate(time.Second)
	var batch []*hourglassv1.ScheduleRequest
	for i := range 500 {
		batch = append(batch, &hourglassv1.ScheduleRequest{Topic: "tl", Body: []byte(fmt.Sprint(i)),
			When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(hot)}})
	}
	if _, err := p.client.ScheduleBatch(ctxT(t), connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: batch})); err != nil {
		t.Fatal(err)
	}
	for _, d := range []time.Duration{5 * time.Minute, 20 * time.Minute, 50 * time.Minute} {
		schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "tl", When: delayMs(d.Milliseconds())})
	}
	schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "tl2", When: delayMs((72 * time.Hour).Milliseconds())})

	pg := openConsole(t, p, 1280, 900)
	pg.show("#/timeline?topic=tl&range=1h")
	pg.wait("503 pending in the next hour of tl", `document.querySelector("#timeline-total")?.dataset.total === "503"`)
	pg.wait("the hot spot first", `(() => { const li = document.querySelector("#hotspots li"); return li && li.dataset.count === "500" && li.classList.contains("hot"); })()`)
	dated := regexp.MustCompile(`^500 due \d{4}-\d\d-\d\d \d\d:\d\d:\d\d – \d{4}-\d\d-\d\d \d\d:\d\d:\d\d`)
	if li := pg.text("#hotspots li a"); !dated.MatchString(li) {
		t.Errorf("the hot spot reads %q: want its start and its end, each with its date", li)
	}
	if n := pg.count("#timeline-chart canvas"); n == 0 {
		t.Error("no chart canvas on the timeline")
	}
	pg.screenshot("timeline")

	// All topics over a week: counted from Stats' hour buckets.
	pg.show("#/timeline?range=7d")
	pg.wait("504 pending in the next week of all topics", `document.querySelector("#timeline-total")?.dataset.total === "504"`)
	pg.waitText("#timeline-note", "Stats")

	// Clicking the hot spot zooms in to its bar; List reads its 500.
	pg.show("#/timeline?topic=tl&range=1h")
	pg.wait("the hot spot", `document.querySelector("#hotspots li")?.dataset.count === "500"`)
	pg.click("#hotspots li a")
	pg.wait("the zoomed bar", `location.hash.includes("from=") && document.querySelector("#timeline-total")?.dataset.total === "500"`)

	// 30 days of a steady load, one message every 9 minutes (40 in each
	// 6-hour bar), and a burst of 500 ten days ahead.
	start := now.Add(time.Hour).Truncate(time.Minute)
	batch = batch[:0]
	for i := range 4700 {
		batch = append(batch, &hourglassv1.ScheduleRequest{Topic: "steady",
			When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(start.Add(time.Duration(i) * 9 * time.Minute))}})
		if len(batch) == 1000 || i == 4699 {
			if _, err := p.client.ScheduleBatch(ctxT(t), connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: batch})); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	for range 500 {
		batch = append(batch, &hourglassv1.ScheduleRequest{Topic: "steady",
			When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(start.Add(10 * 24 * time.Hour).Add(time.Minute))}})
	}
	if _, err := p.client.ScheduleBatch(ctxT(t), connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: batch})); err != nil {
		t.Fatal(err)
	}
	pg.show("#/timeline?topic=steady&range=30d")
	pg.wait("5,200 pending in the next 30 days of steady", `document.querySelector("#timeline-total")?.dataset.total === "5200"`)
	pg.wait("five fullest bars", `document.querySelectorAll("#hotspots li").length === 5`)
	if hot := value(pg, "the hot spots", chromedp.Evaluate[[]string](`[...document.querySelectorAll("#hotspots li.hot")].map((li) => li.dataset.count)`)); len(hot) != 1 || hot[0] != "540" {
		t.Errorf("hot spots over 30 days of a steady load with one burst: bars of %v; want one, of 540 (the burst and its bar's 40)", hot)
	}
}

// TestConsoleMessages: the page opens on the first topic of a picker of
// the known ones; a topic's pending messages a page at a time, each with
// a preview of its body and its own headers (the server's internal ones
// only in the detail); one opened by its row and by its ID, its body as
// JSON and hex; one cancelled from the page and two more in bulk, each
// confirmed with a button that says how many ("Cancel 2 messages", not a
// second "Cancel"), and the API agrees.
func TestConsoleMessages(t *testing.T) {
	p := start(t, t.TempDir(), nil, "--segment-duration", "1h")
	base := time.Now().Add(10 * time.Minute).Truncate(time.Second)
	var batch []*hourglassv1.ScheduleRequest
	for i := range 105 {
		batch = append(batch, &hourglassv1.ScheduleRequest{Topic: "shop", Body: fmt.Appendf(nil, `{"n":%d,"item":"cup"}`, i),
			Headers: []*hourglassv1.Header{{Key: "kind", Value: "order"}},
			When:    &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(base.Add(time.Duration(i) * time.Second))}})
	}
	res, err := p.client.ScheduleBatch(ctxT(t), connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: batch}))
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(res.Msg.Results))
	for i, r := range res.Msg.Results {
		ids[i] = r.Id
	}
	keyed := schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "shop", Body: []byte("keyed"), IdempotencyKey: "order-7", When: delayMs(7_200_000)})
	schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "alpha", Body: []byte("a"), When: delayMs(7_200_000)})

	pg := openConsole(t, p, 1280, 900)
	pg.show("#/messages")
	pg.wait("the first topic chosen", `location.hash.includes("topic=alpha") && document.querySelector("#msg-topic")?.value === "alpha" &&
		document.querySelectorAll("#msg-table tbody tr").length === 1`)
	if opts := value(pg, "the topic picker", chromedp.Evaluate[string](`[...document.querySelectorAll("#msg-topic option")].map((o) => o.value).join(",")`)); opts != "alpha,shop" {
		t.Errorf("the topic picker offers %q, want alpha,shop", opts)
	}
	pg.setValue("#msg-topic", "shop")
	pg.wait("a full first page", `location.hash.includes("topic=shop") && document.querySelectorAll("#msg-table tbody tr").length === 100 && !document.querySelector("#msg-next").disabled`)
	if first := pg.text("#msg-table tbody tr:first-child"); !strings.Contains(first, ids[0]) {
		t.Errorf("first row %q: want the earliest message %s", first, ids[0])
	}
	if body := pg.text("#msg-table tbody tr:first-child td:last-child"); !strings.Contains(body, `{"n":0,"item":"cup"}`) || !strings.Contains(body, "20 B") {
		t.Errorf("first row's body cell %q: want a preview of its text and its size", body)
	}
	if hs := pg.text("#msg-table tbody tr:first-child td:nth-child(5)"); hs != "kind=order" {
		t.Errorf("first row's headers %q, want kind=order", hs)
	}
	pg.click("#msg-next")
	pg.wait("the second page", `document.querySelectorAll("#msg-table tbody tr").length === 6`)
	if list := pg.text("#msg-table"); strings.Contains(list, "hourglass-") || !strings.Contains(list, "keyed") {
		t.Errorf("the second page shows an internal header, or not the keyed message:\n%s", list)
	}
	pg.click(fmt.Sprintf(`#msg-table tr[data-id="%s"] a.open`, keyed))
	pg.waitText("#detail-internal", "hourglass-idempotency-key")
	if hs := pg.text("#detail-headers"); strings.Contains(hs, "hourglass-") {
		t.Errorf("the detail's headers show an internal one: %q", hs)
	}
	pg.click("#msg-first")
	pg.wait("the first page again", `document.querySelectorAll("#msg-table tbody tr").length === 100`)

	// Open the first message from its row: JSON pretty-printed, then hex.
	pg.click("#msg-table tbody tr:first-child a.open")
	pg.wait("its detail", fmt.Sprintf(`document.querySelector("#detail h2")?.innerText.includes(%q)`, ids[0]))
	pg.waitText("#detail-state", "PENDING")
	pg.waitText("#detail-body", "\"n\": 0,\n  \"item\": \"cup\"")
	pg.waitText("#detail", "kind")
	pg.screenshot("messages")
	pg.click(`#body-views button[data-view="hex"]`)
	pg.waitText("#detail-body", `7b 22 6e 22 3a 30`)

	// Cancel it from the page.
	pg.click("#act-cancel")
	pg.waitText("dialog[open]", ids[0])
	pg.confirm()
	pg.waitText("#notices", "CANCELLED")
	pg.waitText("#detail-state", "CANCELLED")
	if got := getState(t, p, ids[0]).State; got != hourglassv1.MessageState_MESSAGE_STATE_CANCELLED {
		t.Errorf("Get(%s) after the page's cancel: %v", ids[0], got)
	}
	pg.wait("the cancelled message to leave the list", fmt.Sprintf(`!document.querySelector('#msg-table tr[data-id="%s"]')`, ids[0]))

	// Look one up by ID.
	pg.setValue("#lookup-id", ids[1])
	pg.click("#lookup-go")
	pg.wait("the looked-up message", fmt.Sprintf(`document.querySelector("#detail h2")?.innerText.includes(%q)`, ids[1]))
	pg.waitText("#detail-state", "PENDING")

	// By topic and key: where the server does not look keys up yet, the page says why.
	_, kerr := p.client.Get(ctxT(t), connect.NewRequest(&hourglassv1.GetRequest{Topic: "shop", Key: "order-7"}))
	pg.setValue("#lookup-id", "")
	pg.setValue("#lookup-topic", "shop")
	pg.setValue("#lookup-key", "order-7")
	pg.click("#lookup-go")
	if kerr != nil {
		// Today the server wants an id (INVALID_ARGUMENT); the page shows its answer.
		pg.wait("the page to show why Get by key failed", `/Get/.test(document.querySelector("#detail .unimpl, #detail .error")?.innerText || "")`)
	} else {
		pg.wait("the message looked up by key", fmt.Sprintf(`document.querySelector("#detail h2")?.innerText.includes(%q)`, keyed))
	}

	// Bulk: cancel two selected messages after a confirmation.
	for _, id := range ids[2:4] {
		pg.click(fmt.Sprintf(`#msg-table tr[data-id="%s"] input.sel`, id))
	}
	pg.waitText("#sel-info", "2 selected")
	pg.click("#bulk-cancel")
	pg.waitText("dialog[open]", "the 2 selected messages")
	if ok, keep := pg.text("dialog[open] .dialog-ok"), pg.text("dialog[open] .dialog-cancel"); ok != "Cancel 2 messages" || keep != "Keep" {
		t.Errorf("the bulk cancel's buttons: %q and %q; want \"Cancel 2 messages\" and \"Keep\"", ok, keep)
	}
	pg.confirm()
	pg.waitText("#bulk-progress", "2 done, 0 not")
	for _, id := range ids[2:4] {
		if got := getState(t, p, id).State; got != hourglassv1.MessageState_MESSAGE_STATE_CANCELLED {
			t.Errorf("Get(%s) after the bulk cancel: %v", id, got)
		}
	}
	if got := getState(t, p, ids[4]).State; got != hourglassv1.MessageState_MESSAGE_STATE_PENDING {
		t.Errorf("Get(%s), not selected: %v", ids[4], got)
	}

	// Bulk on everything a filter matches: the last five by time.
	from, to := base.Add(100*time.Second).UnixMilli(), base.Add(105*time.Second).UnixMilli()
	pg.wait("the time filter set", fmt.Sprintf(`(() => {
		const f = (ms) => { const d = new Date(ms), p = (n) => String(n).padStart(2, "0");
			return d.getFullYear() + "-" + p(d.getMonth() + 1) + "-" + p(d.getDate()) + "T" + p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds()); };
		document.querySelector("#msg-from").value = f(%d); document.querySelector("#msg-to").value = f(%d); return true; })()`, from, to))
	pg.click("#msg-show")
	pg.wait("the five messages in the range", `location.hash.includes("from=") && document.querySelectorAll("#msg-table tbody tr").length === 5`)
	pg.setValue("#bulk-scope", "all")
	pg.click("#bulk-cancel")
	pg.waitText("dialog[open]", "all 5 pending messages of shop in the chosen time range")
	pg.confirm()
	pg.waitText("#bulk-progress", "5 done, 0 not")
	for i := 95; i < len(ids); i++ {
		want := hourglassv1.MessageState_MESSAGE_STATE_PENDING
		if i >= 100 {
			want = hourglassv1.MessageState_MESSAGE_STATE_CANCELLED
		}
		if got := getState(t, p, ids[i]).State; got != want {
			t.Errorf("Get(%s), message %d, after the bulk cancel of 100 to 104: %v, want %v", ids[i], i, got, want)
		}
	}
}
