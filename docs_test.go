package hourglass

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hourglassmq/hourglass/commitlog"
)

// The docs (README.md and docs/*.md) must agree with the code: every flag
// of `hourglass serve` is named in them, and every metric they name is one
// a running node serves.

// readDocs returns README.md and docs/*.md, concatenated.
func readDocs(t *testing.T) string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	paths = append([]string{"README.md"}, paths...)
	var b strings.Builder
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
		b.WriteByte('\n')
	}
	return b.String()
}

var helpFlag = regexp.MustCompile(`^\s+--([a-z0-9][a-z0-9-]*)`)

// helpFlags returns the flag names listed under OPTIONS in a urfave/cli
// help text, without help itself.
func helpFlags(help string) []string {
	var flags []string
	options := false
	for line := range strings.Lines(help) {
		if strings.HasPrefix(line, "OPTIONS:") {
			options = true
			continue
		}
		if m := helpFlag.FindStringSubmatch(line); options && m != nil && m[1] != "help" {
			flags = append(flags, m[1])
		}
	}
	return flags
}

// undocumented returns the flags that docs never names as --flag (a
// longer flag it is the prefix of does not count).
func undocumented(flags []string, docs string) []string {
	var out []string
	for _, f := range flags {
		if !regexp.MustCompile(`--` + regexp.QuoteMeta(f) + `([^a-z0-9-]|$)`).MatchString(docs) {
			out = append(out, f)
		}
	}
	return out
}

// docMetric matches the server's own metrics and the per-RPC ones
// (grpc_server_*, server/rpcmetrics.go).
var docMetric = regexp.MustCompile(`(?:hourglass|grpc_server)_[a-z_]+(\.[a-z])?`)

// docMetrics returns the metric names docs mentions; a name followed by
// an extension (hourglass_test.go) is a file, not a metric.
func docMetrics(docs string) []string {
	var out []string
	for _, m := range docMetric.FindAllStringSubmatch(docs, -1) {
		if m[1] == "" && !slices.Contains(out, m[0]) {
			out = append(out, m[0])
		}
	}
	slices.Sort(out)
	return out
}

// unknownMetrics returns the names in named that are not in known, where
// a histogram's _bucket, _sum and _count series count as the histogram.
func unknownMetrics(named []string, known map[string]bool) []string {
	var out []string
	for _, n := range named {
		base := n
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, s)
		}
		if !known[n] && !known[base] {
			out = append(out, n)
		}
	}
	return out
}

func TestDocsCheckersFail(t *testing.T) {
	help := "NAME:\n   hourglass serve\n\nDESCRIPTION:\n   --not-a-flag in the prose\n\nOPTIONS:\n" +
		"   --max-streams N            at most N\n" +
		"   --max-streams-per-conn N   at most N per connection\n" +
		"   --help, -h                 show help\n"
	if got, want := helpFlags(help), []string{"max-streams", "max-streams-per-conn"}; !slices.Equal(got, want) {
		t.Errorf("helpFlags = %q, want %q", got, want)
	}
	if got := undocumented([]string{"max-streams", "max-streams-per-conn"}, "see `--max-streams-per-conn`"); !slices.Equal(got, []string{"max-streams"}) {
		t.Errorf("undocumented = %q, want [max-streams]: a longer flag must not count for its prefix", got)
	}
	if got := undocumented([]string{"max-streams"}, "--max-streams N"); len(got) != 0 {
		t.Errorf("undocumented = %q, want none", got)
	}
	named := docMetrics("`hourglass_lateness_seconds_bucket`, hourglass_no_such_total; see hourglass_test.go.")
	if want := []string{"hourglass_lateness_seconds_bucket", "hourglass_no_such_total"}; !slices.Equal(named, want) {
		t.Errorf("docMetrics = %q, want %q", named, want)
	}
	if got := unknownMetrics(named, map[string]bool{"hourglass_lateness_seconds": true}); !slices.Equal(got, []string{"hourglass_no_such_total"}) {
		t.Errorf("unknownMetrics = %q, want [hourglass_no_such_total]", got)
	}
}

// TestDocsServeFlags checks that every flag `hourglass serve --help` lists
// is named in README.md or docs/*.md.
func TestDocsServeFlags(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is not on PATH (go test puts GOROOT/bin there): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goBin, "run", "./cmd/hourglass", "serve", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("go run ./cmd/hourglass serve --help: %v\n%s", err, out)
	}
	flags := helpFlags(string(out))
	if len(flags) < 10 {
		t.Fatalf("found %d flags in serve --help, want dozens: has its format changed?\n%s", len(flags), out)
	}
	for _, f := range undocumented(flags, readDocs(t)) {
		t.Errorf("serve --%s is not named in README.md or docs/*.md: document it (docs/DESIGN.md has a table of every flag)", f)
	}
}

// TestDocsMetrics checks that every hourglass_* metric named in README.md
// or docs/*.md exists on a running node, and that every one a node has is
// named there.
func TestDocsMetrics(t *testing.T) {
	n, err := Open(context.Background(), Config{DataDir: t.TempDir(), Fsync: commitlog.SyncNone, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go n.Serve(ln)
	select {
	case <-n.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the node was not ready within 30 s")
	}
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %v %v", resp.Status, err)
	}
	// What /metrics serves now, and what the node's collector can serve
	// once there is something to count (per-topic series, sink retries).
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^# TYPE ((?:hourglass|grpc_server)_[a-z_]+) `).FindAllStringSubmatch(string(body), -1) {
		known[m[1]] = true
	}
	descs := make(chan *prometheus.Desc, 100)
	go func() {
		n.srv.Metrics().Describe(descs)
		close(descs)
	}()
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range descs {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			known[m[1]] = true
		}
	}
	if !known["hourglass_lateness_seconds"] || !known["hourglass_scheduled_total"] {
		t.Fatalf("the node's metrics lack hourglass_lateness_seconds or hourglass_scheduled_total: %v", known)
	}
	docs := readDocs(t)
	named := docMetrics(docs)
	for _, m := range unknownMetrics(named, known) {
		t.Errorf("the docs name the metric %s, which the node does not have (server/metrics.go)", m)
	}
	for _, m := range slices.Sorted(maps.Keys(known)) {
		if !slices.Contains(named, m) {
			t.Errorf("the node has the metric %s, which README.md and docs/*.md never name", m)
		}
	}
}

// docLimits are the documents whose length the issues that asked for them
// bounded, in lines: each a reference a reader can hold.
var docLimits = map[string]int{
	"README.md":          200,
	"docs/OPERATIONS.md": 200,
	"docs/BENCHMARKS.md": 300,
	"docs/CLUSTER.md":    400,
}

// TestDocsLength holds each document of docLimits within its limit.
func TestDocsLength(t *testing.T) {
	for _, path := range slices.Sorted(maps.Keys(docLimits)) {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if n, limit := strings.Count(string(data), "\n"), docLimits[path]; n > limit {
			t.Errorf("%s has %d lines; at most %d: move reference material that another document holds to a link", path, n, limit)
		}
	}
}
