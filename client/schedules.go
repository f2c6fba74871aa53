package client

// Recurring schedules: CreateSchedule, UpdateSchedule, PauseSchedule,
// ResumeSchedule, DeleteSchedule, GetSchedule and ListSchedules.

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

// Errors of the recurring-schedule calls, when the server changed
// nothing. The error returned wraps the server's status too, so
// status.Code(err) still tells codes.NotFound or codes.AlreadyExists.
var (
	// ErrScheduleNotFound: no recurring schedule has this name (never
	// created, or deleted).
	ErrScheduleNotFound = errors.New("client: no such recurring schedule")
	// ErrScheduleExists: CreateSchedule of a name a schedule already has;
	// UpdateSchedule it, or DeleteSchedule it first.
	ErrScheduleExists = errors.New("client: a recurring schedule of this name exists")
)

// MisfirePolicy says what a recurring schedule does with the occurrences
// that fell while the server was down. Its string form is what `hourglass
// schedule --misfire` takes.
type MisfirePolicy string

// Misfire policies. The empty MisfirePolicy is MisfireLatest.
const (
	// MisfireLatest (the default) delivers the missed occurrences once,
	// late, as one, then goes on with the next future one: a job that
	// runs "every hour" runs once after an outage, not in a burst.
	MisfireLatest MisfirePolicy = "fire-latest"
	// MisfireAll delivers each missed occurrence once, oldest first, up
	// to 100 in a row.
	MisfireAll MisfirePolicy = "fire-all"
	// MisfireSkip delivers none of them; the next future occurrence
	// follows.
	MisfireSkip MisfirePolicy = "skip"
)

// MisfirePolicies are the misfire policies, the default first.
var MisfirePolicies = []MisfirePolicy{MisfireLatest, MisfireAll, MisfireSkip}

// OverlapPolicy says what an occurrence of a recurring schedule does when
// its time comes while the previous occurrence delivered is not yet acked
// (due, leased, or waiting for a retry). Its string form is what
// `hourglass schedule --overlap` takes.
type OverlapPolicy string

// Overlap policies. The empty OverlapPolicy is OverlapAllow.
const (
	// OverlapAllow (the default) delivers it all the same.
	OverlapAllow OverlapPolicy = "allow"
	// OverlapSkip does not deliver it.
	OverlapSkip OverlapPolicy = "skip"
	// OverlapBufferOne holds it and delivers it once the previous one is
	// acked; of the occurrences that come while one is held, none is
	// delivered.
	OverlapBufferOne OverlapPolicy = "buffer-one"
)

// OverlapPolicies are the overlap policies, the default first.
var OverlapPolicies = []OverlapPolicy{OverlapAllow, OverlapSkip, OverlapBufferOne}

// CalendarPolicy says what becomes of an occurrence of a recurring
// schedule outside the working time of its Calendar. Its string form is
// what `hourglass schedule --outside` takes.
type CalendarPolicy string

// Calendar policies. The empty CalendarPolicy is CalendarSkip.
const (
	// CalendarSkip (the default): not delivered; the next occurrence in
	// working time is.
	CalendarSkip CalendarPolicy = "skip"
	// CalendarShift: delivered at the next working instant instead; the
	// occurrences between merge into it.
	CalendarShift CalendarPolicy = "shift"
)

// Backfilled is what BackfillSchedule did.
type Backfilled struct {
	// Stored counts the occurrences stored, each a message due at once.
	Stored int
	// Existing counts the occurrences whose message existed already (a
	// live occurrence, or an earlier backfill's), not stored again.
	Existing int
}

// RecurringSchedule is a named message delivered to Topic at every
// occurrence of Spec, in TimeZone. Each occurrence is an ordinary message
// with the idempotency key "<Name>@<time>" (the occurrence's time, UTC,
// "2006-01-02T15:04:05.000Z"), so Key{Topic, that key} names it for
// Cancel, Get and Reschedule; it carries the headers
// "hourglass-schedule" (Name) and "hourglass-occurrence" (its time,
// RFC 3339) beside Headers.
type RecurringSchedule struct {
	// Name is 1 to 160 bytes of ASCII letters, digits, '.', '_' and '-'.
	Name  string
	Topic string
	// Spec is a 5-field cron spec, minute first ("0 9 * * MON-FRI"); a
	// 6-field one, seconds first ("*/30 * * * * *"); "@every 90s" (a Go
	// duration of whole seconds, at least 1s); or a macro: @yearly,
	// @monthly, @weekly, @daily, @hourly.
	Spec string
	// TimeZone is the IANA zone ("Europe/Berlin") the spec is read in;
	// empty means UTC. A local time the clocks skip fires once, at the
	// first instant after the gap; one they repeat fires once, at its
	// first instant.
	TimeZone string
	Body     []byte
	Headers  map[string]string
	// Start and End bound the occurrences delivered; zero means no bound.
	Start, End time.Time
	// Misfire is what happens to occurrences missed while the server was
	// down; empty means MisfireLatest.
	Misfire MisfirePolicy
	// Paused: CreateSchedule creates it paused (no occurrence armed until
	// ResumeSchedule). UpdateSchedule ignores it and keeps the schedule's
	// paused state; PauseSchedule and ResumeSchedule change it.
	Paused bool
	// Jitter delays each occurrence's delivery by 0 to Jitter (whole
	// milliseconds, at most 7 days), never before its time: the same
	// offset for the same occurrence, derived from Name and its time, so
	// that many schedules of one spec do not all fire at once.
	Jitter time.Duration
	// Overlap is what an occurrence does while the previous one is not
	// yet acked; empty means OverlapAllow.
	Overlap OverlapPolicy
	// Calendar names a calendar (CreateCalendar) whose working time the
	// occurrences keep to, as CalendarPolicy says; empty means none.
	Calendar       string
	CalendarPolicy CalendarPolicy
}

