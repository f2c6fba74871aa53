package crashtest

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// damager is the --damage state of a runner.
type damager struct {
	rng     *rand.Rand // its own generator: kill moments stay those of a run without --damage
	queue   []string   // kinds still to inject in this round (nextKind)
	pending *applied   // the damage the next start meets
	events  []DamageEvent
	repair  int // 0 not asked yet, 1 the binary has `hourglass repair`, -1 it has not
	cwd     string
	filled  bool      // the filler sealed a commitlog segment (fillSealed)
	keys    KeyChecks // what checkKeys found
}

// damage damages the stopped server's data directory (one kind per
// restart, each kind once per round) and returns what it did for the
// cycle's progress line.
func (r *runner) damage(cycle int) string {
	d := r.dmg
	cands, err := scanDamage(r.dataDir)
	if err != nil {
		r.progress("cycle %d: listing the data directory: %v", cycle, err)
		return ""
	}
	kind, rest := nextKind(d.queue, cands)
	if kind == "" {
		// Refill: a new round in a seeded order; kinds left in the old
		// round had no file this time, and keep their place in front.
		for _, i := range d.rng.Perm(len(DamageKinds)) {
			if !slices.Contains(d.queue, DamageKinds[i]) {
				d.queue = append(d.queue, DamageKinds[i])
			}
		}
		kind, rest = nextKind(d.queue, cands)
	}
	if kind == "" {
		r.sum.Damage.NoTarget++
		return "; damage: no file of any kind to damage"
	}
	d.queue = rest
	plan := planDamage(kind, cands[kind], d.rng)
	logFrom := int64(0)
	if fi, err := os.Stat(r.logPath); err == nil {
		logFrom = fi.Size()
	}
	ev := DamageEvent{Cycle: cycle, DamagePlan: plan, logFrom: logFrom}
	ev.Rel, _ = filepath.Rel(r.dataDir, plan.Path)
	snap := filepath.Join(r.work, fmt.Sprintf("before-damage-%d", cycle))
	a, err := apply(plan, r.dataDir, snap)
	if err != nil {
		os.RemoveAll(snap)
		r.progress("cycle %d: damaging %s: %v", cycle, plan.Path, err)
		return ""
	}
	ev.At, ev.Held = time.Now(), a.held
	if kind == DSchedFlip && len(ev.Held.Seqs) > 0 {
		// Whether the commitlog can rebuild the entry.
		seq := ev.Held.Seqs[0]
		ev.CommitlogHolds = seq >= firstCommitlogOffset(r.dataDir) && !lostFromCommitlog(d.events, seq, r.dataDir)
	}
	d.pending = a
	d.events = append(d.events, ev)
	where := ""
	if plan.Offset >= 0 {
		where = fmt.Sprintf(" byte %d (^%#02x; the record: %s)", plan.Offset, plan.Mask, a.held)
	}
	return fmt.Sprintf("; damage %s %s%s", kind, ev.Rel, where)
}

// lostFromCommitlog reports whether an earlier repair (of evs) reported
// the commitlog span holding offset seq lost. After a deleted commitlog
// is repaired, a new first segment may start at offset 0 again without
// holding what the deleted ones held, so the file names alone do not say.
func lostFromCommitlog(evs []DamageEvent, seq int64, dataDir string) bool {
	for _, e := range evs {
		if e.Repair == nil || e.Undone {
			continue
		}
		for _, sp := range e.Repair.Lost {
			if log, _ := logOf(sp.File, dataDir); log == "commitlog" && seq >= sp.From && seq < sp.To {
				return true
			}
		}
	}
	return false
}

// firstCommitlogOffset returns the offset of the first commitlog segment
// file (by name); 0 if there is none.
func firstCommitlogOffset(dataDir string) int64 {
	ents, err := os.ReadDir(filepath.Join(dataDir, "commitlog"))
	if err != nil {
		return 0
	}
	for _, e := range ents { // sorted: the first is the oldest
		if v, err := strconv.ParseInt(strings.TrimSuffix(e.Name(), ".log"), 10, 64); err == nil && strings.HasSuffix(e.Name(), ".log") {
			return v
		}
	}
	return 0
}

