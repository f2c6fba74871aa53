// Package calendar holds Hourglass's working-time calendars: an IANA time
// zone, weekly working hours (several spans a day allowed) and a list of
// non-working dates, and the arithmetic of time within them: "3 working
// days after T at 09:00" (AddDays), "4 working hours after T"
// (AddWorking), "the next working instant at or after T" (Next).
//
// Working time is read on the zone's wall clock: an instant is working
// when its wall-clock date is not a non-working date and its wall-clock
// time of day lies in one of that weekday's spans [start, end). Where the
// clocks change, that decides every case: an hour the clocks repeat is
// worked twice when it lies in a span, one they skip is not worked at
// all, and a wall-clock time asked for that the clocks skip resolves to
// the first instant after the gap (as package recur's occurrences do),
// one they repeat to its first instant.
//
// A Calendar is a value: nothing here stores it. Its stored form (Encode,
// Decode; docs/FORMAT.md) is the value of a calendar's control record.
//
// It imports the standard library only (and embeds the IANA zones).
package calendar

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	// The IANA zones are embedded: a binary with calendars needs no zone
	// files on the machine.
	_ "time/tzdata"
)

// Errors of the package.
var (
	// ErrInvalid wraps every error about a calendar's definition.
	ErrInvalid = errors.New("calendar: invalid calendar")
	// ErrNoWorkingTime: a computation found no (or not enough) working
	// time within Horizon.
	ErrNoWorkingTime = errors.New("calendar: not enough working time")
)

// Limits of a calendar's definition.
const (
	// MaxName bounds a calendar's name in bytes.
	MaxName = 160
	// MaxSpans bounds the working spans of one weekday.
	MaxSpans = 16
	// MaxClosed bounds the non-working dates.
	MaxClosed = 10000
	// MaxDays bounds AddDays's n.
	MaxDays = 3650
	// Horizon is how far ahead of its start a computation looks for
	// working time before it gives up with ErrNoWorkingTime.
	Horizon = 10 * 366 * day
)

// Clock is a time of day on the wall clock: minutes after midnight, 0
// (00:00) to 1440 (24:00, the end of the day).
type Clock int

// EndOfDay is 24:00, the end of a day (a span's end only).
const EndOfDay Clock = 24 * 60

// SameTime, given to AddDays as the time of day, keeps the start's.
const SameTime Clock = -1

// ParseClock reads "HH:MM" (00:00 to 24:00).
func ParseClock(s string) (Clock, error) {
	t, err := time.Parse("15:04", s)
	switch {
	case s == "24:00":
		return EndOfDay, nil
	case err != nil || len(s) != 5:
		return 0, fmt.Errorf("%w: time of day %q: want HH:MM, 00:00 to 24:00", ErrInvalid, s)
	}
	return Clock(t.Hour()*60 + t.Minute()), nil
}

// String returns c as "HH:MM".
func (c Clock) String() string { return fmt.Sprintf("%02d:%02d", int(c)/60, int(c)%60) }

func (c Clock) dur() time.Duration { return time.Duration(c) * time.Minute }

// Span is working time within one day: from Start up to (not including)
// End.
type Span struct{ Start, End Clock }

// ParseSpan reads "HH:MM-HH:MM" ("09:00-17:00"; an end of 24:00 is the
// end of the day).
func ParseSpan(s string) (Span, error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return Span{}, fmt.Errorf("%w: working hours %q: want HH:MM-HH:MM, such as 09:00-17:00", ErrInvalid, s)
	}
	start, err := ParseClock(strings.TrimSpace(a))
	if err != nil {
		return Span{}, err
	}
	end, err := ParseClock(strings.TrimSpace(b))
	if err != nil {
		return Span{}, err
	}
	return Span{start, end}, nil
}

// String returns sp as "HH:MM-HH:MM".
func (sp Span) String() string { return sp.Start.String() + "-" + sp.End.String() }

// Date is a civil date (a non-working date of a calendar, read in its
// zone).
type Date struct {
	Year  int
	Month time.Month
	Day   int
}

// ParseDate reads "YYYY-MM-DD".
func ParseDate(s string) (Date, error) {
	t, err := time.Parse(time.DateOnly, s)
	if err != nil || len(s) != len(time.DateOnly) {
		return Date{}, fmt.Errorf("%w: date %q: want YYYY-MM-DD, such as 2030-12-25", ErrInvalid, s)
	}
	return dateOf(t), nil
}

func dateOf(w time.Time) Date {
	y, m, d := w.Date()
	return Date{y, m, d}
}

// String returns d as "YYYY-MM-DD".
func (d Date) String() string { return fmt.Sprintf("%04d-%02d-%02d", d.Year, d.Month, d.Day) }

