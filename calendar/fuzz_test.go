package calendar

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// zones with the clock changes that matter: DST at night and at midnight
// (Havana, Santiago), a 30-minute DST (Lord Howe), odd offsets (Kolkata,
// Chatham, St John's), a skipped day (Apia, 2011-12-30), and zones that
// change their rules often (Casablanca).
var testZones = []string{"UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Apia",
	"America/Santiago", "America/Havana", "Asia/Kolkata", "Pacific/Chatham", "America/St_Johns", "Africa/Casablanca"}

// randomCalendar builds a calendar of 1 to 3 spans on some weekdays, cut
// at random minutes and at the hours around clock changes, with a few
// closed dates.
func randomCalendar(r *rand.Rand) *Calendar {
	cuts := []Clock{0, 60, 120, 150, 180, 1440}
	var week [7][]Span
	for len(week[0])+len(week[1])+len(week[2])+len(week[3])+len(week[4])+len(week[5])+len(week[6]) == 0 {
		for wd := range week {
			week[wd] = nil
			if r.IntN(3) == 0 {
				continue
			}
			var pts []Clock
			for range 2 * (1 + r.IntN(3)) {
				if r.IntN(2) == 0 {
					pts = append(pts, cuts[r.IntN(len(cuts))])
				} else {
					pts = append(pts, Clock(r.IntN(1441)))
				}
			}
			slices.Sort(pts)
			pts = slices.Compact(pts)
			for i := 0; i+1 < len(pts); i += 2 {
				week[wd] = append(week[wd], Span{pts[i], pts[i+1]})
			}
		}
	}
	var closed []Date
	for range r.IntN(40) {
		closed = append(closed, dateOf(time.Date(2000+r.IntN(40), time.Month(1+r.IntN(12)), 1+r.IntN(28), 0, 0, 0, 0, time.UTC)))
	}
	c, err := New(testZones[r.IntN(len(testZones))], week, closed)
	if err != nil {
		panic(err)
	}
	return c
}

// firstWorkingMinute walks from t (a whole minute: working time changes
// only at whole minutes since 1972) a minute at a time, up to limit, and
// returns the first working instant, or false.
func firstWorkingMinute(c *Calendar, t time.Time, limit time.Duration) (time.Time, bool) {
	for x := t; x.Sub(t) <= limit; x = x.Add(time.Minute) {
		if c.Working(x) {
			return x, true
		}
	}
	return time.Time{}, false
}

// addWorkingMinutes counts k working minutes from t (a whole minute) a
// minute at a time, up to limit, and returns the end of the k-th.
func addWorkingMinutes(c *Calendar, t time.Time, k int, limit time.Duration) (time.Time, bool) {
	for x := t; x.Sub(t) <= limit; x = x.Add(time.Minute) {
		if c.Working(x) {
			if k--; k == 0 {
				return x.Add(time.Minute), true
			}
		}
	}
	return time.Time{}, false
}

// checkAgainstWalk holds Next and AddWorking from t (a whole minute) to a
// minute-by-minute walk of Working.
func checkAgainstWalk(t *testing.T, c *Calendar, from time.Time, k int) {
	t.Helper()
	const limit = 10 * day
	got, err := c.Next(from)
	want, found := firstWorkingMinute(c, from, limit)
	switch {
	case found && (err != nil || !got.Equal(want)):
		t.Fatalf("%s: Next(%s) = %s, %v; the walk finds %s", c.Encode(), from.UTC(), got.UTC(), err, want.UTC())
	case !found && err == nil && got.Sub(from) <= limit:
		t.Fatalf("%s: Next(%s) = %s; the walk finds no working minute", c.Encode(), from.UTC(), got.UTC())
	}
	got, err = c.AddWorking(from, time.Duration(k)*time.Minute)
	want, found = addWorkingMinutes(c, from, k, limit)
	switch {
	case found && (err != nil || !got.Equal(want)):
		t.Fatalf("%s: AddWorking(%s, %dm) = %s, %v; the walk ends at %s", c.Encode(), from.UTC(), k, got.UTC(), err, want.UTC())
	case !found && err == nil && got.Sub(from) <= limit:
		t.Fatalf("%s: AddWorking(%s, %dm) = %s; the walk finds fewer working minutes", c.Encode(), from.UTC(), k, got.UTC())
	}
}

