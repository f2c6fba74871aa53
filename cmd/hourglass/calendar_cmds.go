package main

// The commands of working-time calendars: calendar create, update, get,
// list and delete.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass/calendar"
	"github.com/hourglassmq/hourglass/client"
)

const calendarHelp = `A calendar is working time: the working hours of each weekday, except on its
closed dates, read on the wall clock of the time zone --tz (UTC when not given).
An instant is working time when its date there is not closed and its time of
day lies in one of that weekday's spans.

--hours 'DAYS SPANS' sets working hours; repeat it for days with other hours.
DAYS are weekdays (mon tue wed thu fri sat sun) and ranges of them, joined by
commas; SPANS are HH:MM-HH:MM joined by commas (an end of 24:00 is the end of
the day; spans of a day may not overlap):
  --hours 'mon-fri 09:00-12:00,13:00-17:00' --hours 'sat 10:00-14:00'
--closed DATE,... lists non-working dates (YYYY-MM-DD, in the calendar's zone),
and --closed-file F reads them from a file, one a line (# starts a comment):
public holidays, company days off.

Where the clocks change, the wall clock decides: an hour the clocks repeat is
worked twice when it lies in the hours, one they skip is not worked.

Calendars serve two things:
  hourglass send --topic T --calendar NAME --working-days 3 --at-time 09:00
      delivers at 09:00 on the third working day from now (send --help);
  hourglass schedule create ... --calendar NAME [--outside skip|shift]
      keeps a recurring schedule's occurrences to its working time.
A send's delivery time is computed once, when it is stored: changing the
calendar later does not move messages already stored. A recurring schedule
uses the calendar as it is when it arms each next occurrence. A calendar a
recurring schedule uses cannot be deleted. Calendars are not yet available in
cluster mode. A NAME is 1 to 160 ASCII letters, digits, '.', '_' and '-'.`

// calendarFlags are the flags of calendar create and update.
func calendarFlags() []cli.Flag {
	return clientFlags(
		&cli.StringFlag{Name: "tz", Usage: "read the hours and dates in the IANA time `ZONE` (such as Europe/Berlin); UTC when not given"},
		&cli.GenericFlag{Name: "hours", Value: &repeatFlag{}, Usage: "working hours: `'DAYS SPANS'`, such as 'mon-fri 09:00-17:00' (repeat it)"},
		&cli.GenericFlag{Name: "closed", Value: &repeatFlag{}, Usage: "non-working `DATES`, YYYY-MM-DD, joined by commas (repeat it)"},
		&cli.StringFlag{Name: "closed-file", Usage: "read non-working dates from `FILE`, one a line ('-': standard input)"},
		&cli.BoolFlag{Name: "json", Usage: "print the calendar as one JSON object"},
	)
}

// parseHours reads one --hours value: "mon-fri,sun 09:00-12:00,13:00-17:00".
func parseHours(s string) ([]client.WorkingHours, error) {
	days, spans, ok := strings.Cut(strings.TrimSpace(s), " ")
	if !ok || strings.TrimSpace(spans) == "" {
		return nil, fmt.Errorf("--hours %q: want 'DAYS SPANS', such as 'mon-fri 09:00-17:00'", s)
	}
	var wds []time.Weekday
	for _, d := range strings.Split(days, ",") {
		from, to, isRange := strings.Cut(d, "-")
		a, err := calendar.ParseWeekday(from)
		if err != nil {
			return nil, fmt.Errorf("--hours %q: day %q: want mon, tue, wed, thu, fri, sat or sun, or a range such as mon-fri", s, from)
		}
		b := a
		if isRange {
			if b, err = calendar.ParseWeekday(to); err != nil {
				return nil, fmt.Errorf("--hours %q: day %q: want mon, tue, wed, thu, fri, sat or sun", s, to)
			}
		}
		for wd := a; ; wd = (wd + 1) % 7 {
			wds = append(wds, wd)
			if wd == b {
				break
			}
		}
	}
	var out []client.WorkingHours
	for _, sp := range strings.Split(strings.TrimSpace(spans), ",") {
		start, end, ok := strings.Cut(strings.TrimSpace(sp), "-")
		if !ok {
			return nil, fmt.Errorf("--hours %q: span %q: want HH:MM-HH:MM, such as 09:00-17:00", s, sp)
		}
		for _, wd := range wds {
			out = append(out, client.WorkingHours{Day: wd, Start: start, End: end})
		}
	}
	return out, nil
}

