package calendar

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// mustCal builds a calendar from "mon-fri 09:00-17:00"-style lines.
func mustCal(t testing.TB, zone string, hours []string, closed ...string) *Calendar {
	t.Helper()
	var week [7][]Span
	for _, h := range hours {
		days, spans, _ := strings.Cut(h, " ")
		from, to, isRange := strings.Cut(days, "-")
		a, err := ParseWeekday(from)
		if err != nil {
			t.Fatal(err)
		}
		b := a
		if isRange {
			if b, err = ParseWeekday(to); err != nil {
				t.Fatal(err)
			}
		}
		for _, s := range strings.Split(spans, ",") {
			sp, err := ParseSpan(s)
			if err != nil {
				t.Fatal(err)
			}
			for wd := a; ; wd = (wd + 1) % 7 {
				week[wd] = append(week[wd], sp)
				if wd == b {
					break
				}
			}
		}
	}
	var ds []Date
	for _, s := range closed {
		d, err := ParseDate(s)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	c, err := New(zone, week, ds)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// at reads "2006-01-02 15:04" on loc's wall clock (the first instant of a
// repeated time; see Resolve).
func at(t testing.TB, loc string, s string) time.Time {
	t.Helper()
	l, err := time.LoadLocation(loc)
	if err != nil {
		t.Fatal(err)
	}
	w, err := time.Parse("2006-01-02 15:04", s)
	if err != nil {
		t.Fatal(err)
	}
	return Resolve(w, l)
}

func utc(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

const berlin = "Europe/Berlin"

var office = []string{"mon-fri 09:00-17:00"}

func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		zone   string
		week   [7][]Span
		closed []Date
		want   string
	}{
		{"no_hours", "", [7][]Span{}, nil, "no working hours"},
		{"bad_zone", "Mars/Olympus", [7][]Span{1: {{540, 1020}}}, nil, "not an IANA time zone"},
		{"local_zone", "Local", [7][]Span{1: {{540, 1020}}}, nil, "not an IANA time zone"},
		{"start_after_end", "", [7][]Span{1: {{1020, 540}}}, nil, "starts before it ends"},
		{"empty_span", "", [7][]Span{1: {{540, 540}}}, nil, "starts before it ends"},
		{"past_midnight", "", [7][]Span{1: {{540, 1441}}}, nil, "within 00:00 to 24:00"},
		{"overlap", "", [7][]Span{2: {{540, 720}, {700, 1020}}}, nil, "overlap"},
		{"too_many_spans", "", [7][]Span{3: make([]Span, MaxSpans+1)}, nil, "at most 16"},
		{"no_such_date", "", [7][]Span{1: {{540, 1020}}}, []Date{{2026, 2, 30}}, "does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.zone, tc.week, tc.closed)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v; want ErrInvalid saying %q", err, tc.want)
			}
		})
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // "" means an error
	}{
		{"09:00-17:00", "09:00-17:00"},
		{"00:00-24:00", "00:00-24:00"},
		{" 08:30 - 12:15 ", "08:30-12:15"},
		{"9:00-17:00", ""},
		{"09:00", ""},
		{"24:01-24:02", ""},
		{"09:60-10:00", ""},
	} {
		sp, err := ParseSpan(tc.in)
		got := ""
		if err == nil {
			got = sp.String()
		}
		if got != tc.want {
			t.Errorf("ParseSpan(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, s := range []string{"mon", "MON", "Monday", "monday"} {
		if wd, err := ParseWeekday(s); err != nil || wd != time.Monday {
			t.Errorf("ParseWeekday(%q) = %v, %v", s, wd, err)
		}
	}
	for _, s := range []string{"mo", "mond", "", "lundi"} {
		if _, err := ParseWeekday(s); err == nil {
			t.Errorf("ParseWeekday(%q) accepted", s)
		}
	}
	for _, s := range []string{"2026-2-01", "2026-02-30", "26-02-01", "2026/02/01"} {
		if _, err := ParseDate(s); err == nil {
			t.Errorf("ParseDate(%q) accepted", s)
		}
	}
}

func TestCodecRoundTrip(t *testing.T) {
	c := mustCal(t, berlin, []string{"mon-fri 09:00-12:00,13:00-17:00", "sat 10:00-14:00", "sun 00:00-24:00"}, "2030-12-26", "2030-12-25", "2030-12-25")
	b := c.Encode()
	want := `{"zone":"Europe/Berlin","sun":["00:00-24:00"],"mon":["09:00-12:00","13:00-17:00"],"tue":["09:00-12:00","13:00-17:00"],` +
		`"wed":["09:00-12:00","13:00-17:00"],"thu":["09:00-12:00","13:00-17:00"],"fri":["09:00-12:00","13:00-17:00"],"sat":["10:00-14:00"],` +
		`"closed":["2030-12-25","2030-12-26"]}`
	if string(b) != want {
		t.Fatalf("Encode:\n%s\nwant\n%s", b, want)
	}
	d, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(d.Encode()) != want || d.Zone() != berlin || !slices.Equal(d.Closed(), c.Closed()) {
		t.Fatalf("Decode(Encode) = %s", d.Encode())
	}
	for _, bad := range []string{``, `{`, `{"mon":["9-5"]}`, `{"zone":"x/y","mon":["09:00-17:00"]}`, `{}`, `{"mon":["09:00-17:00"],"closed":["2030-13-01"]}`} {
		if _, err := Decode([]byte(bad)); !errors.Is(err, ErrInvalid) {
			t.Errorf("Decode(%s) = %v; want ErrInvalid", bad, err)
		}
	}
}

func TestWorking(t *testing.T) {
	c := mustCal(t, berlin, []string{"mon-fri 09:00-12:00,13:00-17:00"}, "2026-12-24")
	for _, tc := range []struct {
		name string
		t    time.Time
		want bool
	}{
		{"morning", at(t, berlin, "2026-06-01 09:00"), true},
		{"before_start", at(t, berlin, "2026-06-01 08:59"), false},
		{"lunch", at(t, berlin, "2026-06-01 12:00"), false},
		{"afternoon", at(t, berlin, "2026-06-01 16:59"), true},
		{"end_is_out", at(t, berlin, "2026-06-01 17:00"), false},
		{"saturday", at(t, berlin, "2026-06-06 10:00"), false},
		{"closed_date", at(t, berlin, "2026-12-24 10:00"), false},
		{"utc_evening_is_berlin_morning", utc(t, "2026-06-02T07:30:00Z"), true},
	} {
		if got := c.Working(tc.t); got != tc.want {
			t.Errorf("%s: Working(%s) = %v", tc.name, tc.t, got)
		}
	}
}

func TestNext(t *testing.T) {
	c := mustCal(t, berlin, []string{"mon-fri 09:00-12:00,13:00-17:00"}, "2026-12-24", "2026-12-25", "2027-01-01")
	sunday := mustCal(t, berlin, []string{"sun 02:30-04:00", "sat 02:30-02:45"})
	repeated := mustCal(t, berlin, []string{"sun 02:30-02:45"})
	leap := mustCal(t, "UTC", []string{"mon-fri 09:00-17:00"})
	for _, tc := range []struct {
		name string
		c    *Calendar
		from time.Time
		want time.Time
	}{
		{"working_is_itself", c, at(t, berlin, "2026-06-01 10:15"), at(t, berlin, "2026-06-01 10:15")},
		{"before_hours", c, at(t, berlin, "2026-06-01 07:00"), at(t, berlin, "2026-06-01 09:00")},
		{"lunch_break", c, at(t, berlin, "2026-06-01 12:30"), at(t, berlin, "2026-06-01 13:00")},
		{"friday_evening", c, at(t, berlin, "2026-06-05 18:00"), at(t, berlin, "2026-06-08 09:00")},
		{"closed_dates_and_year_end", c, at(t, berlin, "2026-12-23 17:30"), at(t, berlin, "2026-12-28 09:00")},
		{"new_year_closed", c, at(t, berlin, "2026-12-31 17:00"), at(t, berlin, "2027-01-04 09:00")},
		// 2026-03-29: Berlin's clocks go from 02:00 to 03:00; the span
		// 02:30-04:00 begins at the first instant after the gap.
		{"spring_forward_span_in_gap", sunday, at(t, berlin, "2026-03-29 01:00"), utc(t, "2026-03-29T01:00:00Z")},
		// 2026-10-25: from 03:00 back to 02:00; at 02:50 of the first
		// pass, 02:30 of the second pass is next.
		{"fall_back_second_pass", repeated, utc(t, "2026-10-25T00:50:00Z"), utc(t, "2026-10-25T01:30:00Z")},
		{"fall_back_first_pass", repeated, utc(t, "2026-10-24T12:00:00Z"), utc(t, "2026-10-25T00:30:00Z")},
		{"leap_day", leap, utc(t, "2028-02-28T18:00:00Z"), utc(t, "2028-02-29T09:00:00Z")},
		{"after_leap_day", leap, utc(t, "2028-02-29T18:00:00Z"), utc(t, "2028-03-01T09:00:00Z")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.c.Next(tc.from)
			if err != nil || !got.Equal(tc.want) {
				t.Fatalf("Next(%s) = %s, %v; want %s", tc.from.UTC(), got.UTC(), err, tc.want.UTC())
			}
		})
	}
}

