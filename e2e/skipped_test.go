package e2e

import (
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
)

// skipped gathers the tests skipped because a tool is missing, by what
// enables them, so that the run says once, at its end, which suites did
// not run and how to turn them on: `go test ./...` prints nothing of a
// package that passes, and a skip per test is easy to miss.
var skipped struct {
	mu    sync.Mutex
	tests map[string][]string // how to enable them → the tests; guarded by mu
}

// skipForTool skips t, whose suite needs what `enable` says how to get.
func skipForTool(t *testing.T, why, enable string) {
	t.Helper()
	skipped.mu.Lock()
	if skipped.tests == nil {
		skipped.tests = map[string][]string{}
	}
	key := why + ": " + enable
	skipped.tests[key] = append(skipped.tests[key], t.Name())
	skipped.mu.Unlock()
	t.Skipf("%s: %s", why, enable)
}

// skipSummary is the end-of-run message: a line per missing tool with
// the tests it skipped; "" when none was skipped.
func skipSummary() string {
	skipped.mu.Lock()
	defer skipped.mu.Unlock()
	if len(skipped.tests) == 0 {
		return ""
	}
	var b strings.Builder
	for _, key := range slices.Sorted(maps.Keys(skipped.tests)) {
		tests := skipped.tests[key]
		fmt.Fprintf(&b, "e2e: skipped %d tests (%s): %s\n", len(tests), strings.Join(tests, ", "), key)
	}
	return b.String()
}

// reportSkips writes the summary where a user running `go test ./...`
// sees it: the terminal (go test shows a passing package's output only
// with -v), else the test's output (-v, CI logs).
func reportSkips(stdout io.Writer) {
	s := skipSummary()
	if s == "" {
		return
	}
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		defer tty.Close()
		if _, err := io.WriteString(tty, s); err == nil {
			return
		}
	}
	io.WriteString(stdout, s)
}

// TestSkipSummary: the summary names each missing tool once, with every
// test it skipped and how to enable them.
func TestSkipSummary(t *testing.T) {
	skipped.mu.Lock()
	saved := skipped.tests
	skipped.tests = map[string][]string{
		"no Chromium: install chromium":  {"TestConsoleA", "TestConsoleB"},
		"no grpcurl: go install grpcurl": {"TestGRPCurl"},
	}
	skipped.mu.Unlock()
	got := skipSummary()
	skipped.mu.Lock()
	skipped.tests = saved
	skipped.mu.Unlock()
	want := "e2e: skipped 2 tests (TestConsoleA, TestConsoleB): no Chromium: install chromium\n" +
		"e2e: skipped 1 tests (TestGRPCurl): no grpcurl: go install grpcurl\n"
	if got != want {
		t.Errorf("summary:\n%s\nwant:\n%s", got, want)
	}
}
