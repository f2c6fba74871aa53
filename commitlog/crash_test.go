package commitlog

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var crashRuns = flag.Int("crash.runs", 12, "number of SIGKILL runs in TestCrashKill")

// TestCrashKill runs a writer in a child process, kills it with SIGKILL at a
// random moment, reopens the log and checks that every append whose call
// returned under SyncAlways is there, in order, intact.
func TestCrashKill(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns child processes; skipped with -short")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	next := 0 // payload index of the next record a child writes
	var acked []int64
	for run := range *crashRuns {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
		cmd.Env = append(os.Environ(), "HG_CRASH_CHILD_DIR="+dir, "HG_CRASH_CHILD_FROM="+strconv.Itoa(next))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Each line "ack OFFSET INDEX" is printed after Append returned.
		// Kill after a random number of acknowledgements.
		killAfter := 20 + rng.IntN(400)
		sc := bufio.NewScanner(out)
		n := 0
		var once sync.Once
		kill := func() { once.Do(func() { cmd.Process.Signal(syscall.SIGKILL) }) }
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 3 || f[0] != "ack" {
				continue
			}
			off, _ := strconv.ParseInt(f[1], 10, 64)
			idx, _ := strconv.Atoi(f[2])
			if idx != next {
				t.Fatalf("run %d: child acked index %d, want %d", run, idx, next)
			}
			acked = append(acked, off)
			next++
			if n++; n == killAfter {
				kill()
			}
		}
		kill()
		cmd.Wait()

		l, rec, err := Open(Options{Dir: dir, SegmentSize: testSegSize})
		if err != nil {
			t.Fatalf("run %d: reopen: %v", run, err)
		}
		offs, ps, err := readAll(t, l, l.FirstOffset())
		l.Close()
		if err != nil {
			t.Fatalf("run %d: read: %v", run, err)
		}
		// Everything acknowledged is present, in order, intact. Records
		// written but not yet acknowledged may also be there.
		if len(offs) < len(acked) {
			t.Fatalf("run %d: %d records after reopen, %d were acknowledged", run, len(offs), len(acked))
		}
		for i, off := range acked {
			if offs[i] != off || !bytes.Equal(ps[i], payload(i)) {
				t.Fatalf("run %d: acknowledged record %d (offset %d) missing or damaged", run, i, off)
			}
		}
		for i := len(acked); i < len(offs); i++ {
			if !bytes.Equal(ps[i], payload(i)) {
				t.Fatalf("run %d: unacknowledged record %d damaged", run, i)
			}
		}
		// The next child continues after whatever survived.
		next = len(offs)
		acked = offs
		if rec.Truncated {
			t.Logf("run %d: torn tail truncated: %d bytes at offset %d", run, rec.DroppedBytes, rec.DroppedFrom)
		}
	}
	if next == 0 {
		t.Fatal("no record was ever acknowledged")
	}
}

// TestCrashChild is the writer process of TestCrashKill; it does nothing
// unless started by it.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv("HG_CRASH_CHILD_DIR")
	if dir == "" {
		t.Skip("helper process for TestCrashKill")
	}
	from, _ := strconv.Atoi(os.Getenv("HG_CRASH_CHILD_FROM"))
	l, _, err := Open(Options{Dir: dir, SegmentSize: testSegSize, Sync: SyncAlways})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	w := bufio.NewWriter(os.Stdout)
	for i := from; i < from+100000; i++ {
		offs, err := l.Append(nil, Record{Type: 1, Flags: byte(i), Payload: payload(i)})
		if err != nil {
			fmt.Println("append:", err)
			os.Exit(2)
		}
		fmt.Fprintf(w, "ack %d %d\n", offs[0], i)
		w.Flush()
	}
	os.Exit(0)
}
