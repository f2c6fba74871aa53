package client

// Working-time calendars: CreateCalendar, UpdateCalendar, DeleteCalendar,
// GetCalendar and ListCalendars; and WorkingTime, a Message's delivery
// time in one.

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// Errors of the calendar calls, when the server changed nothing. The
// error returned wraps the server's status too.
var (
	// ErrCalendarNotFound: no calendar has this name.
	ErrCalendarNotFound = errors.New("client: no such calendar")
	// ErrCalendarExists: CreateCalendar of a name a calendar has already.
	ErrCalendarExists = errors.New("client: a calendar of this name exists")
	// ErrCalendarInUse: DeleteCalendar of a calendar a recurring schedule
	// keeps to (codes.FailedPrecondition); the message names the schedule.
	ErrCalendarInUse = errors.New("client: the calendar is in use")
)

// Calendar is working time: the working hours of each weekday, except on
// the Closed dates, on the wall clock of TimeZone. An instant is working
// time when its date there is not closed and its time of day lies in one
// of that weekday's spans.
type Calendar struct {
	// Name is 1 to 160 bytes of ASCII letters, digits, '.', '_' and '-'.
	Name string
	// TimeZone is an IANA zone ("Europe/Berlin"); empty means UTC.
	TimeZone string
	// Hours are the working spans, at least one; at most 16 a weekday,
	// none overlapping another of its day.
	Hours []WorkingHours
	// Closed are the non-working dates, "YYYY-MM-DD" in TimeZone, at most
	// 10000 (the server answers them sorted, without repeats).
	Closed []string
}

// WorkingHours is working time on one weekday, from Start up to (not
// including) End: "HH:MM", End after Start, "24:00" the end of the day.
type WorkingHours struct {
	Day        time.Weekday
	Start, End string
}

// WorkWeek returns the spans from start to end on each day from Monday
// to Friday: WorkWeek("09:00", "17:00").
func WorkWeek(start, end string) []WorkingHours {
	var hs []WorkingHours
	for d := time.Monday; d <= time.Friday; d++ {
		hs = append(hs, WorkingHours{Day: d, Start: start, End: end})
	}
	return hs
}

// WorkingTime is a delivery time in the working time of a calendar: the
// Days-th working day after After's date, at AtTime; or, with Days 0,
// Duration of working time after After (the instant it ends: 8 working
// hours from Monday 09:00, with hours 09:00-17:00, are Monday 17:00; 0 is
// the next working instant). A working day is a date that is not closed
// and has working hours. An AtTime outside that day's hours moves on to
// the first working instant after it.
type WorkingTime struct {
	Calendar string
	Days     int
	// AtTime is "HH:MM" on the calendar's clock; empty keeps After's time
	// of day. Days only.
	AtTime   string
	Duration time.Duration
	// After is the start; zero means the server's clock when the request
	// arrives.
	After time.Time
}

func (w *WorkingTime) proto() (*hourglassv1.WorkingTime, error) {
	out := &hourglassv1.WorkingTime{Calendar: w.Calendar, AtTime: w.AtTime}
	switch {
	case w.Days < 0 || w.Duration < 0:
		return nil, fmt.Errorf("%w: WorkingTime of %d days or %v: negative", ErrInvalidMessage, w.Days, w.Duration)
	case w.Days > 0 && w.Duration > 0:
		return nil, fmt.Errorf("%w: WorkingTime of %d days and %v: set one of Days and Duration", ErrInvalidMessage, w.Days, w.Duration)
	case w.Days > 0:
		if !fitsInt32(w.Days) {
			return nil, fmt.Errorf("%w: WorkingTime of %d days: at most 3650", ErrInvalidMessage, w.Days)
		}
		out.Amount = &hourglassv1.WorkingTime_Days{Days: int32(w.Days)}
	default:
		out.Amount = &hourglassv1.WorkingTime_DurationMs{DurationMs: int64((w.Duration + time.Millisecond - 1) / time.Millisecond)}
	}
	if !w.After.IsZero() {
		out.After = timestamppb.New(w.After)
	}
	return out, nil
}

// weekdays maps time.Weekday to the API's Weekday and back.
var weekdays = [7]hourglassv1.Weekday{hourglassv1.Weekday_WEEKDAY_SUNDAY, hourglassv1.Weekday_WEEKDAY_MONDAY, hourglassv1.Weekday_WEEKDAY_TUESDAY,
	hourglassv1.Weekday_WEEKDAY_WEDNESDAY, hourglassv1.Weekday_WEEKDAY_THURSDAY, hourglassv1.Weekday_WEEKDAY_FRIDAY, hourglassv1.Weekday_WEEKDAY_SATURDAY}

