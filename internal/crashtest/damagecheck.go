package crashtest

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// What --damage accepts of a restart after a damage (the harness's doc in
// main.go and the README say the same):
//
//   - It refuses to start: it exits non-zero within DamageStartBound, and
//     its stderr names the damaged file (absolute, relative to the data
//     directory or to the working directory; for a deleted commitlog
//     segment its directory will do) and the command `hourglass repair`.
//     The harness then runs `hourglass repair --data-dir <dir>`, which
//     must exit 0 and leave under <dir>/quarantine/ a byte-identical copy
//     of every file it changed or removed; the next start must succeed.
//     What repair reports as lost is allowed from then on, and only that
//     (parseRepair, damageAllowance): a lost commitlog span loses the
//     schedules whose IDs lie in it and the cancels whose records may
//     (cancelBounds); when it asks for a decision about
//     entries whose dispatch log is lost, the harness takes
//     --assume-pending (runRepair). Without a repair command in the
//     binary, or when repair fails or the server still does not start
//     after it, the harness puts the data directory back as it was before
//     the damage, says so, and restarts.
//   - Or it starts, and over the rest of the run loses nothing and hands
//     out nothing again beyond what the damage provably allows, which is
//     nothing for every kind but one: a flipped schedule entry whose
//     commitlog record retention already deleted may cost that message
//     (while the commitlog holds it, it must be rebuilt from there).
//     A started server must also report the damage (a log line naming the
//     file, I6), unless it is a deleted reput.checkpoint (which only
//     shortens recovery), or the damaged schedule segment or dispatch log
//     was retired with its bucket before the run ended.
//
// Anything else is a violation: a start that neither gets ready nor exits
// within the bound (start-failed), a refusal that does not name the file
// or the repair command (refusal-unclear), a repair that fails or keeps no
// copy (repair-failed), a started server that never reports the damage
// (damage-unreported), and every loss and replay the checker finds that no
// allowance names.

// DamageStartBound bounds a restart after a damage: it is ready or has
// exited within it.
const DamageStartBound = 30 * time.Second

// Restart outcomes after a damage.
const (
	RestartStarted = "started"  // ready
	RestartRefused = "refused"  // exited non-zero within the bound
	RestartHung    = "hung"     // neither ready nor exited within the bound
	RestartExit0   = "exited-0" // exited 0 unasked
)

// startResult is what one start of the server came to.
type startResult struct {
	Ready    bool
	Exited   bool
	ExitCode int
	After    time.Duration
	Stderr   string // this run's stderr
}

// DamageEvent is one damage and what came of it.
type DamageEvent struct {
	Cycle int       `json:"cycle"` // injected after this cycle's stop
	At    time.Time `json:"at"`
	DamagePlan
	Rel  string `json:"rel"` // Path relative to the data directory
	Held Held   `json:"held"`
	// CommitlogHolds: for sched-flip, the entry's seq is at or above the
	// first retained commitlog offset (it can be rebuilt from there).
	CommitlogHolds bool    `json:"commitlog_holds,omitempty"`
	Outcome        string  `json:"outcome"`
	ExitCode       int     `json:"exit_code,omitempty"`
	StartMs        float64 `json:"start_ms"`
	// Named: a refusal's stderr named the file; for a start, a log line
	// after the damage did (checked at the end of the run).
	Named bool `json:"named"`
	// RepairHint: a refusal's stderr named `hourglass repair`.
	RepairHint bool          `json:"repair_hint,omitempty"`
	Stderr     string        `json:"stderr,omitempty"` // a refusal's last lines
	Repair     *RepairResult `json:"repair,omitempty"`
	// Undone: the harness put its damage back (no repair command, or a
	// start that hung) to go on.
	Undone bool   `json:"undone,omitempty"`
	Note   string `json:"note,omitempty"`

	logFrom int64 // server.log size when the damage was made
}