// startAfterDamage is startServer for the start that meets a damage: it
// judges the start (judgeStart); after a refusal it runs hourglass repair
// (or, without one, puts the damage back), after a hung start it puts the
// damage back, and starts again normally.
func (r *runner) startAfterDamage(cycle int) error {
	d := r.dmg
	a := d.pending
	d.pending = nil
	ev := &d.events[len(d.events)-1]
	defer a.discard()
	t0 := time.Now()
	s, sr, err := launch(r.cfg.Bin, r.dataDir, r.logPath, r.serverArgs(), DamageStartBound)
	if err != nil {
		return err
	}
	r.hist.AddStart(cycle, t0)
	r.extra = append(r.extra, judgeStart(ev, sr, r.dataDir, d.cwd)...)
	if ev.Outcome != RestartStarted && a.changedSince() {
		ev.Note = "the failed start changed the damaged file"
	}
	if ev.Outcome == RestartStarted {
		r.recoveries = append(r.recoveries, sr.After)
		r.srv = s
		r.progress("  restart after %s: started in %v", ev.Kind, sr.After.Round(time.Millisecond))
		return r.measureSkew(s.addr)
	}
	named := "naming the file"
	if !ev.Named {
		named = "NOT naming the file"
	}
	if !ev.RepairHint {
		named += ", not naming `hourglass repair`"
	}
	switch {
	case ev.Outcome != RestartRefused:
		r.progress("  restart after %s: %s after %v; putting the damage back", ev.Kind, ev.Outcome, sr.After.Round(time.Millisecond))
		ev.Undone, ev.Note = true, joinNote(ev.Note, "start "+ev.Outcome)
		if err := a.undo(); err != nil {
			return err
		}
	case d.hasRepair(r.cfg.Bin):
		rr, err := runRepair(context.Background(), r.cfg.Bin, r.dataDir)
		if err != nil {
			return err
		}
		ev.Repair = rr
		decided := ""
		if rr.Decision != "" {
			decided = " (asked for a decision: --" + rr.Decision + ")"
		}
		r.progress("  restart after %s: refused in %v (exit %d, %s); hourglass repair%s, killed %d times first: exit %d, %d lost spans, %d skip records, %d files changed, %d without a copy",
			ev.Kind, sr.After.Round(time.Millisecond), sr.ExitCode, named, decided, rr.Kills, rr.ExitCode, len(rr.Lost), len(rr.Skipped), len(rr.Changed), len(rr.NoCopy))
		v := Violation{Kind: VRepairFailed, Cycle: cycle, At: time.Now()}
		switch {
		case rr.ExitCode != 0:
			v.Detail = fmt.Sprintf("after %s of %s: hourglass repair exited %d: %q", ev.Kind, ev.Rel, rr.ExitCode, lastLines(rr.Output, 2))
			r.extra = append(r.extra, v)
			// Go on from the damage as it was: put it back.
			ev.Undone, ev.Note = true, joinNote(ev.Note, "repair failed")
			if err := a.undo(); err != nil {
				r.progress("  putting the damage back after a failed repair: %v", err)
			}
		default:
			if len(rr.NoCopy) > 0 {
				v.Detail = fmt.Sprintf("after %s of %s: hourglass repair changed or removed %s without a copy under quarantine/",
					ev.Kind, ev.Rel, strings.Join(rr.NoCopy, ", "))
				r.extra = append(r.extra, v)
			}
			if len(rr.Unnamed) > 0 {
				v.Detail = fmt.Sprintf("after %s of %s: hourglass repair, killed %d times first, wrote skip records its last report does not name: %v",
					ev.Kind, ev.Rel, rr.Kills, rr.Unnamed)
				r.extra = append(r.extra, v)
			}
			t0 := time.Now()
			s, sr, err := launch(r.cfg.Bin, r.dataDir, r.logPath, r.serverArgs(), DamageStartBound)
			if err != nil {
				return err
			}
			r.hist.AddStart(cycle, t0)
			if sr.Ready {
				r.recoveries = append(r.recoveries, sr.After)
				r.srv = s
				r.progress("  after hourglass repair: started in %v", sr.After.Round(time.Millisecond))
				return r.measureSkew(s.addr)
			}
			// The refusal named repair as the remedy and it was not one:
			// put the damage back to go on.
			what := fmt.Sprintf("exited %d", sr.ExitCode)
			if !sr.Exited {
				what = fmt.Sprintf("neither ready nor exited within %v", DamageStartBound)
			}
			v.Detail = fmt.Sprintf("after %s of %s and hourglass repair (exit 0) the server still did not start: %s: %q",
				ev.Kind, ev.Rel, what, lastLines(sr.Stderr, 1))
			r.extra = append(r.extra, v)
			r.progress("  after hourglass repair: the server %s; putting the damage back", what)
			ev.Undone, ev.Note = true, joinNote(ev.Note, "repair did not make it start")
			if err := a.undo(); err != nil {
				return err
			}
		}
	default:
		r.progress("  restart after %s: refused in %v (exit %d, %s); this binary has no `hourglass repair`: putting the damage back to go on",
			ev.Kind, sr.After.Round(time.Millisecond), sr.ExitCode, named)
		ev.Undone, ev.Note = true, joinNote(ev.Note, "no hourglass repair in the binary")
		if err := a.undo(); err != nil {
			return err
		}
	}
	return r.startPlain(cycle)
}

