package crashtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// VHeldUnexplained: a running server held messages back for an operator's
// decision, naming no file the harness damaged.
const VHeldUnexplained = "held-unexplained"

// holdRequests returns the lines of a running server's log in which it
// held messages back and asked an operator to run `hourglass repair`: a
// damage it found after it got ready (a dispatch log read at preload). A
// refusal to start is not one; the start that meets it judges it.
func holdRequests(log string) []string {
	var out []string
	for line := range strings.Lines(log) {
		line = strings.TrimSpace(line)
		if !strings.Contains(line, "held back") || !strings.Contains(line, "hourglass repair") ||
			strings.Contains(line, "refusing to serve") || !strings.Contains(line, "level=ERROR") {
			continue
		}
		if !slices.Contains(out, line) {
			out = append(out, line)
		}
	}
	return out
}

// answerHolds does what an operator does when a server asked for a
// decision while it ran: with the server stopped, it runs hourglass
// repair (runRepair decides --assume-pending). The repair's report counts
// for the damage whose file the request named, so what it leaves pending
// may come again. log is the stopped server's log; cycle the cycle about
// to start, for violations. Its error is the harness's.
func (r *runner) answerHolds(cycle int, log string) error {
	reqs := holdRequests(log)
	if r.dmg == nil || len(reqs) == 0 {
		return nil
	}
	rr, err := runRepair(context.Background(), r.cfg.Bin, r.dataDir)
	if err != nil {
		return err
	}
	d := r.dmg
	var named []string
	for _, line := range reqs {
		i := slices.IndexFunc(d.events, func(e DamageEvent) bool { return e.Path != "" && strings.Contains(line, e.Path) })
		if i < 0 {
			r.extra = append(r.extra, Violation{Kind: VHeldUnexplained, Cycle: cycle, At: time.Now(),
				Detail: "the server held messages back for a file the harness did not damage: " + lastLines(line, 1)})
			continue
		}
		e := &d.events[i]
		named = append(named, e.Rel)
		e.Repair = mergeRepair(e.Repair, rr)
		e.Note = joinNote(e.Note, "found while serving; repaired after the stop")
	}
	decided := ""
	if rr.Decision != "" {
		decided = " (asked for a decision: --" + rr.Decision + ")"
	}
	r.progress("  the server held messages back for %s and asked for hourglass repair; with it stopped, hourglass repair%s: exit %d, %d lost spans, %d files changed, %d without a copy",
		strings.Join(named, ", "), decided, rr.ExitCode, len(rr.Lost), len(rr.Changed), len(rr.NoCopy))
	switch {
	case rr.ExitCode != 0:
		r.extra = append(r.extra, Violation{Kind: VRepairFailed, Cycle: cycle, At: time.Now(),
			Detail: fmt.Sprintf("after the server held messages back for %s: hourglass repair exited %d: %q", strings.Join(named, ", "), rr.ExitCode, lastLines(rr.Output, 2))})
	case len(rr.NoCopy) > 0:
		r.extra = append(r.extra, Violation{Kind: VRepairFailed, Cycle: cycle, At: time.Now(),
			Detail: fmt.Sprintf("after the server held messages back: hourglass repair changed or removed %s without a copy under quarantine/", strings.Join(rr.NoCopy, ", "))})
	}
	return nil
}

// mergeRepair adds what a later repair reported to an earlier one's
// report (nil: none).
func mergeRepair(a, b *RepairResult) *RepairResult {
	if a == nil {
		return b
	}
	m := *a
	m.Lost = append(slices.Clip(m.Lost), b.Lost...)
	m.LostIDs = append(slices.Clip(m.LostIDs), b.LostIDs...)
	m.AgainIDs = append(slices.Clip(m.AgainIDs), b.AgainIDs...)
	m.AcksLost = append(slices.Clip(m.AcksLost), b.AcksLost...)
	m.BucketsAgain = append(slices.Clip(m.BucketsAgain), b.BucketsAgain...)
	m.Changed = append(slices.Clip(m.Changed), b.Changed...)
	m.NoCopy = append(slices.Clip(m.NoCopy), b.NoCopy...)
	if m.ExitCode == 0 {
		m.ExitCode = b.ExitCode
	}
	if m.Decision == "" {
		m.Decision = b.Decision
	}
	m.Output += "=== crashtest: a later repair\n" + b.Output
	return &m
}
