// Package e2e tests the real hourglass binary over the network: TestMain
// builds it once, each test starts it on 127.0.0.1 with a free port and
// talks to it with the generated connect client (and plain HTTP for the
// JSON and health endpoints). TestClientInProcess runs the client's cases
// against a node of the root package embedded in the test process.
//
// Nothing here sleeps to wait for time: tests wait on the server (a long
// poll with a deadline) or poll a condition with a deadline.
package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// binary is the hourglass binary TestMain built.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hourglass-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "hourglass")
	build := exec.Command("go", "build", "-o", binary, "github.com/hourglassmq/hourglass/cmd/hourglass")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building hourglass:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	reportSkips(os.Stdout)
	os.Exit(code)
}

// proc is one running server.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string // host:port
	url    string // http://host:port
	client hourglassv1connect.HourglassServiceClient
	exited chan struct{} // closed when the process has exited
	err    error         // its exit status, once exited is closed

	mu     sync.Mutex
	stderr strings.Builder // guarded by mu
}

var listenRE = regexp.MustCompile(`listening on (\S+)`)

// start runs `hourglass serve` on dataDir with a free port, short
// buckets, and extra args, and waits until it listens and is ready.
func start(t *testing.T, dataDir string, env []string, args ...string) *proc {
	t.Helper()
	return startWith(t, dataDir, env, (*proc).waitReady, args...)
}

// startWith is start with its own wait for readiness (over TLS, say).
func startWith(t *testing.T, dataDir string, env []string, ready func(*proc), args ...string) *proc {
	t.Helper()
	all := append([]string{"serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--segment-duration", "2s"}, args...)
	cmd := exec.Command(binary, all...)
	cmd.Env = append(os.Environ(), env...)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, cmd: cmd, exited: make(chan struct{})}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.stderr.WriteString(line + "\n")
			p.mu.Unlock()
			if m := listenRE.FindStringSubmatch(line); m != nil {
				select {
				case addrc <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, pipe)
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("server log:\n%s", p.log())
		}
	})
	select {
	case p.addr = <-addrc:
	case <-p.exited:
		t.Fatalf("server exited before listening: %v\n%s", p.err, p.log())
	case <-time.After(30 * time.Second):
		t.Fatalf("server did not print its address in 30s:\n%s", p.log())
	}
	p.url = "http://" + p.addr
	p.client = hourglassv1connect.NewHourglassServiceClient(http.DefaultClient, p.url)
	ready(p)
	return p
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// waitReady polls /readyz until it answers 200.
func (p *proc) waitReady() {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("/readyz not 200 after 30s (last: %v)", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop sends sig and waits for the process to exit.
func (p *proc) stop(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.t.Fatalf("server did not exit within 30s of %v", sig)
	}
	if sig == syscall.SIGTERM {
		if p.err != nil {
			p.t.Errorf("exit after SIGTERM: %v", p.err)
		}
		if !strings.Contains(p.log(), "stopped cleanly") {
			p.t.Errorf("no clean stop after SIGTERM")
		}
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// schedule schedules one message and returns its ID.
func schedule(t *testing.T, c hourglassv1connect.HourglassServiceClient, m *hourglassv1.ScheduleRequest) string {
	t.Helper()
	res, err := c.Schedule(ctxT(t), connect.NewRequest(m))
	if err != nil {
		t.Fatalf("Schedule(%v): %v", m, err)
	}
	return res.Msg.Id
}

func delayMs(ms int64) *hourglassv1.ScheduleRequest_DelayMs {
	return &hourglassv1.ScheduleRequest_DelayMs{DelayMs: ms}
}

// received is a message with the client's clock when it arrived.
type received struct {
	m  *hourglassv1.Message
	at time.Time
}

// receive long-polls topic until n messages arrived or the deadline
// passed, and returns them in order.
func receive(t *testing.T, c hourglassv1connect.HourglassServiceClient, topic string, n int, within time.Duration) []received {
	t.Helper()
	var out []received
	deadline := time.Now().Add(within)
	for len(out) < n {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("topic %s: %d of %d messages arrived within %v", topic, len(out), n, within)
		}
		res, err := c.Receive(ctxT(t), connect.NewRequest(&hourglassv1.ReceiveRequest{
			Topic: topic, MaxMessages: int32(n - len(out)), WaitMs: left.Milliseconds() + 1, LeaseMs: 60_000,
		}))
		if err != nil {
			t.Fatalf("Receive(%s): %v", topic, err)
		}
		now := time.Now()
		for _, m := range res.Msg.Messages {
			out = append(out, received{m: m, at: now})
		}
	}
	return out
}

// receiveNone checks that topic has nothing receivable for wait.
func receiveNone(t *testing.T, c hourglassv1connect.HourglassServiceClient, topic string, wait time.Duration) {
	t.Helper()
	res, err := c.Receive(ctxT(t), connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: topic, MaxMessages: 100, WaitMs: wait.Milliseconds()}))
	if err != nil {
		t.Fatalf("Receive(%s): %v", topic, err)
	}
	for _, m := range res.Msg.Messages {
		t.Errorf("topic %s: unexpected message %s (body %q, attempt %d)", topic, m.Id, m.Body, m.Attempt)
	}
}

func ack(t *testing.T, c hourglassv1connect.HourglassServiceClient, topic, id string) {
	t.Helper()
	if _, err := c.Ack(ctxT(t), connect.NewRequest(&hourglassv1.AckRequest{Topic: topic, Id: id})); err != nil {
		t.Fatalf("Ack(%s, %s): %v", topic, id, err)
	}
}

func cancelID(t *testing.T, c hourglassv1connect.HourglassServiceClient, id string) hourglassv1.CancelResult {
	t.Helper()
	res, err := c.Cancel(ctxT(t), connect.NewRequest(&hourglassv1.CancelRequest{Id: id}))
	if err != nil {
		t.Fatalf("Cancel(%s): %v", id, err)
	}
	return res.Msg.Result
}

func bodies(rs []received) []string {
	var out []string
	for _, r := range rs {
		out = append(out, string(r.m.Body))
	}
	return out
}
