// Package recur holds Hourglass's recurring schedules: a named message
// delivered at every occurrence of a cron spec or an interval, in a time
// zone. Specs are parsed by github.com/robfig/cron/v3; the next
// occurrence is computed here, on the zone's wall clock, with defined
// behaviour where the clocks change:
//
//   - a local time the clocks skip (spring forward) fires once, at the
//     first instant after the gap;
//   - a local time the clocks repeat (fall back) fires once, at its first
//     instant.
//
// A schedule keeps one occurrence armed in the engine as an ordinary
// message (Scheduler); when it is delivered the next one is armed in the
// same commitlog append that records it fired, so no occurrence is lost
// or doubled across a crash.
//
// It imports the engine and the packages the engine's API uses.
package recur

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"time"
	// The IANA zones are embedded: a binary with schedules needs no zone
	// files on the machine.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"

	"github.com/hourglassmq/hourglass/calendar"
)

// ErrSpec wraps every error about a spec or time zone.
var ErrSpec = errors.New("recur: invalid schedule spec")

// parser reads 5-field specs (minute first), 6-field ones (seconds
// first), and descriptors (@every 90s, @daily, ...).
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Spec is a parsed schedule spec in a time zone.
type Spec struct {
	text  string
	loc   *time.Location
	every time.Duration      // @every: a fixed interval
	cron  *cron.SpecSchedule // otherwise
}

// MinEvery is the shortest @every interval.
const MinEvery = time.Second

// Parse parses spec in the IANA time zone tz ("" means UTC). A spec may
// not name its own zone (CRON_TZ=, TZ=): tz does.
func Parse(spec, tz string) (*Spec, error) {
	loc := time.UTC
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil {
			return nil, fmt.Errorf("%w: time zone %q: %v (want an IANA name such as Europe/Berlin, or empty for UTC)", ErrSpec, tz, err)
		}
		loc = l
	}
	s := strings.TrimSpace(spec)
	if s == "" {
		return nil, fmt.Errorf("%w: empty; want a cron spec (\"0 9 * * MON-FRI\"), \"@every 90s\" or a macro (@daily)", ErrSpec)
	}
	if strings.HasPrefix(s, "CRON_TZ=") || strings.HasPrefix(s, "TZ=") {
		return nil, fmt.Errorf("%w: %q names a time zone; give it as the schedule's time zone instead", ErrSpec, spec)
	}
	if rest, ok := strings.CutPrefix(s, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil || d < MinEvery || d%time.Second != 0 {
			return nil, fmt.Errorf("%w: %q: want \"@every <Go duration>\" of whole seconds, at least %v", ErrSpec, spec, MinEvery)
		}
	}
	sch, err := parser.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v (want 5 fields, minute first, or 6 with seconds first; \"@every <Go duration>\"; or @yearly, @monthly, @weekly, @daily, @hourly)", ErrSpec, spec, err)
	}
	out := &Spec{text: s, loc: loc}
	switch c := sch.(type) {
	case cron.ConstantDelaySchedule:
		if c.Delay < MinEvery {
			return nil, fmt.Errorf("%w: %q: the interval must be at least %v", ErrSpec, spec, MinEvery)
		}
		out.every = c.Delay
	case *cron.SpecSchedule:
		out.cron = c
	default:
		return nil, fmt.Errorf("%w: %q: unsupported kind of spec", ErrSpec, spec)
	}
	return out, nil
}

// String returns the spec as given (trimmed).
func (s *Spec) String() string { return s.text }

// Location returns the spec's time zone.
func (s *Spec) Location() *time.Location { return s.loc }

// Every returns the interval of an @every spec, 0 otherwise.
func (s *Spec) Every() time.Duration { return s.every }

// Next returns the first occurrence strictly after after, or the zero
// time if there is none within five years. For @every it is after plus
// the interval (whole seconds).
func (s *Spec) Next(after time.Time) time.Time {
	if s.every > 0 {
		return after.Add(s.every).Truncate(time.Second)
	}
	limit := after.Add(5 * 366 * 24 * time.Hour)
	// Walk the wall clock: c is a civil time (a time.Time in UTC used as
	// a calendar), resolved to an instant in the zone.
	c := calendar.Wall(after, s.loc).Truncate(time.Second)
	for {
		c = s.nextCivil(c)
		if c.IsZero() {
			return time.Time{}
		}
		t := calendar.Resolve(c, s.loc)
		if t.After(after) {
			return t
		}
		if t.After(limit) {
			return time.Time{}
		}
	}
}

// nextCivil returns the first civil time after c that the cron fields
// match, or the zero time within five years. Each field jumps to its next
// allowed value (the lowest set bit at or above it), so a call does a few
// steps, not one per second.
func (s *Spec) nextCivil(c time.Time) time.Time {
	cs := s.cron
	t := c.Add(time.Second).Truncate(time.Second)
	yearLimit := t.Year() + 5
	date := func(y int, mo time.Month, d, h, mi, sec int) time.Time {
		return time.Date(y, mo, d, h, mi, sec, 0, time.UTC)
	}
	for t.Year() <= yearLimit {
		y, mo, d := t.Date()
		h, mi, sec := t.Clock()
		if 1<<uint(mo)&cs.Month == 0 {
			if m, ok := nextBit(cs.Month, int(mo)+1, 12); ok {
				t = date(y, time.Month(m), 1, 0, 0, 0)
			} else {
				t = date(y+1, time.January, 1, 0, 0, 0)
			}
			continue
		}
		if !dayMatches(cs, t) {
			t = date(y, mo, d+1, 0, 0, 0)
			continue
		}
		if 1<<uint(h)&cs.Hour == 0 {
			if n, ok := nextBit(cs.Hour, h+1, 23); ok {
				t = date(y, mo, d, n, 0, 0)
			} else {
				t = date(y, mo, d+1, 0, 0, 0)
			}
			continue
		}
		if 1<<uint(mi)&cs.Minute == 0 {
			if n, ok := nextBit(cs.Minute, mi+1, 59); ok {
				t = date(y, mo, d, h, n, 0)
			} else {
				t = date(y, mo, d, h+1, 0, 0)
			}
			continue
		}
		if 1<<uint(sec)&cs.Second == 0 {
			if n, ok := nextBit(cs.Second, sec+1, 59); ok {
				t = date(y, mo, d, h, mi, n)
			} else {
				t = date(y, mo, d, h, mi+1, 0)
			}
			continue
		}
		return t
	}
	return time.Time{}
}

// nextBit returns the lowest value from from to max whose bit is set in
// a cron field's mask.
func nextBit(mask uint64, from, max int) (int, bool) {
	if from > max {
		return 0, false
	}
	m := mask &^ starBit >> uint(from) << uint(from)
	m &= 1<<uint(max+1) - 1
	if m == 0 {
		return 0, false
	}
	return bits.TrailingZeros64(m), true
}

// starBit marks a field written as * (cron's own convention).
const starBit = 1 << 63

// dayMatches applies cron's rule for day of month and day of week: both
// must match when either is *, otherwise either may.
func dayMatches(s *cron.SpecSchedule, t time.Time) bool {
	dom := 1<<uint(t.Day())&s.Dom > 0
	dow := 1<<uint(t.Weekday())&s.Dow > 0
	if s.Dom&starBit > 0 || s.Dow&starBit > 0 {
		return dom && dow
	}
	return dom || dow
}
