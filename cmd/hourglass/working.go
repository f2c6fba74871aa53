package main

// The flags of send that give a delivery time in a calendar's working
// time.

import (
	"fmt"
	"strconv"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass/client"
	"github.com/hourglassmq/hourglass/internal/units"
)

const workingHelp = `In working time (a calendar: 'hourglass calendar --help'), instead:
  --calendar NAME --working-days N [--at-time HH:MM]
                 the N-th working day after today (a working day is one
                 that is not closed and has working hours), at HH:MM on the
                 calendar's clock (the time of day it is now when not given;
                 a time outside that day's hours moves on to the next
                 working instant)
  --calendar NAME --working-hours H
                 after H of working time: a number of hours (4, 1.5) or a
                 duration (90m, 2h30m); 8 working hours from Monday 09:00
                 with hours 09:00-17:00 end Monday 17:00
  --after TIME   counts from TIME (RFC 3339) instead of now
The server computes the time when it stores the message, and send prints it
on standard error ("delivers at TIME"); a later change of the calendar does
not move it.`

// workingFlags are send's flags of a time in working time.
func workingFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "calendar", Usage: "count working time in the calendar `NAME` (with --working-days or --working-hours)"},
		&cli.IntFlag{Name: "working-days", Usage: "deliver on the `N`-th working day after today (with --calendar)"},
		&cli.StringFlag{Name: "at-time", Usage: "with --working-days: at `HH:MM` on the calendar's clock"},
		&cli.StringFlag{Name: "working-hours", Usage: "deliver after `H` of working time: hours (4, 1.5) or a duration (90m) (with --calendar)"},
		&cli.StringFlag{Name: "after", Usage: "with --working-days or --working-hours: count from `TIME` (RFC 3339) instead of now"},
	}
}

// workingOfFlags reads the working-time flags (one of --working-days and
// --working-hours is set).
func workingOfFlags(c *cli.Context) (*client.WorkingTime, error) {
	w := &client.WorkingTime{Calendar: c.String("calendar"), AtTime: c.String("at-time")}
	if w.Calendar == "" {
		return nil, commandError(c, "--calendar is missing: name the calendar whose working time counts ('hourglass calendar list')")
	}
	if c.IsSet("working-days") {
		if w.Days = c.Int("working-days"); w.Days < 1 {
			return nil, commandError(c, "--working-days %d: at least 1", w.Days)
		}
	} else {
		if c.IsSet("at-time") {
			return nil, commandError(c, "--at-time goes with --working-days, not --working-hours")
		}
		s := c.String("working-hours")
		h, err := strconv.ParseFloat(s, 64)
		d := time.Duration(h * float64(time.Hour))
		if err != nil {
			d, err = units.ParseDuration(s)
		}
		if err != nil || d < 0 {
			return nil, commandError(c, "--working-hours %q: want hours (4, 1.5) or a duration (90m, 2h30m), 0 or more", s)
		}
		w.Duration = d
	}
	if c.IsSet("after") {
		t, err := time.Parse(time.RFC3339Nano, c.String("after"))
		if err != nil {
			return nil, commandError(c, "--after %q: want an RFC 3339 time such as 2030-01-02T09:00:00Z", c.String("after"))
		}
		w.After = t
	}
	return w, nil
}

// noWorkingFlags refuses the working-time flags without --working-days
// or --working-hours.
func noWorkingFlags(c *cli.Context) error {
	for _, f := range []string{"calendar", "at-time", "after"} {
		if c.IsSet(f) {
			return commandError(c, "--%s goes with --working-days or --working-hours", f)
		}
	}
	return nil
}

// printWorking says on standard error when a message in working time is
// delivered.
func printWorking(c *cli.Context, id client.ID) {
	fmt.Fprintf(c.App.ErrWriter, "delivers at %s\n", id.Time().UTC().Format(rfc3339Nano))
}