func (d Date) wall() time.Time { return time.Date(d.Year, d.Month, d.Day, 0, 0, 0, 0, time.UTC) }

// Calendar is working time: the spans of each weekday, except on the
// closed dates, on the wall clock of a zone. Create it with New (or
// Decode); its methods may be called from any goroutine.
type Calendar struct {
	zone   string
	loc    *time.Location
	week   [7][]Span // by time.Weekday
	closed []Date    // sorted, no two equal
	days   []int64   // closed as day numbers, sorted
}

// New checks and returns a calendar: zone is an IANA time zone ("" is
// UTC); week holds the spans of each weekday (indexed by time.Weekday,
// Sunday first), at most MaxSpans a day, none overlapping another (spans
// that touch, 12:00-13:00 and 13:00-17:00, are one working stretch), at
// least one in the week; closed lists the non-working dates, at most
// MaxClosed, in any order. The calendar keeps each day's spans sorted and
// the dates sorted without repeats.
func New(zone string, week [7][]Span, closed []Date) (*Calendar, error) {
	loc := time.UTC
	if zone != "" {
		l, err := time.LoadLocation(zone)
		if err != nil || zone == "Local" {
			return nil, fmt.Errorf("%w: time zone %q is not an IANA time zone (want a name such as Europe/Berlin, or empty for UTC)", ErrInvalid, zone)
		}
		loc = l
	}
	c := &Calendar{zone: zone, loc: loc}
	has := false
	for wd, spans := range week {
		if len(spans) > MaxSpans {
			return nil, fmt.Errorf("%w: %s has %d working spans; at most %d", ErrInvalid, time.Weekday(wd), len(spans), MaxSpans)
		}
		s := slices.Clone(spans)
		slices.SortFunc(s, func(a, b Span) int { return int(a.Start - b.Start) })
		for i, sp := range s {
			switch {
			case sp.Start < 0 || sp.End > EndOfDay || sp.Start >= sp.End:
				return nil, fmt.Errorf("%w: %s %s: a span starts before it ends, within 00:00 to 24:00", ErrInvalid, time.Weekday(wd), sp)
			case i > 0 && s[i-1].End > sp.Start:
				return nil, fmt.Errorf("%w: %s: the spans %s and %s overlap", ErrInvalid, time.Weekday(wd), s[i-1], sp)
			}
		}
		c.week[wd] = s
		has = has || len(s) > 0
	}
	if !has {
		return nil, fmt.Errorf("%w: no working hours: give at least one span, such as Monday 09:00-17:00", ErrInvalid)
	}
	if len(closed) > MaxClosed {
		return nil, fmt.Errorf("%w: %d non-working dates; at most %d", ErrInvalid, len(closed), MaxClosed)
	}
	for _, d := range closed {
		if w := d.wall(); dateOf(w) != d || d.Year < 1 || d.Year > 9999 {
			return nil, fmt.Errorf("%w: non-working date %s does not exist (want YYYY-MM-DD, years 0001 to 9999)", ErrInvalid, d)
		}
		c.days = append(c.days, dayNumber(d.wall()))
	}
	slices.Sort(c.days)
	c.days = slices.Compact(c.days)
	for _, n := range c.days {
		c.closed = append(c.closed, dateOf(time.Unix(n*86400, 0).UTC()))
	}
	return c, nil
}

// Zone returns the calendar's time zone as given ("" is UTC).
func (c *Calendar) Zone() string { return c.zone }

// Location returns the calendar's time zone.
func (c *Calendar) Location() *time.Location { return c.loc }

// Week returns the spans of each weekday (indexed by time.Weekday),
// sorted; the caller must not change them.
func (c *Calendar) Week() [7][]Span { return c.week }

// Closed returns the non-working dates, sorted; the caller must not
// change them.
func (c *Calendar) Closed() []Date { return c.closed }

// CheckName checks a calendar's name: 1 to MaxName bytes of ASCII
// letters, digits, '.', '_' and '-'.
func CheckName(name string) error {
	if name == "" || len(name) > MaxName {
		return fmt.Errorf("%w: name %q: 1 to %d bytes", ErrInvalid, name, MaxName)
	}
	for _, r := range name {
		if !(r == '.' || r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return fmt.Errorf("%w: name %q: use letters, digits, '.', '_' and '-'", ErrInvalid, name)
		}
	}
	return nil
}

// isClosed reports whether the civil day of w is a non-working date.
func (c *Calendar) isClosed(w time.Time) bool {
	_, found := slices.BinarySearch(c.days, dayNumber(w))
	return found
}