// RepairResult is one run of `hourglass repair`.
type RepairResult struct {
	ExitCode int    `json:"exit_code"`
	Output   string `json:"output"` // its stdout and stderr, the first 4 KB
	// Lost are the spans it reported lost (file, offsets [From, To)).
	Lost []LostSpan `json:"lost,omitempty"`
	// LostIDs and AgainIDs are message IDs it named as lost, or as
	// possibly handed out again.
	LostIDs  []string `json:"lost_ids,omitempty"`
	AgainIDs []string `json:"again_ids,omitempty"`
	// AcksLost are topics whose acks repair could not recover.
	AcksLost []TopicAcks `json:"acks_lost,omitempty"`
	// Decision is the assumption the harness made when repair asked
	// for one ("assume-pending"), or "".
	Decision string `json:"decision,omitempty"`
	// BucketsAgain are dispatch logs whose undecided entries repair left
	// pending: up to UpTo of the bucket's messages may come again.
	BucketsAgain []BucketAgain `json:"buckets_again,omitempty"`
	// Changed lists the files (relative to the data directory) repair
	// changed or removed; NoCopy those of them without a byte-identical
	// copy under quarantine/.
	Changed []string `json:"changed,omitempty"`
	NoCopy  []string `json:"no_copy,omitempty"`
	// Kills counts the runs the harness killed (HOURGLASS_REPAIR_KILL_AT)
	// before the one that finished; Skipped are the skip records written
	// meanwhile (commitlog and queue logs), each of which the finishing
	// run's report must name.
	Kills   int        `json:"kills,omitempty"`
	Skipped []LostSpan `json:"skipped,omitempty"`
	// Unnamed are the spans of Skipped its report does not name.
	Unnamed []LostSpan `json:"unnamed,omitempty"`
}

// TopicAcks is a topic whose acks repair reported lost: up to UpTo
// messages (-1: any number) may be handed out again though acked.
type TopicAcks struct {
	Topic string `json:"topic"`
	UpTo  int64  `json:"up_to"`
}

// BucketAgain is a dispatch log (File, as repair printed it) whose UpTo
// undecided entries repair left pending.
type BucketAgain struct {
	File string `json:"file"`
	UpTo int64  `json:"up_to"`
}

// LostSpan is a span of a log repair reported lost.
type LostSpan struct {
	File     string `json:"file"`
	From, To int64
}

// pathForms are the ways a message may name path: absolute, relative to
// the data directory, relative to the working directory.
func pathForms(path, dataDir, cwd string) []string {
	forms := []string{path}
	if rel, err := filepath.Rel(dataDir, path); err == nil && !strings.HasPrefix(rel, "..") {
		forms = append(forms, rel)
	}
	if rel, err := filepath.Rel(cwd, path); err == nil && cwd != "" {
		forms = append(forms, rel)
	}
	return forms
}

// namesFile reports whether text names path. With dirOK naming its
// directory counts too, in a form with a separator in it (a bare
// "commitlog" names nothing).
func namesFile(text, path, dataDir, cwd string, dirOK bool) bool {
	for _, f := range pathForms(path, dataDir, cwd) {
		if strings.Contains(text, f) {
			return true
		}
	}
	if dirOK {
		for _, f := range pathForms(filepath.Dir(path), dataDir, cwd) {
			if strings.ContainsRune(f, filepath.Separator) && strings.Contains(text, f) {
				return true
			}
		}
	}
	return false
}

// damageWords are what a log line reporting damage says besides the file.
var damageWords = []string{"corrupt", "damage", "torn", "missing", "checksum", "lost", "gone", "deleted", "refus", "quarantin", "repair"}

// reportsDamage reports whether a line of log names path (as namesFile)
// and says something is wrong with it (damageWords): a server that merely
// mentions a file it opens has not reported damage.
func reportsDamage(log, path, dataDir, cwd string, dirOK bool) bool {
	for line := range strings.Lines(log) {
		low := strings.ToLower(line)
		if slices.ContainsFunc(damageWords, func(w string) bool { return strings.Contains(low, w) }) &&
			namesFile(line, path, dataDir, cwd, dirOK) {
			return true
		}
	}
	return false
}