func TestAddDays(t *testing.T) {
	c := mustCal(t, berlin, office, "2026-12-24", "2026-12-25", "2027-01-01")
	allDay := mustCal(t, berlin, []string{"mon-sun 00:00-24:00"})
	apia := mustCal(t, "Pacific/Apia", []string{"mon-sun 09:00-17:00"})
	leap := mustCal(t, "UTC", []string{"mon-fri 09:00-17:00"}, "2029-01-01")
	nine := Clock(9 * 60)
	for _, tc := range []struct {
		name   string
		c      *Calendar
		from   time.Time
		n      int
		at     Clock
		want   time.Time
		inZone string
	}{
		{"three_days_at_nine", c, at(t, berlin, "2026-06-01 10:00"), 3, nine, at(t, berlin, "2026-06-04 09:00"), ""},
		{"over_the_weekend", c, at(t, berlin, "2026-06-05 10:00"), 1, nine, at(t, berlin, "2026-06-08 09:00"), ""},
		{"from_saturday", c, at(t, berlin, "2026-06-06 10:00"), 1, nine, at(t, berlin, "2026-06-08 09:00"), ""},
		{"same_time_of_day", c, at(t, berlin, "2026-06-01 14:30"), 2, SameTime, at(t, berlin, "2026-06-03 14:30"), ""},
		{"same_time_after_hours", c, at(t, berlin, "2026-06-01 18:00"), 1, SameTime, at(t, berlin, "2026-06-03 09:00"), ""},
		{"at_before_hours", c, at(t, berlin, "2026-06-01 10:00"), 1, Clock(7 * 60), at(t, berlin, "2026-06-02 09:00"), ""},
		{"over_christmas_and_year_end", c, at(t, berlin, "2026-12-23 11:00"), 3, nine, at(t, berlin, "2026-12-30 09:00"), ""},
		{"over_new_year", c, at(t, berlin, "2026-12-31 11:00"), 1, nine, at(t, berlin, "2027-01-04 09:00"), ""},
		// At 02:30 on the day Berlin skips 02:00-03:00: the first instant
		// after the gap, 03:00 CEST.
		{"at_in_spring_gap", allDay, at(t, berlin, "2026-03-28 12:00"), 1, Clock(150), utc(t, "2026-03-29T01:00:00Z"), ""},
		// At 02:30 on the day Berlin repeats 02:00-03:00: its first instant.
		{"at_in_repeated_hour", allDay, at(t, berlin, "2026-10-24 12:00"), 1, Clock(150), utc(t, "2026-10-25T00:30:00Z"), ""},
		// Samoa skipped 2011-12-30 whole: it is no working day.
		{"skipped_day", apia, at(t, "Pacific/Apia", "2011-12-29 10:00"), 1, nine, at(t, "Pacific/Apia", "2011-12-31 09:00"), ""},
		{"leap_day_counts", leap, utc(t, "2028-02-28T10:00:00Z"), 1, nine, utc(t, "2028-02-29T09:00:00Z"), ""},
		{"leap_year_end", leap, utc(t, "2028-12-29T10:00:00Z"), 2, nine, utc(t, "2029-01-03T09:00:00Z"), ""}, // Monday 2029-01-01 closed
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.c.AddDays(tc.from, tc.n, tc.at)
			if err != nil || !got.Equal(tc.want) {
				t.Fatalf("AddDays(%s, %d, %s) = %s, %v; want %s", tc.from.UTC(), tc.n, tc.at, got.UTC(), err, tc.want.UTC())
			}
			if !tc.c.Working(got) || got.Before(tc.from) {
				t.Fatalf("AddDays = %s: not working time, or before its start", got)
			}
		})
	}
	for _, n := range []int{0, -1, MaxDays + 1} {
		if _, err := c.AddDays(time.Now(), n, nine); !errors.Is(err, ErrInvalid) {
			t.Errorf("AddDays(n=%d) = %v; want ErrInvalid", n, err)
		}
	}
	if _, err := c.AddDays(time.Now(), 1, EndOfDay); !errors.Is(err, ErrInvalid) {
		t.Errorf("AddDays(at 24:00) = %v; want ErrInvalid", err)
	}
}

