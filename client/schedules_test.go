package client_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/client"
)

// occurrenceOf is the time an occurrence's header names.
func occurrenceOf(t *testing.T, d client.Delivery) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, d.Headers["hourglass-occurrence"])
	if err != nil {
		t.Fatalf("occurrence %s: header hourglass-occurrence %q: %v", d.ID, d.Headers["hourglass-occurrence"], err)
	}
	return at
}

// TestRecurringScheduleLifecycle creates an @every 1s schedule, receives
// its occurrences (each its own message, named by its key), reads it
// back, pauses it (nothing fires), resumes it, updates it and deletes it.
func TestRecurringScheduleLifecycle(t *testing.T) {
	c := startNode(t, nil)
	ctx := context.Background()
	s := client.RecurringSchedule{Name: "tick", Topic: "ticks", Spec: "@every 1s", Body: []byte("tick"), Headers: map[string]string{"k": "v"}}
	before := time.Now()
	next, err := c.CreateSchedule(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if !next.After(before) || next.After(time.Now().Add(time.Second)) {
		t.Errorf("CreateSchedule = %v; want within a second from %v", next, before)
	}
	_, err = c.CreateSchedule(ctx, client.RecurringSchedule{Name: "tick", Topic: "other", Spec: "@hourly"})
	if !errors.Is(err, client.ErrScheduleExists) || status.Code(err) != codes.AlreadyExists {
		t.Errorf("a second CreateSchedule of tick: %v; want ErrScheduleExists with code AlreadyExists", err)
	}

	ds := receiveN(t, c, "ticks", 2)
	if ds[0].ID == ds[1].ID {
		t.Errorf("two occurrences share the ID %s", ds[0].ID)
	}
	for _, d := range ds {
		at := occurrenceOf(t, d)
		if string(d.Body) != "tick" || d.Headers["k"] != "v" || d.Headers["hourglass-schedule"] != "tick" || !d.DeliverAt.Equal(at) || d.ReceivedAt.Before(at) {
			t.Errorf("occurrence %+v; want body tick, header k=v, schedule tick, due at %v and not received before", d, at)
		}
		key := client.Key{Topic: "ticks", Key: "tick@" + at.UTC().Format("2006-01-02T15:04:05.000Z")}
		if f, err := c.Get(ctx, key); err != nil || f.Message.ID != d.ID {
			t.Errorf("Get(%v) = %+v, %v; want the occurrence %s", key, f, err, d.ID)
		}
	}

	in, err := c.GetSchedule(ctx, "tick", 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Next) != 3 || in.Next[1].Sub(in.Next[0]) != time.Second || in.Next[2].Sub(in.Next[1]) != time.Second {
		t.Errorf("GetSchedule Next = %v; want 3 times a second apart", in.Next)
	}
	if len(in.Next) > 0 && (in.Armed.IsZero() || !in.Armed.Time().Equal(in.Next[0])) {
		t.Errorf("GetSchedule Armed = %v; want the message due at %v", in.Armed, in.Next[0])
	}
	want := s
	want.Misfire = client.MisfireLatest
	if got := in.Schedule; got.Name != want.Name || got.Topic != want.Topic || got.Spec != want.Spec || string(got.Body) != "tick" ||
		!maps.Equal(got.Headers, want.Headers) || got.Misfire != want.Misfire || got.Paused || got.TimeZone != "" || !got.Start.IsZero() || !got.End.IsZero() {
		t.Errorf("GetSchedule Schedule = %+v; want %+v", got, want)
	}
	if in.Fired < 2 {
		t.Errorf("GetSchedule Fired = %d after two occurrences were received", in.Fired)
	}

	// Paused, nothing fires: once the occurrences fired before the pause
	// are received, none comes, and Fired stays.
	if err := c.PauseSchedule(ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	in, err = c.GetSchedule(ctx, "tick", 0)
	if err != nil || !in.Schedule.Paused || len(in.Next) != 0 || !in.Armed.IsZero() {
		t.Fatalf("GetSchedule of a paused schedule = %+v, %v; want paused, no next times, nothing armed", in, err)
	}
	if more := int(in.Fired) - len(ds); more > 0 {
		for _, d := range receiveN(t, c, "ticks", more) {
			if at := occurrenceOf(t, d); at.After(paused) {
				t.Errorf("occurrence of %v delivered after the pause answered at %v", at, paused)
			}
		}
	}
	receiveNone(t, c, "ticks", 2*time.Second)
	if again, err := c.GetSchedule(ctx, "tick", 0); err != nil || again.Fired != in.Fired {
		t.Errorf("Fired went from %d to %d (%v) while paused", in.Fired, again.Fired, err)
	}
	if err := c.PauseSchedule(ctx, "tick"); err != nil {
		t.Errorf("PauseSchedule of a paused schedule: %v", err)
	}

	next, err = c.ResumeSchedule(ctx, "tick")
	if err != nil || !next.After(paused) {
		t.Fatalf("ResumeSchedule = %v, %v; want a time after the pause", next, err)
	}
	if d := receiveN(t, c, "ticks", 1)[0]; !occurrenceOf(t, d).After(paused) {
		t.Errorf("the first occurrence after resuming is of %v, before the pause ended", occurrenceOf(t, d))
	}

	s.Spec, s.Body, s.Headers = "*/2 * * * * *", []byte("tock"), nil
	if next, err = c.UpdateSchedule(ctx, s); err != nil || next.Second()%2 != 0 {
		t.Fatalf("UpdateSchedule = %v, %v; want an even second", next, err)
	}
	in, err = c.GetSchedule(ctx, "tick", 2)
	if err != nil || in.Schedule.Spec != s.Spec || string(in.Schedule.Body) != "tock" || in.Schedule.Headers != nil || len(in.Next) != 2 || in.Next[1].Sub(in.Next[0]) != 2*time.Second || in.Fired < 3 {
		t.Errorf("GetSchedule after UpdateSchedule = %+v, %v; want the new spec and body, no headers, and the count kept", in, err)
	}

	if err := c.DeleteSchedule(ctx, "tick"); err != nil {
		t.Fatal(err)
	}
	_, err = c.GetSchedule(ctx, "tick", 0)
	if !errors.Is(err, client.ErrScheduleNotFound) || status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "tick") {
		t.Errorf("GetSchedule of a deleted schedule: %v; want ErrScheduleNotFound with code NotFound, naming it", err)
	}
	for name, call := range map[string]func() error{
		"PauseSchedule":  func() error { return c.PauseSchedule(ctx, "tick") },
		"ResumeSchedule": func() error { _, err := c.ResumeSchedule(ctx, "tick"); return err },
		"UpdateSchedule": func() error { _, err := c.UpdateSchedule(ctx, s); return err },
		"DeleteSchedule": func() error { return c.DeleteSchedule(ctx, "tick") },
	} {
		if err := call(); !errors.Is(err, client.ErrScheduleNotFound) {
			t.Errorf("%s of a deleted schedule: %v; want ErrScheduleNotFound", name, err)
		}
	}
}

// TestRecurringScheduleFields creates schedules with every field set and
// reads them back, with the next fire times across a clock change, and
// lists them a page at a time.
func TestRecurringScheduleFields(t *testing.T) {
	c := startNode(t, nil)
	ctx := context.Background()
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	// The clocks skip 02:00-03:00 on the last Sunday of March; its
	// Saturday and Monday have a 02:30.
	sun := time.Date(time.Now().Year()+2, time.March, 31, 0, 0, 0, 0, berlin)
	for sun.Weekday() != time.Sunday {
		sun = sun.AddDate(0, 0, -1)
	}
	s := client.RecurringSchedule{
		Name: "backup.nightly_1", Topic: "backups", Spec: "30 2 * * *", TimeZone: "Europe/Berlin",
		Body: []byte{0xff, 0}, Headers: map[string]string{"a": "1", "b": "2"},
		Start: sun.AddDate(0, 0, -1), End: sun.AddDate(0, 0, 2), Misfire: client.MisfireSkip,
	}
	next, err := c.CreateSchedule(ctx, s)
	wantNext := []time.Time{
		time.Date(sun.Year(), time.March, sun.Day()-1, 2, 30, 0, 0, berlin),
		time.Date(sun.Year(), time.March, sun.Day(), 3, 0, 0, 0, berlin), // the first instant after the gap
		time.Date(sun.Year(), time.March, sun.Day()+1, 2, 30, 0, 0, berlin),
	}
	if err != nil || !next.Equal(wantNext[0]) {
		t.Fatalf("CreateSchedule = %v, %v; want %v", next, err, wantNext[0])
	}
	in, err := c.GetSchedule(ctx, s.Name, 10)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(in.Next, wantNext, time.Time.Equal) {
		t.Errorf("Next = %v; want %v (none after End)", in.Next, wantNext)
	}
	got := in.Schedule
	if got.Name != s.Name || got.TimeZone != s.TimeZone || !slices.Equal(got.Body, s.Body) || !maps.Equal(got.Headers, s.Headers) ||
		!got.Start.Equal(s.Start) || !got.End.Equal(s.End) || got.Misfire != client.MisfireSkip || got.Paused || in.Fired != 0 {
		t.Errorf("GetSchedule = %+v; want %+v", in, s)
	}

	for _, name := range []string{"a-paused", "c-all"} {
		o := client.RecurringSchedule{Name: name, Topic: "other", Spec: "@daily", Misfire: client.MisfireAll, Paused: name == "a-paused"}
		next, err := c.CreateSchedule(ctx, o)
		if err != nil || next.IsZero() != o.Paused {
			t.Fatalf("CreateSchedule(%s) = %v, %v; want a time unless paused", name, next, err)
		}
	}
	var names []string
	for in, err := range c.ListSchedules(ctx, client.ListSchedulesOptions{PageSize: 1}) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, in.Schedule.Name)
		if in.Schedule.Name == "a-paused" && (!in.Schedule.Paused || len(in.Next) != 0) {
			t.Errorf("listed %+v; want it paused, without next times", in)
		}
		if in.Schedule.Name == "c-all" && (in.Schedule.Misfire != client.MisfireAll || len(in.Next) != 3) {
			t.Errorf("listed %+v; want fire-all with 3 next times", in)
		}
	}
	if want := []string{"a-paused", "backup.nightly_1", "c-all"}; !slices.Equal(names, want) {
		t.Errorf("ListSchedules = %q; want %q", names, want)
	}
	page, token, err := c.ListSchedulesPage(ctx, client.ListSchedulesOptions{Topic: "other"}, "")
	if err != nil || len(page) != 2 || page[0].Schedule.Name != "a-paused" || page[1].Schedule.Name != "c-all" || token != "" {
		t.Errorf("ListSchedulesPage of topic other = %+v, %q, %v; want a-paused and c-all, no more", page, token, err)
	}
}

