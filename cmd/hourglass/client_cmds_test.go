package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var idRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TestSendRecv runs serve in-process, sends with `hourglass send` and
// reads the messages back with `hourglass recv`.
func TestSendRecv(t *testing.T) {
	addr, stop, _ := startServe(t, "--data-dir", t.TempDir())
	defer stop()
	url := "http://" + addr

	out, _, err := runApp(t, "send", "--addr", url, "--topic", "cli", "--delay", "0s", "--body", "héllo")
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	first := strings.TrimSpace(out)
	if !idRE.MatchString(first) {
		t.Fatalf("send printed %q, want one ID", out)
	}
	out, _, err = runApp(t, "send", "--addr", url, "--topic", "cli", "--level", "1", "--count", "3", "--body", "b")
	if err != nil {
		t.Fatalf("send --count 3: %v", err)
	}
	ids := strings.Fields(out)
	if len(ids) != 3 {
		t.Fatalf("send --count 3 printed %q, want 3 IDs", out)
	}
	seen := map[string]bool{first: true}
	for _, id := range ids {
		if !idRE.MatchString(id) || seen[id] {
			t.Errorf("send --count 3: bad or repeated ID %q", id)
		}
		seen[id] = true
	}

	start := time.Now()
	out, _, err = runApp(t, "recv", "--addr", url, "--topic", "cli", "--count", "4", "--timeout", "20s")
	if err != nil {
		t.Fatalf("recv: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("recv printed %d lines, want 4:\n%s", len(lines), out)
	}
	for i, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %d is not JSON: %v\n%s", i, err, line)
		}
		for _, k := range []string{"id", "topic", "body", "deliver_at", "received_at", "attempt"} {
			if _, ok := m[k]; !ok {
				t.Errorf("line %d lacks %q: %s", i, k, line)
			}
		}
		id, _ := m["id"].(string)
		if !seen[id] {
			t.Errorf("line %d: id %q was not sent", i, id)
		}
		delete(seen, id)
		if m["topic"] != "cli" || m["attempt"] != 0.0 {
			t.Errorf("line %d: topic %v attempt %v, want cli and 0", i, m["topic"], m["attempt"])
		}
		wantBody := "b"
		if i == 0 {
			wantBody = "héllo" // due first
		}
		if m["body"] != wantBody {
			t.Errorf("line %d: body %v, want %q", i, m["body"], wantBody)
		}
		for _, k := range []string{"deliver_at", "received_at"} {
			s, _ := m[k].(string)
			if _, err := time.Parse(time.RFC3339Nano, s); err != nil || len(s) != len("2006-01-02T15:04:05.000000000Z") {
				t.Errorf("line %d: %s %q is not RFC 3339 UTC with nanoseconds", i, k, s)
			}
		}
	}
	t.Logf("recv took %v", time.Since(start))

	// Acked: nothing is left, and recv ends quietly at its timeout.
	out, _, err = runApp(t, "recv", "--addr", url, "--topic", "cli", "--timeout", "200ms")
	if err != nil || out != "" {
		t.Errorf("recv after acks: %q, %v; want nothing and no error", out, err)
	}

	// A body that is not UTF-8 comes back in body_base64.
	if _, _, err := runApp(t, "send", "--addr", url, "--topic", "bin", "--delay", "0s", "--body", "\xff\xfe"); err != nil {
		t.Fatal(err)
	}
	out, _, err = runApp(t, "recv", "--addr", url, "--topic", "bin", "--count", "1", "--timeout", "20s", "--no-ack")
	if err != nil {
		t.Fatal(err)
	}
	var bin map[string]any
	if err := json.Unmarshal([]byte(out), &bin); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if _, ok := bin["body"]; ok || bin["body_base64"] != base64.StdEncoding.EncodeToString([]byte("\xff\xfe")) {
		t.Errorf("binary body: %s", out)
	}

	out, _, err = runApp(t, "cancel", "--addr", url, first, strings.Repeat("0", 32))
	if err != nil {
		t.Fatal(err)
	}
	if want := first + " already-delivered\n" + strings.Repeat("0", 32) + " unknown\n"; out != want {
		t.Errorf("cancel printed %q, want %q", out, want)
	}
	out, _, err = runApp(t, "stats", "--addr", url)
	if err != nil || !strings.Contains(out, "pending") || !strings.Contains(out, "lateness") || !strings.Contains(out, "cli") {
		t.Errorf("stats: %v\n%s", err, out)
	}
}

func TestClientCommandErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no_time", []string{"send", "--topic", "t"}, "when to deliver is missing: give --delay D (such as 30s or 2h), --at TIME (RFC 3339, such as 2030-01-02T09:00:00Z), --level N, --now, or --calendar C with --working-days N or --working-hours H"},
		{"two_times", []string{"send", "--topic", "t", "--delay", "1s", "--level", "2"}, "--delay and --level: give one of them"},
		{"no_topic", []string{"send", "--delay", "1s"}, "the topic is missing"},
		{"bad_delay", []string{"send", "--topic", "t", "--delay", "soon"}, "with a unit"},
		{"bad_at", []string{"send", "--topic", "t", "--at", "tomorrow"}, "RFC 3339"},
		{"bad_level", []string{"send", "--topic", "t", "--level", "0"}, "levels start at 1"},
		{"bad_count", []string{"send", "--topic", "t", "--delay", "1s", "--count", "0"}, "at least 1"},
		{"recv_no_topic", []string{"recv"}, "the topic is missing"},
		{"cancel_no_ids", []string{"cancel"}, "one or more message IDs"},
		{"addr_without_scheme", []string{"stats", "--addr", "127.0.0.1:7420"}, "want a URL starting with http://"},
		// Port 1 refuses connections: the error names the call.
		{"unreachable", []string{"cancel", "--addr", "http://127.0.0.1:1", strings.Repeat("0", 32)}, "client: Cancel"},
	} {
		_, _, err := runApp(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

func TestClientCommandsHelp(t *testing.T) {
	for cmd, wants := range map[string][]string{
		"send":   {"--topic", "--delay", "--at", "--level", "--body", "--count", "HOURGLASS_ADDR", "HOURGLASS_TOKEN", "Exit status"},
		"recv":   {"--count", "--timeout", "--no-ack", "body_base64", "deliver_at", "received_at", "attempt", "Exit status"},
		"cancel": {"already-delivered", "unknown", "Exit status"},
		"stats":  {"hour ahead", "lateness", "Exit status"},
	} {
		out, _, err := runApp(t, cmd, "--help")
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range wants {
			if !strings.Contains(out, w) {
				t.Errorf("%s --help lacks %q", cmd, w)
			}
		}
	}
}

func TestFlagsFirst(t *testing.T) {
	id := strings.Repeat("a", 32)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"flags_first_unchanged", []string{"cancel", "--addr", "U", id}, []string{"cancel", "--addr", "U", id}},
		{"flag_after_arg", []string{"cancel", id, "--addr", "U"}, []string{"cancel", "--addr", "U", id}},
		{"flag_with_equals", []string{"cancel", id, "--addr=U"}, []string{"cancel", "--addr=U", id}},
		{"single_dash", []string{"ack", id, "-topic", "t"}, []string{"ack", "-topic", "t", id}},
		{"mixed_keep_order", []string{"nack", id, "--topic", "t", id + "b", "--delay", "1s"}, []string{"nack", "--topic", "t", "--delay", "1s", id, id + "b"}},
		{"bool_takes_no_value", []string{"recv", "--no-ack", "x", "--topic", "t"}, []string{"recv", "--no-ack", "--topic", "t", "x"}},
		{"help_after_arg", []string{"cancel", id, "--help"}, []string{"cancel", "--help", id}},
		{"value_that_looks_like_flag", []string{"send", "--body", "--x", "--topic", "t"}, []string{"send", "--body", "--x", "--topic", "t"}},
		{"dash_is_arg", []string{"send", "-", "--body-file", "-"}, []string{"send", "--body-file", "-", "-"}},
		{"double_dash_ends_flags", []string{"cancel", id, "--addr", "U", "--", "--not-a-flag"}, []string{"cancel", "--addr", "U", "--", id, "--not-a-flag"}},
		{"double_dash_no_flaglike_args", []string{"cancel", "--", id}, []string{"cancel", id}},
		{"unknown_flag_moved", []string{"cancel", id, "--nope"}, []string{"cancel", "--nope", id}},
		{"subcommand", []string{"inspect", "dump", "FILE", "--json"}, []string{"inspect", "dump", "--json", "FILE"}},
		{"trailing_value_flag", []string{"cancel", id, "--addr"}, []string{"cancel", "--addr", id}},
		{"no_command", []string{"--help"}, []string{"--help"}},
		{"unknown_command", []string{"nosuch", "x", "--y"}, []string{"nosuch", "x", "--y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := flagsFirst(newApp(), append([]string{"hourglass"}, tc.args...))
			if want := append([]string{"hourglass"}, tc.want...); !slices.Equal(got, want) {
				t.Errorf("flagsFirst(%q) = %q, want %q", tc.args, got[1:], want[1:])
			}
		})
	}
}