// hasRepair asks the binary once whether it has `hourglass repair`.
func (d *damager) hasRepair(bin string) bool {
	if d.repair == 0 {
		d.repair = -1
		if hasRepair(bin) {
			d.repair = 1
		}
	}
	return d.repair == 1
}

// finishDamage judges what only the end of the run shows (whether a
// started server ever reported its damage), marks the violations the
// damages allow, and returns the process-level violations it found.
func (r *runner) finishDamage(ev Events, vs []Violation) []Violation {
	d := r.dmg
	log := ""
	if b, err := os.ReadFile(r.logPath); err == nil {
		log = string(b)
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	var out []Violation
	for i := range d.events {
		e := &d.events[i]
		if e.Outcome != RestartStarted {
			continue
		}
		// From the damage to the next damage of the same file.
		end := int64(len(log))
		for _, n := range d.events[i+1:] {
			if n.Path == e.Path {
				end = min(end, n.logFrom)
				break
			}
		}
		after := log[min(end, e.logFrom):end]
		e.Named = reportsDamage(after, e.Path, r.dataDir, d.cwd, e.Kind == DCommitlogDelete)
		if !e.Named && mustReport(*e, exists) {
			out = append(out, Violation{Kind: VDamageUnreported, Cycle: e.Cycle + 1, At: e.At,
				Detail: fmt.Sprintf("started on %s of %s (%s) and no log line since names the file", e.Kind, e.Rel, heldOrFile(*e))})
		} else if !e.Named {
			e.Named = true // nothing to report (see mustReport)
			e.Note = joinNote(e.Note, "not required to report")
		}
	}
	for _, e := range d.events {
		out = append(out, skipsUnreported(e, log, r.dataDir)...)
	}
	markDamage(vs, damageAllowance(d.events, ev, r.dataDir, r.cfg.SegmentDuration), ev)
	return out
}

// skipsUnreported checks that the start after e's repair logged each
// skip record the repair wrote in the commitlog (engine checkRetained).
func skipsUnreported(e DamageEvent, log, dataDir string) []Violation {
	if e.Repair == nil || e.Undone || e.Repair.ExitCode != 0 {
		return nil
	}
	after := log[min(e.logFrom, int64(len(log))):]
	if strings.Contains(after, "more commitlog spans were given up") {
		return nil // it names the first ones only
	}
	// Adjacent skip records are one span to the server.
	var said []LostSpan
	for _, m := range givenUpRE.FindAllStringSubmatch(after, -1) {
		from, _ := strconv.ParseInt(m[1], 10, 64)
		to, _ := strconv.ParseInt(m[2], 10, 64)
		said = append(said, LostSpan{From: from, To: to})
	}
	var out []Violation
	for _, sp := range e.Repair.Skipped {
		if l, _ := logOf(sp.File, dataDir); l != "commitlog" || slices.ContainsFunc(said, func(s LostSpan) bool { return s.From <= sp.From && sp.To <= s.To }) {
			continue
		}
		out = append(out, Violation{Kind: VDamageUnreported, Cycle: e.Cycle + 1, At: e.At,
			Detail: fmt.Sprintf("the start after the repair of %s (%s) did not log that commitlog offsets %d..%d were given up", e.Rel, e.Kind, sp.From, sp.To)})
	}
	return out
}

// givenUpRE is what the server logs at start of a skipped commitlog span.
var givenUpRE = regexp.MustCompile(`commitlog offsets (\d+)\.\.(\d+) were given up by hourglass repair`)

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

func heldOrFile(e DamageEvent) string {
	if e.Offset < 0 {
		return "the whole file"
	}
	return fmt.Sprintf("byte %d; the record: %s", e.Offset, e.Held)
}

// writeTable prints the per-kind table of a --damage run, the violations
// suspected to follow from each kind, and the damages one by one.
func (s *DamageSummary) writeTable(w io.Writer) {
	fmt.Fprintln(w, "\ndamage by kind (started: ready after the damage, reported: it named the file in its log; refused: exited")
	fmt.Fprintln(w, "non-zero, named: naming the file and `hourglass repair`; undone: the harness put the damage back to go on;")
	fmt.Fprintln(w, "violations: failing ones suspected to follow from it; allowed: losses repair reported):")
	fmt.Fprintf(w, "  %-21s %8s %13s %15s %8s %6s %6s %10s %7s\n", "kind", "injected", "started/rep.", "refused/named", "repaired", "undone", "hung", "violations", "allowed")
	var t DamageStats
	for _, k := range DamageKinds {
		c := s.ByKind[k]
		fmt.Fprintf(w, "  %-21s %8d %13s %15s %8d %6d %6d %10d %7d\n", k, c.Injected, fmt.Sprintf("%d/%d", c.Started, c.Reported),
			fmt.Sprintf("%d/%d", c.Refused, c.Named), c.Repaired, c.Undone, c.Hung, c.Violations, c.Allowed)
		t.Injected += c.Injected
		t.Started += c.Started
		t.Refused += c.Refused
		t.Violations += c.Violations
	}
	fmt.Fprintf(w, "  %-21s %8d %13d %15d %35d\n", "all", t.Injected, t.Started, t.Refused, t.Violations)
	for _, k := range DamageKinds {
		if c := s.ByKind[k]; len(c.ByViolation) > 0 {
			fmt.Fprintf(w, "  violations after %s: %s\n", k, mapString(c.ByViolation))
		}
	}
	fmt.Fprintf(w, "  hourglass repair killed %d times at its steps before a run got through; keyed Schedules sent again after restarts: %d the first ID, %d refused, %d another ID\n",
		s.RepairKills, s.Keys.Same, s.Keys.Refused, s.Keys.Forgotten)
	if s.NoTarget > 0 {
		fmt.Fprintf(w, "  %d restarts had no file of any kind to damage\n", s.NoTarget)
	}
	if !s.RepairCommand {
		fmt.Fprintln(w, "  the binary has no `hourglass repair`: refusals were followed by putting the damage back")
	}
	const maxLines = 50
	for i, e := range s.Events {
		if i == maxLines {
			fmt.Fprintf(w, "  ... and %d more (--json lists every one)\n", len(s.Events)-maxLines)
			break
		}
		line := fmt.Sprintf("  cycle %d: %s %s", e.Cycle, e.Kind, e.Rel)
		if e.Offset >= 0 {
			line += fmt.Sprintf(" byte %d (%s)", e.Offset, e.Held)
		}
		line += ": " + e.Outcome
		if e.Outcome == RestartRefused {
			line += fmt.Sprintf(" (exit %d, named %v, repair hint %v)", e.ExitCode, e.Named, e.RepairHint)
		} else if e.Outcome == RestartStarted {
			line += fmt.Sprintf(" (reported %v)", e.Named)
		}
		if e.Repair != nil {
			line += fmt.Sprintf("; repair exit %d, lost %d spans %d IDs, acks of %d topics, %d buckets pending again", e.Repair.ExitCode,
				len(e.Repair.Lost), len(e.Repair.LostIDs), len(e.Repair.AcksLost), len(e.Repair.BucketsAgain))
			if e.Repair.Decision != "" {
				line += " (--" + e.Repair.Decision + ")"
			}
		}
		if e.Note != "" {
			line += "; " + e.Note
		}
		fmt.Fprintln(w, line)
	}
}

// owed counts the messages the drain still waits for: Check's pending
// ones, but those whose loss a damage allows (damageAllowance).
func (r *runner) owed(ev Events, res Result) int {
	if r.dmg == nil || len(res.Pending) == 0 {
		return len(res.Pending)
	}
	al := damageAllowance(r.dmg.events, ev, r.dataDir, r.cfg.SegmentDuration)
	n := 0
	for _, k := range res.Pending {
		if al.owes(k) {
			n++
		}
	}
	return n
}