// ScheduleInfo is a recurring schedule as GetSchedule and ListSchedules
// answer it.
type ScheduleInfo struct {
	Schedule RecurringSchedule
	// Next are its next fire times from now, oldest first (UTC); none
	// while it is paused or past its End.
	Next []time.Time
	// Armed is the message of its next occurrence, while one is pending;
	// the zero ID otherwise.
	Armed ID
	// Fired counts the occurrences delivered since it was created.
	Fired int64
	// Skipped counts the occurrences its Overlap policy did not deliver.
	Skipped int64
	// Buffered is the time of the occurrence held until the previous one
	// is acked (OverlapBufferOne); zero when none is.
	Buffered time.Time
}

// proto checks s and builds its protobuf form.
func (s *RecurringSchedule) proto() (*hourglassv1.RecurringSchedule, error) {
	out := &hourglassv1.RecurringSchedule{Name: s.Name, Topic: s.Topic, Spec: s.Spec, Body: s.Body, TimeZone: s.TimeZone, Paused: s.Paused,
		Headers: headersProto(s.Headers)}
	if !s.Start.IsZero() {
		out.Start = timestamppb.New(s.Start)
	}
	if !s.End.IsZero() {
		out.End = timestamppb.New(s.End)
	}
	switch s.Misfire {
	case "":
	case MisfireLatest:
		out.MisfirePolicy = hourglassv1.MisfirePolicy_MISFIRE_POLICY_FIRE_LATEST
	case MisfireAll:
		out.MisfirePolicy = hourglassv1.MisfirePolicy_MISFIRE_POLICY_FIRE_ALL
	case MisfireSkip:
		out.MisfirePolicy = hourglassv1.MisfirePolicy_MISFIRE_POLICY_SKIP
	default:
		return nil, fmt.Errorf("%w: schedule %q: misfire policy %q: want %q (the default), %q or %q",
			ErrInvalidMessage, s.Name, s.Misfire, MisfireLatest, MisfireAll, MisfireSkip)
	}
	switch s.Overlap {
	case "":
	case OverlapAllow:
		out.OverlapPolicy = hourglassv1.OverlapPolicy_OVERLAP_POLICY_ALLOW
	case OverlapSkip:
		out.OverlapPolicy = hourglassv1.OverlapPolicy_OVERLAP_POLICY_SKIP
	case OverlapBufferOne:
		out.OverlapPolicy = hourglassv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE
	default:
		return nil, fmt.Errorf("%w: schedule %q: overlap policy %q: want %q (the default), %q or %q",
			ErrInvalidMessage, s.Name, s.Overlap, OverlapAllow, OverlapSkip, OverlapBufferOne)
	}
	switch s.CalendarPolicy {
	case "":
	case CalendarSkip:
		out.CalendarPolicy = hourglassv1.CalendarPolicy_CALENDAR_POLICY_SKIP
	case CalendarShift:
		out.CalendarPolicy = hourglassv1.CalendarPolicy_CALENDAR_POLICY_SHIFT
	default:
		return nil, fmt.Errorf("%w: schedule %q: calendar policy %q: want %q (the default) or %q",
			ErrInvalidMessage, s.Name, s.CalendarPolicy, CalendarSkip, CalendarShift)
	}
	if s.Jitter < 0 {
		return nil, fmt.Errorf("%w: schedule %q: jitter %v is negative", ErrInvalidMessage, s.Name, s.Jitter)
	}
	out.JitterMs, out.Calendar = s.Jitter.Milliseconds(), s.Calendar
	return out, nil
}

