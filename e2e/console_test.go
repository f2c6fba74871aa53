package e2e

// The web console's browser tests drive headless Chromium (chromedp)
// against the real binary. Without Chromium they skip, saying how to
// install it. With HOURGLASS_CONSOLE_SCREENSHOTS=DIR they save a PNG of
// each page there (scripts/console-screenshots.sh writes docs/console/).

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// chromiumPath is the browser the tests drive: $HOURGLASS_CHROMIUM, or
// chromium on the PATH; "" when there is none.
func chromiumPath() string {
	if p, ok := os.LookupEnv("HOURGLASS_CHROMIUM"); ok {
		if _, err := os.Stat(p); err != nil {
			return ""
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// page is one browser tab on a console.
type page struct {
	t   *testing.T
	ctx context.Context
	url string // the server's root, http://host:port

	mu   sync.Mutex
	errs []string // guarded by mu: script exceptions and CSP violations
}

// openConsole starts Chromium (width × height) on p's /ui/ and returns
// its tab; it skips t when there is no Chromium.
func openConsole(t *testing.T, p *proc, width, height int) *page {
	t.Helper()
	bin := chromiumPath()
	if bin == "" {
		skipForTool(t, "the console's browser tests need Chromium",
			"apt-get install -y --no-install-recommends chromium (Debian; .ci/run does), or set HOURGLASS_CHROMIUM to a Chromium binary")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, height),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	pg := &page{t: t, url: p.url}
	// The browser lives as long as this context: no timeout on it (each
	// step gets its own in run).
	ctx, cancelTab := chromedp.NewContext(actx, chromedp.WithListener(func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			pg.fail(fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber, msg))
		case *log.EventEntryAdded:
			if ev.Entry.Source == log.EntrySourceSecurity || strings.Contains(ev.Entry.Text, "Content Security Policy") {
				pg.fail("security: " + ev.Entry.Text)
			}
		}
	}))
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	pg.ctx = ctx
	if err := chromedp.Do(ctx,
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, log.Enable, cdp.Empty{})
			return err
		}),
		chromedp.EmulateViewport(int64(width), int64(height)),
		chromedp.Navigate(p.url+"/ui/")); err != nil {
		t.Fatalf("Chromium %s: %v", bin, err)
	}
	t.Cleanup(func() {
		pg.mu.Lock()
		defer pg.mu.Unlock()
		for _, e := range pg.errs {
			t.Errorf("page: %s", e)
		}
	})
	return pg
}

func (pg *page) fail(s string) {
	pg.mu.Lock()
	pg.errs = append(pg.errs, s)
	pg.mu.Unlock()
}

// run runs actions, failing the test with what went wrong and the
// notices the page shows.
func (pg *page) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	pg.t.Helper()
	ctx, cancel := context.WithTimeout(pg.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		pg.t.Fatalf("%s: %v\npage notices: %s", what, err, pg.notices())
	}
}

// notices is the text of the page's notices (errors the page shows).
func (pg *page) notices() string {
	ctx, cancel := context.WithTimeout(pg.ctx, 5*time.Second)
	defer cancel()
	s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`(document.getElementById("notices")||{}).innerText||""`))
	return s
}

// wait waits until the JavaScript expression js is truthy.
func (pg *page) wait(what, js string) {
	pg.t.Helper()
	pg.run("waiting for "+what, ignore(chromedp.Poll[bool](js, chromedp.WithPollingTimeout(25*time.Second))))
}

// show shows a page of the console ("#/messages?topic=x").
func (pg *page) show(hash string) {
	pg.t.Helper()
	pg.run("showing "+hash, ignore(chromedp.Evaluate[string](fmt.Sprintf(`location.hash = %q`, hash))))
}

