package main

import (
	"encoding/base64"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
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
		{"no_time", []string{"send", "--topic", "t"}, "exactly one of --delay, --at, --level and --now (when to deliver), got 0"},
		{"two_times", []string{"send", "--topic", "t", "--delay", "1s", "--level", "2"}, "got 2 (--delay, --level)"},
		{"no_topic", []string{"send", "--delay", "1s"}, "--topic is missing"},
		{"bad_delay", []string{"send", "--topic", "t", "--delay", "soon"}, "with a unit"},
		{"bad_at", []string{"send", "--topic", "t", "--at", "tomorrow"}, "RFC 3339"},
		{"bad_level", []string{"send", "--topic", "t", "--level", "0"}, "levels start at 1"},
		{"bad_count", []string{"send", "--topic", "t", "--delay", "1s", "--count", "0"}, "at least 1"},
		{"recv_no_topic", []string{"recv"}, "--topic is missing"},
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
