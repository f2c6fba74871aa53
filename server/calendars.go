package server

// The calendar RPCs: CreateCalendar, UpdateCalendar, DeleteCalendar,
// GetCalendar and ListCalendars. A calendar is a control record
// (message.ControlCalendar) routed into the catalog's calendars table,
// like a topic's policy; package calendar checks and encodes it. And the
// working time of a ScheduleRequest, computed in one.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/calendar"
	"github.com/hourglassmq/hourglass/catalog"
	"github.com/hourglassmq/hourglass/engine"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/internal/units"
	"github.com/hourglassmq/hourglass/message"
)

// calendarEngine returns the engine whose catalog holds the calendars, or
// Unimplemented in cluster mode.
func (s *Server) calendarEngine(rpc string) (*engine.Engine, error) {
	if ec, ok := s.eng.(engineCore); ok {
		return ec.Engine, nil
	}
	return nil, status.Errorf(codes.Unimplemented, "%s: calendars are not yet available in cluster mode", rpc)
}

// calendarsLocked takes the lock that serializes the changes of calendars
// with those of the schedules that name one, if lock is set, and returns
// its release: a calendar in use is never deleted.
func (s *Server) calendarsLocked(lock bool) func() {
	if !lock {
		return func() {}
	}
	s.changes.calendar.Lock()
	return s.changes.calendar.Unlock
}

// calendarText is a calendar error's text for a caller.
func calendarText(err error) string {
	return strings.TrimPrefix(strings.TrimPrefix(err.Error(), "calendar: "), "recur: ")
}

// calendarOf checks m and turns it into package calendar's.
func calendarOf(m *hourglassv1.Calendar) (*calendar.Calendar, error) {
	if m == nil {
		return nil, invalid("calendar is missing")
	}
	if err := calendar.CheckName(m.Name); err != nil {
		return nil, invalid("%s", calendarText(err))
	}
	var week [7][]calendar.Span
	for i, h := range m.Hours {
		if h == nil || h.Day < hourglassv1.Weekday_WEEKDAY_MONDAY || h.Day > hourglassv1.Weekday_WEEKDAY_SUNDAY {
			return nil, invalid("hours[%d]: the day is missing or unknown: want MONDAY to SUNDAY", i)
		}
		sp, err := calendar.ParseSpan(h.Start + "-" + h.End)
		if err != nil {
			return nil, invalid("hours[%d]: %s", i, calendarText(err))
		}
		wd := time.Weekday(int(h.Day) % 7) // MONDAY is 1, SUNDAY 7
		week[wd] = append(week[wd], sp)
	}
	closed := make([]calendar.Date, 0, len(m.ClosedDates))
	for i, s := range m.ClosedDates {
		d, err := calendar.ParseDate(s)
		if err != nil {
			return nil, invalid("closed_dates[%d]: %s", i, calendarText(err))
		}
		closed = append(closed, d)
	}
	c, err := calendar.New(m.TimeZone, week, closed)
	if err != nil {
		return nil, invalid("%s", calendarText(err))
	}
	return c, nil
}

// protoCalendar shows the calendar name as the API does: hours from
// Monday to Sunday.
func protoCalendar(name string, c *calendar.Calendar) *hourglassv1.Calendar {
	out := &hourglassv1.Calendar{Name: name, TimeZone: c.Zone()}
	week := c.Week()
	for i := range 7 {
		wd := time.Weekday((i + 1) % 7)
		for _, sp := range week[wd] {
			out.Hours = append(out.Hours, &hourglassv1.WorkingHours{Day: hourglassv1.Weekday(i + 1), Start: sp.Start.String(), End: sp.End.String()})
		}
	}
	for _, d := range c.Closed() {
		out.ClosedDates = append(out.ClosedDates, d.String())
	}
	return out
}

// storedCalendar reads the calendar name: NotFound if there is none.
func storedCalendar(eng *engine.Engine, name string) (*calendar.Calendar, error) {
	b, ok, err := eng.Setting(catalog.Calendars, name)
	switch {
	case err != nil:
		return nil, serverError(err)
	case !ok:
		return nil, status.Errorf(codes.NotFound, "calendar %q: no such calendar (hourglass calendar list shows them)", name)
	}
	c, err := calendar.Decode(b)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "calendar %q as stored: %v", name, err)
	}
	return c, nil
}

