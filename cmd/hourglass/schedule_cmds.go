package main

// The commands of recurring schedules: schedule create, update, pause,
// resume and delete; get and list are in schedule_view.go.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass/client"
)

const scheduleHelp = `A recurring schedule delivers a message (--body, --header) to --topic at every
occurrence of --spec, read on the wall clock of the time zone --tz:
  0 9 * * MON-FRI     5 fields: minute, hour, day of month, month, day of week
                      (09:00 on weekdays)
  */30 * * * * *      6 fields, seconds first (every 30 seconds)
  @every 90s          a fixed interval after each occurrence: a duration of
                      whole seconds, at least 1s (90s, 15m, 1h30m)
  @hourly @daily @weekly @monthly @yearly   (@daily is 0 0 * * *)
A field takes *, a list (1,15), a range (1-5), a step (*/15) or names (MON, JAN).

--tz is an IANA time zone (Europe/Berlin, America/New_York); UTC when not given.
Where the clocks change, a local time they skip (02:30 on the night they jump
from 02:00 to 03:00) fires once, at the first instant after the gap (03:00),
and a local time they repeat (02:30 on the night they fall back) fires once,
at its first instant. @every counts real time, whatever the zone.

--misfire is what becomes of occurrences that fell while the server was down:
  fire-latest   (the default) deliver them once, late, as one; then go on with
                the next future occurrence (a job that runs every hour runs
                once after an outage, not in a burst)
  fire-all      deliver each of them, oldest first (up to 100 in a row)
  skip          deliver none of them

Each occurrence is an ordinary message of --topic, with the idempotency key
"NAME@TIME" (TIME in UTC with milliseconds) and the headers hourglass-schedule
(NAME) and hourglass-occurrence (TIME): recv, get, list, reschedule and cancel
work on it. Only the next occurrence exists; cancelling it skips it:
  hourglass cancel --topic reports --key daily-report@2030-01-02T08:00:00.000Z
and the schedule arms its next one within two minutes of the skipped one's
time. A NAME is 1 to 160 ASCII letters, digits, '.', '_' and '-'.

` + schedulePolicyHelp

// scheduleFlags are the flags of schedule create and update: the fields
// of a schedule.
func scheduleFlags() []cli.Flag {
	return clientFlags(slices.Concat([]cli.Flag{
		&cli.StringFlag{Name: "topic", Usage: "deliver each occurrence to `TOPIC`"},
		&cli.StringFlag{Name: "spec", Usage: "when: a cron `SPEC` of 5 or 6 fields, \"@every 90s\", or @hourly, @daily, @weekly, @monthly, @yearly"},
		&cli.StringFlag{Name: "tz", Usage: "read the spec in the IANA time `ZONE` (such as Europe/Berlin); UTC when not given"},
	}, bodyFlags("each occurrence"), []cli.Flag{
		&cli.StringFlag{Name: "start", Usage: "deliver no occurrence before `TIME` (RFC 3339, or a duration from now such as 1h)"},
		&cli.StringFlag{Name: "end", Usage: "deliver no occurrence after `TIME` (RFC 3339, or a duration from now such as 30d)"},
		&cli.StringFlag{Name: "misfire", Usage: "what to do with occurrences missed while the server was down: `POLICY` fire-latest (the default), fire-all or skip"},
	}, schedulePolicyFlags(), []cli.Flag{
		&cli.BoolFlag{Name: "paused", Usage: "create it paused (update: --paused pauses it, --paused=false resumes it)"},
		&cli.BoolFlag{Name: "json", Usage: "print one JSON object instead of the text"},
	})...)
}

// schedulePatch is what the flags of create and update set, to apply to a
// new schedule or to the one stored.
type schedulePatch []func(*client.RecurringSchedule)

