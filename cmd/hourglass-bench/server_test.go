package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/internal/serverbench"
)

func TestBenchServerFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown_scenario", []string{"--scenario", "uniform"}, `--scenario "uniform" is unknown; use one of batch, single, lateness`},
		{"no_messages", []string{"--messages", "0"}, "--messages 0 is out of range; it must be from 1 to 100000000"},
		{"negative_messages", []string{"--messages", "-5"}, "--messages -5 is out of range; it must be from 1 to 100000000"},
		{"huge_batch", []string{"--batch", "1001"}, "--batch 1001 is out of range; it must be from 1 to 1000"},
		{"small_body", []string{"--body-size", "4"}, "--body-size 4 is out of range; it must be from 8 to 1048576"},
		{"no_clients", []string{"--clients", "0"}, "--clients 0 is out of range; it must be from 1 to 1024"},
		{"no_consumers", []string{"--consumers", "0"}, "--consumers 0 is out of range; it must be from 1 to 256"},
		{"negative_credits", []string{"--credits", "-1"}, "--credits -1 is out of range; it must be from 1 to 1000"},
		{"huge_credits", []string{"--credits", "1001"}, "--credits 1001 is out of range; it must be from 1 to 1000"},
		{"zero_window", []string{"--window", "0s"}, "--window 0s is out of range; it must be from 1ms to 24h0m0s"},
		{"zero_timeout", []string{"--timeout", "0s"}, "--timeout 0s must be positive"},
		{"bad_topic", []string{"--topic", "a b"}, "may only hold A-Z a-z 0-9 . _ -"},
		{"bad_addr", []string{"--addr", "127.0.0.1:7420"}, `--addr "127.0.0.1:7420": want a URL such as http://127.0.0.1:7420`},
		{"timeout_not_duration", []string{"--timeout", "5"}, "--timeout takes a duration with a unit"},
		{"argument", []string{"now"}, `server takes no arguments, got ["now"]`},
		{"negative_max_calls", []string{"--scenario", "single", "--max-calls", "-1"}, "--max-calls -1 is out of range; it must be from 0 (every Schedule its own call) to 1024"},
		{"max_calls_batch", []string{"--max-calls", "2"}, "--max-calls applies to --scenario single only"},
		{"unknown_protocol", []string{"--protocol", "h1"}, `--protocol "h1" is unknown; use grpc (unary gRPC calls over HTTP/2), connect (Connect over HTTP/1.1) or stream`},
		{"max_calls_stream", []string{"--scenario", "single", "--protocol", "stream", "--max-calls", "2"}, "--max-calls applies to --protocol grpc only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runApp(t, append([]string{"server"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing on an error", out)
			}
		})
	}
}

var benchListenRE = regexp.MustCompile(`listening on (\S+)`)

