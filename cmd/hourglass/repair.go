package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/internal/repair"
)

const repairDescription = `Repairs what stops a server from starting on a damaged data directory: a
server that finds damage (a record that fails its checksum with valid records
after it, a log that ends below a checkpoint, a missing segment file) refuses
to start and names this command. Run it with the server stopped: it takes the
data directory's lock as serve does, and fails while a server holds it.

It never deletes or overwrites a file without first keeping a copy of it under
--data-dir/quarantine/<UTC time of the run>/ (with -2, -3, ... for more runs in
the same second), at the same path relative to the data directory, so every
repair can be undone by copying the files back. A copy is written under a .tmp
name and renamed once it is whole and synced.

Before a step changes anything, what it is about to do (its dry run's report,
with every span it is about to give up) is written durably to
--data-dir/repair.journal, and what it did replaces it once it has run. Every
later repair and every 'hourglass inspect verify' print the reports of the
journal's runs, so a repair killed half way still says what its changes lost
(an interrupted run is marked so, and the next repair finishes it). The
reports stay until 'hourglass repair --acknowledge' moves the journal into the
quarantine.

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
  hourglass repair --data-dir /var/lib/hourglass
  hourglass repair --data-dir /var/lib/hourglass --acknowledge`

// repairCommand is `hourglass repair`; the steps, their order and the
// journal are package internal/repair's, the work on each log is in the
// package that owns it (commitlog.Repair, ...).
func repairCommand() *cli.Command {
	return &cli.Command{
		Name:        "repair",
		Usage:       "repair a stopped server's damaged data directory, keeping a copy of all it changes",
		UsageText:   "hourglass repair [--data-dir PATH] [--dry-run] [--assume-delivered | --assume-pending] [--accept-replays] | --acknowledge",
		Description: repairDescription,
		Flags: []cli.Flag{
			dataDirFlag("the data directory (`PATH`) of a stopped server"),
			&cli.BoolFlag{Name: "dry-run", Usage: "print what would be repaired; change nothing"},
			&cli.BoolFlag{Name: "assume-delivered", Usage: "release held buckets by marking their undecided entries done (never delivered again; lost if they never were)"},
			&cli.BoolFlag{Name: "assume-pending", Usage: "release held buckets by delivering their undecided entries (at least once: some may come twice)"},
			&cli.BoolFlag{Name: "accept-replays", Usage: "rebuild the reput checkpoint even when the retired log is lost (retired buckets may be delivered again)"},
			&cli.BoolFlag{Name: "acknowledge", Usage: "end the reports of earlier repairs (repair.journal): the journal moves into quarantine/; nothing is repaired"},
		},
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("repair takes no arguments, got %q (see 'hourglass repair --help')", c.Args().First())
			}
			o := repair.Options{Dir: c.String("data-dir"), DryRun: c.Bool("dry-run"), AcceptReplays: c.Bool("accept-replays"), Out: c.App.Writer}
			switch {
			case c.Bool("assume-delivered") && c.Bool("assume-pending"):
				return fmt.Errorf("repair: --assume-delivered and --assume-pending exclude each other: choose one")
			case c.Bool("assume-delivered"):
				o.Assume = engine.AssumeDelivered
			case c.Bool("assume-pending"):
				o.Assume = engine.AssumePending
			}
			if c.Bool("acknowledge") {
				if o.DryRun || o.Assume != engine.AssumeNothing || o.AcceptReplays {
					return fmt.Errorf("repair: --acknowledge takes no other flag but --data-dir: it repairs nothing")
				}
				return repair.Acknowledge(o.Dir, time.Now(), c.App.Writer)
			}
			at, err := killPoint(os.Getenv(repairKillEnv))
			if err != nil {
				return err
			}
			o.At = at
			return repair.Run(o)
		},
	}
}

// repairKillEnv names the environment variable that makes a repair kill
// itself (SIGKILL) at its N-th point (repair.Options.At), for the crash
// harness (cmd/crashtest --damage): a run killed there must leave its
// report to the next.
const repairKillEnv = "HOURGLASS_REPAIR_KILL_AT"

// killPoint returns the repair.Options.At that kills this process at the
// n-th point, for the value v of repairKillEnv; nil when v is empty.
func killPoint(v string) (func(string) error, error) {
	if v == "" {
		return nil, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return nil, fmt.Errorf("repair: %s=%q: want a point number from 1", repairKillEnv, v)
	}
	seen := 0
	return func(point string) error {
		if seen++; seen == n {
			fmt.Fprintf(os.Stderr, "repair: killed at point %d (%s) by %s\n", n, point, repairKillEnv)
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
		return nil
	}, nil
}