// click clicks the first element sel matches once it is visible. It
// clicks in the page's script, in one step, so that a table the page
// refreshes meanwhile cannot swap the element between finding and
// clicking.
func (pg *page) click(sel string) {
	pg.t.Helper()
	pg.wait(sel, fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e || !e.offsetParent || e.disabled) return false; e.click(); return true; })()`, sel))
}

// confirm answers the open confirmation dialog with its action button,
// after checking that no two of its buttons have one label.
func (pg *page) confirm() {
	pg.t.Helper()
	pg.wait("the dialog's buttons", `document.querySelectorAll("dialog[open] .dialog-buttons button").length === 2`)
	labels := value(pg, "the dialog's buttons", chromedp.Evaluate[[]string](`[...document.querySelectorAll("dialog[open] .dialog-buttons button")].map((b) => b.innerText)`))
	if len(labels) != 2 || labels[0] == labels[1] {
		pg.t.Errorf("the dialog's buttons are labelled %q: want two different labels", labels)
	}
	pg.click("dialog[open] .dialog-ok")
	pg.wait("the dialog to close", `!document.querySelector("dialog[open]")`)
}

// text returns the text of the first element sel matches.
func (pg *page) text(sel string) string {
	pg.t.Helper()
	return value(pg, "reading "+sel, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible))
}

// waitText waits until the element sel matches shows sub.
func (pg *page) waitText(sel, sub string) {
	pg.t.Helper()
	pg.wait(fmt.Sprintf("%s to show %q", sel, sub),
		fmt.Sprintf(`((document.querySelector(%q)||{}).innerText||"").includes(%q)`, sel, sub))
}

// setValue sets an input's value as typing would (input and change events).
func (pg *page) setValue(sel, v string) {
	pg.t.Helper()
	pg.wait("setting "+sel, fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false; e.value = %q;
		e.dispatchEvent(new Event("input", {bubbles: true})); e.dispatchEvent(new Event("change", {bubbles: true})); return true; })()`, sel, v))
}

// screenshot saves what the window shows, from the top of the page, as
// DIR/name.png when HOURGLASS_CONSOLE_SCREENSHOTS=DIR.
func (pg *page) screenshot(name string) {
	pg.t.Helper()
	dir := os.Getenv("HOURGLASS_CONSOLE_SCREENSHOTS")
	if dir == "" {
		return
	}
	pg.run("scrolling to the top", ignore(chromedp.Evaluate[int](`window.scrollTo(0, 0), 0`)))
	b := value(pg, "screenshot "+name, chromedp.CaptureScreenshot())
	if err := os.WriteFile(filepath.Join(dir, name+".png"), b, 0o644); err != nil {
		pg.t.Fatal(err)
	}
}

// needRPC fails t when err, a call of rpc, was answered UNIMPLEMENTED:
// the server serves every RPC the console calls.
func needRPC(t *testing.T, rpc string, err error) {
	t.Helper()
	if connect.CodeOf(err) == connect.CodeUnimplemented {
		t.Fatalf("%s answers UNIMPLEMENTED (%v): the console calls it, the server must serve it", rpc, err)
	}
}

// needListState fails t when List refuses a queue state: the server lists
// every state.
func needListState(t *testing.T, state string, err error) {
	t.Helper()
	needRPC(t, "List of "+state, err)
	if connect.CodeOf(err) == connect.CodeInvalidArgument && strings.Contains(err.Error(), "not listed yet") {
		t.Fatalf("List of %s messages refused (%v): the server lists every state", state, err)
	}
}

// tokenClient is a client of p that sends token.
func tokenClient(p *proc, token string) hourglassv1connect.HourglassServiceClient {
	return hourglassv1connect.NewHourglassServiceClient(http.DefaultClient, p.url,
		connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				req.Header().Set("Authorization", "Bearer "+token)
				return next(ctx, req)
			}
		})))
}

// nodeCount counts the elements sel matches.
func (pg *page) count(sel string) int {
	pg.t.Helper()
	return value(pg, "counting "+sel, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, sel)))
}

// value runs one action and returns its value.
func value[T any](pg *page, what string, a chromedp.Action[T]) T {
	pg.t.Helper()
	ctx, cancel := context.WithTimeout(pg.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		pg.t.Fatalf("%s: %v\npage notices: %s", what, err, pg.notices())
	}
	return v
}

// ignore drops an action's value.
func ignore[T any](a chromedp.Action[T]) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := a(ctx, t)
		return chromedp.Void{}, err
	}
}
