package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// tourCommandTimeout bounds each command of the tour: the longest waits
// for a message for at most 30 s (recv --timeout 30s), and grpcurl may be
// built by go run first.
const tourCommandTimeout = 2 * time.Minute

// TestTour runs the README's tour as a user types it: every command of the
// code blocks of "A five-minute tour", in order, in one bash in a fresh
// directory, the server started by the tour's own serve line. Only what
// cannot be the same on this machine changes: go build ./cmd/hourglass
// copies the binary TestMain built, 127.0.0.1:7420 is a free port (the
// commands' default address too, through HOURGLASS_LISTEN and
// HOURGLASS_ADDR), and grpcurl is the installed one when there is one.
// A command that exits non-zero, prints a Connect error, or runs longer
// than tourCommandTimeout fails the test; so does a server that does not
// stop cleanly at the tour's kill %1.
func TestTour(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := tourCommands(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	replace := []string{"go build ./cmd/hourglass", "cp " + binary + " ./hourglass", "127.0.0.1:7420", addr}
	if p := findGrpcurl(); p != "" {
		replace = append(replace, "go run github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.4", p)
	}
	sh := startShell(t, t.TempDir(), "HOURGLASS_LISTEN="+addr, "HOURGLASS_ADDR=http://"+addr)
	for i, c := range cmds {
		c = strings.NewReplacer(replace...).Replace(c)
		out, err := sh.run(c, tourCommandTimeout)
		if err != nil {
			t.Fatalf("tour command %d: %s\n%v\noutput:\n%s", i+1, c, err, sh.output())
		}
		if strings.Contains(out, `{"code":"`) {
			t.Fatalf("tour command %d: %s\nanswered a Connect error:\n%s", i+1, c, out)
		}
		if isServeLine(c) {
			waitTourServer(t, "http://"+addr, sh)
		}
	}
	// The tour ends with kill %1: the server stops cleanly.
	if _, err := sh.run("wait", 30*time.Second); err != nil {
		t.Fatalf("wait for the server after kill %%1: %v\n%s", err, sh.output())
	}
	if out := sh.output(); !strings.Contains(out, "stopped cleanly") {
		t.Errorf("the server did not stop cleanly at kill %%1:\n%s", out)
	}
}

// tourCommands returns the commands of the sh code blocks of the README's
// section "A five-minute tour", lines ending in \ joined with the next.
func tourCommands(readme string) ([]string, error) {
	_, tour, ok := strings.Cut(readme, "\n## A five-minute tour\n")
	if !ok {
		return nil, fmt.Errorf("README.md has no section %q", "## A five-minute tour")
	}
	tour, _, _ = strings.Cut(tour, "\n## ")
	var cmds []string
	in, cont := false, ""
	for line := range strings.Lines(tour) {
		line = strings.TrimRight(line, "\n")
		switch {
		case !in && line == "```sh":
			in = true
		case in && line == "```":
			in = false
		case in && strings.HasSuffix(line, `\`):
			cont += strings.TrimSuffix(line, `\`)
		case in && strings.TrimSpace(cont+line) != "":
			cmds = append(cmds, cont+line)
			cont = ""
		}
	}
	if len(cmds) < 10 {
		return nil, fmt.Errorf("found %d commands in the tour's code blocks; has its format changed?", len(cmds))
	}
	return cmds, nil
}

// isServeLine reports whether c starts the server in the background.
func isServeLine(c string) bool {
	c, _, _ = strings.Cut(c, "#")
	return strings.Contains(c, "hourglass serve") && strings.HasSuffix(strings.TrimSpace(c), "&")
}

// findGrpcurl is grpcurl as the other tests find it ($HOURGLASS_GRPCURL or
// PATH), or "".
func findGrpcurl() string {
	if p := os.Getenv("HOURGLASS_GRPCURL"); p != "" {
		return p
	}
	p, _ := exec.LookPath("grpcurl")
	return p
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitTourServer waits until the server at url answers /readyz 200, as a user
// waits for "listening on".
func waitTourServer(t *testing.T, url string, sh *shell) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		if res, err := http.Get(url + "/readyz"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tour's server did not answer /readyz within 30s:\n%s", sh.output())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// shell is one bash reading commands one at a time, in its own process
// group, its stdin /dev/null (commands that read stdin redirect it).
type shell struct {
	cmd    *exec.Cmd
	script io.WriteCloser // bash reads its commands from here (fd 3)
	status chan string    // the status line after each command (fd 4)

	mu  sync.Mutex
	out bytes.Buffer // guarded by mu: stdout and stderr of everything run
}

func startShell(t *testing.T, dir string, env ...string) *shell {
	t.Helper()
	scriptR, scriptW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	sh := &shell{script: scriptW, status: make(chan string)}
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	sh.cmd = exec.Command("bash", "/dev/fd/3")
	sh.cmd.Dir = work
	sh.cmd.Env = append(os.Environ(), append(env, "TMPDIR="+tmp)...)
	sh.cmd.Stdout, sh.cmd.Stderr = (*shellOut)(sh), (*shellOut)(sh)
	sh.cmd.ExtraFiles = []*os.File{scriptR, statusW}
	sh.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sh.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	scriptR.Close()
	statusW.Close()
	go func() {
		sc := bufio.NewScanner(statusR)
		for sc.Scan() {
			sh.status <- sc.Text()
		}
		close(sh.status)
	}()
	t.Cleanup(func() {
		sh.script.Close()
		syscall.Kill(-sh.cmd.Process.Pid, syscall.SIGKILL) // the shell, and a server the tour left
		sh.cmd.Wait()
		statusR.Close()
	})
	return sh
}

// run runs c in the shell and returns what it printed; an error if it
// exits non-zero or does not end within timeout (then everything the
// shell started is killed).
func (sh *shell) run(c string, timeout time.Duration) (string, error) {
	sh.mu.Lock()
	start := sh.out.Len()
	sh.mu.Unlock()
	// The status goes through its own pipe, the output through another
	// (stdout and stderr share one): the marker printed after the command
	// says all of its output has been read.
	if _, err := fmt.Fprintf(sh.script, "%s\n__st=$?; printf '%s'; echo \"$__st\" >&4\n", c, tourMarker); err != nil {
		return "", err
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case st, ok := <-sh.status:
		if !ok {
			return sh.output()[start:], fmt.Errorf("the shell exited")
		}
		out := sh.waitMarker(start, timer.C)
		switch {
		case st != "0":
			return out, fmt.Errorf("exit status %s", st)
		}
		return out, nil
	case <-timer.C:
		syscall.Kill(-sh.cmd.Process.Pid, syscall.SIGKILL)
		return sh.output()[start:], fmt.Errorf("still running after %v: killed", timeout)
	}
}

// tourMarker ends each command's output; run removes it.
const tourMarker = "\x1etour-command-done\x1e"

// waitMarker returns the output from start up to the next marker, and
// removes the marker; what there is when timeout fires otherwise.
func (sh *shell) waitMarker(start int, timeout <-chan time.Time) string {
	for {
		sh.mu.Lock()
		b := sh.out.Bytes()
		if i := bytes.Index(b[start:], []byte(tourMarker)); i >= 0 {
			out := string(b[start : start+i])
			rest := append([]byte(nil), b[start+i+len(tourMarker):]...)
			sh.out.Truncate(start + i)
			sh.out.Write(rest)
			sh.mu.Unlock()
			return out
		}
		out := string(b[start:])
		sh.mu.Unlock()
		select {
		case <-timeout:
			return out
		case <-time.After(time.Millisecond):
		}
	}
}

func (sh *shell) output() string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.out.String()
}

// shellOut collects the shell's stdout and stderr in sh.out.
type shellOut shell

func (o *shellOut) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.out.Write(p)
}

// TestTourShell: the tour's runner keeps the shell's state from one
// command to the next, and reports a command that fails or hangs.
func TestTourShell(t *testing.T) {
	sh := startShell(t, t.TempDir())
	if _, err := sh.run("X=$(echo kept)", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if out, err := sh.run(`echo "$X"`, 10*time.Second); err != nil || out != "kept\n" {
		t.Errorf("echo $X: %q, %v; want kept", out, err)
	}
	if _, err := sh.run("false", 10*time.Second); err == nil || err.Error() != "exit status 1" {
		t.Errorf("false: %v; want exit status 1", err)
	}
	if _, err := sh.run("read line # stdin is /dev/null: no line", 10*time.Second); err == nil {
		t.Error("read from stdin: no error; want one (EOF), not the next command read as input")
	}
	if _, err := sh.run("sleep 60", 100*time.Millisecond); err == nil || !strings.Contains(err.Error(), "still running") {
		t.Errorf("sleep 60 with a 100ms bound: %v; want it reported as still running", err)
	}
}
