package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// hg runs one client command of the binary with stdin, within 30s.
func hg(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = []string{} // no HOURGLASS_ADDR or _TOKEN from the environment
	var out, errOut bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// hgOK is hg that fails the test on an error.
func hgOK(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, errOut, err := hg(t, stdin, args...)
	if err != nil {
		t.Fatalf("hourglass %q: %v\n%s", args, err, errOut)
	}
	return out
}

// cliLine is the part of a `hourglass recv` line these tests read.
type cliLine struct {
	ID       string            `json:"id"`
	OriginID string            `json:"origin_id"`
	Body     *string           `json:"body"`
	Headers  map[string]string `json:"headers"`
	Attempt  int               `json:"attempt"`
}

func parseLine(t *testing.T, s string) cliLine {
	t.Helper()
	var l cliLine
	if err := json.Unmarshal([]byte(s), &l); err != nil {
		t.Fatalf("recv printed %q: %v", s, err)
	}
	return l
}

// TestCLI runs the client commands of the binary against a server.
func TestCLI(t *testing.T) {
	t.Parallel()
	p := start(t, t.TempDir(), nil, "--idempotency-window", "1m")
	recvOne := func(t *testing.T, topic string) cliLine {
		t.Helper()
		return parseLine(t, hgOK(t, "", "recv", "--topic", topic, "--count", "1", "--timeout", "20s", "--no-ack", "--addr", p.url))
	}

	t.Run("cancel_addr_after_id", func(t *testing.T) {
		id := strings.TrimSpace(hgOK(t, "", "send", "--topic", "c", "--delay", "1h", "--addr", p.url))
		if out := hgOK(t, "", "cancel", id, "--addr", p.url); out != id+" cancelled\n" {
			t.Errorf("cancel ID --addr URL printed %q, want %q", out, id+" cancelled\n")
		}
	})
	t.Run("send_stdin_header_key", func(t *testing.T) {
		args := []string{"send", "--topic", "s", "--now", "--body-file", "-", "--header", "content-type=text/plain", "--header", "trace=a,b=c", "--key", "order-42", "--addr", p.url}
		first := strings.TrimSpace(hgOK(t, "piped body\n", args...))
		second := strings.TrimSpace(hgOK(t, "another body\n", args...))
		if first == "" || second != first {
			t.Fatalf("two sends with --key order-42 printed %q and %q, want the same ID", first, second)
		}
		l := recvOne(t, "s")
		if l.ID != first || l.Body == nil || *l.Body != "piped body\n" ||
			l.Headers["content-type"] != "text/plain" || l.Headers["trace"] != "a,b=c" {
			t.Errorf("received %+v (body %v), want ID %s, the piped body and both headers", l, l.Body, first)
		}
		receiveNone(t, p.client, "s", 200*time.Millisecond) // the second send stored nothing
		if out := hgOK(t, "", "ack", l.ID, "--topic", "s", "--addr", p.url); out != l.ID+" acked\n" {
			t.Errorf("ack printed %q", out)
		}
		if _, errOut, err := hg(t, "", "ack", l.ID, "--topic", "s", "--addr", p.url); err == nil || !strings.Contains(errOut, "not leased") {
			t.Errorf("second ack: %v, %q; want an error saying it is not leased", err, errOut)
		}
	})
	t.Run("nack", func(t *testing.T) {
		id := strings.TrimSpace(hgOK(t, "", "send", "--topic", "n", "--now", "--body", "retry me", "--addr", p.url))
		l := recvOne(t, "n")
		if out := hgOK(t, "", "nack", "--topic", "n", l.ID, "--addr", p.url); out != l.ID+" nacked\n" {
			t.Errorf("nack printed %q", out)
		}
		l = recvOne(t, "n")
		if l.ID != id || l.Attempt != 1 {
			t.Fatalf("after nack: %+v, want %s on attempt 1", l, id)
		}
		hgOK(t, "", "nack", l.ID, "--topic", "n", "--delay", "200ms", "--addr", p.url)
		l = recvOne(t, "n")
		if l.ID == id || l.OriginID != id || l.Attempt != 2 {
			t.Errorf("after nack --delay: %+v, want a new ID with origin_id %s on attempt 2", l, id)
		}
		hgOK(t, "", "ack", l.ID, "--topic", "n", "--addr", p.url)
	})
	t.Run("stats_json", func(t *testing.T) {
		out := hgOK(t, "", "stats", "--addr", p.url, "--json")
		var st struct {
			ServerTime string `json:"server_time"`
			Pending    struct {
				Hours []struct {
					FromHour int64 `json:"from_hour"`
					ToHour   int64 `json:"to_hour"`
					Messages int64 `json:"messages"`
				} `json:"hours"`
				Total *int64 `json:"total"`
			} `json:"pending"`
			Engine *struct {
				Scheduled int64 `json:"scheduled"`
				Cancelled int64 `json:"cancelled"`
			} `json:"engine"`
			Topics []struct {
				Topic  string `json:"topic"`
				Acked  int64  `json:"acked"`
				Nacked int64  `json:"nacked"`
			} `json:"topics"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("stats --json: %v\n%s", err, out)
		}
		if _, err := time.Parse(time.RFC3339Nano, st.ServerTime); err != nil || st.Pending.Total == nil || st.Engine == nil {
			t.Fatalf("stats --json lacks server_time, pending.total or engine:\n%s", out)
		}
		if st.Engine.Scheduled < 3 || st.Engine.Cancelled < 1 {
			t.Errorf("engine %+v: want at least 3 scheduled and 1 cancelled", *st.Engine)
		}
		var n int64
		for _, tp := range st.Topics {
			if tp.Topic == "n" {
				n = tp.Nacked
			}
		}
		if n != 2 {
			t.Errorf("topic n: %d nacked, want 2:\n%s", n, out)
		}
	})
}

// syncBuf is a bytes.Buffer that a process may write while a test reads.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer // guarded by mu
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestCLIRecvAcrossRestart(t *testing.T) { t.Parallel(); testRecvAcrossRestart(t, syscall.SIGTERM) }

func TestCLIRecvAcrossKill9(t *testing.T) { t.Parallel(); testRecvAcrossRestart(t, syscall.SIGKILL) }

// testRecvAcrossRestart stops the server with sig under a running
// `hourglass recv --count 4` and restarts it on the same port and data
// directory: recv waits for it, prints each message once, and exits 0
// after the fourth.
func testRecvAcrossRestart(t *testing.T, sig syscall.Signal) {
	dir := t.TempDir()
	p := start(t, dir, nil)
	const topic = "restart"

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "recv", "--topic", topic, "--count", "4", "--timeout", "80s", "--addr", p.url)
	cmd.Env = []string{}
	var errOut syncBuf
	cmd.Stderr = &errOut
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 10)
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	var got []cliLine
	waitLines := func(n int) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for len(got) < n {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("recv ended after %d lines: %v\nstderr:\n%s", len(got), <-exited, errOut.String())
				}
				got = append(got, parseLine(t, l))
			case <-timeout:
				t.Fatalf("recv printed %d lines in 30s, want %d\nstderr:\n%s", len(got), n, errOut.String())
			}
		}
	}

	schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("before-1")})
	schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("before-2")})
	waitLines(2)
	p.stop(sig)
	p2 := start(t, dir, nil, "--listen", p.addr)
	schedule(t, p2.client, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("after-1")})
	schedule(t, p2.client, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("after-2")})
	waitLines(4)
	select {
	case l, ok := <-lines:
		if ok {
			t.Errorf("recv printed a fifth line: %s", l)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("recv did not exit within 30s of its fourth line")
	}
	if err := <-exited; err != nil {
		t.Fatalf("recv: %v\nstderr:\n%s", err, errOut.String())
	}
	var bodies []string
	for _, l := range got {
		bodies = append(bodies, *l.Body)
	}
	slices.Sort(bodies)
	if want := []string{"after-1", "after-2", "before-1", "before-2"}; !slices.Equal(bodies, want) {
		t.Errorf("recv printed %q, want each of %q once", bodies, want)
	}
	se := errOut.String()
	t.Logf("recv's stderr:\n%s", se)
	if strings.Count(se, "is unavailable") != 1 || strings.Count(se, "is back after") != 1 {
		t.Errorf("recv's stderr should tell the outage once and its end once:\n%s", se)
	}
	// Everything recv printed was acked, on one server or the other.
	receiveNone(t, p2.client, topic, 300*time.Millisecond)
	p2.stop(syscall.SIGTERM)
}
