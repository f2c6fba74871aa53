package recur

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/calendar"
)

func mustParse(t *testing.T, spec, tz string) *Spec {
	t.Helper()
	s, err := Parse(spec, tz)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func at(t *testing.T, tz, s string) time.Time {
	t.Helper()
	loc, err := time.LoadLocation(tz)
	if err != nil {
		t.Fatal(err)
	}
	v, err := time.ParseInLocation("2006-01-02 15:04:05 -0700", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestNextAcrossClockChanges(t *testing.T) {
	const berlin, ny = "Europe/Berlin", "America/New_York"
	for _, tc := range []struct {
		name, spec, tz, after string
		want                  []string // the next occurrences, in the zone
	}{
		// 2026-03-29 02:00 CET → 03:00 CEST: 02:30 does not exist.
		{"berlin_skipped_time_fires_once_after_the_gap", "30 2 * * *", berlin, "2026-03-28 12:00:00 +0100",
			[]string{"2026-03-29 03:00:00 +0200", "2026-03-30 02:30:00 +0200"}},
		{"berlin_every_30_minutes_over_the_gap", "*/30 * * * *", berlin, "2026-03-29 01:15:00 +0100",
			[]string{"2026-03-29 01:30:00 +0100", "2026-03-29 03:00:00 +0200", "2026-03-29 03:30:00 +0200"}},
		// 2026-10-25 03:00 CEST → 02:00 CET: 02:30 happens twice.
		{"berlin_repeated_time_fires_once", "30 2 * * *", berlin, "2026-10-24 12:00:00 +0200",
			[]string{"2026-10-25 02:30:00 +0200", "2026-10-26 02:30:00 +0100"}},
		{"berlin_hourly_over_the_repeat", "0 * * * *", berlin, "2026-10-25 01:30:00 +0200",
			[]string{"2026-10-25 02:00:00 +0200", "2026-10-25 03:00:00 +0100", "2026-10-25 04:00:00 +0100"}},
		{"berlin_from_inside_the_second_pass", "30 2 * * *", berlin, "2026-10-25 02:10:00 +0100",
			[]string{"2026-10-26 02:30:00 +0100"}},
		// 2026-03-08 02:00 EST → 03:00 EDT; 2026-11-01 02:00 EDT → 01:00 EST.
		{"new_york_skipped", "15 2 * * *", ny, "2026-03-07 12:00:00 -0500",
			[]string{"2026-03-08 03:00:00 -0400", "2026-03-09 02:15:00 -0400"}},
		{"new_york_repeated", "30 1 * * *", ny, "2026-10-31 12:00:00 -0400",
			[]string{"2026-11-01 01:30:00 -0400", "2026-11-02 01:30:00 -0500"}},
		{"leap_day", "0 9 29 2 *", "UTC", "2026-01-01 00:00:00 +0000",
			[]string{"2028-02-29 09:00:00 +0000", "2032-02-29 09:00:00 +0000"}},
		{"seconds_field", "*/20 * * * * *", "UTC", "2026-01-01 00:00:05 +0000",
			[]string{"2026-01-01 00:00:20 +0000", "2026-01-01 00:00:40 +0000", "2026-01-01 00:01:00 +0000"}},
		{"weekdays_at_nine", "0 9 * * MON-FRI", berlin, "2026-12-04 10:00:00 +0100", // a Friday
			[]string{"2026-12-07 09:00:00 +0100", "2026-12-08 09:00:00 +0100"}},
		{"daily_macro", "@daily", ny, "2026-03-07 12:00:00 -0500",
			[]string{"2026-03-08 00:00:00 -0500", "2026-03-09 00:00:00 -0400"}},
		{"every_interval", "@every 90s", "UTC", "2026-01-01 00:00:00 +0000",
			[]string{"2026-01-01 00:01:30 +0000", "2026-01-01 00:03:00 +0000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := mustParse(t, tc.spec, tc.tz)
			cur := at(t, tc.tz, tc.after)
			for i, w := range tc.want {
				cur = s.Next(cur)
				if want := at(t, tc.tz, w); !cur.Equal(want) {
					t.Fatalf("occurrence %d: %s, want %s", i+1, cur.In(s.Location()).Format("2006-01-02 15:04:05 -0700"), w)
				}
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ spec, tz string }{
		{"", ""}, {"* * *", ""}, {"61 * * * *", ""}, {"@every 100ms", ""}, {"@fortnightly", ""},
		{"CRON_TZ=Europe/Berlin 0 9 * * *", ""}, {"0 9 * * *", "Mars/Olympus"},
	} {
		if _, err := Parse(tc.spec, tc.tz); !errors.Is(err, ErrSpec) {
			t.Errorf("Parse(%q, %q) = %v, want ErrSpec", tc.spec, tc.tz, err)
		}
	}
}

// TestNextAgainstReference compares Next with a brute-force reference over
// random specs and zones, around each zone's clock changes: the reference
// walks instants a second (or a minute) at a time and fires at an instant
// whose wall-clock reading matches, unless that reading happened at an
// earlier instant (a repeated time), or at the end of a gap in which a
// matching reading was skipped.
func TestNextAgainstReference(t *testing.T) {
	zones := []string{"Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Sao_Paulo", "Asia/Kolkata", "UTC", "Pacific/Chatham"}
	rng := rand.New(rand.NewPCG(1, 2))
	n := 300
	if testing.Short() {
		n = 60
	}
	for i := range n {
		tz := zones[rng.IntN(len(zones))]
		spec, secs := randomSpec(rng)
		s := mustParse(t, spec, tz)
		// Near a clock change of the zone in 2026, or anywhere.
		after := time.Date(2026, time.Month(1+rng.IntN(12)), 1+rng.IntN(28), rng.IntN(24), rng.IntN(60), rng.IntN(60), 0, time.UTC)
		if _, end := after.In(s.Location()).ZoneBounds(); !end.IsZero() && rng.IntN(3) > 0 {
			after = end.Add(-time.Duration(rng.IntN(48*3600)) * time.Second)
		}
		got := s.Next(after)
		want := reference(s, after, secs, 3*24*time.Hour)
		if want.IsZero() {
			continue // nothing within the window the reference walks
		}
		if !got.Equal(want) {
			t.Errorf("case %d: %q in %s after %s: Next = %s, reference %s", i, spec, tz,
				after.In(s.Location()), got.In(s.Location()), want.In(s.Location()))
		}
	}
}

// randomSpec returns a random cron spec, and whether it has a seconds
// field.
func randomSpec(rng *rand.Rand) (string, bool) {
	field := func(lo, hi int) string {
		switch rng.IntN(4) {
		case 0:
			return "*"
		case 1:
			return fmt.Sprint(lo + rng.IntN(hi-lo+1))
		case 2:
			return fmt.Sprintf("*/%d", 1+rng.IntN(max(1, (hi-lo)/2)))
		}
		a := lo + rng.IntN(hi-lo+1)
		return fmt.Sprintf("%d-%d", a, a+rng.IntN(hi-a+1))
	}
	base := fmt.Sprintf("%s %s * * *", field(0, 59), field(0, 23))
	if rng.IntN(4) == 0 {
		base = fmt.Sprintf("%s %s %s * %s", field(0, 59), field(0, 23), field(1, 28), field(0, 6))
	}
	if rng.IntN(5) == 0 {
		return fmt.Sprintf("%d ", rng.IntN(60)) + base, true
	}
	return base, false
}

// reference is the brute-force Next: at most within after after.
func reference(s *Spec, after time.Time, secs bool, within time.Duration) time.Time {
	step := time.Minute
	if secs {
		step = time.Second
	}
	loc := s.Location()
	matches := func(c time.Time) bool {
		cs := s.cron
		return 1<<uint(c.Second())&cs.Second > 0 && 1<<uint(c.Minute())&cs.Minute > 0 && 1<<uint(c.Hour())&cs.Hour > 0 &&
			1<<uint(c.Month())&cs.Month > 0 && dayMatches(cs, c)
	}
	u := after.Truncate(step).Add(step)
	for end := after.Add(within); !u.After(end); u = u.Add(step) {
		c := calendar.Wall(u, loc).Truncate(time.Second)
		zs, _ := u.In(loc).ZoneBounds()
		_, off := u.In(loc).Zone()
		_, prevOff := zs.Add(-time.Nanosecond).In(loc).Zone()
		changed := !zs.IsZero() && prevOff != off
		// A repeated reading: the clocks went back at zs and u is within
		// the repeat.
		if changed && prevOff > off && u.Sub(zs) < time.Duration(prevOff-off)*time.Second {
			continue
		}
		if matches(c) {
			return u
		}
		// The end of a gap: fire if a skipped reading matched.
		if changed && prevOff < off && u.Equal(zs) {
			for g := c.Add(-time.Duration(off-prevOff) * time.Second); g.Before(c); g = g.Add(step) {
				if matches(g) {
					return u
				}
			}
		}
	}
	return time.Time{}
}

// BenchmarkNext measures the next occurrence of an hourly spec with a
// minute and a second, the one a hot second of schedules re-arms with.
func BenchmarkNext(b *testing.B) {
	s, err := Parse("17 42 * * * *", "Europe/Berlin")
	if err != nil {
		b.Fatal(err)
	}
	t := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	for b.Loop() {
		t = s.Next(t)
	}
}

// A definition's start and end bound its occurrences: the first is at or
// after start, none is after end.
func TestStartAndEnd(t *testing.T) {
	sp := mustParse(t, "0 12 * * *", "UTC")
	day := func(d int) time.Time { return time.Date(2026, 12, d, 12, 0, 0, 0, time.UTC) }
	d := &Def{StartMs: day(10).Add(-time.Hour).UnixMilli(), EndMs: day(12).UnixMilli()}
	var got []time.Time
	at := day(1)
	for {
		n, ok := d.next(sp, nil, at)
		if !ok {
			break
		}
		got = append(got, n)
		at = n
	}
	if len(got) != 3 || !got[0].Equal(day(10)) || !got[2].Equal(day(12)) {
		t.Fatalf("occurrences %v, want the 10th, 11th and 12th at noon", got)
	}
	// An occurrence exactly at start counts.
	d.StartMs = day(10).UnixMilli()
	if n, ok := d.next(sp, nil, day(1)); !ok || !n.Equal(day(10)) {
		t.Fatalf("with start at an occurrence: %v, %v", n, ok)
	}
}