func recurringOf(m *hourglassv1.RecurringSchedule) RecurringSchedule {
	if m == nil {
		return RecurringSchedule{}
	}
	s := RecurringSchedule{Name: m.Name, Topic: m.Topic, Spec: m.Spec, TimeZone: m.TimeZone, Body: m.Body, Paused: m.Paused, Misfire: MisfireLatest,
		Headers: headersOf(m.Headers)}
	if m.Start != nil {
		s.Start = m.Start.AsTime()
	}
	if m.End != nil {
		s.End = m.End.AsTime()
	}
	switch m.MisfirePolicy {
	case hourglassv1.MisfirePolicy_MISFIRE_POLICY_FIRE_ALL:
		s.Misfire = MisfireAll
	case hourglassv1.MisfirePolicy_MISFIRE_POLICY_SKIP:
		s.Misfire = MisfireSkip
	}
	s.Jitter, s.Calendar, s.Overlap = time.Duration(m.JitterMs)*time.Millisecond, m.Calendar, OverlapAllow
	switch m.OverlapPolicy {
	case hourglassv1.OverlapPolicy_OVERLAP_POLICY_SKIP:
		s.Overlap = OverlapSkip
	case hourglassv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE:
		s.Overlap = OverlapBufferOne
	}
	if m.Calendar != "" {
		s.CalendarPolicy = CalendarSkip
		if m.CalendarPolicy == hourglassv1.CalendarPolicy_CALENDAR_POLICY_SHIFT {
			s.CalendarPolicy = CalendarShift
		}
	}
	return s
}

func scheduleInfoOf(op string, m *hourglassv1.GetScheduleResponse) (ScheduleInfo, error) {
	in := ScheduleInfo{Schedule: recurringOf(m.Schedule), Fired: m.Fired, Skipped: m.Skipped, Buffered: timeOf(m.Buffered)}
	for _, t := range m.Next {
		in.Next = append(in.Next, t.AsTime())
	}
	if m.ArmedId != "" {
		id, err := idOf(op, m.ArmedId)
		if err != nil {
			return ScheduleInfo{}, err
		}
		in.Armed = id
	}
	return in, nil
}

// sentinelError is an error of the server about a schedule or calendar: its text is
// the server's, and it is both the sentinel and the status error.
type sentinelError struct {
	sentinel, err error
}

func (e *sentinelError) Error() string   { return e.err.Error() }
func (e *sentinelError) Unwrap() []error { return []error{e.sentinel, e.err} }

// wrapSchedule wraps an error of a schedule call, mapping NotFound and
// AlreadyExists to their sentinels.
func wrapSchedule(op string, err error) error {
	if err == nil {
		return nil
	}
	werr := wrap(op, err)
	switch status.Code(err) {
	case codes.NotFound:
		return &sentinelError{ErrScheduleNotFound, werr}
	case codes.AlreadyExists:
		return &sentinelError{ErrScheduleExists, werr}
	}
	return werr
}

func timeOf(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

// CreateSchedule creates the recurring schedule s and arms its first
// occurrence; it returns that occurrence's time, or the zero time if none
// is armed (s.Paused, or none before s.End). A name taken fails with
// ErrScheduleExists; a bad spec, zone or name with codes.InvalidArgument
// and a message that says what is allowed.
func (c *Client) CreateSchedule(ctx context.Context, s RecurringSchedule) (time.Time, error) {
	m, err := s.proto()
	if err != nil {
		return time.Time{}, err
	}
	res, err := c.svc.CreateSchedule(ctx, &hourglassv1.CreateScheduleRequest{Schedule: m})
	if err != nil {
		return time.Time{}, wrapSchedule("CreateSchedule", err)
	}
	return timeOf(res.Next), nil
}

// UpdateSchedule replaces the definition of the schedule s.Name names
// with s, keeping its paused state and its Fired count: its armed
// occurrence is cancelled and the next one of s is armed. It returns that
// occurrence's time (zero: none armed). An unknown name fails with
// ErrScheduleNotFound.
func (c *Client) UpdateSchedule(ctx context.Context, s RecurringSchedule) (time.Time, error) {
	m, err := s.proto()
	if err != nil {
		return time.Time{}, err
	}
	res, err := c.svc.UpdateSchedule(ctx, &hourglassv1.UpdateScheduleRequest{Schedule: m})
	if err != nil {
		return time.Time{}, wrapSchedule("UpdateSchedule", err)
	}
	return timeOf(res.Next), nil
}

// PauseSchedule stops the schedule's occurrences, durably, until
// ResumeSchedule: its armed occurrence is cancelled, and once it returns
// no occurrence is delivered. Pausing a paused schedule changes nothing.
func (c *Client) PauseSchedule(ctx context.Context, name string) error {
	_, err := c.svc.PauseSchedule(ctx, &hourglassv1.PauseScheduleRequest{Name: name})
	return wrapSchedule("PauseSchedule", err)
}

// ResumeSchedule arms a paused schedule's next occurrence from now on
// (those that fell while it was paused are not delivered) and returns its
// time (zero: none left before its End). Resuming a schedule that is not
// paused changes nothing and returns its armed occurrence's time.
func (c *Client) ResumeSchedule(ctx context.Context, name string) (time.Time, error) {
	res, err := c.svc.ResumeSchedule(ctx, &hourglassv1.ResumeScheduleRequest{Name: name})
	if err != nil {
		return time.Time{}, wrapSchedule("ResumeSchedule", err)
	}
	return timeOf(res.Next), nil
}

// DeleteSchedule removes the schedule: once it returns, no further
// occurrence is delivered. Occurrences delivered before stay where they
// are (in the queue, say).
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	_, err := c.svc.DeleteSchedule(ctx, &hourglassv1.DeleteScheduleRequest{Name: name})
	return wrapSchedule("DeleteSchedule", err)
}

