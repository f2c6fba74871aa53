package calendar

import (
	"fmt"
	"time"
)

// Working reports whether t is working time.
func (c *Calendar) Working(t time.Time) bool {
	w := Wall(t, c.loc)
	if c.isClosed(w) {
		return false
	}
	tod := w.Sub(midnight(w))
	for _, sp := range c.week[w.Weekday()] {
		if tod >= sp.Start.dur() && tod < sp.End.dur() {
			return true
		}
	}
	return false
}

// Next returns the first working instant at or after t, or
// ErrNoWorkingTime if there is none within Horizon.
func (c *Calendar) Next(t time.Time) (time.Time, error) {
	s, _, err := c.stretch(t)
	return s, err
}

// stretch returns the first working instant at or after t and the end of
// the working time that follows it without a break: the first instant
// after it that is not working, or a change of the zone's offset, after
// which working time may go on (stretch from there says).
func (c *Calendar) stretch(t time.Time) (start, end time.Time, err error) {
	limit := t.Add(Horizon)
	for !t.After(limit) {
		lt := t.In(c.loc)
		_, off := lt.Zone()
		_, zoneEnd := lt.ZoneBounds()
		offset := time.Duration(off) * time.Second
		// Within this offset's period the wall clock runs with the real
		// one: the first working wall-clock time from t's reading is the
		// first working instant, if it comes before the period ends.
		until := limit.Add(offset)
		if !zoneEnd.IsZero() && zoneEnd.Before(limit) {
			until = zoneEnd.Add(offset)
		}
		ws, we, ok := c.wallFrom(t.UTC().Add(offset), until)
		if ok {
			s := ws.Add(-offset)
			if zoneEnd.IsZero() || s.Before(zoneEnd) {
				e := we.Add(-offset)
				if !zoneEnd.IsZero() && zoneEnd.Before(e) {
					e = zoneEnd
				}
				return s, e, nil
			}
		}
		if zoneEnd.IsZero() {
			break
		}
		t = zoneEnd
	}
	return time.Time{}, time.Time{}, fmt.Errorf("%w: no working time within %d days after %s", ErrNoWorkingTime, Horizon/day, t.UTC().Format(time.RFC3339))
}

// wallFrom returns the first working wall-clock time at or after w, on a
// day that starts no later than until, and the end of its span.
func (c *Calendar) wallFrom(w, until time.Time) (start, end time.Time, ok bool) {
	for d := midnight(w); !d.After(until); d = d.Add(day) {
		if c.isClosed(d) {
			continue
		}
		for _, sp := range c.week[d.Weekday()] {
			e := d.Add(sp.End.dur())
			if !w.Before(e) {
				continue
			}
			s := d.Add(sp.Start.dur())
			if s.Before(w) {
				s = w
			}
			return s, e, true
		}
	}
	return time.Time{}, time.Time{}, false
}

// AddWorking returns the instant at which d of working time has passed
// after t (working time before t does not count; d of 0 is Next(t)): the
// instant within working time, or at the end of a stretch of it, where the
// d-th working hour ends (8 working hours after Monday 09:00, with hours
// 09:00-17:00, are Monday 17:00). Working time is real elapsed time: a
// working day whose clocks spring forward is an hour shorter.
func (c *Calendar) AddWorking(t time.Time, d time.Duration) (time.Time, error) {
	if d < 0 {
		return time.Time{}, fmt.Errorf("%w: working time %v is negative", ErrInvalid, d)
	}
	limit := t.Add(Horizon)
	s, e, err := c.stretch(t)
	for err == nil {
		if left := e.Sub(s); d <= left {
			return s.Add(d), nil
		}
		d -= e.Sub(s)
		if e.After(limit) {
			return time.Time{}, fmt.Errorf("%w: %v of working time left over %d days after %s", ErrNoWorkingTime, d, Horizon/day, t.UTC().Format(time.RFC3339))
		}
		s, e, err = c.stretch(e)
	}
	return time.Time{}, err
}

// AddDays returns the n-th working day after t's date (n from 1 to
// MaxDays) at the wall-clock time at (SameTime: t's time of day), or the
// first working instant after it when that time is not working time (an
// at before the day's hours begin moves to their start; one after they
// end, to the next working day's). A working day is a date that is not
// closed and has working time. A time the clocks skip that day resolves
// to the first instant after the gap; the answer is never before t.
func (c *Calendar) AddDays(t time.Time, n int, at Clock) (time.Time, error) {
	if n < 1 || n > MaxDays {
		return time.Time{}, fmt.Errorf("%w: %d working days: from 1 to %d", ErrInvalid, n, MaxDays)
	}
	if at != SameTime && (at < 0 || at >= EndOfDay) {
		return time.Time{}, fmt.Errorf("%w: time of day %s: from 00:00 to 23:59", ErrInvalid, at)
	}
	w := Wall(t, c.loc)
	d := midnight(w)
	tod := w.Sub(d)
	if at != SameTime {
		tod = at.dur()
	}
	for i := 0; n > 0; i++ {
		if i > int(Horizon/day) {
			return time.Time{}, fmt.Errorf("%w: fewer than %d working days within %d days after %s", ErrNoWorkingTime, n, Horizon/day, t.UTC().Format(time.RFC3339))
		}
		d = d.Add(day)
		if c.workingDay(d) {
			n--
		}
	}
	r := Resolve(d.Add(tod), c.loc)
	if r.Before(t) {
		r = t // a day that begins in an hour the clocks repeat
	}
	return c.Next(r)
}

// workingDay reports whether the civil day d (its midnight on the wall
// clock) has working time: it is not closed and some span of its weekday
// holds an instant (not all of it in an hour the clocks skip).
func (c *Calendar) workingDay(d time.Time) bool {
	if c.isClosed(d) {
		return false
	}
	for _, sp := range c.week[d.Weekday()] {
		// The span's start, or the first instant after a gap it lies in:
		// working time if that is still before the span's end.
		if Wall(Resolve(d.Add(sp.Start.dur()), c.loc), c.loc).Before(d.Add(sp.End.dur())) {
			return true
		}
	}
	return false
}
