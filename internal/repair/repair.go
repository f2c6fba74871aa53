// Package repair is `hourglass repair`: the steps that make a stopped
// server's damaged data directory start again, in their order, each
// keeping a copy of every file it changes under quarantine/, and the
// journal (journal.go) that records durably what a run is about to do
// before it changes anything, so that a run killed half way still has its
// report read back by every later run and by `hourglass inspect verify`.
// The work on each log is in the package that owns it (commitlog.Repair,
// reput.RepairStep, queue.RepairStep, schedulelog.RepairHeaders,
// engine.RepairDispatchLogs); cmd/hourglass only turns flags into Options.
package repair

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hourglassmq/hourglass"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/queue"
	"github.com/hourglassmq/hourglass/reput"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// Options configure Run.
type Options struct {
	// Dir is the data directory of a stopped server.
	Dir string
	// DryRun finds and prints what would be done and changes nothing (it
	// writes no journal).
	DryRun bool
	// Assume decides the entries of buckets whose dispatch log is damaged
	// or lost (--assume-delivered, --assume-pending).
	Assume engine.Assumption
	// AcceptReplays lets the reput step rebuild a checkpoint when the
	// retired log is lost too (--accept-replays).
	AcceptReplays bool
	// Out receives what each step found and did, one line each.
	Out io.Writer
	// Now is the clock that names the run; default time.Now.
	Now func() time.Time
	// At, if set, is called at each point where a killed run leaves the
	// directory in a state of its own: "planned <step>" (its plan is
	// durable, nothing of the step changed yet), "copying <file>" (the
	// copy is synced under its temporary name), "kept <file>" (the copy
	// is in the quarantine, the file not yet changed), "ran <step>" (the
	// step's changes are made, the journal does not say so yet) and
	// "recorded <step>". A non-nil error stops the run there, as a kill
	// would (tests); the crash harness kills the process instead.
	At func(point string) error
}

// step is one step of a repair: it finds what in one part of the data
// directory stops a server from starting and repairs it, calling
// env.Keep before it changes or deletes a file. It returns how many
// changes it made (or, in a dry run, would make).
type step struct {
	name string
	run  func(env *env) (changes int, err error)
}

// steps run in this order. A step for another log goes here, as a
// function of its own. A step that decides a position other steps use
// (the reput checkpoint, which the commitlog step reads as the position
// the log must reach) goes before them.
var steps = []step{
	{name: "reput checkpoint and retired log", run: func(env *env) (int, error) {
		return reput.RepairStep(filepath.Join(env.dir, "schedule"), env.dryRun, env.r.o.AcceptReplays, env.keep, env.out)
	}},
	{name: "commitlog", run: repairCommitlog},
	{name: "queue", run: func(env *env) (int, error) {
		return queue.RepairStep(hourglass.QueueDir(env.dir), env.dryRun, env.keep, env.out)
	}},
	{name: "schedule segment headers", run: func(env *env) (int, error) {
		return schedulelog.RepairHeaders(filepath.Join(env.dir, "schedule"), schedulelog.HeaderRepairOptions{DryRun: env.dryRun, Keep: env.keep, Out: env.out,
			Fallback: engine.DefaultSegmentDuration.Milliseconds()})
	}},
	{name: "dispatch logs", run: func(env *env) (int, error) {
		return engine.RepairDispatchLogs(filepath.Join(env.dir, "schedule"), engine.DoneRepairOptions{DryRun: env.dryRun, Keep: env.keep, Out: env.out, Assume: env.r.o.Assume,
			Commitlog: filepath.Join(env.dir, "commitlog")})
	}},
}

// errStopped is returned by a run that Options.At stopped.
var errStopped = errors.New("repair: stopped")