// closedOfFlags reads --closed and --closed-file.
func closedOfFlags(c *cli.Context) ([]string, error) {
	var out []string
	for _, v := range repeated(c, "closed") {
		for _, d := range strings.Split(v, ",") {
			if d = strings.TrimSpace(d); d != "" {
				out = append(out, d)
			}
		}
	}
	if f := c.String("closed-file"); f != "" {
		var r io.Reader = c.App.Reader
		if f != "-" {
			file, err := os.Open(f)
			if err != nil {
				return nil, commandError(c, "--closed-file: %v", err)
			}
			defer file.Close()
			r = file
		}
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			line, _, _ := strings.Cut(sc.Text(), "#")
			if line = strings.TrimSpace(line); line != "" {
				out = append(out, line)
			}
		}
		if err := sc.Err(); err != nil {
			return nil, commandError(c, "--closed-file %s: %v", f, err)
		}
	}
	return out, nil
}

// applyCalendarFlags sets the fields of cal the flags name, and reports
// whether any did.
func applyCalendarFlags(c *cli.Context, cal *client.Calendar) (bool, error) {
	set := false
	if c.IsSet("tz") {
		cal.TimeZone, set = c.String("tz"), true
	}
	if c.IsSet("hours") {
		cal.Hours, set = nil, true
		for _, h := range repeated(c, "hours") {
			hs, err := parseHours(h)
			if err != nil {
				return false, commandError(c, "%v", err)
			}
			cal.Hours = append(cal.Hours, hs...)
		}
	}
	if c.IsSet("closed") || c.IsSet("closed-file") {
		closed, err := closedOfFlags(c)
		if err != nil {
			return false, err
		}
		cal.Closed, set = closed, true
	}
	return set, nil
}

func calendarCommand() *cli.Command {
	return &cli.Command{
		Name:  "calendar",
		Usage: "working-time calendars: a time zone, weekly working hours and closed dates",
		UsageText: "hourglass calendar create NAME --hours 'DAYS SPANS'... [--tz ZONE] [--closed DATES]... [--closed-file F]\n" +
			"hourglass calendar update NAME [the flags of create]\n" +
			"hourglass calendar get NAME [--json]\n" +
			"hourglass calendar list [--json]\n" +
			"hourglass calendar delete NAME [--yes]",
		Description: calendarHelp + `

  hourglass calendar create berlin --tz Europe/Berlin --hours 'mon-fri 09:00-17:00' \
      --closed 2030-12-24,2030-12-25,2030-12-26,2030-12-31
  hourglass send --topic invoices --calendar berlin --working-days 3 --at-time 09:00 --body 'remind'
  hourglass calendar update berlin --closed-file holidays-2030.txt
  hourglass calendar get berlin`,
		Subcommands: []*cli.Command{calendarCreateCommand(), calendarUpdateCommand(), calendarGetCommand(), calendarListCommand(), calendarDeleteCommand()},
	}
}

// calendarName returns the one calendar name a command takes.
func calendarName(c *cli.Context) (string, error) {
	if c.NArg() != 1 {
		return "", commandError(c, "give one calendar name, got %d arguments", c.NArg())
	}
	return c.Args().First(), nil
}

func calendarCreateCommand() *cli.Command {
	return &cli.Command{
		Name:      "create",
		Usage:     "create a calendar",
		UsageText: "hourglass calendar create NAME --hours 'DAYS SPANS'... [--tz ZONE] [--closed DATES]... [--closed-file F] [--json]",
		Description: `Creates the calendar NAME, durably, and prints it as 'calendar get' does. A
NAME that exists is an error: change it with 'calendar update'.

` + calendarHelp + `

  hourglass calendar create berlin --tz Europe/Berlin --hours 'mon-fri 09:00-17:00' --closed 2030-12-25,2030-12-26
  hourglass calendar create support --tz America/New_York \
      --hours 'mon-fri 08:00-12:00,13:00-20:00' --hours 'sat 10:00-14:00' --closed-file us-holidays.txt
` + exitCodes,
		Flags:        calendarFlags(),
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			name, err := calendarName(c)
			if err != nil {
				return err
			}
			if !c.IsSet("hours") {
				return commandError(c, "--hours is missing: give the working hours, such as --hours 'mon-fri 09:00-17:00'")
			}
			cal := client.Calendar{Name: name}
			if _, err := applyCalendarFlags(c, &cal); err != nil {
				return err
			}
			return withClient(c, func(cl *client.Client) error {
				if err := cl.CreateCalendar(c.Context, cal); err != nil {
					if errors.Is(err, client.ErrCalendarExists) {
						return fmt.Errorf("calendar create %s: it exists: change it with 'hourglass calendar update %s' (%w)", name, name, err)
					}
					return fmt.Errorf("calendar create %s: %w", name, err)
				}
				return showCalendar(c, cl, name)
			})
		},
	}
}