// BackfillSchedule delivers now the occurrences of the schedule name from
// from up to (not including) to, which must not be after the server's
// clock (at most 10000 occurrences): one message per occurrence, keyed
// "<name>@<time>" as the live occurrence was, none for an occurrence that
// has its message already (a live one, or an earlier backfill's; so a
// backfill cut short is run again safely). They carry the header
// "hourglass-backfill". An unknown name fails with ErrScheduleNotFound.
func (c *Client) BackfillSchedule(ctx context.Context, name string, from, to time.Time) (Backfilled, error) {
	res, err := c.svc.BackfillSchedule(ctx, &hourglassv1.BackfillScheduleRequest{Name: name, From: timestamppb.New(from), To: timestamppb.New(to)})
	if err != nil {
		return Backfilled{}, wrapSchedule("BackfillSchedule", err)
	}
	return Backfilled{Stored: int(res.Stored), Existing: int(res.Existing)}, nil
}

// MaxNextTimes is the most fire times GetSchedule returns.
const MaxNextTimes = 100

// GetSchedule returns the schedule name with its next n fire times (0
// means 5; at most MaxNextTimes), its armed occurrence and how many have
// fired. It only reads.
func (c *Client) GetSchedule(ctx context.Context, name string, n int) (ScheduleInfo, error) {
	if n < 0 || n > MaxNextTimes {
		return ScheduleInfo{}, fmt.Errorf("%w: GetSchedule of %d next times: from 0 (5) to %d", ErrInvalidMessage, n, MaxNextTimes)
	}
	res, err := c.svc.GetSchedule(ctx, &hourglassv1.GetScheduleRequest{Name: name, NextCount: int32(n)})
	if err != nil {
		return ScheduleInfo{}, wrapSchedule("GetSchedule", err)
	}
	return scheduleInfoOf("GetSchedule", res)
}

// ListSchedulesOptions select what ListSchedules returns.
type ListSchedulesOptions struct {
	// Topic, if set, lists only the schedules that deliver to it.
	Topic string
	// PageSize is how many schedules one call fetches, 1 to 1000; 0 means
	// the server's default (100).
	PageSize int
}

// ListSchedulesPage returns one page of the recurring schedules, by
// name, each with its next 3 fire times, starting after the page token
// (empty for the first page), and the token of the next page (empty when
// there is no more).
func (c *Client) ListSchedulesPage(ctx context.Context, o ListSchedulesOptions, token string) ([]ScheduleInfo, string, error) {
	if !fitsInt32(o.PageSize) {
		return nil, "", fmt.Errorf("%w: ListSchedules PageSize %d: from 1 to 1000", ErrInvalidMessage, o.PageSize)
	}
	res, err := c.svc.ListSchedules(ctx, &hourglassv1.ListSchedulesRequest{Topic: o.Topic, PageSize: int32(o.PageSize), PageToken: token})
	if err != nil {
		return nil, "", wrap("ListSchedules", err)
	}
	out := make([]ScheduleInfo, 0, len(res.Schedules))
	for _, g := range res.Schedules {
		in, err := scheduleInfoOf("ListSchedules", g)
		if err != nil {
			return nil, "", err
		}
		out = append(out, in)
	}
	return out, res.NextPageToken, nil
}

// ListSchedules yields every recurring schedule (of o.Topic, if set), by
// name, fetching a page at a time; it stops at the first error, which it
// yields.
func (c *Client) ListSchedules(ctx context.Context, o ListSchedulesOptions) iter.Seq2[ScheduleInfo, error] {
	return pages(func(token string) ([]ScheduleInfo, string, error) { return c.ListSchedulesPage(ctx, o, token) })
}
