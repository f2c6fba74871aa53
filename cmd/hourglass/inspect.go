package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/hourglassmq/hourglass/internal/inspect"
	"github.com/hourglassmq/hourglass/message"
)

const inspectDescription = `Reads a data directory and says what is on disk: what is scheduled for when, what
was delivered, and whether anything is damaged. It never starts the server, takes
no lock, opens every file read-only and repairs nothing, so it is safe while a
server runs on the same directory (a torn tail it finds in a file being written
may then be a write in progress: run verify again).

Every command takes --data-dir (default ./hourglass-data, or HOURGLASS_DATA_DIR),
--json (one JSON object per line, for jq) and --now (compare with this time, RFC
3339, instead of the clock). A progress bar appears on stderr for scans that take
more than half a second, when stderr is a terminal. Output has no colour.

  hourglass inspect segments                       what each bucket holds
  hourglass inspect dump --bucket 2026-11-30T05:00:00Z --pending-only
  hourglass inspect commitlog [--dump OFFSET]
  hourglass inspect verify                         exit 0 clean, 1 damaged, 2 could not run
  hourglass inspect timeline --hours 48

Exit status: 0 on success; 1 on an error (verify: damage found); 2 when verify
could not run (a bad flag, a directory that cannot be read).`

const segmentsDescription = `One row per schedule segment (one delivery-time bucket each), in time order:
bucket start (UTC) and length, file, size (segment and dispatch log), entries,
how many are done (delivered, cancelled, dead-lettered) and pending, the state,
and when the bucket starts. Totals at the bottom.

The state of a segment at --now is the first that applies:
  damaged   the segment or its dispatch log could not be read to the end
  empty     no entries
  done      every entry is done; the server deletes it once its bucket is over
  overdue   its bucket is over and entries are pending (server down, or a backlog)
  loaded    now >= start - preload lead: a running server holds it in memory
  future    not loaded yet: it costs disk, no memory
The preload lead is the server's default (10m, or a sixth of the segment's length
when that is shorter) unless --preload-lead says otherwise: give the value the
server runs with. A "*" after the state marks an incomplete record at the end of
the segment (a write in progress, or a torn tail).

--json: one {"kind":"segment",...} per segment, then {"kind":"total",...}.
Exit status: 0, or 1 on an error.`

const dumpDescription = `Prints the entries of one schedule segment in file (commitlog) order: ID, offset
in the file, topic, delivery time (UTC), attempt, state (pending, delivered,
cancelled, dead-lettered) and body. A body is shown as text when it is printable
UTF-8 (tabs and newlines escaped), else as base64:..., and cut at 40 characters
("…") unless --full.

Name the segment by a time in its bucket (--bucket, RFC 3339, or the ID of a
message: its delivery time) or by its file (a name such as
20261130T050000Z.sched, or a path into --data-dir/schedule).

--json: one object per entry with id, offset, topic, deliver_at, attempt, state,
headers, body (or body_base64), body_bytes and truncated.
Exit status: 0, or 1 on an error.`

const commitlogDescription = `Lists the commitlog's segment files: base offset, size, records, bytes used, and
role (sealed; active: the one being written; spare: preallocated for the next),
the offsets of the retained records, and reput's checkpoint: every record below
it is durably routed into the schedule segments; what follows is routed again
after a restart (never twice into a segment).

--dump OFFSET prints the records from the first at or after OFFSET instead (0:
from the oldest): offset, type, framed size, whether reput's checkpoint is past
it, and for a schedule record its ID, topic, delivery time, attempt and body; for
a cancel the ID it cancels.

--json: one object per segment and a summary, or one per record with --dump.
Exit status: 0, or 1 on an error.`

const verifyDescription = `Checks every checksum of every file: the commitlog, each schedule segment and
its dispatch log, reput's checkpoint, and the built-in queue's logs; and that no
file is missing or out of place. Each problem is printed with its file (relative
to --data-dir), byte offset and kind:
  torn-tail    an incomplete record at the end of a file being appended to: what
               a crash during a write leaves (or, on a live server, a write in
               progress); the server cuts it when it next opens the file
  corruption   a checksum or field that does not hold where data must be whole;
               never repaired automatically: the server refuses or skips it
  missing      a file that must exist does not (a gap in the commitlog)
  unexpected   a file that does not belong where it is
  repair-report  a run of 'hourglass repair' (repair.journal) that was interrupted,
               or whose changes lost data, printed with what it did or was about
               to do, until 'hourglass repair --acknowledge'
Notes (harmless leftovers, files a running server deleted during the check, a
repair that lost nothing) are printed too but are not damage.

--json: one {"kind":"problem"|"note",...} per finding, then {"kind":"summary",...}.
Exit status: 0 when clean, 1 when damaged, 2 when the check could not run.`

