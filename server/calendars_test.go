package server

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/internal/units"
)

func office(name string, closed ...string) *hourglassv1.Calendar {
	c := &hourglassv1.Calendar{Name: name, TimeZone: "Europe/Berlin", ClosedDates: closed}
	for d := hourglassv1.Weekday_WEEKDAY_FRIDAY; d >= hourglassv1.Weekday_WEEKDAY_MONDAY; d-- {
		c.Hours = append(c.Hours, &hourglassv1.WorkingHours{Day: d, Start: "09:00", End: "17:00"})
	}
	return c
}

// The calendar RPCs create, answer, page through, replace and delete
// calendars, durably as control records, and refuse what is wrong saying
// what is allowed.
func TestCalendarRPCs(t *testing.T) {
	ts := newTestServer(t, Options{})
	c := ts.client
	ctx := context.Background()
	for _, name := range []string{"b-office", "a-office", "c-office"} {
		if _, err := c.CreateCalendar(ctx, connect.NewRequest(&hourglassv1.CreateCalendarRequest{Calendar: office(name, "2030-12-26", "2030-12-25", "2030-12-25")})); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.CreateCalendar(ctx, connect.NewRequest(&hourglassv1.CreateCalendarRequest{Calendar: office("a-office")}))
	wantCode(t, "CreateCalendar of a name taken", err, connect.CodeAlreadyExists, "exists")
	g, err := c.GetCalendar(ctx, connect.NewRequest(&hourglassv1.GetCalendarRequest{Name: "a-office"}))
	if err != nil {
		t.Fatal(err)
	}
	cal := g.Msg.Calendar
	if cal.TimeZone != "Europe/Berlin" || len(cal.Hours) != 5 || cal.Hours[0].Day != hourglassv1.Weekday_WEEKDAY_MONDAY ||
		cal.Hours[0].Start != "09:00" || !slices.Equal(cal.ClosedDates, []string{"2030-12-25", "2030-12-26"}) {
		t.Fatalf("GetCalendar = %v (want hours from Monday, dates sorted and once)", cal)
	}
	var names []string
	token := ""
	for range 3 {
		l, err := c.ListCalendars(ctx, connect.NewRequest(&hourglassv1.ListCalendarsRequest{PageSize: 2, PageToken: token}))
		if err != nil {
			t.Fatal(err)
		}
		for _, cal := range l.Msg.Calendars {
			names = append(names, cal.Name)
		}
		if token = l.Msg.NextPageToken; token == "" {
			break
		}
	}
	if !slices.Equal(names, []string{"a-office", "b-office", "c-office"}) {
		t.Fatalf("ListCalendars by pages of 2: %v", names)
	}
	up := office("a-office")
	up.Hours = []*hourglassv1.WorkingHours{{Day: hourglassv1.Weekday_WEEKDAY_SATURDAY, Start: "10:00", End: "24:00"}}
	if _, err := c.UpdateCalendar(ctx, connect.NewRequest(&hourglassv1.UpdateCalendarRequest{Calendar: up})); err != nil {
		t.Fatal(err)
	}
	g, err = c.GetCalendar(ctx, connect.NewRequest(&hourglassv1.GetCalendarRequest{Name: "a-office"}))
	if err != nil || len(g.Msg.Calendar.Hours) != 1 || g.Msg.Calendar.Hours[0].End != "24:00" || len(g.Msg.Calendar.ClosedDates) != 0 {
		t.Fatalf("GetCalendar after UpdateCalendar = %v, %v", g, err)
	}
	_, err = c.UpdateCalendar(ctx, connect.NewRequest(&hourglassv1.UpdateCalendarRequest{Calendar: office("nope")}))
	wantCode(t, "UpdateCalendar of an unknown name", err, connect.CodeNotFound, "create it first")
	if _, err := c.DeleteCalendar(ctx, connect.NewRequest(&hourglassv1.DeleteCalendarRequest{Name: "b-office"})); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetCalendar(ctx, connect.NewRequest(&hourglassv1.GetCalendarRequest{Name: "b-office"}))
	wantCode(t, "GetCalendar after DeleteCalendar", err, connect.CodeNotFound, "no such calendar")
	_, err = c.DeleteCalendar(ctx, connect.NewRequest(&hourglassv1.DeleteCalendarRequest{Name: "b-office"}))
	wantCode(t, "DeleteCalendar again", err, connect.CodeNotFound)

	for _, tc := range []struct {
		name string
		edit func(*hourglassv1.Calendar)
		want string
	}{
		{"no_name", func(c *hourglassv1.Calendar) { c.Name = "" }, "1 to 160 bytes"},
		{"bad_zone", func(c *hourglassv1.Calendar) { c.TimeZone = "Berlin" }, "IANA"},
		{"no_hours", func(c *hourglassv1.Calendar) { c.Hours = nil }, "no working hours"},
		{"no_day", func(c *hourglassv1.Calendar) { c.Hours[1].Day = 0 }, "hours[1]: the day"},
		{"bad_time", func(c *hourglassv1.Calendar) { c.Hours[2].End = "5pm" }, "hours[2]"},
		{"overlap", func(c *hourglassv1.Calendar) {
			c.Hours = append(c.Hours, &hourglassv1.WorkingHours{Day: hourglassv1.Weekday_WEEKDAY_MONDAY, Start: "16:00", End: "18:00"})
		}, "overlap"},
		{"bad_date", func(c *hourglassv1.Calendar) { c.ClosedDates = []string{"2030-02-30"} }, "closed_dates[0]"},
	} {
		cal := office("x")
		tc.edit(cal)
		_, err := c.CreateCalendar(ctx, connect.NewRequest(&hourglassv1.CreateCalendarRequest{Calendar: cal}))
		wantCode(t, tc.name, err, connect.CodeInvalidArgument, tc.want)
	}
}

// A Schedule in working time is delivered at the time its calendar gives,
// answered as deliver_at; a later change of the calendar leaves it there.
func TestScheduleInWorkingTime(t *testing.T) {
	// Friday 2030-01-04, 15:30 in Berlin.
	now := time.Date(2030, 1, 4, 14, 30, 0, 0, time.UTC)
	ts := newTestServerClock(t, Options{MaxDelay: 30 * units.Day}, func() time.Time { return now })
	c := ts.client
	ctx := context.Background()
	if _, err := c.CreateCalendar(ctx, connect.NewRequest(&hourglassv1.CreateCalendarRequest{Calendar: office("berlin", "2030-01-07")})); err != nil {
		t.Fatal(err)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	at := func(s string) time.Time {
		v, err := time.ParseInLocation("2006-01-02 15:04", s, berlin)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	working := func(w *hourglassv1.WorkingTime) *hourglassv1.ScheduleRequest {
		return &hourglassv1.ScheduleRequest{Topic: "t", When: &hourglassv1.ScheduleRequest_Working{Working: w}}
	}
	for _, tc := range []struct {
		name string
		w    *hourglassv1.WorkingTime
		want time.Time
	}{
		// Monday is closed: the first working day after Friday is Tuesday.
		{"one_day_at_nine", &hourglassv1.WorkingTime{Calendar: "berlin", Amount: &hourglassv1.WorkingTime_Days{Days: 1}, AtTime: "09:00"}, at("2030-01-08 09:00")},
		{"two_days_same_time", &hourglassv1.WorkingTime{Calendar: "berlin", Amount: &hourglassv1.WorkingTime_Days{Days: 2}}, at("2030-01-09 15:30")},
		// 1.5 h of Friday's working time is left; 2 h end Tuesday 09:30.
		{"two_hours", &hourglassv1.WorkingTime{Calendar: "berlin", Amount: &hourglassv1.WorkingTime_DurationMs{DurationMs: 2 * 3600_000}}, at("2030-01-08 09:30")},
		{"next_working_instant", &hourglassv1.WorkingTime{Calendar: "berlin", Amount: &hourglassv1.WorkingTime_DurationMs{}}, now},
		{"after_a_time", &hourglassv1.WorkingTime{Calendar: "berlin", Amount: &hourglassv1.WorkingTime_Days{Days: 3}, AtTime: "10:15",
			After: timestamppb.New(at("2030-01-10 12:00"))}, at("2030-01-15 10:15")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := c.Schedule(ctx, connect.NewRequest(working(tc.w)))
			if err != nil {
				t.Fatal(err)
			}
			if got := res.Msg.DeliverAt.AsTime(); !got.Equal(tc.want) {
				t.Fatalf("deliver_at %s, want %s", got, tc.want.UTC())
			}
		})
	}
	b, err := c.ScheduleBatch(ctx, connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{
		{Topic: "t", When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 1000}},
		working(&hourglassv1.WorkingTime{Calendar: "berlin", Amount: &hourglassv1.WorkingTime_Days{Days: 1}, AtTime: "09:00"}),
	}}))
	if err != nil || !b.Msg.Results[1].DeliverAt.AsTime().Equal(at("2030-01-08 09:00")) {
		t.Fatalf("ScheduleBatch = %v, %v", b, err)
	}
	// The calendar changes (Tuesday closed too): what is stored stays.
	if _, err := c.UpdateCalendar(ctx, connect.NewRequest(&hourglassv1.UpdateCalendarRequest{Calendar: office("berlin", "2030-01-07", "2030-01-08")})); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, connect.NewRequest(&hourglassv1.GetRequest{Id: b.Msg.Results[1].Id}))
	if err != nil || !got.Msg.Message.DeliverAt.AsTime().Equal(at("2030-01-08 09:00")) {
		t.Fatalf("Get after UpdateCalendar = %v, %v", got, err)
	}
	for _, tc := range []struct {
		name string
		w    *hourglassv1.WorkingTime
		want string
	}{
		{"no_calendar", &hourglassv1.WorkingTime{Amount: &hourglassv1.WorkingTime_Days{Days: 1}}, "calendar is empty"},
		{"unknown_calendar", &hourglassv1.WorkingTime{Calendar: "nope", Amount: &hourglassv1.WorkingTime_Days{Days: 1}}, `"nope": no such calendar`},
		{"no_amount", &hourglassv1.WorkingTime{Calendar: "berlin"}, "give days or duration_ms"},
		{"zero_days", &hourglassv1.WorkingTime{Calendar: "berlin", Amount: &hourglassv1.WorkingTime_Days{}}, "days 0: from 1 to 3650"},
		{"bad_at", &hourglassv1.WorkingTime{Calendar: "berlin", Amount: &hourglassv1.WorkingTime_Days{Days: 1}, AtTime: "24:00"}, "at_time"},
		{"at_with_duration", &hourglassv1.WorkingTime{Calendar: "berlin", Amount: &hourglassv1.WorkingTime_DurationMs{DurationMs: 1}, AtTime: "09:00"}, "goes with days"},
		{"beyond_max_delay", &hourglassv1.WorkingTime{Calendar: "berlin", Amount: &hourglassv1.WorkingTime_Days{Days: 40}}, "maximum delay"},
		{"negative", &hourglassv1.WorkingTime{Calendar: "berlin", Amount: &hourglassv1.WorkingTime_DurationMs{DurationMs: -1}}, "duration_ms -1"},
	} {
		_, err := c.Schedule(ctx, connect.NewRequest(working(tc.w)))
		wantCode(t, tc.name, err, connect.CodeInvalidArgument, "working: ", tc.want)
	}
	_, err = c.ScheduleBatch(ctx, connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{
		{Topic: "t"}, working(&hourglassv1.WorkingTime{Calendar: "nope", Amount: &hourglassv1.WorkingTime_Days{Days: 1}})}}))
	wantCode(t, "a batch names the message", err, connect.CodeInvalidArgument, fmt.Sprintf("messages[%d]: working:", 1))
}
