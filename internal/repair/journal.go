package repair

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hourglassmq/hourglass/segfile"
)

// The repair journal, JournalName in the data directory (docs/FORMAT.md):
// what each run of repair is about to do, written durably before the run
// changes anything, and what it did, until the operator acknowledges it
// (Acknowledge). A run killed after it changed a file (a skip record
// written over a damaged span, a dispatch log rewritten) leaves behind a
// directory that the next run finds whole: without the journal, what that
// change lost would be reported nowhere.
//
// It is one JSON document, rewritten whole at each change (tmp, fsync,
// rename, fsync of the directory), so that a crash leaves the old journal
// or the new one:
//
//	{"format": "hourglass-repair-journal", "version": 1, "runs": [
//	  {"id": "20261205T180000Z", "started": "2026-12-05T18:00:00Z",
//	   "quarantine": "quarantine/20261205T180000Z", "flags": ["--assume-pending"],
//	   "state": "running" | "complete" | "failed", "finished_by": "<a later run's id>",
//	   "steps": [{"name": "commitlog", "state": "planned" | "done" | "failed",
//	              "plan": ["<line>", ...], "done": ["<line>", ...], "error": "..."}]}]}
//
// A step's plan is what its dry run printed, recorded before the step
// changes anything; done is what the step printed when it ran. The format
// name and version are part of the format and must not change.
const (
	// JournalName is the journal's file name in the data directory.
	JournalName    = "repair.journal"
	journalFormat  = "hourglass-repair-journal"
	journalVersion = 1
)

// Run states.
const (
	RunRunning  = "running"  // started and not finished: killed, if no repair runs now
	RunComplete = "complete" // every step ran
	RunFailed   = "failed"   // a step failed; what it recorded stands
)

// Step states.
const (
	StepPlanned = "planned" // its plan is durable; it may have changed files since
	StepDone    = "done"    // it ran
	StepFailed  = "failed"  // it failed after its plan was recorded
)

// Journal is the decoded journal.
type Journal struct {
	Format  string       `json:"format"`
	Version int          `json:"version"`
	Runs    []JournalRun `json:"runs"`
}

// JournalRun is one run of repair that changed, or was about to change, files.
type JournalRun struct {
	ID         string    `json:"id"`
	Started    time.Time `json:"started"`
	Quarantine string    `json:"quarantine"` // relative to the data directory
	Flags      []string  `json:"flags,omitempty"`
	State      string    `json:"state"`
	// FinishedBy names a later run that completed after this one was
	// interrupted (its ID, or its time when it changed nothing): the
	// directory is repaired, and this run's report still says what its
	// changes cost.
	FinishedBy string        `json:"finished_by,omitempty"`
	Steps      []JournalStep `json:"steps"`
}

// JournalStep is what one step of a run recorded.
type JournalStep struct {
	Name  string   `json:"name"`
	State string   `json:"state"`
	Plan  []string `json:"plan"`
	Done  []string `json:"done,omitempty"`
	Error string   `json:"error,omitempty"`
}

// ErrBadJournal is wrapped by the error for a journal that cannot be
// decoded.
var ErrBadJournal = errors.New("repair: damaged journal")

// DecodeJournal decodes a journal and checks its format, version and
// states.
func DecodeJournal(b []byte) (*Journal, error) {
	var j Journal
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadJournal, err)
	}
	if j.Format != journalFormat {
		return nil, fmt.Errorf("%w: format %q, want %q", ErrBadJournal, j.Format, journalFormat)
	}
	if j.Version != journalVersion {
		return nil, fmt.Errorf("%w: version %d, this build reads version %d", ErrBadJournal, j.Version, journalVersion)
	}
	for _, r := range j.Runs {
		if r.ID == "" || (r.State != RunRunning && r.State != RunComplete && r.State != RunFailed) {
			return nil, fmt.Errorf("%w: run %q has state %q", ErrBadJournal, r.ID, r.State)
		}
		for _, s := range r.Steps {
			if s.Name == "" || (s.State != StepPlanned && s.State != StepDone && s.State != StepFailed) {
				return nil, fmt.Errorf("%w: run %q: step %q has state %q", ErrBadJournal, r.ID, s.Name, s.State)
			}
		}
	}
	return &j, nil
}

// ReadJournal reads the journal of the data directory dir; nil when there
// is none.
func ReadJournal(dir string) (*Journal, error) {
	b, err := os.ReadFile(filepath.Join(dir, JournalName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	j, err := DecodeJournal(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, JournalName), err)
	}
	return j, nil
}

// writeJournal durably replaces the journal of dir with j.
func writeJournal(dir string, j *Journal) error {
	b, err := json.MarshalIndent(j, "", " ")
	if err != nil {
		return err
	}
	return segfile.WriteFileAtomic(filepath.Join(dir, JournalName), append(b, '\n'))
}

// Interrupted reports whether the run stopped before it finished and no
// later run completed after it.
func (r *JournalRun) Interrupted() bool { return r.State == RunRunning && r.FinishedBy == "" }

// Loses reports whether what the run recorded names a loss: a line that
// says LOST, or that decided held entries with --assume-delivered.
func (r *JournalRun) Loses() bool {
	for _, s := range r.Steps {
		for _, l := range append(append([]string(nil), s.Plan...), s.Done...) {
			if lineLoses(l) {
				return true
			}
		}
	}
	return false
}

func lineLoses(l string) bool {
	return strings.Contains(l, "LOST") || strings.Contains(l, "assumed delivered")
}

// Report returns the lines that tell an operator what run r did or was
// about to do: for a step that ran, what it printed; for one that may
// have been cut short, the plan it recorded before it changed anything.
func (r *JournalRun) Report() []string {
	head := fmt.Sprintf("repair run %s (started %s, copies in %s)", r.ID, r.Started.UTC().Format(time.RFC3339), r.Quarantine)
	if len(r.Flags) > 0 {
		head += " with " + strings.Join(r.Flags, " ")
	}
	switch {
	case r.Interrupted():
		head += ": INTERRUPTED; it may have made any of the changes below; `hourglass repair` finishes it"
	case r.State == RunRunning:
		head += ": interrupted, and run " + r.FinishedBy + " finished the repair"
	case r.State == RunFailed:
		head += ": failed"
	default:
		head += ": complete"
	}
	out := []string{head}
	for _, s := range r.Steps {
		switch s.State {
		case StepDone:
			out = append(out, "  step "+s.Name+":")
			out = append(out, indent(s.Done)...)
		default:
			what := "was cut short"
			if s.State == StepFailed {
				what = "failed (" + s.Error + ")"
			}
			out = append(out, "  step "+s.Name+" "+what+"; before changing anything it recorded:")
			out = append(out, indent(s.Plan)...)
		}
	}
	return out
}

func indent(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = "  " + l
	}
	return out
}