func TestAddWorking(t *testing.T) {
	c := mustCal(t, berlin, []string{"mon-fri 09:00-12:00,13:00-17:00"})
	allDay := mustCal(t, berlin, []string{"mon-sun 00:00-24:00"})
	twice := mustCal(t, berlin, []string{"sun 02:00-03:00"})
	for _, tc := range []struct {
		name string
		c    *Calendar
		from time.Time
		d    time.Duration
		want time.Time
	}{
		{"within_a_span", c, at(t, berlin, "2026-06-01 09:00"), 2 * time.Hour, at(t, berlin, "2026-06-01 11:00")},
		{"over_lunch", c, at(t, berlin, "2026-06-01 11:00"), 2 * time.Hour, at(t, berlin, "2026-06-01 14:00")},
		{"ends_at_close", c, at(t, berlin, "2026-06-01 09:00"), 7 * time.Hour, at(t, berlin, "2026-06-01 17:00")},
		{"over_night", c, at(t, berlin, "2026-06-01 16:00"), 2 * time.Hour, at(t, berlin, "2026-06-02 10:00")},
		{"from_the_weekend", c, at(t, berlin, "2026-06-06 10:00"), time.Hour, at(t, berlin, "2026-06-08 10:00")},
		{"zero_is_next", c, at(t, berlin, "2026-06-06 10:00"), 0, at(t, berlin, "2026-06-08 09:00")},
		{"a_week", c, at(t, berlin, "2026-06-01 09:00"), 35 * time.Hour, at(t, berlin, "2026-06-05 17:00")},
		// 2026-03-29 has 23 hours in Berlin: 24 working hours from its
		// midnight end at 01:00 the next day.
		{"short_day", allDay, at(t, berlin, "2026-03-29 00:00"), 24 * time.Hour, at(t, berlin, "2026-03-30 01:00")},
		// 2026-10-25 has 25: 24 hours end at 23:00 that day.
		{"long_day", allDay, at(t, berlin, "2026-10-25 00:00"), 24 * time.Hour, at(t, berlin, "2026-10-25 23:00")},
		// 02:00-03:00 is worked twice on 2026-10-25: 90 minutes end at
		// 02:30 of the second pass (01:30 UTC).
		{"repeated_hour_worked_twice", twice, at(t, berlin, "2026-10-24 12:00"), 90 * time.Minute, utc(t, "2026-10-25T01:30:00Z")},
		{"leap_year", mustCal(t, "UTC", []string{"mon-sun 00:00-24:00"}), utc(t, "2028-02-28T12:00:00Z"), 48 * time.Hour, utc(t, "2028-03-01T12:00:00Z")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.c.AddWorking(tc.from, tc.d)
			if err != nil || !got.Equal(tc.want) {
				t.Fatalf("AddWorking(%s, %v) = %s, %v; want %s", tc.from.UTC(), tc.d, got.UTC(), err, tc.want.UTC())
			}
		})
	}
	if _, err := c.AddWorking(time.Now(), -time.Second); !errors.Is(err, ErrInvalid) {
		t.Errorf("AddWorking(-1s) = %v; want ErrInvalid", err)
	}
}

