package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
)

// TestFaultRepairKilledAfterSkip: `hourglass repair` killed (SIGKILL)
// right after it wrote its skip record (what it printed is gone with the
// terminal it printed to), leaves its report in the data directory: inspect verify reports the
// interrupted run (a problem) and what it was about to give up, the next
// repair prints it (and finds nothing left to repair), the server starts,
// and the report stays (a note: the span was routed, nothing was lost)
// until `repair --acknowledge`.
func TestFaultRepairKilledAfterSkip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	due := time.Now().Add(time.Hour)
	p := start(t, dir, nil)
	routed := clScheduleAt(t, p, "rk", "a", 20, due)
	p.stop(syscall.SIGTERM)
	segs, _ := filepath.Glob(filepath.Join(dir, "commitlog", "*.log"))
	base, _ := clParseBase(segs[0])
	clFlip(t, segs[0], commitlog.SegmentHeaderSize+clSeqOf(t, routed[3])-base+12)
	if out := clServeRefuses(t, dir); !strings.Contains(out, "hourglass repair --data-dir "+dir) {
		t.Fatalf("serve's refusal:\n%s", out)
	}
	from, to := clSeqOf(t, routed[3]), clSeqOf(t, routed[4])
	span := fmt.Sprintf("offsets %d..%d", from, to)

	// Points: planned commitlog, copying, kept, ran commitlog.
	out, err := runBin(t, []string{"HOURGLASS_REPAIR_KILL_AT=4"}, "repair", "--data-dir", dir)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL || !strings.Contains(out, "killed at point 4 (ran commitlog)") {
		t.Fatalf("repair with HOURGLASS_REPAIR_KILL_AT=4: %v\n%s", err, out)
	}
	if strings.Contains(out, "repair: made") {
		t.Fatalf("the killed repair got to its summary:\n%s", out)
	}
	verify, err := runBin(t, nil, "inspect", "verify", "--data-dir", dir)
	if err == nil || !strings.Contains(verify, "INTERRUPTED") || !strings.Contains(verify, span) {
		t.Errorf("inspect verify after the killed repair (%v) does not report it and %s:\n%s", err, span, verify)
	}
	rep := clRepair(t, dir)
	for _, want := range []string{"INTERRUPTED", span, "nothing to repair in", "is finished now"} {
		if !strings.Contains(rep, want) {
			t.Errorf("the repair after the killed one lacks %q:\n%s", want, rep)
		}
	}
	p = start(t, dir, nil)
	p.stop(syscall.SIGTERM)
	// Finished, and the span was routed (nothing lost): a note now, which
	// still names the span, until --acknowledge.
	verify, err = runBin(t, nil, "inspect", "verify", "--data-dir", dir)
	if err != nil || !strings.Contains(verify, span) || !strings.Contains(verify, "finished the repair") {
		t.Errorf("inspect verify before --acknowledge (%v) does not note the finished run and %s:\n%s", err, span, verify)
	}
	if out := clRepair(t, dir, "--acknowledge"); !strings.Contains(out, "acknowledged repair run") {
		t.Errorf("repair --acknowledge:\n%s", out)
	}
	if verify, err = runBin(t, nil, "inspect", "verify", "--data-dir", dir); err != nil {
		t.Errorf("inspect verify after --acknowledge: %v\n%s", err, verify)
	}
}

// runBin runs the hourglass binary with args and extra environment, and
// returns its combined output.
func runBin(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
