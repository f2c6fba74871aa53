package crashtest

import (
	"bufio"
	"context"
	"errors"
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
	"time"
)

// Build compiles the hourglass binary (embedded: the program embedding
// the node, internal/crashtest/embednode) from the module at
// moduleDir into dir and returns its path.
func Build(ctx context.Context, moduleDir, dir string, embedded bool) (string, error) {
	pkg, bin := "./cmd/hourglass", filepath.Join(dir, "hourglass")
	if embedded {
		pkg, bin = "./internal/crashtest/embednode", filepath.Join(dir, "embednode")
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
	cmd.Dir = moduleDir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("crashtest: go build %s in %s: %w\n%s", pkg, moduleDir, err, out)
	}
	return bin, nil
}

// ModuleRoot finds the directory holding go.mod at or above dir.
func ModuleRoot(dir string) (string, error) {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("crashtest: no go.mod at or above %s: run it inside the hourglass module", dir)
		}
	}
}

// server is one run of `hourglass serve`. Its whole stderr goes to a log
// file (kept with --keep) and is scanned for the listen address.
type server struct {
	cmd    *exec.Cmd
	addr   string // http://host:port
	exited chan struct{}
	err    error // exit status once exited is closed

	mu  sync.Mutex
	log strings.Builder // this run's stderr; guarded by mu
}

var listenRE = regexp.MustCompile(`listening on (\S+)`)

// startServer runs bin serve on dataDir, appending its stderr to logPath,
// and waits (bounded by timeout) until it listens. It does not wait for
// readiness; see waitReady.
func startServer(bin, dataDir, logPath string, args []string, timeout time.Duration) (*server, error) {
	s, addrc, err := spawn(bin, dataDir, logPath, args)
	if err != nil {
		return nil, err
	}
	select {
	case a := <-addrc:
		s.addr = "http://" + a
		return s, nil
	case <-s.exited:
		return nil, fmt.Errorf("crashtest: server exited before listening: %v\n%s", s.err, s.logText())
	case <-time.After(timeout):
		s.kill()
		return nil, fmt.Errorf("crashtest: server did not print its address within %v", timeout)
	}
}

// launch starts bin serve on dataDir like startServer and waits, up to
// bound in all, until it is ready (the server is returned) or has exited
// (nil; the result says how). A server neither ready nor gone by then is
// killed. Its error is the harness's: the process could not be started.
func launch(bin, dataDir, logPath string, args []string, bound time.Duration) (*server, startResult, error) {
	t0 := time.Now()
	s, addrc, err := spawn(bin, dataDir, logPath, args)
	if err != nil {
		return nil, startResult{}, err
	}
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case a := <-addrc:
		s.addr = "http://" + a
		if err := s.waitReady(bound - time.Since(t0)); err == nil {
			return s, startResult{Ready: true, After: time.Since(t0)}, nil
		}
	case <-s.exited:
	case <-timer.C:
	}
	select {
	case <-s.exited:
		return nil, startResult{Exited: true, ExitCode: exitCode(s.err), After: time.Since(t0), Stderr: s.logText()}, nil
	default:
		after := time.Since(t0)
		s.kill()
		return nil, startResult{After: after, Stderr: s.logText()}, nil
	}
}

// exitCode is the exit status in err (from exec.Cmd.Wait): 0 for nil, -1
// for a signal or another error.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		return ee.ExitCode()
	}
	return -1
}

// spawn starts bin serve on dataDir, appending its stderr to logPath; the
// channel gets the listen address once the server prints it.
func spawn(bin, dataDir, logPath string, args []string) (*server, <-chan string, error) {
	all := append([]string{"serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0"}, args...)
	cmd := exec.Command(bin, all...)
	cmd.Env = append(os.Environ(), "HOURGLASS_AUTH_TOKEN=") // never inherit a token
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	pipe, err := cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, nil, fmt.Errorf("crashtest: starting %s: %w", bin, err)
	}
	fmt.Fprintf(logf, "=== crashtest: started pid %d: %s\n", cmd.Process.Pid, strings.Join(all, " "))
	s := &server{cmd: cmd, exited: make(chan struct{})}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.log.WriteString(line + "\n")
			s.mu.Unlock()
			fmt.Fprintln(logf, line)
			if m := listenRE.FindStringSubmatch(line); m != nil {
				select {
				case addrc <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, pipe)
		s.err = cmd.Wait()
		fmt.Fprintf(logf, "=== crashtest: pid %d exited: %v\n", cmd.Process.Pid, s.err)
		logf.Close()
		close(s.exited)
	}()
	return s, addrc, nil
}

func (s *server) logText() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// waitReady polls /readyz until it answers 200 or timeout passes.
func (s *server) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	hc := &http.Client{Timeout: time.Second}
	for {
		resp, err := hc.Get(s.addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/readyz answered %d", resp.StatusCode)
		}
		select {
		case <-s.exited:
			return fmt.Errorf("crashtest: server exited while recovering: %v", s.err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("crashtest: not ready after %v (last: %v)", timeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (s *server) kill() {
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

// terminate sends SIGTERM and waits up to timeout; it returns an error when
// the server did not stop cleanly (exit 0 and "stopped cleanly" logged).
// After the timeout the process is killed.
func (s *server) terminate(timeout time.Duration) error {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(timeout):
		s.kill()
		return fmt.Errorf("did not exit within %v of SIGTERM (killed)", timeout)
	}
	if s.err != nil {
		return fmt.Errorf("exit after SIGTERM: %v", s.err)
	}
	if !strings.Contains(s.logText(), "stopped cleanly") {
		return fmt.Errorf("exited 0 after SIGTERM without logging \"stopped cleanly\"")
	}
	return nil
}