func (c *Calendar) proto() (*hourglassv1.Calendar, error) {
	out := &hourglassv1.Calendar{Name: c.Name, TimeZone: c.TimeZone, ClosedDates: c.Closed}
	for _, h := range c.Hours {
		if h.Day < time.Sunday || h.Day > time.Saturday {
			return nil, fmt.Errorf("%w: calendar %q: weekday %d: want time.Sunday to time.Saturday", ErrInvalidMessage, c.Name, h.Day)
		}
		out.Hours = append(out.Hours, &hourglassv1.WorkingHours{Day: weekdays[h.Day], Start: h.Start, End: h.End})
	}
	return out, nil
}

func calendarOf(m *hourglassv1.Calendar) Calendar {
	if m == nil {
		return Calendar{}
	}
	c := Calendar{Name: m.Name, TimeZone: m.TimeZone, Closed: m.ClosedDates}
	for _, h := range m.Hours {
		day := time.Weekday(int(h.Day) % 7) // MONDAY is 1, SUNDAY 7
		c.Hours = append(c.Hours, WorkingHours{Day: day, Start: h.Start, End: h.End})
	}
	return c
}

// wrapCalendar wraps an error of a calendar call, mapping NotFound,
// AlreadyExists and FailedPrecondition to their sentinels.
func wrapCalendar(op string, err error) error {
	if err == nil {
		return nil
	}
	werr := wrap(op, err)
	switch status.Code(err) {
	case codes.NotFound:
		return &sentinelError{ErrCalendarNotFound, werr}
	case codes.AlreadyExists:
		return &sentinelError{ErrCalendarExists, werr}
	case codes.FailedPrecondition:
		return &sentinelError{ErrCalendarInUse, werr}
	}
	return werr
}

// CreateCalendar creates the calendar c, durably. A name taken fails
// with ErrCalendarExists; a bad zone, span or date with
// codes.InvalidArgument and a message that says what is allowed.
func (c *Client) CreateCalendar(ctx context.Context, cal Calendar) error {
	m, err := cal.proto()
	if err != nil {
		return err
	}
	_, err = c.svc.CreateCalendar(ctx, &hourglassv1.CreateCalendarRequest{Calendar: m})
	return wrapCalendar("CreateCalendar", err)
}

// UpdateCalendar replaces the definition of the calendar cal.Name names.
// Messages stored before keep their delivery times; recurring schedules
// keep to it from their next occurrence on. An unknown name fails with
// ErrCalendarNotFound.
func (c *Client) UpdateCalendar(ctx context.Context, cal Calendar) error {
	m, err := cal.proto()
	if err != nil {
		return err
	}
	_, err = c.svc.UpdateCalendar(ctx, &hourglassv1.UpdateCalendarRequest{Calendar: m})
	return wrapCalendar("UpdateCalendar", err)
}

// DeleteCalendar removes the calendar name. One a recurring schedule
// keeps to fails with ErrCalendarInUse.
func (c *Client) DeleteCalendar(ctx context.Context, name string) error {
	_, err := c.svc.DeleteCalendar(ctx, &hourglassv1.DeleteCalendarRequest{Name: name})
	return wrapCalendar("DeleteCalendar", err)
}

// GetCalendar returns the calendar name.
func (c *Client) GetCalendar(ctx context.Context, name string) (Calendar, error) {
	res, err := c.svc.GetCalendar(ctx, &hourglassv1.GetCalendarRequest{Name: name})
	if err != nil {
		return Calendar{}, wrapCalendar("GetCalendar", err)
	}
	return calendarOf(res.Calendar), nil
}

// ListCalendarsPage returns one page of up to pageSize calendars (1 to
// 1000; 0 means 100), by name, after the page token (empty for the first
// page), and the token of the next page (empty when there is no more).
func (c *Client) ListCalendarsPage(ctx context.Context, pageSize int, token string) ([]Calendar, string, error) {
	if !fitsInt32(pageSize) {
		return nil, "", fmt.Errorf("%w: ListCalendars page size %d: from 1 to 1000", ErrInvalidMessage, pageSize)
	}
	res, err := c.svc.ListCalendars(ctx, &hourglassv1.ListCalendarsRequest{PageSize: int32(pageSize), PageToken: token})
	if err != nil {
		return nil, "", wrap("ListCalendars", err)
	}
	out := make([]Calendar, 0, len(res.Calendars))
	for _, m := range res.Calendars {
		out = append(out, calendarOf(m))
	}
	return out, res.NextPageToken, nil
}

// ListCalendars yields every calendar, by name, a page at a time; it
// stops at the first error, which it yields.
func (c *Client) ListCalendars(ctx context.Context) iter.Seq2[Calendar, error] {
	return pages(func(token string) ([]Calendar, string, error) { return c.ListCalendarsPage(ctx, 0, token) })
}