const timelineDescription = `Counts the messages not yet done by hour ahead of --now and draws a bar chart:
a row for those already overdue, one per hour for --hours hours, and one for all
later ones. It reads every schedule segment.

--json: one object per row: {"row":"overdue"|"hour"|"later","hour":N,"from":...,
"to":...,"pending":N}.
Exit status: 0, or 1 on an error.`

// inspectFlags are the flags every inspect command takes.
func inspectFlags(extra ...cli.Flag) []cli.Flag {
	return append([]cli.Flag{
		dataDirFlag("the data directory (`PATH`) to read; nothing in it is changed"),
		&cli.BoolFlag{Name: "json", Usage: "print one JSON object per line instead of a table"},
		&cli.StringFlag{Name: "now", Usage: "compare with this `TIME` (RFC 3339, e.g. 2026-11-30T05:00:00Z) instead of the clock"},
	}, extra...)
}

var preloadLeadFlag = &cli.DurationFlag{Name: "preload-lead", DefaultText: "10m, or a sixth of the segment's length when shorter",
	Usage: "the server's --preload-lead (`DURATION`), to tell loaded segments from future ones"}

// inspectCommand is `hourglass inspect`; the work is in internal/inspect.
func inspectCommand() *cli.Command {
	return &cli.Command{
		Name:        "inspect",
		Usage:       "show what is on disk: segments, entries, the commitlog, damage, pending by hour",
		UsageText:   "hourglass inspect COMMAND [--data-dir PATH] [--json] [options]",
		Description: inspectDescription,
		Subcommands: []*cli.Command{
			{
				Name: "segments", Usage: "one row per schedule segment: entries, done, pending, state",
				UsageText:   "hourglass inspect segments [--data-dir PATH] [--json] [--now TIME] [--preload-lead D]",
				Description: segmentsDescription, Flags: inspectFlags(preloadLeadFlag),
				OnUsageError: usageError, Action: runSegments,
			},
			{
				Name: "dump", Usage: "the entries of one segment",
				UsageText:   "hourglass inspect dump (--bucket TIME | FILE) [--topic T] [--pending-only] [--limit N] [--full] [--json]",
				Description: dumpDescription,
				Flags: inspectFlags(preloadLeadFlag,
					&cli.StringFlag{Name: "bucket", Usage: "the segment whose bucket holds `TIME` (RFC 3339), or the message of this ID"},
					&cli.StringFlag{Name: "topic", Usage: "only entries of `TOPIC`"},
					&cli.BoolFlag{Name: "pending-only", Usage: "only entries not done"},
					&cli.IntFlag{Name: "limit", Usage: "at most `N` entries (0: all)"},
					&cli.BoolFlag{Name: "full", Usage: "print whole bodies"},
				),
				OnUsageError: usageError, Action: runDump,
			},
			{
				Name: "commitlog", Usage: "the commitlog's segments and reput's position, or its records",
				UsageText:   "hourglass inspect commitlog [--data-dir PATH] [--json] [--dump OFFSET [--limit N] [--full]]",
				Description: commitlogDescription,
				Flags: inspectFlags(
					&cli.Int64Flag{Name: "dump", Usage: "print the records from `OFFSET` on (0: the oldest)"},
					&cli.IntFlag{Name: "limit", Usage: "with --dump, at most `N` records (0: all)"},
					&cli.BoolFlag{Name: "full", Usage: "with --dump, print whole bodies"},
				),
				OnUsageError: usageError, Action: runCommitlog,
			},
			{
				Name: "verify", Usage: "check every checksum of every file; exit 0 clean, 1 damaged, 2 could not run",
				UsageText:   "hourglass inspect verify [--data-dir PATH] [--json]",
				Description: verifyDescription, Flags: inspectFlags(),
				OnUsageError: func(c *cli.Context, err error, sub bool) error {
					return cli.Exit("hourglass: "+usageError(c, err, sub).Error(), 2)
				},
				Action: runVerify,
			},
			{
				Name: "timeline", Usage: "pending messages per hour ahead, as a bar chart",
				UsageText:    "hourglass inspect timeline [--hours N] [--data-dir PATH] [--json] [--now TIME]",
				Description:  timelineDescription,
				Flags:        inspectFlags(&cli.IntFlag{Name: "hours", Value: 24, Usage: "hours ahead to chart, one row each (`N`, 1 to 8784)"}),
				OnUsageError: usageError, Action: runTimeline,
			},
		},
	}
}