// runAppStdin is runApp with stdin.
func runAppStdin(t *testing.T, stdin string, args ...string) (stdout string, err error) {
	t.Helper()
	app := newApp()
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter, app.Reader = &out, &errOut, strings.NewReader(stdin)
	err = app.RunContext(context.Background(), flagsFirst(app, append([]string{"hourglass"}, args...)))
	return out.String(), err
}

// TestQueueCommands runs serve in-process and checks send's body, header
// and key flags, ack, nack, stats --json and flags after arguments.
func TestQueueCommands(t *testing.T) {
	addr, stop, _ := startServe(t, "--data-dir", t.TempDir())
	defer stop()
	url := "http://" + addr
	file := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(file, []byte("from a file\x00\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	recvOne := func(t *testing.T, topic string) recvLine {
		t.Helper()
		out, _, err := runApp(t, "recv", "--topic", topic, "--count", "1", "--timeout", "20s", "--no-ack", "--addr", url)
		var l recvLine
		if err != nil || json.Unmarshal([]byte(out), &l) != nil {
			t.Fatalf("recv: %v: %q", err, out)
		}
		return l
	}

	t.Run("body_file_headers", func(t *testing.T) {
		if _, _, err := runApp(t, "send", "--topic", "f", "--now", "--body-file", file, "--header", "a=1,2", "--header", "b=x=y", "--addr", url); err != nil {
			t.Fatal(err)
		}
		l := recvOne(t, "f")
		if l.Body == nil || *l.Body != "from a file\x00\n" || l.Headers["a"] != "1,2" || l.Headers["b"] != "x=y" || len(l.Headers) != 2 {
			t.Errorf("got body %v headers %v", l.Body, l.Headers)
		}
		if out, _, err := runApp(t, "ack", l.ID, "--topic", "f", "--addr", url); err != nil || out != l.ID+" acked\n" {
			t.Errorf("ack: %q, %v", out, err)
		}
		if _, _, err := runApp(t, "ack", l.ID, "--topic", "f", "--addr", url); err == nil || !strings.Contains(err.Error(), "not leased") {
			t.Errorf("second ack: %v, want one saying it is not leased", err)
		}
	})
	t.Run("body_stdin", func(t *testing.T) {
		if _, err := runAppStdin(t, "\xffpiped", "send", "--topic", "s", "--now", "--body-file", "-", "--addr", url); err != nil {
			t.Fatal(err)
		}
		if l := recvOne(t, "s"); l.BodyBase64 != base64.StdEncoding.EncodeToString([]byte("\xffpiped")) {
			t.Errorf("body_base64 %q", l.BodyBase64)
		}
	})
	t.Run("key", func(t *testing.T) {
		var ids []string
		for range 2 {
			out, _, err := runApp(t, "send", "--topic", "k", "--delay", "1h", "--key", "order-42", "--addr", url)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, strings.TrimSpace(out))
		}
		other, _, err := runApp(t, "send", "--topic", "k", "--delay", "1h", "--key", "order-43", "--addr", url)
		if err != nil {
			t.Fatal(err)
		}
		if !idRE.MatchString(ids[0]) || ids[0] != ids[1] || strings.TrimSpace(other) == ids[0] {
			t.Errorf("same key: %q, other key: %q; want the same ID twice, then another", ids, other)
		}
	})
	t.Run("nack", func(t *testing.T) {
		if _, _, err := runApp(t, "send", "--topic", "n", "--now", "--body", "again", "--addr", url); err != nil {
			t.Fatal(err)
		}
		l := recvOne(t, "n")
		if out, _, err := runApp(t, "nack", l.ID, "--topic", "n", "--addr", url); err != nil || out != l.ID+" nacked\n" {
			t.Fatalf("nack: %q, %v", out, err)
		}
		if l2 := recvOne(t, "n"); l2.ID != l.ID || l2.Attempt != 1 {
			t.Errorf("after nack: id %s attempt %d, want %s and 1", l2.ID, l2.Attempt, l.ID)
		}
	})
	t.Run("cancel_flag_after_id", func(t *testing.T) {
		out, _, err := runApp(t, "send", "--topic", "c", "--delay", "1h", "--addr", url)
		if err != nil {
			t.Fatal(err)
		}
		id := strings.TrimSpace(out)
		if out, _, err := runApp(t, "cancel", id, "--addr", url); err != nil || out != id+" cancelled\n" {
			t.Errorf("cancel ID --addr: %q, %v", out, err)
		}
	})
	t.Run("stats_json", func(t *testing.T) {
		out, _, err := runApp(t, "stats", "--json", "--addr", url)
		if err != nil {
			t.Fatal(err)
		}
		var st map[string]any
		if err := json.Unmarshal([]byte(out), &st); err != nil || strings.Count(out, "\n") != 1 {
			t.Fatalf("stats --json is not one JSON line: %v\n%s", err, out)
		}
		for _, k := range []string{"server_time", "pending", "engine", "topics"} {
			if _, ok := st[k]; !ok {
				t.Errorf("stats --json lacks %q: %s", k, out)
			}
		}
		var v statsJSON
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatal(err)
		}
		// The key test left messages an hour ahead (their bucket's count
		// is the server's business, not this test's).
		if len(v.Pending.Hours) < 1 || v.Engine == nil || v.Engine.Scheduled < 5 {
			t.Errorf("stats --json: pending %+v engine %+v", v.Pending, v.Engine)
		}
		topics := map[string]topicJSON{}
		for _, tp := range v.Topics {
			topics[tp.Topic] = tp
		}
		if topics["f"].Acked != 1 || topics["n"].Nacked != 1 {
			t.Errorf("stats --json topics: %+v", v.Topics)
		}
	})
}

