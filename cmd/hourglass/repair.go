package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass"
	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/queue"
	"github.com/hourglassmq/hourglass/reput"
	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/segfile"
)

const repairDescription = `Repairs what stops a server from starting on a damaged data directory: a
server that finds damage (a record that fails its checksum with valid records
after it, a log that ends below a checkpoint, a missing segment file) refuses
to start and names this command. Run it with the server stopped: it takes the
data directory's lock as serve does, and fails while a server holds it.

It never deletes or overwrites a file without first keeping a copy of it under
--data-dir/quarantine/<UTC time of the run>/, at the same path relative to the
data directory, so every repair can be undone by copying the files back.

What it does, step by step (each step prints what it found and did):

  reput       A damaged or missing reput checkpoint (schedule/reput.checkpoint)
              is rebuilt from the retired log (schedule/reput.retired), and a
              missing, damaged or short retired log from its whole records and
              the checkpoint: nothing already delivered and retired is routed
              again. When both are lost which buckets were retired is unknown,
              and it stops rather than rebuild what would deliver them again.

  commitlog   A damaged span in a commitlog segment is covered by a skip record
              (docs/FORMAT.md) that readers step over; every other record keeps
              its offset, and no offset is ever used again. A log that ends
              below reput's checkpoint is given a skip record up to it; a
              missing segment file is recreated as one skip record. For each
              lost span it says whether it was already routed (below the
              checkpoint: the schedule segments hold those messages, nothing
              is lost) or not (those records are lost: it says how many bytes).
              A torn tail (the last write cut short, nothing valid after it) is
              left to the server, which truncates it when it starts.

  queue       Each topic's queue log and ack log (queue/topics/<topic>/): damaged
              spans get skip records the same way, a queue log that ends below
              what its ack log names is given a skip record up to it, and a
              checkpoint stating the repaired state is appended to the ack log.
              Lost queue-log spans are messages LOST (it says how many bytes);
              lost acks mean messages already acked are handed out again: it
              says ACKS LOST and up to how many messages that may be.

  schedule segment headers
              A schedule segment (schedule/*.sched) whose header cannot be read
              stops routing when a message must go into it, and its bucket is
              not loaded. Its records carry their own checksums: the header is
              rebuilt from the file name (the start) and the duration the other
              segments have (else the default hour) that holds every entry in
              the file. A segment no duration fits is left as it is, and the
              step fails naming it.

  dispatch logs
              A bucket whose done log (schedule/*.done) is damaged, or missing
              after the bucket started, is held by the server: which of its
              entries were delivered is unknown, and the server delivers none
              of them until an operator decides. Entries whose cancel the
              commitlog still holds are recorded cancelled. This step says how many
              entries are undecided and needs the decision as a flag:
              --assume-delivered marks them done (none is delivered; those
              not delivered before are lost), --assume-pending releases them
              (each is delivered; those delivered before come twice). The old
              log is kept in the quarantine either way.

A decision a step needs is never taken silently: without its flag the step
stops, says what it found and which flag decides it, and nothing after it runs.
--accept-replays lets the reput step rebuild a checkpoint when the retired log
is lost too (buckets retired before may be delivered again).

--dry-run prints what would be done and changes nothing. Exit status: 0 when
the directory is repaired or nothing needed repair, 1 on an error.

  hourglass repair --data-dir /var/lib/hourglass --dry-run
  hourglass repair --data-dir /var/lib/hourglass`

