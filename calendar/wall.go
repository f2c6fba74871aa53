package calendar

import "time"

// Wall returns t's wall-clock reading in loc as a time in UTC: a civil
// time (date and time of day) that can be compared, truncated to days and
// added to without any zone's rules getting in the way.
func Wall(t time.Time, loc *time.Location) time.Time {
	_, off := t.In(loc).Zone()
	return t.UTC().Add(time.Duration(off) * time.Second)
}

// Resolve returns the instant of the wall-clock time w (as Wall gives it)
// in loc: for a time the clocks repeat (falling back), the first of its
// two instants; for one they skip (springing forward), the first instant
// after the gap.
func Resolve(w time.Time, loc *time.Location) time.Time {
	// Candidates: w read with the offsets in force a day before and a day
	// after it (zones change their offset at most once within two days).
	_, before := w.Add(-26 * time.Hour).In(loc).Zone()
	_, after := w.Add(26 * time.Hour).In(loc).Zone()
	tb := w.Add(-time.Duration(before) * time.Second)
	okb := Wall(tb, loc).Equal(w)
	if before == after {
		if okb {
			return tb
		}
	} else {
		ta := w.Add(-time.Duration(after) * time.Second)
		oka := Wall(ta, loc).Equal(w)
		switch {
		case okb && oka: // repeated: the first instant
			if ta.Before(tb) {
				return ta
			}
			return tb
		case okb:
			return tb
		case oka:
			return ta
		}
	}
	// In a gap: the transition that opened it is the first instant after;
	// tb, read with the earlier offset, lies after it.
	start, _ := tb.In(loc).ZoneBounds()
	return start
}

// day is the length of a civil day: wall-clock times are UTC times, whose
// days are all this long.
const day = 24 * time.Hour

// midnight returns the start of the civil day of the wall-clock time w.
func midnight(w time.Time) time.Time {
	y, m, d := w.Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// dayNumber numbers the civil day of w: days since 1970-01-01.
func dayNumber(w time.Time) int64 {
	s := w.Unix()
	n := s / 86400
	if s%86400 < 0 {
		n--
	}
	return n
}