// inspectSetup reads the common flags.
func inspectSetup(c *cli.Context) (inspect.Options, inspect.Output, error) {
	o := inspect.Options{Dir: c.String("data-dir")}
	if o.Dir == "" {
		return o, inspect.Output{}, errors.New("--data-dir is empty: name a data directory")
	}
	o.Now = time.Now()
	if s := c.String("now"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return o, inspect.Output{}, fmt.Errorf("--now %q: want an RFC 3339 time such as 2026-11-30T05:00:00Z", s)
		}
		o.Now = t
	}
	if c.IsSet("preload-lead") {
		o.PreloadLead = c.Duration("preload-lead")
		if o.PreloadLead <= 0 {
			return o, inspect.Output{}, fmt.Errorf("--preload-lead %v: must be positive", o.PreloadLead)
		}
	}
	if f, ok := c.App.ErrWriter.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		o.Progress = inspect.NewBar(f, 500*time.Millisecond, time.Now)
	}
	return o, inspect.Output{W: c.App.Writer, JSON: c.Bool("json"), Now: o.Now}, nil
}

// inspectSetupNoArgs is inspectSetup for a command that takes no
// arguments.
func inspectSetupNoArgs(c *cli.Context) (inspect.Options, inspect.Output, error) {
	if c.NArg() > 0 {
		return inspect.Options{}, inspect.Output{}, fmt.Errorf("%s takes no arguments, got %q (see '%s --help')", c.Command.Name, c.Args().Slice(), c.Command.HelpName)
	}
	return inspectSetup(c)
}

func runSegments(c *cli.Context) error {
	o, out, err := inspectSetupNoArgs(c)
	if err != nil {
		return err
	}
	segs, tot, err := inspect.Segments(o)
	if err != nil {
		return err
	}
	return out.WriteSegments(o, segs, tot)
}

func runDump(c *cli.Context) error {
	o, out, err := inspectSetup(c)
	if err != nil {
		return err
	}
	var at time.Time
	file := c.Args().First()
	switch {
	case c.NArg() > 1:
		return fmt.Errorf("dump takes one segment FILE, got %q", c.Args().Slice())
	case c.IsSet("bucket") == (file != ""):
		return errors.New("dump needs --bucket TIME or a segment FILE, not both (see 'hourglass inspect segments' for the segments)")
	case c.IsSet("bucket"):
		if id, perr := message.ParseID(c.String("bucket")); perr == nil {
			at = id.Time() // the bucket of the message's delivery time
		} else if at, err = time.Parse(time.RFC3339Nano, c.String("bucket")); err != nil {
			return fmt.Errorf("--bucket %q: want an RFC 3339 time such as 2026-11-30T05:00:00Z, or a message ID", c.String("bucket"))
		}
	}
	if c.Int("limit") < 0 {
		return fmt.Errorf("--limit %d: must not be negative", c.Int("limit"))
	}
	name, err := inspect.FindSegment(o, file, at)
	if err != nil {
		return err
	}
	dw := out.NewDumpWriter(c.Bool("full"))
	shown := 0
	seg, err := inspect.Dump(o, name, inspect.DumpFilter{Topic: c.String("topic"), PendingOnly: c.Bool("pending-only"), Limit: c.Int("limit")},
		func(e *inspect.Entry) error { shown++; return dw.Entry(e) })
	if err != nil {
		return err
	}
	return dw.Close(o, seg, shown)
}

func runCommitlog(c *cli.Context) error {
	o, out, err := inspectSetupNoArgs(c)
	if err != nil {
		return err
	}
	if !c.IsSet("dump") {
		cl, err := inspect.ReadCommitlog(o)
		if err != nil {
			return err
		}
		return out.WriteCommitlog(o, cl)
	}
	from := c.Int64("dump")
	if from < 0 || c.Int("limit") < 0 {
		return fmt.Errorf("--dump %d --limit %d: neither may be negative", from, c.Int("limit"))
	}
	rw := out.NewRecordWriter(c.Bool("full"))
	if err := inspect.DumpCommitlog(o, from, c.Int("limit"), rw.Record); err != nil {
		return err
	}
	return rw.Close()
}

// runVerify exits 1 when it finds damage and 2 when it cannot check.
func runVerify(c *cli.Context) error {
	couldNot := func(err error) error { return cli.Exit("hourglass: inspect verify: "+err.Error(), 2) }
	o, out, err := inspectSetupNoArgs(c)
	if err != nil {
		return couldNot(err)
	}
	rep, err := inspect.Verify(o)
	if err != nil {
		return couldNot(err)
	}
	if err := out.WriteVerify(rep); err != nil {
		return couldNot(err)
	}
	if !rep.Clean() {
		return cli.Exit("", 1)
	}
	return nil
}

func runTimeline(c *cli.Context) error {
	o, out, err := inspectSetupNoArgs(c)
	if err != nil {
		return err
	}
	hours := c.Int("hours")
	if hours < 1 || hours > 8784 {
		return fmt.Errorf("--hours %d: from 1 to 8784 (a year)", hours)
	}
	t, err := inspect.ReadTimeline(o, hours)
	if err != nil {
		return err
	}
	return out.WriteTimeline(t)
}
