package main

// The flags of a recurring schedule's jitter, overlap policy and
// calendar, and schedule backfill.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass/client"
	"github.com/hourglassmq/hourglass/internal/units"
)

const schedulePolicyHelp = `--jitter D delays each occurrence's delivery by 0 to D (at most 7d), never
before its time: the same delay for the same occurrence, derived from NAME and
its time, so that many schedules of one spec do not all fire at once. The
occurrence's key and hourglass-occurrence header keep the time without jitter.

--overlap is what an occurrence does while the previous one is not yet acked
(received and not acked, or waiting for a retry):
  allow         (the default) deliver it anyway
  skip          do not deliver it (counted as skipped); go on with the next
  buffer-one    hold it until the previous one is acked, then deliver it at
                once; while one is held, later ones are skipped
Overlap policies other than allow are not available in cluster mode.

--calendar NAME keeps the occurrences to a calendar's working time
('hourglass calendar --help'); --outside is what becomes of an occurrence
outside it:
  skip          (the default) it is not delivered; go on with the next
  shift         deliver it at the next working instant
The calendar is read as it is when each next occurrence is armed.`

// schedulePolicyFlags are the flags of create and update for jitter,
// overlap and calendar.
func schedulePolicyFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "jitter", Usage: "delay each occurrence by 0 to `DURATION` (such as 30s or 5m; 0 for none), the same for the same occurrence"},
		&cli.StringFlag{Name: "overlap", Usage: "while the previous occurrence is not acked: `POLICY` allow (the default), skip or buffer-one"},
		&cli.StringFlag{Name: "calendar", Usage: "keep the occurrences to the working time of the calendar `NAME` ('' for none)"},
		&cli.StringFlag{Name: "outside", Usage: "an occurrence outside the calendar's working time: `POLICY` skip (the default) or shift"},
	}
}

// policyPatch adds to p the fields the jitter, overlap and calendar flags
// set.
func policyPatch(c *cli.Context, p schedulePatch) (schedulePatch, error) {
	if c.IsSet("jitter") {
		d, err := units.ParseDuration(c.String("jitter"))
		if err != nil || d < 0 || d > 7*24*time.Hour {
			return nil, commandError(c, "--jitter %q: want a duration from 0 to 7d, such as 30s or 5m", c.String("jitter"))
		}
		p = append(p, func(s *client.RecurringSchedule) { s.Jitter = d })
	}
	if c.IsSet("overlap") {
		o := client.OverlapPolicy(c.String("overlap"))
		if !slices.Contains(client.OverlapPolicies, o) {
			return nil, commandError(c, "--overlap %q: want allow (the default), skip or buffer-one", o)
		}
		p = append(p, func(s *client.RecurringSchedule) { s.Overlap = o })
	}
	if c.IsSet("calendar") {
		name := c.String("calendar")
		p = append(p, func(s *client.RecurringSchedule) {
			if s.Calendar = name; name == "" {
				s.CalendarPolicy = "" // no policy without a calendar
			}
		})
	}
	if c.IsSet("outside") {
		o := client.CalendarPolicy(c.String("outside"))
		if o != client.CalendarSkip && o != client.CalendarShift {
			return nil, commandError(c, "--outside %q: want skip (the default) or shift", o)
		}
		p = append(p, func(s *client.RecurringSchedule) { s.CalendarPolicy = o })
	}
	return p, nil
}

// checkOutside refuses --outside on a schedule that keeps to no calendar.
func checkOutside(c *cli.Context, s client.RecurringSchedule) error {
	if c.IsSet("outside") && s.Calendar == "" {
		return commandError(c, "--outside goes with --calendar: the schedule keeps to no calendar")
	}
	return nil
}

// backfillJSON is what schedule backfill prints with --json.
type backfillJSON struct {
	Name     string `json:"name"`
	From     string `json:"from"`
	To       string `json:"to"`
	Stored   int    `json:"stored"`
	Existing int    `json:"existing"`
}

func scheduleBackfillCommand() *cli.Command {
	return &cli.Command{
		Name:      "backfill",
		Usage:     "deliver now the occurrences of a past span of time",
		UsageText: "hourglass schedule backfill NAME --from TIME [--to TIME] [--json]",
		Description: `Delivers now, as messages due at once, the occurrences of the schedule NAME
from --from up to (not including) --to (now when not given; not after now),
at most 10000 of them: after an outage longer than its --misfire covers, or
for a schedule created late. Each has the key "NAME@TIME" its live occurrence
had, and the header hourglass-backfill; an occurrence whose message exists
(delivered live, or by an earlier backfill) is not stored again, so a backfill
cut short is run again safely. The occurrences follow the schedule's spec,
--start, --end and calendar as they are now; they are delivered even while it
is paused, and its jitter and overlap policy do not apply.
Prints "NAME backfilled S occurrences (E existed already)", or with --json
{"name":"...","from":"...","to":"...","stored":S,"existing":E}.
--from and --to are RFC 3339 times or durations before now (such as 2d).

  hourglass schedule backfill daily-report --from 2030-01-01T00:00:00Z --to 2030-01-08T00:00:00Z
  hourglass schedule backfill heartbeat --from 1h
` + exitCodes,
		Flags: clientFlags(
			&cli.StringFlag{Name: "from", Usage: "the first `TIME`: RFC 3339, or a duration before now (such as 2d)"},
			&cli.StringFlag{Name: "to", Usage: "the end `TIME`, not included: RFC 3339, or a duration before now; now when not given"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object instead of the text"},
		),
		OnUsageError: usageError,
		Action:       runScheduleBackfill,
	}
}

// pastTime reads a --from or --to: an RFC 3339 time, or a duration before
// now.
func pastTime(c *cli.Context, name string, now time.Time) (time.Time, error) {
	s := c.String(name)
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := units.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, commandError(c, "--%s %q: want an RFC 3339 time (2030-01-02T09:00:00Z) or a duration before now (90s, 2h, 3d)", name, s)
	}
	return now.Add(-d), nil
}

func runScheduleBackfill(c *cli.Context) error {
	name, err := scheduleName(c)
	if err != nil {
		return err
	}
	if c.String("from") == "" {
		return commandError(c, "--from is missing: give the first time to backfill, such as --from 2030-01-01T00:00:00Z or --from 2d")
	}
	now := time.Now()
	from, err := pastTime(c, "from", now)
	if err != nil {
		return err
	}
	to := now
	if c.IsSet("to") {
		if to, err = pastTime(c, "to", now); err != nil {
			return err
		}
	}
	if !from.Before(to) {
		return commandError(c, "--from %s is not before --to %s: give a span of time", from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	}
	b, err := call(c, name, func(cl *client.Client, ctx context.Context) (client.Backfilled, error) {
		return cl.BackfillSchedule(ctx, name, from, to)
	})
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(backfillJSON{Name: name, From: from.UTC().Format(rfc3339Nano),
			To: to.UTC().Format(rfc3339Nano), Stored: b.Stored, Existing: b.Existing})
	}
	_, err = fmt.Fprintf(c.App.Writer, "%s backfilled %d occurrences (%d existed already)\n", name, b.Stored, b.Existing)
	return err
}