// startBenchServer builds the binary and runs `hourglass serve` on a free
// loopback port with --fsync none; it returns the server's URL.
func startBenchServer(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "hourglass")
	build := exec.Command("go", "build", "-o", bin, "github.com/hourglassmq/hourglass/cmd/hourglass")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building hourglass: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "serve", "--data-dir", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0", "--fsync", "none")
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var log strings.Builder
	addrc := make(chan string, 1)
	exited := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := benchListenRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addrc <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, pipe)
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			mu.Lock()
			t.Logf("server log:\n%s", log.String())
			mu.Unlock()
		}
	})
	var addr string
	select {
	case addr = <-addrc:
	case <-exited:
		t.Fatalf("server exited before listening:\n%s", log.String())
	case <-time.After(30 * time.Second):
		t.Fatal("server did not print its address in 30s")
	}
	url := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return url
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not 200 after 30s (last: %v)", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestBenchServerScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the server")
	}
	url := startBenchServer(t)
	for _, tc := range []struct {
		scenario string
		args     []string
	}{
		{serverbench.Batch, []string{"--messages", "3000", "--batch", "50"}},
		{serverbench.Single, []string{"--messages", "500", "--clients", "8"}},
		{serverbench.Single + "_merged", []string{"--messages", "2000", "--clients", "32", "--max-calls", "1"}},
		{serverbench.Single + "_stream", []string{"--messages", "500", "--clients", "8", "--protocol", "stream"}},
		{serverbench.Single + "_connect", []string{"--messages", "500", "--clients", "8", "--protocol", "connect"}},
		{serverbench.Lateness, []string{"--messages", "1000", "--window", "500ms", "--grace", "5s"}},
		{serverbench.Lateness + "_stream", []string{"--messages", "1000", "--window", "500ms", "--grace", "5s", "--protocol", "stream"}},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			scenario, merged := strings.CutSuffix(tc.scenario, "_merged")
			scenario, _, _ = strings.Cut(scenario, "_")
			protocol := serverbench.DefaultProtocol
			for i, a := range tc.args {
				if a == "--protocol" {
					protocol = tc.args[i+1]
				}
			}
			args := append([]string{"server", "--addr", url, "--scenario", scenario, "--timeout", "1m", "--json"}, tc.args...)
			out, stderr, err := runApp(t, args...)
			if err != nil {
				t.Fatalf("%v\nstdout: %s\nstderr: %s", err, out, stderr)
			}
			m := benchJSON(t, out)
			if m["scenario"] != scenario || m["protocol"] != protocol || m["end"] != "complete" {
				t.Errorf("scenario %v, protocol %v, end %v", m["scenario"], m["protocol"], m["end"])
			}
			if m["schedule_per_sec"].(float64) <= 0 {
				t.Errorf("schedule_per_sec %v, want > 0", m["schedule_per_sec"])
			}
			for _, k := range []string{"early", "lost", "duplicates", "anomalies", "errors"} {
				if m[k].(float64) != 0 {
					t.Errorf("%s = %v, want 0\n%s", k, m[k], out)
				}
			}
			if m["scheduled"] != m["messages"] {
				t.Errorf("scheduled %v of %v", m["scheduled"], m["messages"])
			}
			// 32 goroutines and one call in flight: the Schedules that
			// wait for it share the next, so fewer calls than messages.
			if calls := m["calls"].(float64); merged && (calls < 1 || calls >= m["messages"].(float64) || m["merged"].(float64) == 0) {
				t.Errorf("--max-calls 1: %v calls, %v merged messages for %v messages; want merged calls", calls, m["merged"], m["messages"])
			}
			if !merged && (m["calls"].(float64) < 1 || m["merged"].(float64) != 0) {
				t.Errorf("calls %v, merged %v without --max-calls; want the requests counted, none merged", m["calls"], m["merged"])
			}
			if scenario == serverbench.Lateness {
				if m["delivered"] != m["messages"] || m["fire_per_sec"].(float64) <= 0 || m["lateness_max_ms"].(float64) < m["lateness_p99_ms"].(float64) {
					t.Errorf("delivered %v, fire_per_sec %v, p99 %v, max %v", m["delivered"], m["fire_per_sec"], m["lateness_p99_ms"], m["lateness_max_ms"])
				}
				if !strings.Contains(out, "clock_skew_ms") {
					t.Errorf("the table does not print the clock skew:\n%s", out)
				}
			}
		})
	}
}

// TestBenchServerBacklogDrain schedules a backlog with keys, then drains
// the part of it due first: every message due in the window arrives once,
// none early, and none due after it is counted.
func TestBenchServerBacklogDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the server")
	}
	url := startBenchServer(t)
	from := time.Now().Add(2 * time.Second).UTC().Format(time.RFC3339Nano)
	run := func(args ...string) map[string]any {
		t.Helper()
		out, stderr, err := runApp(t, append([]string{"server", "--addr", url, "--json", "--protocol", "stream"}, args...)...)
		if err != nil {
			t.Fatalf("%v\nstdout: %s\nstderr: %s", err, out, stderr)
		}
		m := benchJSON(t, out)
		if m["end"] != "complete" {
			t.Fatalf("end %v\n%s", m["end"], out)
		}
		return m
	}
	b := run("--scenario", "backlog", "--messages", "3000", "--batch", "100", "--due-from", from, "--spread", "4s", "--keys", "--body-size", "64")
	if b["scheduled"].(float64) != 3000 || b["keys"] != true || b["due_from"] == "" || b["spread"] != "4s" {
		t.Fatalf("backlog: scheduled %v, keys %v, due from %v, spread %v", b["scheduled"], b["keys"], b["due_from"], b["spread"])
	}
	topic := b["topic"].(string)
	d := run("--scenario", "drain", "--topic", topic, "--messages", "3000", "--due-from", b["due_from"].(string), "--spread", "4s", "--window", "1s", "--grace", "5s")
	// A quarter of the spread: 750 messages, the first in due order.
	if d["expected"].(float64) != 750 || d["delivered"] != d["expected"] {
		t.Errorf("drain: expected %v, delivered %v; want 750 and all of them", d["expected"], d["delivered"])
	}
	for _, k := range []string{"early", "lost", "duplicates", "anomalies", "errors"} {
		if d[k].(float64) != 0 {
			t.Errorf("drain: %s = %v, want 0", k, d[k])
		}
	}
	if d["lateness_max_ms"].(float64) < d["lateness_p99_ms"].(float64) || d["lateness_p99_ms"].(float64) <= 0 {
		t.Errorf("drain: lateness p99 %v, max %v", d["lateness_p99_ms"], d["lateness_max_ms"])
	}
}

// benchJSON parses the last line of a `bench server --json` run and
// checks that it carries every key the command documents.
func benchJSON(t *testing.T, out string) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &m); err != nil {
		t.Fatalf("last line is not JSON: %v\n%s", err, out)
	}
	for _, k := range serverbench.Keys {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	return m
}
