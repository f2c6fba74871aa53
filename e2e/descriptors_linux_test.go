package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's
// times (100 on every Linux architecture Go runs on).
const clockTicks = 100

// cpuTime is the CPU time (user and system) process pid has used.
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// TestOutOfDescriptors: a server out of descriptors (RLIMIT_NOFILE a few
// above what it holds, more connections waiting than it can take) backs
// off between accepts instead of spinning a core (the report measured
// 102% CPU and 13,543 failed accept4 in 2 s), logs it, and serves again
// once the connections close.
func TestOutOfDescriptors(t *testing.T) {
	p := start(t, t.TempDir(), nil)
	pid := p.cmd.Process.Pid
	// What /readyz needs must be open already: the client's connection.
	p.waitReady()
	limit := uint64(openFDs(t, pid) + 8)
	if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: limit, Max: limit}, nil); err != nil {
		t.Skipf("cannot lower the server's RLIMIT_NOFILE: %v", err)
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 30 {
		c, err := net.Dial("tcp", p.addr) // the kernel takes it into the backlog
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	deadline := time.Now().Add(10 * time.Second)
	for openFDs(t, pid) < int(limit) {
		if time.Now().After(deadline) {
			t.Fatalf("the server holds %d descriptors, not its limit %d, with 30 connections waiting", openFDs(t, pid), limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Out of descriptors with connections waiting: measure its CPU.
	const window = 2 * time.Second
	cpu0, t0 := cpuTime(t, pid), time.Now()
	time.Sleep(window) // a measuring window, not a wait for an event
	used, wall := cpuTime(t, pid)-cpu0, time.Since(t0)
	t.Logf("out of descriptors with 30 connections waiting: %v of CPU in %v", used, wall)
	if share := float64(used) / float64(wall); share > 0.20 {
		t.Errorf("out of descriptors, the server used %v of CPU in %v (%.0f%% of a core); want under 20%%", used, wall, 100*share)
	}
	if !strings.Contains(p.log(), "accepting a connection failed") {
		t.Errorf("no log line says accepting failed:\n%s", p.log())
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
	deadline = time.Now().Add(20 * time.Second)
	for {
		resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(p.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not served once the connections closed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.stop(syscall.SIGTERM)
}