// TestAgainstWalk compares Next and AddWorking with a minute-by-minute
// walk over random calendars in zones with clock changes, from random
// starts and from the hours around each zone's changes.
func TestAgainstWalk(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	n := 150
	if testing.Short() {
		n = 30
	}
	for range n {
		c := randomCalendar(r)
		from := time.Date(2000+r.IntN(40), time.January, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(r.IntN(366*24*60)) * time.Minute)
		if r.IntN(2) == 0 {
			// An hour or two before a change of the zone's offset.
			if _, end := from.In(c.loc).ZoneBounds(); !end.IsZero() {
				from = end.Add(-time.Duration(r.IntN(180)) * time.Minute)
			}
		}
		checkAgainstWalk(t, c, from, 1+r.IntN(3000))
	}
}

// FuzzWorkingTime checks that computed times are never before their start
// and never inside non-working time (AddWorking's answer may also be the
// end of a working stretch, where the last working hour ends), and, from
// whole minutes, agree with a walk of Working.
func FuzzWorkingTime(f *testing.F) {
	f.Add(uint64(1), int64(0), uint16(3), uint32(90), uint16(540))
	f.Add(uint64(7), int64(13_940_000), uint16(1), uint32(0), uint16(150))
	f.Add(uint64(42), int64(6_000_000), uint16(200), uint32(100_000), uint16(0xffff))
	f.Fuzz(func(t *testing.T, seed uint64, minute int64, n uint16, dsec uint32, atMin uint16) {
		r := rand.New(rand.NewPCG(seed, seed>>32))
		c := randomCalendar(r)
		base := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
		from := base.Add(time.Duration(uint64(minute)%(40*366*24*60)) * time.Minute)
		if minute < 0 {
			from = from.Add(time.Duration(-minute%60_000_000_000) * time.Nanosecond) // not a whole minute
		}
		next, err := c.Next(from)
		if err == nil && (next.Before(from) || !c.Working(next)) {
			t.Fatalf("%s: Next(%s) = %s: before the start, or not working", c.Encode(), from, next)
		}
		at := SameTime
		if atMin < 1440 {
			at = Clock(atMin)
		}
		days, err := c.AddDays(from, 1+int(n)%MaxDays, at)
		if err == nil && (days.Before(from) || !c.Working(days)) {
			t.Fatalf("%s: AddDays(%s, %d, %s) = %s: before the start, or not working", c.Encode(), from, 1+int(n)%MaxDays, at, days)
		}
		d := time.Duration(dsec) * time.Second
		w, err := c.AddWorking(from, d)
		if err == nil && (w.Before(from) || !c.Working(w) && (d == 0 || !c.Working(w.Add(-time.Nanosecond)))) {
			t.Fatalf("%s: AddWorking(%s, %v) = %s: before the start, or not working (nor the end of working time)", c.Encode(), from, d, w)
		}
		if minute >= 0 && dsec < 3000*60 {
			checkAgainstWalk(t, c, from, 1+int(dsec/60))
		}
	})
}

// FuzzDecode checks that Decode never panics, and that what it accepts
// encodes to a value it decodes to the same calendar.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"zone":"Europe/Berlin","mon":["09:00-17:00"],"closed":["2030-12-25"]}`))
	f.Add([]byte(`{"sun":["00:00-24:00"],"closed":["0001-01-01","9999-12-31"]}`))
	f.Add([]byte(`{"mon":["09:00-12:00","11:00-13:00"]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Decode(b)
		if err != nil {
			return
		}
		enc := c.Encode()
		d, err := Decode(enc)
		if err != nil {
			t.Fatalf("Decode(%s) = %v; it was Encode of what %q decoded to", enc, err, b)
		}
		if again := d.Encode(); string(again) != string(enc) {
			t.Fatalf("Encode(Decode(%s)) = %s", enc, again)
		}
	})
}