// Run repairs the data directory o.Dir, step by step, with the data
// directory's lock held (it fails while a server runs on it). Before a
// step changes anything, its dry run's report is appended to the journal
// durably; what the step then printed replaces it once it is done. The
// reports of earlier runs not yet acknowledged are printed first.
func Run(o Options) error {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if fi, err := os.Stat(o.Dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("repair: no data directory at %s (give --data-dir)", o.Dir)
	}
	lock, err := hourglass.LockDataDir(o.Dir)
	if err != nil {
		return fmt.Errorf("repair: %w: stop the server first", err)
	}
	defer lock.Close()
	r := &runner{o: o, out: o.Out, kept: map[string]bool{}}
	if r.j, err = ReadJournal(o.Dir); err != nil {
		return fmt.Errorf("%w; it is repair's own report: move it aside to go on (its runs are then reported no more)", err)
	}
	earlier := r.printEarlier()
	if o.DryRun {
		fmt.Fprintf(r.out, "repair: dry run on %s: nothing is changed\n", o.Dir)
	}
	total := 0
	for _, st := range steps {
		fmt.Fprintf(r.out, "%s:\n", st.name)
		n, err := r.step(st)
		if errors.Is(err, errStopped) {
			return err
		}
		if err != nil {
			if r.run != nil {
				r.run.State = RunFailed
				r.save()
			}
			return fmt.Errorf("repair: step %s: %w", st.name, err)
		}
		if n == 0 {
			fmt.Fprintf(r.out, "  nothing to repair\n")
		}
		total += n
	}
	return r.finish(total, earlier)
}

// runner is one run of Run.
type runner struct {
	o    Options
	out  io.Writer
	j    *Journal    // nil until there is one
	run  *JournalRun // this run's record in j, once a step planned a change
	kept map[string]bool
}

// step runs st: in a dry run once; otherwise a dry run first, whose
// report goes into the journal before the step runs for real when it has
// anything to change.
func (r *runner) step(st step) (int, error) {
	if r.o.DryRun {
		return st.run(&env{r: r, dir: r.o.Dir, dryRun: true, out: r.out})
	}
	var plan bytes.Buffer
	n, err := st.run(&env{r: r, dir: r.o.Dir, dryRun: true, out: &plan})
	if err != nil || n == 0 {
		r.out.Write(plan.Bytes()) // what it found; nothing changed
		return 0, err
	}
	if err := r.begin(); err != nil {
		return 0, err
	}
	r.run.Steps = append(r.run.Steps, JournalStep{Name: st.name, State: StepPlanned, Plan: lines(plan.String())})
	if err := r.save(); err != nil {
		return 0, err
	}
	if err := r.at("planned " + st.name); err != nil {
		return 0, err
	}
	var done bytes.Buffer
	n, err = st.run(&env{r: r, dir: r.o.Dir, out: io.MultiWriter(r.out, &done)})
	if errors.Is(err, errStopped) {
		return 0, err
	}
	s := &r.run.Steps[len(r.run.Steps)-1]
	s.Done = lines(done.String())
	if err != nil {
		s.State, s.Error = StepFailed, err.Error()
		r.save()
		return 0, err
	}
	if err := r.at("ran " + st.name); err != nil {
		return 0, err
	}
	s.State = StepDone
	if err := r.save(); err != nil {
		return 0, err
	}
	return n, r.at("recorded " + st.name)
}

// begin adds this run to the journal, with a quarantine directory of its
// own.
func (r *runner) begin() error {
	if r.run != nil {
		return nil
	}
	q, err := newQuarantine(r.o.Dir, r.o.Now())
	if err != nil {
		return fmt.Errorf("repair: making the quarantine directory (nothing was changed): %w", err)
	}
	if r.j == nil {
		r.j = &Journal{Format: journalFormat, Version: journalVersion}
	}
	rel, _ := filepath.Rel(r.o.Dir, q)
	r.j.Runs = append(r.j.Runs, JournalRun{ID: filepath.Base(q), Started: r.o.Now().UTC(), Quarantine: rel, Flags: r.flags(), State: RunRunning})
	r.run = &r.j.Runs[len(r.j.Runs)-1]
	fmt.Fprintf(r.out, "  (this run is repair run %s; its report is kept in %s until `hourglass repair --acknowledge`)\n", r.run.ID, JournalName)
	return nil
}

func (r *runner) flags() []string {
	var f []string
	if r.o.Assume != engine.AssumeNothing {
		f = append(f, "--assume-"+string(r.o.Assume))
	}
	if r.o.AcceptReplays {
		f = append(f, "--accept-replays")
	}
	return f
}

func (r *runner) save() error {
	if err := writeJournal(r.o.Dir, r.j); err != nil {
		return fmt.Errorf("repair: writing the journal %s: %w", filepath.Join(r.o.Dir, JournalName), err)
	}
	return nil
}