// judgeStart classifies the restart after ev's damage, sets ev's outcome
// and what the refusal named, and returns the violations it shows.
func judgeStart(ev *DamageEvent, sr startResult, dataDir, cwd string) []Violation {
	ev.StartMs = ms(sr.After)
	v := func(kind, detail string) Violation {
		return Violation{Kind: kind, Cycle: ev.Cycle + 1, At: ev.At, Detail: fmt.Sprintf("after %s of %s: %s", ev.Kind, ev.Rel, detail)}
	}
	switch {
	case sr.Ready:
		ev.Outcome = RestartStarted
		return nil
	case sr.Exited && sr.ExitCode == 0:
		ev.Outcome = RestartExit0
		return []Violation{v(VStartFailed, fmt.Sprintf("the server exited 0 after %v without being stopped", sr.After.Round(time.Millisecond)))}
	case !sr.Exited || sr.After > DamageStartBound:
		ev.Outcome = RestartHung
		return []Violation{v(VStartFailed, fmt.Sprintf("neither ready nor exited within %v", DamageStartBound))}
	}
	ev.Outcome, ev.ExitCode = RestartRefused, sr.ExitCode
	ev.Stderr = lastLines(sr.Stderr, 5)
	ev.Named = namesFile(sr.Stderr, ev.Path, dataDir, cwd, ev.Kind == DCommitlogDelete)
	ev.RepairHint = strings.Contains(sr.Stderr, "hourglass repair")
	var missing []string
	if !ev.Named {
		missing = append(missing, "the damaged file "+ev.Rel)
	}
	if !ev.RepairHint {
		missing = append(missing, "the command `hourglass repair`")
	}
	if len(missing) > 0 {
		return []Violation{v(VRefusalUnclear, fmt.Sprintf("refused to start (exit %d) without naming %s; its last line: %q",
			sr.ExitCode, strings.Join(missing, " or "), lastLines(sr.Stderr, 1)))}
	}
	return nil
}

// mustReport reports whether a server that started after ev must have
// named the damaged file in its log by the end of the run; exists says
// whether a file still exists (the harness asks about the damaged file,
// or a deleted dispatch log's schedule segment).
func mustReport(ev DamageEvent, exists func(string) bool) bool {
	switch ev.Kind {
	case DCheckpointDelete:
		return false // it only shortens recovery
	case DSchedFlip:
		return exists(ev.Path) // retired with its bucket: nothing left to report
	case DDoneFlip:
		// A dispatch log whose segment is gone belongs to a retired bucket
		// (a kill cut its retirement between the two deletes): nothing
		// reads it again, so there is nothing to report.
		return exists(ev.Path) && exists(strings.TrimSuffix(ev.Path, ".done")+".sched")
	case DDoneDelete:
		return exists(strings.TrimSuffix(ev.Path, ".done") + ".sched")
	}
	return true
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

var (
	offsetsRE = regexp.MustCompile(`offsets (\d+)\.\.(\d+)`)
	idRE      = regexp.MustCompile(`\b[0-9a-f]{32}\b`)
	topicRE   = regexp.MustCompile(`^topic (\S+): `)
	upToRE    = regexp.MustCompile(`up to (\d+) messages`)
	pendingRE = regexp.MustCompile(`the (\d+) undecided entries stay pending`)
)

// parseRepair reads what `hourglass repair` printed (cmd/hourglass/repair.go
// and queue.RepairStep):
//
//   - a line that names a span of offsets ("offsets A..B") and says it is
//     lost ("... those records are LOST"; "nothing is lost" is not) is a
//     lost span of the file the line names, or else of the last file an
//     earlier line named (the commitlog step prints the fix, "<file>:
//     damaged records (...): offsets A..B ...", then which part of it was
//     routed and which is lost);
//   - "topic T: ... the queue log ... lost" makes every span printed
//     before for a file of T's queue log ("topic T: <file>: ...: offsets
//     A..B ...") a lost span;
//   - "topic T: ACKS LOST: up to N messages ..." says up to N messages of
//     T may be handed out again though acked ("at least N": any number);
//   - "the N undecided entries stay pending and are delivered" (the
//     dispatch-log step under --assume-pending) says up to N messages of
//     the bucket of the last .done file named may be handed out again;
//   - message IDs on a line saying "lost" are lost; on a line saying
//     "again", may be handed out again.
func parseRepair(out string) (r RepairResult) {
	file := ""
	type fix struct {
		topic string
		span  LostSpan
	}
	var fixes []fix
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		low := strings.ToLower(line)
		says := strings.Contains(low, "lost") && !strings.Contains(low, "nothing is lost") && !strings.Contains(low, "not lost")
		topic := ""
		if m := topicRE.FindStringSubmatch(line); m != nil {
			topic = m[1]
		}
		if f := firstPath(line); f != "" {
			file = f
		}
		m := offsetsRE.FindStringSubmatch(line)
		if m != nil {
			from, _ := strconv.ParseInt(m[1], 10, 64)
			to, _ := strconv.ParseInt(m[2], 10, 64)
			sp := LostSpan{File: file, From: from, To: to}
			fixes = append(fixes, fix{topic, sp})
			if says {
				r.Lost = append(r.Lost, sp)
			}
		}
		switch {
		case pendingRE.MatchString(line) && strings.HasSuffix(file, ".done"):
			n, _ := strconv.ParseInt(pendingRE.FindStringSubmatch(line)[1], 10, 64)
			r.BucketsAgain = append(r.BucketsAgain, BucketAgain{File: file, UpTo: n})
		case topic != "" && strings.Contains(line, "ACKS LOST"):
			n := int64(-1)
			if c := upToRE.FindStringSubmatch(line); c != nil {
				n, _ = strconv.ParseInt(c[1], 10, 64)
			}
			r.AcksLost = append(r.AcksLost, TopicAcks{Topic: topic, UpTo: n})
		case topic != "" && m == nil && says && strings.Contains(low, "queue log"):
			for _, f := range fixes {
				if l, t := logOf(f.span.File, ""); f.topic == topic && l == "queue-log" && t == topic {
					r.Lost = append(r.Lost, f.span)
				}
			}
		}
		for _, id := range idRE.FindAllString(line, -1) {
			switch {
			case says:
				r.LostIDs = append(r.LostIDs, id)
			case strings.Contains(low, "again"):
				r.AgainIDs = append(r.AgainIDs, id)
			}
		}
	}
	return r
}

