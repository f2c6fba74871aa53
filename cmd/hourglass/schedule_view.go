package main

// What schedule get and schedule list print.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass/client"
)

// scheduleJSON is a schedule as get and list print it with --json.
type scheduleJSON struct {
	Name     string            `json:"name"`
	Topic    string            `json:"topic"`
	Spec     string            `json:"spec"`
	TimeZone string            `json:"time_zone"`
	Misfire  string            `json:"misfire"`
	Paused   bool              `json:"paused"`
	Start    string            `json:"start,omitempty"`
	End      string            `json:"end,omitempty"`
	Headers  map[string]string `json:"headers,omitempty"`
	bodyJSON
	Next     []string `json:"next"`
	ArmedID  string   `json:"armed_id,omitempty"`
	Fired    int64    `json:"fired"`
	Jitter   string   `json:"jitter,omitempty"`
	Overlap  string   `json:"overlap"`
	Calendar string   `json:"calendar,omitempty"`
	Outside  string   `json:"outside,omitempty"`
	Skipped  int64    `json:"skipped"`
	Buffered string   `json:"buffered,omitempty"`
}

func newScheduleJSON(in client.ScheduleInfo) scheduleJSON {
	s := in.Schedule
	j := scheduleJSON{Name: s.Name, Topic: s.Topic, Spec: s.Spec, TimeZone: s.TimeZone, Misfire: string(s.Misfire), Paused: s.Paused,
		Headers: s.Headers, bodyJSON: newBodyJSON(s.Body), Next: []string{}, ArmedID: in.Armed.String(), Fired: in.Fired}
	if j.TimeZone == "" {
		j.TimeZone = "UTC"
	}
	if j.Misfire == "" {
		j.Misfire = string(client.MisfireLatest)
	}
	j.Overlap, j.Calendar, j.Outside, j.Skipped = string(s.Overlap), s.Calendar, string(s.CalendarPolicy), in.Skipped
	if j.Overlap == "" {
		j.Overlap = string(client.OverlapAllow)
	}
	if s.Jitter > 0 {
		j.Jitter = s.Jitter.String()
	}
	if !in.Buffered.IsZero() {
		j.Buffered = in.Buffered.UTC().Format(rfc3339Nano)
	}
	if !s.Start.IsZero() {
		j.Start = s.Start.UTC().Format(rfc3339Nano)
	}
	if !s.End.IsZero() {
		j.End = s.End.UTC().Format(rfc3339Nano)
	}
	for _, t := range in.Next {
		j.Next = append(j.Next, t.UTC().Format(rfc3339Nano))
	}
	return j
}

// yesNo prints a bool as the tables do.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func scheduleListCommand() *cli.Command {
	return &cli.Command{
		Name:      "list",
		Usage:     "list the recurring schedules with their next fire times (reads only)",
		UsageText: "hourglass schedule list [--topic T] [--json]",
		Description: `Prints one row per recurring schedule (of --topic, if given), by name:
  name      the schedule
  topic     where its occurrences go
  spec      when, read in zone
  zone      its time zone
  next      its next fire time (RFC 3339 UTC); "-" while paused or past its end
  paused    yes or no
  fired     occurrences delivered since it was created
With --json it prints one JSON object per schedule and line instead, as
'schedule get --json' does (with its next 3 fire times).

  hourglass schedule list --topic reports
` + exitCodes,
		Flags: clientFlags(
			&cli.StringFlag{Name: "topic", Usage: "list only the schedules that deliver to `TOPIC`"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per schedule instead of the table"},
		),
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return commandError(c, "takes no arguments, got %q", c.Args().Slice())
			}
			return withClient(c, func(cl *client.Client) error {
				enc := json.NewEncoder(c.App.Writer)
				w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
				if !c.Bool("json") {
					fmt.Fprintln(w, "name\ttopic\tspec\tzone\tnext\tpaused\tfired")
				}
				for in, err := range cl.ListSchedules(c.Context, client.ListSchedulesOptions{Topic: c.String("topic")}) {
					if err != nil {
						return fmt.Errorf("schedule list: %w", err)
					}
					j := newScheduleJSON(in)
					if c.Bool("json") {
						if err := enc.Encode(j); err != nil {
							return err
						}
						continue
					}
					next := "-"
					if len(j.Next) > 0 {
						next = j.Next[0]
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", j.Name, j.Topic, j.Spec, j.TimeZone, next, yesNo(j.Paused), j.Fired)
				}
				return w.Flush()
			})
		},
	}
}

