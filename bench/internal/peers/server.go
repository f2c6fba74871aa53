package peers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Server is one server process (or process tree) of a system, on
// 127.0.0.1:Port with its data in Dir. Its methods are called from one
// goroutine.
type Server struct {
	Dir  string
	Port int
	// Log receives the process's stdout and stderr.
	Log string

	init    func() error                // once, before the first start (initdb)
	command func() *exec.Cmd            // the process to start, as it is restarted too
	ready   func(context.Context) error // answers once the server serves
	inited  bool
	cmd     *exec.Cmd
	exited  chan struct{}
}

// Addr is "127.0.0.1:Port".
func (s *Server) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.Port) }

// StartTimeout bounds a start: the process must be ready within it.
const StartTimeout = 90 * time.Second

// readyPoll is how long Start waits between readiness checks, so W4's
// restart-to-ready reads up to this much above the true time, on every
// system alike.
const readyPoll = 10 * time.Millisecond

// Start starts the process and returns once it is ready.
func (s *Server) Start(ctx context.Context) error {
	if s.cmd != nil {
		return errors.New("peers: server already started")
	}
	if !s.inited && s.init != nil {
		if err := s.init(); err != nil {
			return err
		}
	}
	s.inited = true
	logf, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := s.command()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("peers: start %s: %w", cmd.Path, err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(s.exited) }()
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	for {
		select {
		case <-s.exited:
			s.cmd = nil
			return fmt.Errorf("peers: %s exited while starting; see %s", cmd.Path, s.Log)
		default:
		}
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		err := s.ready(rctx)
		rcancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			s.Kill()
			return fmt.Errorf("peers: %s not ready within %v: %v; see %s", cmd.Path, StartTimeout, err, s.Log)
		case <-time.After(readyPoll):
		}
	}
}

// PID is the server's main process, 0 when it is not running.
func (s *Server) PID() int {
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// PIDs are the main process and all its descendants.
func (s *Server) PIDs() []int {
	if s.cmd == nil {
		return nil
	}
	return processTree(s.cmd.Process.Pid)
}

// Kill sends SIGKILL to the server and every process below it, and waits
// for all of them to be gone: PostgreSQL refuses to start while a killed
// backend still holds its shared memory.
func (s *Server) Kill() error {
	if s.cmd == nil {
		return nil
	}
	pids := s.PIDs()
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if err := s.wait(30 * time.Second); err != nil {
		return err
	}
	return waitGone(pids[1:], 10*time.Second)
}

// waitGone waits until no process of pids runs, for at most d.
func waitGone(pids []int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for _, pid := range pids {
		for running(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("peers: pid %d still running %v after SIGKILL", pid, d)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return nil
}

// running says whether pid is a process that has not exited: it is in
// /proc and not a zombie (a zombie's memory is already released; whoever
// adopted it reaps it when it will).
func running(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// Stop asks the server to stop (SIGTERM), and kills it if it has not
// within 30 s.
func (s *Server) Stop() error {
	if s.cmd == nil {
		return nil
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	if err := s.wait(30 * time.Second); err == nil {
		return nil
	}
	return s.Kill()
}

func (s *Server) wait(d time.Duration) error {
	select {
	case <-s.exited:
		s.cmd = nil
		return nil
	case <-time.After(d):
		return fmt.Errorf("peers: pid %d still running after %v", s.cmd.Process.Pid, d)
	}
}

// processTree returns pid and its descendants, read from /proc.
func processTree(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parens.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		pp, _ := strconv.Atoi(f[1])
		children[pp] = append(children[pp], p)
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// Memory is a server's resident memory.
type Memory struct {
	// RSS of the main process (VmRSS), bytes.
	RSS int64
	// Anon is the part of RSS that is anonymous memory (RssAnon): heap and
	// stacks, as opposed to mapped files (page cache that the kernel can
	// drop) and shared memory.
	Anon int64
	// PSS summed over the process tree (smaps_rollup), bytes: shared pages
	// (PostgreSQL's shared buffers) counted once across its processes.
	PSS int64
}

// Memory reads the server's resident memory from /proc.
func (s *Server) Memory() (Memory, error) {
	var m Memory
	if s.cmd == nil {
		return m, errors.New("peers: server not running")
	}
	// One read of status, so that RSS and its anonymous part are of the
	// same moment (a process still exec'ing grows between two reads).
	vs, err := procFields(fmt.Sprintf("/proc/%d/status", s.PID()), "VmRSS:", "RssAnon:")
	if err != nil {
		return m, err
	}
	m.RSS, m.Anon = vs[0], vs[1]
	for _, pid := range s.PIDs() {
		pss, err := procFields(fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Pss:")
		if err == nil {
			m.PSS += pss[0]
		}
	}
	return m, nil
}

// procFields returns the "<name> N kB" lines of one read of a /proc
// file, in bytes, in the order of names.
func procFields(path string, names ...string) ([]int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(names))
	found := 0
	for line := range strings.Lines(string(b)) {
		for i, name := range names {
			if !strings.HasPrefix(line, name) {
				continue
			}
			fs := strings.Fields(line[len(name):])
			if len(fs) == 0 {
				return nil, fmt.Errorf("peers: %s: %q has no value", path, strings.TrimSpace(line))
			}
			kb, err := strconv.ParseInt(fs[0], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("peers: %s: %q: %w", path, strings.TrimSpace(line), err)
			}
			out[i] = kb * 1024
			found++
		}
	}
	if found < len(names) {
		return nil, fmt.Errorf("peers: %s lacks one of %q", path, names)
	}
	return out, nil
}

// DiskUsage is the disk space allocated to the files under dir (as du
// counts it: blocks, not apparent sizes).
func DiskUsage(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) { // a file removed while walking
				return nil
			}
			return err
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		}
		return nil
	})
	return total, err
}

// tcpReady answers once addr accepts a TCP connection.
func tcpReady(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}