func TestNoWorkingTime(t *testing.T) {
	var closed []string
	for d := utc(t, "2026-01-05T00:00:00Z"); d.Year() < 2038; d = d.AddDate(0, 0, 7) {
		closed = append(closed, d.Format(time.DateOnly)) // every Monday
	}
	c := mustCal(t, "UTC", []string{"mon 09:00-17:00"}, closed...)
	from := utc(t, "2026-01-01T00:00:00Z")
	if _, err := c.Next(from); !errors.Is(err, ErrNoWorkingTime) {
		t.Errorf("Next = %v; want ErrNoWorkingTime", err)
	}
	if _, err := c.AddDays(from, 1, SameTime); !errors.Is(err, ErrNoWorkingTime) {
		t.Errorf("AddDays = %v; want ErrNoWorkingTime", err)
	}
	if _, err := c.AddWorking(from, time.Hour); !errors.Is(err, ErrNoWorkingTime) {
		t.Errorf("AddWorking = %v; want ErrNoWorkingTime", err)
	}
	few := mustCal(t, "UTC", []string{"mon 09:00-09:01"})
	if _, err := few.AddWorking(from, 1000*time.Hour); !errors.Is(err, ErrNoWorkingTime) {
		t.Errorf("AddWorking of more than 10 years' worth = %v; want ErrNoWorkingTime", err)
	}
}

func TestCheckName(t *testing.T) {
	for _, n := range []string{"berlin-office", "a", "x.y_z", strings.Repeat("n", MaxName)} {
		if err := CheckName(n); err != nil {
			t.Errorf("CheckName(%q): %v", n, err)
		}
	}
	for _, n := range []string{"", "a b", "a/b", "é", strings.Repeat("n", MaxName+1)} {
		if err := CheckName(n); !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckName(%q) = %v; want ErrInvalid", n, err)
		}
	}
}