func (r *runner) at(point string) error {
	if r.o.At == nil {
		return nil
	}
	if err := r.o.At(point); err != nil {
		return fmt.Errorf("%w at %s: %w", errStopped, point, err)
	}
	return nil
}

// printEarlier prints the reports of the journal's runs and returns how
// many there are.
func (r *runner) printEarlier() int {
	if r.j == nil || len(r.j.Runs) == 0 {
		return 0
	}
	fmt.Fprintf(r.out, "earlier repairs, reported until `hourglass repair --acknowledge` (%s):\n", JournalName)
	for _, run := range r.j.Runs {
		for _, l := range run.Report() {
			fmt.Fprintf(r.out, "  %s\n", l)
		}
	}
	return len(r.j.Runs)
}

// finish marks this run complete and the interrupted runs before it
// finished by it (a run that found nothing left to repair finishes them
// too), and prints the summary.
func (r *runner) finish(total, earlier int) error {
	by := r.o.Now().UTC().Format("20060102T150405Z") + " (it found nothing left to repair)"
	if r.run != nil {
		r.run.State, by = RunComplete, r.run.ID
	}
	dirty := r.run != nil
	if r.j != nil && !r.o.DryRun {
		for i := range r.j.Runs {
			if p := &r.j.Runs[i]; p != r.run && p.Interrupted() {
				p.FinishedBy, dirty = by, true
				fmt.Fprintf(r.out, "repair: run %s, interrupted before, is finished now: its report stands\n", p.ID)
			}
		}
	}
	if dirty {
		if err := r.save(); err != nil {
			return err
		}
	}
	verb := "made"
	if r.o.DryRun {
		verb = "would make"
	}
	switch {
	case total == 0:
		fmt.Fprintf(r.out, "repair: nothing to repair in %s\n", r.o.Dir)
	case len(r.kept) > 0:
		fmt.Fprintf(r.out, "repair: %s %d changes in %s; copies of the %d files changed are in %s\n", verb, total, r.o.Dir, len(r.kept), filepath.Join(r.o.Dir, r.run.Quarantine))
	default:
		fmt.Fprintf(r.out, "repair: %s %d changes in %s\n", verb, total, r.o.Dir)
	}
	if r.o.DryRun && total > 0 {
		fmt.Fprintf(r.out, "run again without --dry-run to repair\n")
	}
	if n := earlier + b2i(r.run != nil); n > 0 {
		fmt.Fprintf(r.out, "repair: the reports of %d repair runs stay in %s, and `hourglass inspect verify` shows them, until `hourglass repair --acknowledge`\n",
			n, filepath.Join(r.o.Dir, JournalName))
	}
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// lines splits s into its lines, without their line ends.
func lines(s string) []string {
	var out []string
	for l := range strings.Lines(s) {
		out = append(out, strings.TrimRight(l, "\n"))
	}
	return out
}

// Acknowledge ends the reports of the journal of the data directory dir:
// it moves the journal into the quarantine (a directory of its own, named
// by now), where it stays for the record, and prints what it
// acknowledged. It takes the data directory's lock.
func Acknowledge(dir string, now time.Time, out io.Writer) error {
	lock, err := hourglass.LockDataDir(dir)
	if err != nil {
		return fmt.Errorf("repair: %w: stop the server first", err)
	}
	defer lock.Close()
	j, err := ReadJournal(dir)
	if err != nil {
		return err
	}
	if j == nil {
		fmt.Fprintf(out, "repair: no repair report to acknowledge in %s\n", dir)
		return nil
	}
	for _, run := range j.Runs {
		if run.Interrupted() {
			return fmt.Errorf("repair: run %s was interrupted and no repair finished it since: run `hourglass repair --data-dir %s` first", run.ID, dir)
		}
	}
	q, err := newQuarantine(dir, now)
	if err != nil {
		return err
	}
	if err := moveDurably(filepath.Join(dir, JournalName), filepath.Join(q, JournalName)); err != nil {
		return fmt.Errorf("repair: moving the journal into %s: %w", q, err)
	}
	for _, run := range j.Runs {
		fmt.Fprintf(out, "acknowledged repair run %s (started %s)\n", run.ID, run.Started.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(out, "repair: the journal is kept in %s\n", filepath.Join(q, JournalName))
	return nil
}