// putCalendar serves CreateCalendar (update false) and UpdateCalendar.
func (s *Server) putCalendar(ctx context.Context, rpc string, m *hourglassv1.Calendar, update bool) error {
	eng, err := s.calendarEngine(rpc)
	if err != nil {
		return err
	}
	c, err := calendarOf(m)
	if err != nil {
		return err
	}
	defer s.calendarsLocked(true)()
	_, found, err := eng.Setting(catalog.Calendars, m.Name)
	switch {
	case err != nil:
		return serverError(err)
	case update && !found:
		return status.Errorf(codes.NotFound, "calendar %q: no such calendar: create it first", m.Name)
	case !update && found:
		return status.Errorf(codes.AlreadyExists, "calendar %q exists: update it, or delete it first", m.Name)
	}
	if err := eng.Control(ctx, message.Control{Kind: message.ControlCalendar, Name: []byte(m.Name), Value: c.Encode()}); err != nil {
		return serverError(err)
	}
	return nil
}

func (s api) CreateCalendar(ctx context.Context, m *hourglassv1.CreateCalendarRequest) (*hourglassv1.CreateCalendarResponse, error) {
	if err := s.putCalendar(ctx, "CreateCalendar", m.Calendar, false); err != nil {
		return nil, err
	}
	return &hourglassv1.CreateCalendarResponse{}, nil
}

func (s api) UpdateCalendar(ctx context.Context, m *hourglassv1.UpdateCalendarRequest) (*hourglassv1.UpdateCalendarResponse, error) {
	if err := s.putCalendar(ctx, "UpdateCalendar", m.Calendar, true); err != nil {
		return nil, err
	}
	return &hourglassv1.UpdateCalendarResponse{}, nil
}

// calendarUser is what DeleteCalendar asks of the recurring schedules.
type calendarUser interface {
	CalendarUser(ctx context.Context, name string) (string, error)
}

func (s api) DeleteCalendar(ctx context.Context, m *hourglassv1.DeleteCalendarRequest) (*hourglassv1.DeleteCalendarResponse, error) {
	eng, err := s.calendarEngine("DeleteCalendar")
	if err != nil {
		return nil, err
	}
	defer s.calendarsLocked(true)()
	if _, err := storedCalendar(eng, m.Name); err != nil {
		return nil, err
	}
	if u, ok := s.opts.Schedules.(calendarUser); ok {
		user, err := u.CalendarUser(ctx, m.Name)
		if err != nil {
			return nil, serverError(err)
		}
		if user != "" {
			return nil, status.Errorf(codes.FailedPrecondition, "calendar %q is used by the recurring schedule %q: update or delete that schedule first", m.Name, user)
		}
	}
	if err := eng.Control(ctx, message.Control{Kind: message.ControlCalendar, Name: []byte(m.Name)}); err != nil {
		return nil, serverError(err)
	}
	return &hourglassv1.DeleteCalendarResponse{}, nil
}

func (s api) GetCalendar(ctx context.Context, m *hourglassv1.GetCalendarRequest) (*hourglassv1.GetCalendarResponse, error) {
	eng, err := s.calendarEngine("GetCalendar")
	if err != nil {
		return nil, err
	}
	c, err := storedCalendar(eng, m.Name)
	if err != nil {
		return nil, err
	}
	return &hourglassv1.GetCalendarResponse{Calendar: protoCalendar(m.Name, c)}, nil
}