// repairCommand is `hourglass repair`; the work is in the packages that
// own each log (commitlog.Repair, ...).
func repairCommand() *cli.Command {
	return &cli.Command{
		Name:        "repair",
		Usage:       "repair a stopped server's damaged data directory, keeping a copy of all it changes",
		UsageText:   "hourglass repair [--data-dir PATH] [--dry-run] [--assume-delivered | --assume-pending] [--accept-replays]",
		Description: repairDescription,
		Flags: []cli.Flag{
			dataDirFlag("the data directory (`PATH`) of a stopped server"),
			&cli.BoolFlag{Name: "dry-run", Usage: "print what would be repaired; change nothing"},
			&cli.BoolFlag{Name: "assume-delivered", Usage: "release held buckets by marking their undecided entries done (never delivered again; lost if they never were)"},
			&cli.BoolFlag{Name: "assume-pending", Usage: "release held buckets by delivering their undecided entries (at least once: some may come twice)"},
			&cli.BoolFlag{Name: "accept-replays", Usage: "rebuild the reput checkpoint even when the retired log is lost (retired buckets may be delivered again)"},
		},
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("repair takes no arguments, got %q (see 'hourglass repair --help')", c.Args().First())
			}
			var d repairDecisions
			switch {
			case c.Bool("assume-delivered") && c.Bool("assume-pending"):
				return fmt.Errorf("repair: --assume-delivered and --assume-pending exclude each other: choose one")
			case c.Bool("assume-delivered"):
				d.assume = engine.AssumeDelivered
			case c.Bool("assume-pending"):
				d.assume = engine.AssumePending
			}
			d.acceptReplays = c.Bool("accept-replays")
			return runRepair(c.String("data-dir"), c.Bool("dry-run"), d, time.Now().UTC(), c.App.Writer)
		},
	}
}

// repairEnv is what every repair step is given.
type repairEnv struct {
	// Dir is the data directory.
	Dir string
	// DryRun: find and print, change nothing.
	DryRun bool
	// Out receives what the step found and did, one line each.
	Out io.Writer
	// Quarantine is where Keep copies files: Dir/quarantine/<UTC time>.
	Quarantine string
	// Decisions are the operator's answers to what a step cannot decide.
	Decisions repairDecisions
	kept      map[string]bool
}

// Keep copies the file at path (inside Dir) to the same relative path
// under Quarantine, durably, once per run: call it before changing or
// deleting any file. In a dry run it does nothing.
func (env *repairEnv) Keep(path string) error {
	if env.DryRun || env.kept[path] {
		return nil
	}
	rel, err := filepath.Rel(env.Dir, path)
	if err != nil || !filepath.IsLocal(rel) {
		return fmt.Errorf("repair: %s is not inside the data directory %s", path, env.Dir)
	}
	dst := filepath.Join(env.Quarantine, rel)
	if err := copyDurably(path, dst, env.Dir); err != nil {
		return fmt.Errorf("repair: keeping a copy of %s in %s (nothing was changed): %w", path, dst, err)
	}
	env.kept[path] = true
	fmt.Fprintf(env.Out, "  kept a copy of %s in %s\n", rel, dst)
	return nil
}

// Progress returns a progress callback that prints a line at most once
// a second, for scans that take long.
func (env *repairEnv) Progress(what string) func(done, total int64) {
	last := time.Now()
	return func(done, total int64) {
		if now := time.Now(); now.Sub(last) >= time.Second && total > 0 {
			last = now
			fmt.Fprintf(env.Out, "  %s: %d%% (%d of %d MiB)\n", what, done*100/total, done>>20, total>>20)
		}
	}
}

// repairDecisions are the flags that decide what the data cannot.
type repairDecisions struct {
	assume        engine.Assumption // held dispatch-log entries
	acceptReplays bool              // a checkpoint rebuilt without the retired log
}

// repairStep is one step of hourglass repair: it finds what in one part
// of the data directory stops a server from starting and repairs it,
// calling env.Keep before it changes or deletes a file. It returns how
// many changes it made (or, in a dry run, would make).
type repairStep struct {
	name string
	run  func(env *repairEnv) (changes int, err error)
}

// repairSteps run in this order. A step for another log goes here, as a
// function of its own: the queue's logs, the reput checkpoint and the
// done logs. A step that decides a position other steps use (the reput
// checkpoint, which the commitlog step reads as the position the log must
// reach) goes before them.
var repairSteps = []repairStep{
	{name: "reput checkpoint and retired log", run: func(env *repairEnv) (int, error) {
		return reput.RepairStep(filepath.Join(env.Dir, "schedule"), env.DryRun, env.Decisions.acceptReplays, env.Keep, env.Out)
	}},
	{name: "commitlog", run: repairCommitlog},
	{name: "queue", run: func(env *repairEnv) (int, error) {
		return queue.RepairStep(hourglass.QueueDir(env.Dir), env.DryRun, env.Keep, env.Out)
	}},
	{name: "schedule segment headers", run: func(env *repairEnv) (int, error) {
		return schedulelog.RepairHeaders(filepath.Join(env.Dir, "schedule"), schedulelog.HeaderRepairOptions{DryRun: env.DryRun, Keep: env.Keep, Out: env.Out,
			Fallback: engine.DefaultSegmentDuration.Milliseconds()})
	}},
	{name: "dispatch logs", run: func(env *repairEnv) (int, error) {
		return engine.RepairDispatchLogs(filepath.Join(env.Dir, "schedule"), engine.DoneRepairOptions{DryRun: env.DryRun, Keep: env.Keep, Out: env.Out, Assume: env.Decisions.assume,
			Commitlog: filepath.Join(env.Dir, "commitlog")})
	}},
}

