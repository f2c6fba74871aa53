package crashtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc/codes"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
)

// CalendarName is the calendar the harness's messages in working time
// (issue 44) count in: UTC, every day sixteen spans of 89 minutes each
// followed by a minute off (00:00-01:29, 01:30-02:59, ..., 22:30-23:59),
// so that a duration of working time that crosses a minute off ends a
// minute later than the same duration of real time.
const CalendarName = "cr-cal"

// workCalendar is the definition of CalendarName.
func workCalendar() *hourglassv1.Calendar {
	c := &hourglassv1.Calendar{Name: CalendarName}
	for d := hourglassv1.Weekday_WEEKDAY_MONDAY; d <= hourglassv1.Weekday_WEEKDAY_SUNDAY; d++ {
		for i := range 16 {
			start := time.Duration(i) * 90 * time.Minute
			c.Hours = append(c.Hours, &hourglassv1.WorkingHours{Day: d, Start: clock(start), End: clock(start + 89*time.Minute)})
		}
	}
	return c
}

// clock is d after midnight as "HH:MM".
func clock(d time.Duration) string {
	return fmt.Sprintf("%02d:%02d", int(d.Hours()), int(d.Minutes())%60)
}

// ensureCalendar creates CalendarName, every 100 ms until it is answered
// OK (or ALREADY_EXISTS: an attempt before took effect) or ctx ends; then
// producers send messages in its working time (workingMessage). A cycle
// runs it until it is done.
func (w *workload) ensureCalendar(ctx context.Context, l lanes, cycle int, rng *rand.Rand) {
	for !w.calReady.Load() && ctx.Err() == nil {
		ln := l.choose(rng)
		w.count("create-calendar", ln.proto)
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		_, err := ln.CreateCalendar(cctx, &hourglassv1.CreateCalendarRequest{Calendar: workCalendar()})
		cancel()
		if err == nil || codeOf(err) == codes.AlreadyExists {
			w.calReady.Store(true)
			return
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// workingMessage makes req a message due after d of CalendarName's
// working time from the server's clock. Its NotBefore is sent plus d,
// which working time never ends before (an hour of working time takes at
// least an hour); AddSchedule raises it to the time the server answered
// (the ID's) once the Schedule is answered.
func workingMessage(req *hourglassv1.ScheduleRequest, s *Schedule, sent time.Time, d time.Duration) {
	req.When = &hourglassv1.ScheduleRequest_Working{Working: &hourglassv1.WorkingTime{
		Calendar: CalendarName, Amount: &hourglassv1.WorkingTime_DurationMs{DurationMs: d.Milliseconds()}}}
	s.Kind, s.NotBefore = KindWorking, sent.Add(d.Truncate(time.Millisecond))
}

// KindWorking is Schedule.Kind of a message in working time.
const KindWorking = "working"

// answeredTime raises the NotBefore of s, a message in working time
// answered OK, to the delivery time its ID carries: the one the server
// computed and answered as deliver_at. The server's clock is the
// harness's (one machine), within the skew Check allows.
func answeredTime(s *Schedule) {
	if s.Kind != KindWorking || s.Outcome != OK {
		return
	}
	if id, err := message.ParseID(s.ID); err == nil && id.Time().After(s.NotBefore) {
		s.NotBefore = id.Time()
	}
}

// ones is 1 for true, 0 for false: a count of what holds.
func ones(b bool) int {
	if b {
		return 1
	}
	return 0
}