// patchOfFlags reads and checks the fields the flags set.
func patchOfFlags(c *cli.Context) (schedulePatch, error) {
	var p schedulePatch
	for _, f := range []struct {
		name string
		set  func(*client.RecurringSchedule, string)
	}{
		{"topic", func(s *client.RecurringSchedule, v string) { s.Topic = v }},
		{"spec", func(s *client.RecurringSchedule, v string) { s.Spec = v }},
		{"tz", func(s *client.RecurringSchedule, v string) { s.TimeZone = v }},
	} {
		if c.IsSet(f.name) {
			v, set := c.String(f.name), f.set
			p = append(p, func(s *client.RecurringSchedule) { set(s, v) })
		}
	}
	b, set, err := bodyOfFlags(c)
	if err != nil {
		return nil, err
	}
	if set {
		p = append(p, func(s *client.RecurringSchedule) { s.Body = b })
	}
	if c.IsSet("header") {
		h, _ := c.Generic("header").(*headerFlag)
		p = append(p, func(s *client.RecurringSchedule) { s.Headers = maps.Clone(h.m) })
	}
	now := time.Now()
	for _, name := range []string{"start", "end"} {
		if !c.IsSet(name) {
			continue
		}
		t, err := listTime(c, name, now) // "" clears the bound
		if err != nil {
			return nil, err
		}
		if name == "start" {
			p = append(p, func(s *client.RecurringSchedule) { s.Start = t })
		} else {
			p = append(p, func(s *client.RecurringSchedule) { s.End = t })
		}
	}
	if c.IsSet("misfire") {
		m := client.MisfirePolicy(c.String("misfire"))
		if !slices.Contains(client.MisfirePolicies, m) {
			return nil, commandError(c, "--misfire %q: want fire-latest (the default), fire-all or skip", m)
		}
		p = append(p, func(s *client.RecurringSchedule) { s.Misfire = m })
	}
	return policyPatch(c, p)
}

// scheduleName returns the one schedule name a command takes.
func scheduleName(c *cli.Context) (string, error) {
	if c.NArg() != 1 {
		return "", commandError(c, "give one schedule name, got %d arguments", c.NArg())
	}
	return c.Args().First(), nil
}

// scheduleResultJSON is what create, update and resume print with --json.
type scheduleResultJSON struct {
	Name   string `json:"name"`
	Result string `json:"result"`
	Paused bool   `json:"paused"`
	Next   string `json:"next,omitempty"`
}

// printScheduleResult prints "NAME RESULT, next TIME", or with --json
// one object.
func printScheduleResult(c *cli.Context, j scheduleResultJSON, next time.Time) error {
	if !next.IsZero() {
		j.Next = next.UTC().Format(rfc3339Nano)
	}
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(j)
	}
	what := "next " + j.Next
	switch {
	case j.Paused:
		what = "paused"
	case j.Next == "":
		what = "no occurrence left (past its end)"
	}
	_, err := fmt.Fprintf(c.App.Writer, "%s %s, %s\n", j.Name, j.Result, what)
	return err
}

func scheduleCommand() *cli.Command {
	return &cli.Command{
		Name:  "schedule",
		Usage: "recurring schedules: a message delivered at every occurrence of a cron spec or interval",
		UsageText: "hourglass schedule create NAME --topic T --spec SPEC [--tz ZONE] [--body TEXT | --body-file F|-] [--header K=V]...\n" +
			"                          [--start TIME] [--end TIME] [--misfire fire-latest|fire-all|skip] [--paused]\n" +
			"                          [--jitter D] [--overlap allow|skip|buffer-one] [--calendar C [--outside skip|shift]]\n" +
			"hourglass schedule update NAME [the flags of create]\n" +
			"hourglass schedule list [--topic T] [--json]\n" +
			"hourglass schedule get NAME [--next N] [--json]\n" +
			"hourglass schedule pause|resume NAME\n" +
			"hourglass schedule backfill NAME --from TIME [--to TIME]\n" +
			"hourglass schedule delete NAME [--yes]",
		Description: scheduleHelp + `

  hourglass schedule create daily-report --topic reports --spec '0 8 * * MON-FRI' \
      --tz Europe/Berlin --body '{"report":"daily"}' --header content-type=application/json
  hourglass schedule create heartbeat --topic health --spec '@every 30s'
  hourglass schedule create invoices --topic billing --spec '0 9 * * *' --tz Europe/Berlin \
      --calendar berlin --outside shift --jitter 10m --overlap skip
  hourglass schedule list
  hourglass schedule get daily-report --next 10
  hourglass schedule update daily-report --spec '0 7 * * MON-FRI'
  hourglass schedule pause daily-report
  hourglass schedule delete heartbeat --yes`,
		Subcommands: []*cli.Command{
			scheduleCreateCommand(), scheduleUpdateCommand(), scheduleListCommand(), scheduleGetCommand(),
			schedulePauseCommand(), scheduleResumeCommand(), scheduleDeleteCommand(), scheduleBackfillCommand(),
		},
	}
}