func scheduleGetCommand() *cli.Command {
	return &cli.Command{
		Name:      "get",
		Usage:     "print a recurring schedule with its next fire times (reads only)",
		UsageText: "hourglass schedule get NAME [--next N] [--json]",
		Description: `Prints the schedule NAME: its fields, how many occurrences it has delivered
("fired"), the ID of its armed occurrence (the pending message of its next
one: 'hourglass get ID' shows it), and its next --next fire times (1 to 100,
default 5), each in RFC 3339 UTC and on its zone's wall clock. A paused
schedule, or one past its end, has none.

With --json it prints one object instead:
  {"name":"daily-report","topic":"reports","spec":"0 8 * * MON-FRI",
   "time_zone":"Europe/Berlin","misfire":"fire-latest","paused":false,
   "start":"...","end":"...","headers":{...},"body":"..." (or "body_base64"),
   "next":["2030-01-02T07:00:00.000000000Z",...],"armed_id":"...","fired":12,
   "jitter":"5m0s","overlap":"allow","calendar":"berlin","outside":"skip",
   "skipped":0,"buffered":"..."}
jitter, calendar, outside and buffered are left out when the schedule has
none. "skipped" counts the occurrences its overlap policy did not deliver;
"buffered" is the one buffer-one holds until the previous one is acked.

  hourglass schedule get daily-report --next 10
` + exitCodes,
		Flags: clientFlags(
			&cli.IntFlag{Name: "next", Value: 5, Usage: "print the next `N` fire times, 1 to 100"},
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object instead of the text"},
		),
		OnUsageError: usageError,
		Action:       runScheduleGet,
	}
}

func runScheduleGet(c *cli.Context) error {
	name, err := scheduleName(c)
	if err != nil {
		return err
	}
	n := c.Int("next")
	if n < 1 || n > client.MaxNextTimes {
		return commandError(c, "--next %d: from 1 to %d", n, client.MaxNextTimes)
	}
	in, err := call(c, name, func(cl *client.Client, ctx context.Context) (client.ScheduleInfo, error) {
		return cl.GetSchedule(ctx, name, n)
	})
	if err != nil {
		return err
	}
	j := newScheduleJSON(in)
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(j)
	}
	return printSchedule(c.App.Writer, j, in)
}

// printSchedule prints what schedule get prints without --json.
func printSchedule(w io.Writer, j scheduleJSON, in client.ScheduleInfo) error {
	fmt.Fprintf(w, "name:        %s\ntopic:       %s\nspec:        %s\ntime zone:   %s\nmisfire:     %s\npaused:      %s\n",
		j.Name, j.Topic, j.Spec, j.TimeZone, j.Misfire, yesNo(j.Paused))
	if j.Start != "" {
		fmt.Fprintf(w, "start:       %s\n", j.Start)
	}
	if j.End != "" {
		fmt.Fprintf(w, "end:         %s\n", j.End)
	}
	if j.Jitter != "" {
		fmt.Fprintf(w, "jitter:      %s\n", j.Jitter)
	}
	fmt.Fprintf(w, "overlap:     %s\n", j.Overlap)
	if j.Calendar != "" {
		fmt.Fprintf(w, "calendar:    %s (outside its working time: %s)\n", j.Calendar, j.Outside)
	}
	fmt.Fprintf(w, "fired:       %d\n", j.Fired)
	if j.Skipped > 0 {
		fmt.Fprintf(w, "skipped:     %d\n", j.Skipped)
	}
	if j.Buffered != "" {
		fmt.Fprintf(w, "buffered:    %s (held until the previous one is acked)\n", j.Buffered)
	}
	if j.ArmedID != "" {
		fmt.Fprintf(w, "armed:       %s\n", j.ArmedID)
	}
	loc, err := time.LoadLocation(j.TimeZone)
	if err != nil {
		loc = time.UTC
	}
	label := "next:"
	for i, t := range in.Next {
		fmt.Fprintf(w, "%-12s %s  %s\n", label, j.Next[i], t.In(loc).Format("Mon 2006-01-02 15:04:05 MST"))
		label = ""
	}
	if len(in.Next) == 0 {
		fmt.Fprintln(w, "next:        -")
	}
	for _, k := range slices.Sorted(maps.Keys(j.Headers)) {
		fmt.Fprintf(w, "header:      %s=%s\n", k, j.Headers[k])
	}
	return j.print(w)
}