func (s api) ListCalendars(ctx context.Context, m *hourglassv1.ListCalendarsRequest) (*hourglassv1.ListCalendarsResponse, error) {
	eng, err := s.calendarEngine("ListCalendars")
	if err != nil {
		return nil, err
	}
	n := int(m.PageSize)
	if n == 0 {
		n = 100
	}
	if n < 1 || n > 1000 {
		return nil, invalid("page_size %d: from 1 to 1000; 0 means 100", m.PageSize)
	}
	var after []byte
	if m.PageToken != "" {
		after = []byte(m.PageToken)
	}
	out := &hourglassv1.ListCalendarsResponse{}
	var derr error
	next, err := eng.ScanSettings(catalog.Calendars, after, n, func(k, v []byte) {
		c, err := calendar.Decode(v)
		if err != nil {
			derr = errors.Join(derr, fmt.Errorf("calendar %q as stored: %w", k, err))
			return
		}
		out.Calendars = append(out.Calendars, protoCalendar(string(k), c))
	})
	if err != nil {
		return nil, serverError(err)
	}
	if derr != nil {
		return nil, status.Error(codes.Internal, derr.Error())
	}
	if next != nil {
		out.NextPageToken = string(next)
	}
	return out, nil
}

// workingTime computes the delivery time of a ScheduleRequest's working
// time; now is the server's clock when the request arrived. It checks
// the result against the max delay.
func (s *Server) workingTime(prefix string, w *hourglassv1.WorkingTime, now time.Time) (time.Time, error) {
	bad := func(format string, args ...any) error {
		return invalid("%s", field(prefix, "working: "+fmt.Sprintf(format, args...)))
	}
	if w == nil {
		return time.Time{}, bad("is empty: give calendar and days or duration_ms")
	}
	eng, err := s.calendarEngine("Schedule in working time")
	if err != nil {
		return time.Time{}, err
	}
	if w.Calendar == "" {
		return time.Time{}, bad("calendar is empty: name the calendar (CreateCalendar) whose working time counts")
	}
	b, ok, err := eng.Setting(catalog.Calendars, w.Calendar)
	if err != nil {
		return time.Time{}, serverError(err)
	}
	if !ok {
		return time.Time{}, bad("calendar %q: no such calendar; create it first (hourglass calendar create)", w.Calendar)
	}
	c, err := calendar.Decode(b)
	if err != nil {
		return time.Time{}, status.Errorf(codes.Internal, "calendar %q as stored: %v", w.Calendar, err)
	}
	start := now
	if w.After != nil {
		if err := w.After.CheckValid(); err != nil {
			return time.Time{}, bad("after is not a valid time: %v", err)
		}
		start = w.After.AsTime()
	}
	var t time.Time
	switch a := w.Amount.(type) {
	case *hourglassv1.WorkingTime_Days:
		at := calendar.SameTime
		if w.AtTime != "" {
			if at, err = calendar.ParseClock(w.AtTime); err != nil || at == calendar.EndOfDay {
				return time.Time{}, bad("at_time %q: want HH:MM, 00:00 to 23:59", w.AtTime)
			}
		}
		if a.Days < 1 || a.Days > calendar.MaxDays {
			return time.Time{}, bad("days %d: from 1 to %d", a.Days, calendar.MaxDays)
		}
		t, err = c.AddDays(start, int(a.Days), at)
	case *hourglassv1.WorkingTime_DurationMs:
		if w.AtTime != "" {
			return time.Time{}, bad("at_time goes with days, not with duration_ms")
		}
		if a.DurationMs < 0 || a.DurationMs > s.opts.MaxDelay.Milliseconds() {
			return time.Time{}, bad("duration_ms %d: from 0 to %d (the server's --max-delay)", a.DurationMs, s.opts.MaxDelay.Milliseconds())
		}
		t, err = c.AddWorking(start, time.Duration(a.DurationMs)*time.Millisecond)
	default:
		return time.Time{}, bad("give days or duration_ms")
	}
	if err != nil {
		return time.Time{}, bad("%s", calendarText(err))
	}
	if maxDelay := s.opts.MaxDelay; t.After(now.Add(maxDelay)) {
		return time.Time{}, bad("it comes to %s, %s ahead of the server's clock; the maximum delay is %s (the server's --max-delay)",
			t.UTC().Format(time.RFC3339), units.FormatDuration(t.Sub(now).Round(time.Second)), units.FormatDuration(maxDelay))
	}
	return t, nil
}