func TestQueueCommandErrors(t *testing.T) {
	id := strings.Repeat("0", 32)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"header_no_equals", []string{"send", "--topic", "t", "--now", "--header", "oops"}, `"oops" has no '='`},
		{"header_empty_key", []string{"send", "--topic", "t", "--now", "--header", "=v"}, `"=v" has an empty key`},
		{"header_twice", []string{"send", "--topic", "t", "--now", "--header", "a=1", "--header", "a=2"}, `header "a" is given twice`},
		{"body_and_body_file", []string{"send", "--topic", "t", "--now", "--body", "x", "--body-file", "-"}, "--body and --body-file: give one of them"},
		{"body_file_missing", []string{"send", "--topic", "t", "--now", "--body-file", "/nonexistent/b"}, "/nonexistent/b"},
		{"key_with_count", []string{"send", "--topic", "t", "--now", "--key", "k", "--count", "2"}, "--key with --count 2"},
		{"key_empty", []string{"send", "--topic", "t", "--now", "--key", ""}, "--key is empty"},
		{"ack_no_topic", []string{"ack", id}, "the topic is missing"},
		{"ack_no_ids", []string{"ack", "--topic", "t"}, "one or more message IDs"},
		{"nack_bad_delay", []string{"nack", id, "--topic", "t", "--delay", "soon"}, `--delay "soon"`},
		{"nack_negative_delay", []string{"nack", id, "--topic", "t", "--delay", "-1s"}, "0 or more"},
		// Port 1 refuses connections; --addr after the ID is used.
		{"ack_addr_after_id", []string{"ack", id, "--topic", "t", "--addr", "http://127.0.0.1:1"}, "client: Ack"},
		{"nack_addr_after_id", []string{"nack", id, "--topic", "t", "--addr", "http://127.0.0.1:1"}, "client: Nack"},
		{"cancel_addr_after_id", []string{"cancel", id, "--addr", "http://127.0.0.1:1"}, "client: Cancel"},
		{"double_dash_ends_flags", []string{"cancel", "--addr", "http://127.0.0.1:1", "--", "--addr"}, "cancel --addr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runApp(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestQueueCommandsHelp(t *testing.T) {
	for cmd, wants := range map[string][]string{
		"ack":   {"--topic", "acked", "recv --no-ack", "not leased now", "Exit status"},
		"nack":  {"--topic", "--delay", "nacked", "origin_id", ".dlq", "Exit status"},
		"send":  {"--body-file", `"-" reads standard input`, "--header", "KEY=VALUE", "--key", "--idempotency-window"},
		"recv":  {"retries", "delivered again", "without printing it twice", "Ctrl-C"},
		"stats": {"--json", "server_time", "from_hour", "dead_lettered", "p99_ms", "reput_lag_bytes"},
	} {
		out, _, err := runApp(t, cmd, "--help")
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range wants {
			if !strings.Contains(out, w) {
				t.Errorf("%s --help lacks %q", cmd, w)
			}
		}
	}
}