// firstPath returns the first field of line that names a log file (it
// ends in .log, .sched or .done, or is a path to a commitlog or queue
// directory), without surrounding punctuation; "" if none does.
func firstPath(line string) string {
	for _, f := range strings.Fields(line) {
		f = strings.Trim(f, ":,;()\"'`")
		if strings.HasSuffix(f, ".log") || strings.HasSuffix(f, ".sched") || strings.HasSuffix(f, ".done") {
			return f
		}
	}
	return ""
}

// Levels of relevance of a damage to a violation (relevance).
const (
	relNone   = iota
	relAny    // the commitlog or the checkpoint: any message
	relTopic  // a queue log of the message's topic or its dead-letter topic
	relBucket // a schedule segment or dispatch log of the message's bucket
)

// DamageStats are one damage kind's numbers in a run.
type DamageStats struct {
	Injected int `json:"injected"`
	// Started: the next start got ready; Reported: of them, the server
	// named the file in its log (or did not have to).
	Started  int `json:"started"`
	Reported int `json:"started_reported"`
	// Refused: exited non-zero within the bound; Named: of them, naming
	// the file and the repair command.
	Refused int `json:"refused"`
	Named   int `json:"refused_named"`
	// Repaired: hourglass repair ran and the server then started;
	// RepairLost: spans, IDs and topics' acks repair reported lost.
	Repaired   int `json:"repaired"`
	RepairLost int `json:"repair_lost"`
	// Undone: the harness put its damage back (no repair command, or a
	// hung start) to go on.
	Undone int `json:"undone"`
	Hung   int `json:"hung"`
	// Violations that fail the run, suspected to follow from this kind
	// (suspect); Allowed: violations its repair reports allowed.
	Violations int `json:"violations"`
	Allowed    int `json:"allowed"`
	// ByViolation counts those failing violations by violation kind.
	ByViolation map[string]int `json:"by_violation,omitempty"`
}

// DamageSummary is what a --damage run adds to the Summary.
type DamageSummary struct {
	// RepairCommand: the binary has `hourglass repair`.
	RepairCommand bool                    `json:"repair_command"`
	ByKind        map[string]*DamageStats `json:"by_kind"`
	// NoTarget counts restarts where no kind had a file to damage.
	NoTarget int           `json:"no_target"`
	Events   []DamageEvent `json:"events"`
	// Keys are the answers to the keyed Schedules sent again after the
	// restarts (checkKeys); RepairKills the repairs killed in all.
	Keys        KeyChecks `json:"keys"`
	RepairKills int       `json:"repair_kills"`
}