// TestRecurringScheduleRefused: what the server refuses says what is
// allowed; what the client can tell is wrong is not sent.
func TestRecurringScheduleRefused(t *testing.T) {
	c := startNode(t, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		s    client.RecurringSchedule
		want string
	}{
		{"bad_spec", client.RecurringSchedule{Name: "x", Topic: "t", Spec: "61 * * * *"}, "want 5 fields"},
		{"short_every", client.RecurringSchedule{Name: "x", Topic: "t", Spec: "@every 500ms"}, "at least 1s"},
		{"unknown_zone", client.RecurringSchedule{Name: "x", Topic: "t", Spec: "@daily", TimeZone: "Mars/Olympus_Mons"}, "IANA name"},
		{"bad_name", client.RecurringSchedule{Name: "a b", Topic: "t", Spec: "@daily"}, "letters, digits"},
		{"no_name", client.RecurringSchedule{Topic: "t", Spec: "@daily"}, "1 to 160 bytes"},
		{"bad_topic", client.RecurringSchedule{Name: "x", Topic: "a b", Spec: "@daily"}, "topic"},
		{"end_before_start", client.RecurringSchedule{Name: "x", Topic: "t", Spec: "@daily", Start: time.Now().Add(48 * time.Hour), End: time.Now().Add(time.Hour)}, "before start"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.CreateSchedule(ctx, tc.s)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CreateSchedule(%+v): %v; want InvalidArgument saying %q", tc.s, err, tc.want)
			}
		})
	}
	if _, err := c.CreateSchedule(ctx, client.RecurringSchedule{Name: "x", Topic: "t", Spec: "@daily", Misfire: "sometimes"}); !errors.Is(err, client.ErrInvalidMessage) || !strings.Contains(err.Error(), "fire-latest") {
		t.Errorf("CreateSchedule with misfire sometimes: %v; want ErrInvalidMessage naming the policies", err)
	}
	if _, err := c.GetSchedule(ctx, "x", client.MaxNextTimes+1); !errors.Is(err, client.ErrInvalidMessage) {
		t.Errorf("GetSchedule of %d next times: %v; want ErrInvalidMessage", client.MaxNextTimes+1, err)
	}
	if n := len(listNames(t, c)); n != 0 {
		t.Errorf("%d schedules after refused creates; want none", n)
	}
}

func listNames(t *testing.T, c *client.Client) []string {
	t.Helper()
	var out []string
	for in, err := range c.ListSchedules(context.Background(), client.ListSchedulesOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, in.Schedule.Name)
	}
	return out
}