func scheduleCreateCommand() *cli.Command {
	return &cli.Command{
		Name:      "create",
		Usage:     "create a recurring schedule and arm its first occurrence",
		UsageText: "hourglass schedule create NAME --topic T --spec SPEC [--tz ZONE] [--body TEXT | --body-file F|-] [--header K=V]... [--start TIME] [--end TIME] [--misfire fire-latest|fire-all|skip] [--paused] [--jitter D] [--overlap allow|skip|buffer-one] [--calendar C [--outside skip|shift]] [--json]",
		Description: `Creates the schedule NAME, durably, and prints "NAME created, next TIME" (TIME:
its first occurrence, RFC 3339 UTC), or "NAME created, paused" with --paused
(nothing fires until 'hourglass schedule resume NAME'). A NAME that exists is
an error: change it with 'schedule update', or delete it first. With --json it
prints {"name":"...","result":"created","paused":false,"next":"..."}.

` + scheduleHelp + `

The body is --body TEXT, or the bytes of --body-file F ("-" reads standard
input), or empty. --start and --end bound the occurrences delivered; each is
an RFC 3339 time (2030-01-02T09:00:00Z) or a duration from now (1h, 30d).

  hourglass schedule create daily-report --topic reports --spec '0 8 * * MON-FRI' \
      --tz Europe/Berlin --body '{"report":"daily"}' --header content-type=application/json
  hourglass schedule create heartbeat --topic health --spec '@every 30s' --misfire skip
  hourglass schedule create poll --topic feeds --spec '*/20 * * * * *' --end 7d --paused
  hourglass schedule create invoices --topic billing --spec '0 9 * * *' --tz Europe/Berlin \
      --calendar berlin --outside shift --jitter 10m --overlap buffer-one
` + exitCodes,
		Flags:        scheduleFlags(),
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			name, err := scheduleName(c)
			if err != nil {
				return err
			}
			switch {
			case !c.IsSet("topic") || c.String("topic") == "":
				return commandError(c, "--topic is missing: give the topic each occurrence is delivered to")
			case !c.IsSet("spec") || c.String("spec") == "":
				return commandError(c, "--spec is missing: give a cron spec ('0 9 * * MON-FRI'), '@every 90s' or a macro such as @daily")
			}
			p, err := patchOfFlags(c)
			if err != nil {
				return err
			}
			s := client.RecurringSchedule{Name: name, Paused: c.Bool("paused")}
			for _, f := range p {
				f(&s)
			}
			if err := checkOutside(c, s); err != nil {
				return err
			}
			next, err := call(c, name, func(cl *client.Client, ctx context.Context) (time.Time, error) {
				next, err := cl.CreateSchedule(ctx, s)
				if errors.Is(err, client.ErrScheduleExists) {
					err = fmt.Errorf("a schedule of this name exists: change it with 'hourglass schedule update %s', or delete it first (%w)", name, err)
				}
				return next, err
			})
			if err != nil {
				return err
			}
			return printScheduleResult(c, scheduleResultJSON{Name: name, Result: "created", Paused: s.Paused}, next)
		},
	}
}

func scheduleUpdateCommand() *cli.Command {
	return &cli.Command{
		Name:      "update",
		Usage:     "change fields of a recurring schedule; the others keep their values",
		UsageText: "hourglass schedule update NAME [--topic T] [--spec SPEC] [--tz ZONE] [--body TEXT | --body-file F|-] [--header K=V]... [--start TIME] [--end TIME] [--misfire fire-latest|fire-all|skip] [--paused[=false]] [--jitter D] [--overlap allow|skip|buffer-one] [--calendar C] [--outside skip|shift] [--json]",
		Description: `Changes the fields of the schedule NAME that the flags name; the others keep
their values (it reads the schedule, then writes it whole: a change another
client makes in between is overwritten). Its armed occurrence is cancelled
and the next one of the new definition armed; its fired count is kept.
--header replaces all the headers; --start '' and --end '' remove a bound.
--paused pauses it, --paused=false resumes it (as 'schedule pause' and
'schedule resume' do). Prints "NAME updated, next TIME" (or "paused"), or
with --json {"name":"...","result":"updated","paused":false,"next":"..."}.

` + scheduleHelp + `

  hourglass schedule update daily-report --spec '0 7 * * MON-FRI'
  hourglass schedule update daily-report --tz America/New_York --end 2030-12-31T23:59:59Z
  hourglass schedule update daily-report --body-file report.json --paused=false
  hourglass schedule update invoices --calendar '' --jitter 0
` + exitCodes,
		Flags:        scheduleFlags(),
		OnUsageError: usageError,
		Action:       runScheduleUpdate,
	}
}