// runRepair runs every step on dir and prints a summary.
func runRepair(dir string, dryRun bool, d repairDecisions, now time.Time, out io.Writer) error {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("repair: no data directory at %s (give --data-dir)", dir)
	}
	lock, err := hourglass.LockDataDir(dir)
	if err != nil {
		return fmt.Errorf("repair: %w: stop the server first", err)
	}
	defer lock.Close()
	env := &repairEnv{Dir: dir, DryRun: dryRun, Out: out, kept: map[string]bool{}, Decisions: d,
		Quarantine: filepath.Join(dir, "quarantine", now.Format("20060102T150405Z"))}
	verb := "made"
	if dryRun {
		verb = "would make"
		fmt.Fprintf(out, "repair: dry run on %s: nothing is changed\n", dir)
	}
	total := 0
	for _, st := range repairSteps {
		fmt.Fprintf(out, "%s:\n", st.name)
		n, err := st.run(env)
		if err != nil {
			return fmt.Errorf("repair: step %s: %w", st.name, err)
		}
		if n == 0 {
			fmt.Fprintf(out, "  nothing to repair\n")
		}
		total += n
	}
	switch {
	case total == 0:
		fmt.Fprintf(out, "repair: nothing to repair in %s\n", dir)
	case len(env.kept) > 0:
		fmt.Fprintf(out, "repair: %s %d changes in %s; copies of the %d files changed are in %s\n", verb, total, dir, len(env.kept), env.Quarantine)
	default:
		fmt.Fprintf(out, "repair: %s %d changes in %s\n", verb, total, dir)
	}
	if dryRun && total > 0 {
		fmt.Fprintf(out, "run again without --dry-run to repair\n")
	}
	return nil
}

// repairCommitlog is the commitlog step (commitlog.Repair), with the reput
// checkpoint as the position the log must reach.
func repairCommitlog(env *repairEnv) (int, error) {
	dir := filepath.Join(env.Dir, "commitlog")
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	ckpt, ok, err := reput.ReadCheckpoint(filepath.Join(env.Dir, "schedule"))
	switch {
	case err != nil:
		return 0, fmt.Errorf("the reput checkpoint cannot be read, so the position the commitlog must reach is unknown: %w", err)
	case !ok:
		ckpt = 0
		fmt.Fprintf(env.Out, "  no reput checkpoint: every record is taken as not yet routed\n")
	}
	fixes, err := commitlog.Repair(dir, commitlog.RepairOptions{MinEnd: ckpt, DryRun: env.DryRun, Keep: env.Keep,
		Progress: env.Progress("scanning the commitlog")})
	if err != nil {
		return 0, err
	}
	changes := 0
	var gaps []seqGap // read when a routed span is lost
	gapsRead := false
	for _, f := range fixes {
		rel, _ := filepath.Rel(env.Dir, f.File)
		if f.Kind == commitlog.FixTornTail {
			fmt.Fprintf(env.Out, "  %s: a torn tail of %d bytes at offset %d (a write cut short, nothing valid after it): the server truncates it when it starts\n",
				rel, f.Bytes(), f.From)
			continue
		}
		changes++
		what := map[commitlog.FixKind]string{
			commitlog.FixSkipDamage:      "damaged records",
			commitlog.FixSkipToMinEnd:    "the log ends below the reput checkpoint",
			commitlog.FixRecreateSegment: "a missing segment file",
		}[f.Kind]
		act := "skip record written at file position " + fmt.Sprint(f.Pos)
		if f.Kind == commitlog.FixRecreateSegment {
			act = "recreated as one skip record"
		}
		if env.DryRun {
			act = "would be " + act
		}
		fmt.Fprintf(env.Out, "  %s: %s (%v): offsets %d..%d (%d bytes); %s\n", rel, what, cause(f.Cause), f.From, f.To, f.Bytes(), act)
		if f.Records > 0 {
			fmt.Fprintf(env.Out, "    the span held %d records (their headers still chain)\n", f.Records)
		}
		if routed := min(f.To, ckpt) - f.From; routed > 0 {
			if !gapsRead {
				gaps, gapsRead = damagedSeqGaps(filepath.Join(env.Dir, "schedule")), true
			}
			// Routed records are in the schedule segments, except where a
			// segment's entries are damaged: the server rebuilds those from
			// the commitlog, which no longer holds them.
			lostHere := false
			for _, g := range gaps {
				from, to := max(f.From, int64(g.lo)+1), min(f.From+routed, int64(g.hi))
				if from >= to {
					continue
				}
				lostHere = true
				fmt.Fprintf(env.Out, "    offsets %d..%d: damaged entries of the schedule segment of bucket %s were rebuilt from these records, now gone: those records are LOST\n",
					from, to, g.bucket)
			}
			if !lostHere {
				fmt.Fprintf(env.Out, "    offsets %d..%d (%d bytes) were already routed (below the reput checkpoint %d): the schedule segments hold them, nothing is lost\n",
					f.From, f.From+routed, routed, ckpt)
			}
		}
		if lost := f.To - max(f.From, ckpt); lost > 0 {
			if f.Kind == commitlog.FixRecreateSegment {
				fmt.Fprintf(env.Out, "    offsets %d..%d were not routed: whatever records the missing file held there are LOST (how many is unknown); no offset in the span is used again\n",
					max(f.From, ckpt), f.To)
			} else {
				recs := "at least one record"
				if f.Records > 0 && f.From >= ckpt {
					recs = fmt.Sprintf("%d records", f.Records)
				}
				fmt.Fprintf(env.Out, "    offsets %d..%d (%d bytes, %s) were not routed: those records are LOST\n",
					max(f.From, ckpt), f.To, lost, recs)
			}
		}
	}
	return changes, nil
}