func calendarUpdateCommand() *cli.Command {
	return &cli.Command{
		Name:      "update",
		Usage:     "change fields of a calendar; the others keep their values",
		UsageText: "hourglass calendar update NAME [--tz ZONE] [--hours 'DAYS SPANS']... [--closed DATES]... [--closed-file F] [--json]",
		Description: `Changes the fields of the calendar NAME that the flags name, and prints it as
'calendar get' does: --tz its zone, --hours all its hours, --closed and
--closed-file all its closed dates (--closed '' removes them). It reads the
calendar, then writes it whole: a change another client makes in between is
overwritten.

Messages sent before keep their delivery times: a send in working time is
computed once, when it is stored. Recurring schedules keep to the new
calendar from their next occurrence on (the armed one keeps its time).

` + calendarHelp + `

  hourglass calendar update berlin --closed-file holidays-2031.txt
  hourglass calendar update berlin --hours 'mon-thu 08:00-16:00' --hours 'fri 08:00-12:00'
` + exitCodes,
		Flags:        calendarFlags(),
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			name, err := calendarName(c)
			if err != nil {
				return err
			}
			return withClient(c, func(cl *client.Client) error {
				cal, err := cl.GetCalendar(c.Context, name)
				if err != nil {
					return fmt.Errorf("calendar update %s: %w", name, err)
				}
				set, err := applyCalendarFlags(c, &cal)
				if err != nil {
					return err
				}
				if !set {
					return commandError(c, "nothing to change: give --tz, --hours, --closed or --closed-file")
				}
				if err := cl.UpdateCalendar(c.Context, cal); err != nil {
					return fmt.Errorf("calendar update %s: %w", name, err)
				}
				return showCalendar(c, cl, name)
			})
		},
	}
}

func calendarGetCommand() *cli.Command {
	return &cli.Command{
		Name:      "get",
		Usage:     "show a calendar (reads only)",
		UsageText: "hourglass calendar get NAME [--json]",
		Description: `Prints the calendar NAME: its zone, its working hours by weekday, and its
closed dates. With --json it prints one object:
  {"name":"berlin","time_zone":"Europe/Berlin","hours":{"mon":["09:00-17:00"],...},"closed":["2030-12-25"]}

  hourglass calendar get berlin
` + exitCodes,
		Flags:        clientFlags(&cli.BoolFlag{Name: "json", Usage: "print one JSON object"}),
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			name, err := calendarName(c)
			if err != nil {
				return err
			}
			return withClient(c, func(cl *client.Client) error { return showCalendar(c, cl, name) })
		},
	}
}

func calendarListCommand() *cli.Command {
	return &cli.Command{
		Name:      "list",
		Usage:     "list the calendars (reads only)",
		UsageText: "hourglass calendar list [--json]",
		Description: `Prints one row per calendar, by name: its name, zone, working hours and how
many closed dates it has (and the next one). With --json, one JSON object per
calendar and line, as 'calendar get --json' prints it.

  hourglass calendar list
` + exitCodes,
		Flags:        clientFlags(&cli.BoolFlag{Name: "json", Usage: "print one JSON object per line"}),
		OnUsageError: usageError,
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return commandError(c, "takes no arguments, got %q", c.Args().Slice())
			}
			return withClient(c, func(cl *client.Client) error {
				var tw *tabwriter.Writer
				if !c.Bool("json") {
					tw = tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "NAME\tZONE\tHOURS\tCLOSED\tNEXT CLOSED")
				}
				for cal, err := range cl.ListCalendars(c.Context) {
					if err != nil {
						return fmt.Errorf("calendar list: %w", err)
					}
					j := newCalendarJSON(cal)
					if tw == nil {
						if err := json.NewEncoder(c.App.Writer).Encode(j); err != nil {
							return err
						}
						continue
					}
					next := "-"
					today := time.Now().UTC().Format(time.DateOnly)
					if i, _ := slices.BinarySearch(cal.Closed, today); i < len(cal.Closed) {
						next = cal.Closed[i]
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", cal.Name, j.TimeZone, j.hoursText(), len(cal.Closed), next)
				}
				if tw != nil {
					return tw.Flush()
				}
				return nil
			})
		},
	}
}