func runScheduleUpdate(c *cli.Context) error {
	name, err := scheduleName(c)
	if err != nil {
		return err
	}
	p, err := patchOfFlags(c)
	if err != nil {
		return err
	}
	if len(p) == 0 && !c.IsSet("paused") {
		return commandError(c, "nothing to change: give --topic, --spec, --tz, --body, --body-file, --header, --start, --end, --misfire, --jitter, --overlap, --calendar, --outside or --paused")
	}
	return withClient(c, func(cl *client.Client) error {
		in, err := cl.GetSchedule(c.Context, name, 1)
		if err != nil {
			return fmt.Errorf("schedule update %s: %w", name, err)
		}
		s := in.Schedule
		var next time.Time
		if len(p) > 0 {
			for _, f := range p {
				f(&s)
			}
			if err := checkOutside(c, s); err != nil {
				return err
			}
			if next, err = cl.UpdateSchedule(c.Context, s); err != nil {
				return fmt.Errorf("schedule update %s: %w", name, err)
			}
		} else if len(in.Next) > 0 {
			next = in.Next[0]
		}
		switch {
		case c.IsSet("paused") && c.Bool("paused"):
			if err := cl.PauseSchedule(c.Context, name); err != nil {
				return fmt.Errorf("schedule update %s: pausing it: %w", name, err)
			}
			s.Paused = true
		case c.IsSet("paused"):
			if next, err = cl.ResumeSchedule(c.Context, name); err != nil {
				return fmt.Errorf("schedule update %s: resuming it: %w", name, err)
			}
			s.Paused = false
		}
		return printScheduleResult(c, scheduleResultJSON{Name: name, Result: "updated", Paused: s.Paused}, next)
	})
}

func schedulePauseCommand() *cli.Command {
	return &cli.Command{
		Name:      "pause",
		Usage:     "stop a recurring schedule's occurrences until it is resumed",
		UsageText: "hourglass schedule pause NAME",
		Description: `Pauses the schedule NAME, durably (across restarts): its armed occurrence is
cancelled, and once pause answers no occurrence is delivered until
'hourglass schedule resume NAME'. Occurrences delivered before stay in the
queue. Prints "NAME paused"; pausing a paused schedule changes nothing.

  hourglass schedule pause daily-report
` + exitCodes,
		Flags:        clientFlags(),
		OnUsageError: usageError,
		Action:       refAction(scheduleName, noAnswer((*client.Client).PauseSchedule), printDone("paused")),
	}
}

func scheduleResumeCommand() *cli.Command {
	return &cli.Command{
		Name:      "resume",
		Usage:     "let a paused recurring schedule fire again, from now on",
		UsageText: "hourglass schedule resume NAME [--json]",
		Description: `Resumes the schedule NAME: its next occurrence from now on is armed (those
that fell while it was paused are not delivered, whatever its --misfire).
Prints "NAME resumed, next TIME", or with --json
{"name":"...","result":"resumed","paused":false,"next":"..."}. Resuming a
schedule that is not paused changes nothing.

  hourglass schedule resume daily-report
` + exitCodes,
		Flags:        clientFlags(&cli.BoolFlag{Name: "json", Usage: "print one JSON object instead of the text"}),
		OnUsageError: usageError,
		Action: refAction(scheduleName, (*client.Client).ResumeSchedule, func(c *cli.Context, name string, next time.Time) error {
			return printScheduleResult(c, scheduleResultJSON{Name: name, Result: "resumed"}, next)
		}),
	}
}

func scheduleDeleteCommand() *cli.Command {
	return &cli.Command{
		Name:      "delete",
		Usage:     "delete a recurring schedule (asks first)",
		UsageText: "hourglass schedule delete NAME [--yes]",
		Description: `Deletes the schedule NAME: once delete answers, no further occurrence is
delivered (its armed one is cancelled). Occurrences delivered before stay in
the queue. Prints "NAME deleted".

It asks for confirmation on standard input first (y or yes goes ahead;
anything else, or no answer, deletes nothing and exits 1); --yes skips the
question, for scripts.

  hourglass schedule delete heartbeat --yes
` + exitCodes,
		Flags:        clientFlags(&cli.BoolFlag{Name: "yes", Usage: "do not ask for confirmation"}),
		OnUsageError: usageError,
		Action: refAction(func(c *cli.Context) (string, error) {
			name, err := scheduleName(c)
			if err == nil {
				err = confirm(c, fmt.Sprintf("delete the recurring schedule %q: none of its occurrences will be delivered any more", name))
			}
			return name, err
		}, noAnswer((*client.Client).DeleteSchedule), printDone("deleted")),
	}
}
