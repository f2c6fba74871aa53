package recur

import (
	"context"
	"errors"
	"fmt"

	"github.com/hourglassmq/hourglass/calendar"
)

// CalendarPolicy says what becomes of an occurrence outside the working
// time of its schedule's calendar.
type CalendarPolicy string

// Calendar policies.
const (
	// CalendarSkip (the default): it is not delivered; the next
	// occurrence in working time is.
	CalendarSkip CalendarPolicy = "skip"
	// CalendarShift: it is delivered at the next working instant instead,
	// with that instant as its time; the occurrences up to that instant
	// merge into it.
	CalendarShift CalendarPolicy = "shift"
)

// ErrCalendarInUse: a calendar a schedule names may not be deleted.
var ErrCalendarInUse = errors.New("recur: the calendar is in use")

// calendar returns the calendar d keeps to, nil if none. A schedule whose
// calendar is gone (deleted while a change of the schedule was on its
// way) goes on by its spec alone, and says so in the log.
func (s *Scheduler) calendar(d *Def) *calendar.Calendar {
	if d.Calendar == "" {
		return nil
	}
	c, err := s.loadCalendar(d.Calendar)
	if err != nil {
		s.log.Warn("recur: the schedule's calendar cannot be read; its occurrences follow its spec alone", "schedule", d.Name, "calendar", d.Calendar, "err", err)
		return nil
	}
	return c
}

// loadCalendar reads the stored calendar name.
func (s *Scheduler) loadCalendar(name string) (*calendar.Calendar, error) {
	b, ok, err := s.eng.Calendar(name)
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return nil, fmt.Errorf("%w: calendar %q: no such calendar (create it first)", ErrInvalid, name)
	}
	return calendar.Decode(b)
}

// checkCalendar checks d's calendar fields: the calendar exists, and the
// policy is known.
func (s *Scheduler) checkCalendar(d *Def) error {
	switch {
	case d.Calendar == "" && d.CalendarPolicy != "":
		return fmt.Errorf("%w: calendar policy %q without a calendar: name one, or leave the policy out", ErrInvalid, d.CalendarPolicy)
	case d.Calendar == "":
		return nil
	}
	switch d.CalendarPolicy {
	case "", CalendarSkip, CalendarShift:
	default:
		return fmt.Errorf("%w: calendar policy %q: want %s or %s", ErrInvalid, d.CalendarPolicy, CalendarSkip, CalendarShift)
	}
	_, err := s.loadCalendar(d.Calendar)
	return err
}

// CalendarUser returns the name of a schedule that keeps to the calendar
// name ("" if none): a calendar in use may not be deleted.
func (s *Scheduler) CalendarUser(ctx context.Context, name string) (string, error) {
	var after []byte
	for {
		user := ""
		next, err := s.eng.Scan(after, 512, func(k, v []byte) {
			if d, err := DecodeDef(string(k), v); err == nil && user == "" && d.Calendar == name {
				user = d.Name
			}
		})
		if err != nil || user != "" || next == nil {
			return user, err
		}
		if err := ctx.Err(); err != nil {
			return "", err
		}
		after = next
	}
}