func calendarDeleteCommand() *cli.Command {
	return &cli.Command{
		Name:      "delete",
		Usage:     "delete a calendar (asks first)",
		UsageText: "hourglass calendar delete NAME [--yes]",
		Description: `Deletes the calendar NAME. Messages sent in its working time keep their
delivery times. A calendar a recurring schedule keeps to is not deleted: the
error names the schedule (update it without --calendar, or delete it, first).
Prints "NAME deleted".

It asks for confirmation on standard input first (y or yes goes ahead); --yes
skips the question, for scripts.

  hourglass calendar delete berlin --yes
` + exitCodes,
		Flags:        clientFlags(&cli.BoolFlag{Name: "yes", Usage: "do not ask for confirmation"}),
		OnUsageError: usageError,
		Action: refAction(func(c *cli.Context) (string, error) {
			name, err := calendarName(c)
			if err == nil {
				err = confirm(c, fmt.Sprintf("delete the calendar %q", name))
			}
			return name, err
		}, noAnswer((*client.Client).DeleteCalendar), printDone("deleted")),
	}
}

// repeatFlag is a flag given more than once, each value kept whole (a
// StringSliceFlag would split them at commas).
type repeatFlag struct{ vs []string }

func (r *repeatFlag) Set(s string) error { r.vs = append(r.vs, s); return nil }
func (r *repeatFlag) String() string     { return strings.Join(r.vs, " ") }

// repeated returns the values of the repeatFlag name.
func repeated(c *cli.Context, name string) []string {
	if r, ok := c.Generic(name).(*repeatFlag); ok {
		return r.vs
	}
	return nil
}

// calendarJSON is a calendar as get and list print it with --json.
type calendarJSON struct {
	Name     string              `json:"name"`
	TimeZone string              `json:"time_zone"`
	Hours    map[string][]string `json:"hours"`
	Closed   []string            `json:"closed"`
}

var dayNames = [7]string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

func newCalendarJSON(cal client.Calendar) calendarJSON {
	j := calendarJSON{Name: cal.Name, TimeZone: cal.TimeZone, Hours: map[string][]string{}, Closed: cal.Closed}
	if j.TimeZone == "" {
		j.TimeZone = "UTC"
	}
	if j.Closed == nil {
		j.Closed = []string{}
	}
	for _, h := range cal.Hours {
		j.Hours[dayNames[h.Day]] = append(j.Hours[dayNames[h.Day]], h.Start+"-"+h.End)
	}
	return j
}

// hoursText is the hours in one line, days with the same hours joined:
// "mon-fri 09:00-17:00; sat 10:00-14:00".
func (j calendarJSON) hoursText() string {
	var parts []string
	order := []int{1, 2, 3, 4, 5, 6, 0}
	for i := 0; i < len(order); {
		spans := strings.Join(j.Hours[dayNames[order[i]]], ",")
		k := i + 1
		for k < len(order) && strings.Join(j.Hours[dayNames[order[k]]], ",") == spans {
			k++
		}
		if spans != "" {
			days := dayNames[order[i]]
			if k-i > 1 {
				days += "-" + dayNames[order[k-1]]
			}
			parts = append(parts, days+" "+spans)
		}
		i = k
	}
	return strings.Join(parts, "; ")
}

// showCalendar prints the calendar name as get does.
func showCalendar(c *cli.Context, cl *client.Client, name string) error {
	cal, err := cl.GetCalendar(c.Context, name)
	if err != nil {
		return fmt.Errorf("%s %s: %w", commandName(c), name, err)
	}
	j := newCalendarJSON(cal)
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(j)
	}
	w := c.App.Writer
	fmt.Fprintf(w, "calendar  %s\nzone      %s\n", j.Name, j.TimeZone)
	for _, d := range []int{1, 2, 3, 4, 5, 6, 0} {
		hs := j.Hours[dayNames[d]]
		if len(hs) == 0 {
			hs = []string{"-"}
		}
		fmt.Fprintf(w, "%-9s %s\n", dayNames[d], strings.Join(hs, ", "))
	}
	closed := "-"
	if len(j.Closed) > 0 {
		closed = strings.Join(j.Closed, " ")
	}
	_, err = fmt.Fprintf(w, "closed    %s\n", closed)
	return err
}