// seqGap is a damaged region of a schedule segment: the seqs of its
// entries lie strictly between lo and hi (the good entries around it).
type seqGap struct {
	bucket string // the segment's bucket start, RFC 3339
	lo, hi uint64
}

// damagedSeqGaps lists the damaged regions of the schedule segments in
// dir (what the server rebuilds from the commitlog while it holds them).
func damagedSeqGaps(dir string) []seqGap {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []seqGap
	for _, e := range ents {
		start, ok := schedulelog.ParseName(e.Name())
		if !ok {
			continue
		}
		bucket := time.UnixMilli(start).UTC().Format(time.RFC3339)
		r, err := schedulelog.OpenReader(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		it := r.Scan(schedulelog.FirstOffset, -1)
		var lo uint64
		for it.Next() {
			if len(it.Skipped()) > 0 {
				out = append(out, seqGap{bucket: bucket, lo: lo, hi: it.Seq()})
			}
			lo = it.Seq()
		}
		if ds := it.Skipped(); len(ds) > 0 && !ds[len(ds)-1].Torn {
			out = append(out, seqGap{bucket: bucket, lo: lo, hi: math.MaxInt64})
		}
		r.Close()
	}
	return out
}

// cause returns the innermost useful text of a fix's cause.
func cause(err error) string {
	var ce *segfile.CorruptionError
	if errors.As(err, &ce) {
		return ce.Err.Error()
	}
	if err == nil {
		return "damaged"
	}
	return err.Error()
}

// copyDurably copies src to dst (creating its directories), keeping
// runs of zeros as holes, and fsyncs it and the directories from its own
// up to root; it refuses to replace an existing dst.
func copyDurably(src, dst, root string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	var size int64
	buf := make([]byte, 1<<20)
	for {
		n, rerr := in.ReadAt(buf, size)
		if n > 0 && !allZero(buf[:n]) {
			if _, err := out.WriteAt(buf[:n], size); err != nil {
				out.Close()
				return err
			}
		}
		size += int64(n)
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			out.Close()
			return rerr
		}
	}
	err = out.Truncate(size)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	for d := filepath.Dir(dst); ; d = filepath.Dir(d) {
		if err := segfile.SyncDir(d); err != nil {
			return err
		}
		if d == root || d == filepath.Dir(d) {
			return nil
		}
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