func TestBackoff(t *testing.T) {
	var b backoff
	prev := time.Duration(0)
	for i := range 20 {
		d := b.next()
		if d < backoffMin || d > backoffMax+backoffMax/5 || d < prev*9/10 && b.d != backoffMax {
			t.Fatalf("step %d: %v after %v, want growing from %v, capped at %v (+20%%)", i, d, prev, backoffMin, backoffMax)
		}
		prev = d
	}
	if b.d != backoffMax {
		t.Errorf("after 20 steps the base is %v, want the cap %v", b.d, backoffMax)
	}
}

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"unavailable", fmt.Errorf("client: Receive: %w", status.Error(codes.Unavailable, "connection refused")), true},
		{"exhausted", status.Error(codes.ResourceExhausted, "too many long polls"), true},
		{"deadline", status.Error(codes.DeadlineExceeded, "slow"), true},
		{"invalid", status.Error(codes.InvalidArgument, "bad topic"), false},
		{"unauthenticated", status.Error(codes.Unauthenticated, "token"), false},
		{"not_leased", status.Error(codes.FailedPrecondition, "not leased"), false},
	} {
		if got := retryable(tc.err); got != tc.want {
			t.Errorf("%s: retryable = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestFlagsAfterArgsSubcommand checks a subcommand with an argument:
// `inspect dump FILE --data-dir D --json` is `inspect dump --data-dir D
// --json FILE`.
func TestFlagsAfterArgsSubcommand(t *testing.T) {
	dir := filepath.Join(testdata, "healthy")
	before, _, err := runApp(t, "inspect", "dump", "--data-dir", dir, "--json", "20261130T050000Z.sched")
	if err != nil || before == "" {
		t.Fatalf("inspect dump with flags first: %q, %v", before, err)
	}
	after, _, err := runApp(t, "inspect", "dump", "20261130T050000Z.sched", "--data-dir", dir, "--json")
	if err != nil || after != before {
		t.Errorf("inspect dump with flags after the file: %v\n%s\nwant\n%s", err, after, before)
	}
}
