package calendar

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"
)

// stored is a calendar as stored (the value of its control record; JSON,
// docs/FORMAT.md). The JSON names are part of the on-disk format.
type stored struct {
	Zone   string   `json:"zone,omitempty"`
	Sun    []string `json:"sun,omitempty"`
	Mon    []string `json:"mon,omitempty"`
	Tue    []string `json:"tue,omitempty"`
	Wed    []string `json:"wed,omitempty"`
	Thu    []string `json:"thu,omitempty"`
	Fri    []string `json:"fri,omitempty"`
	Sat    []string `json:"sat,omitempty"`
	Closed []string `json:"closed,omitempty"`
}

func (s *stored) days() [7]*[]string {
	return [7]*[]string{&s.Sun, &s.Mon, &s.Tue, &s.Wed, &s.Thu, &s.Fri, &s.Sat}
}

// Encode returns c as stored: {"zone":"Europe/Berlin","mon":["09:00-17:00"],
// ...,"closed":["2030-12-25"]}.
func (c *Calendar) Encode() []byte {
	s := stored{Zone: c.zone}
	days := s.days()
	for wd, spans := range c.week {
		for _, sp := range spans {
			*days[wd] = append(*days[wd], sp.String())
		}
	}
	for _, d := range c.closed {
		s.Closed = append(s.Closed, d.String())
	}
	b, err := json.Marshal(&s)
	if err != nil {
		panic(err) // strings always encode
	}
	return b
}

// Decode returns the calendar Encode stored as b. A value that is not
// one, or does not make a calendar New accepts, is an error wrapping
// ErrInvalid. Calendars are values: Decode of the same bytes may return
// the same *Calendar.
func Decode(b []byte) (*Calendar, error) {
	decoded.mu.Lock()
	c := decoded.m[string(b)]
	decoded.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c, err := decode(b)
	if err != nil {
		return nil, err
	}
	decoded.mu.Lock()
	if decoded.m == nil || len(decoded.m) >= maxDecoded {
		decoded.m = map[string]*Calendar{}
	}
	decoded.m[string(b)] = c
	decoded.mu.Unlock()
	return c, nil
}

// decoded remembers the calendars Decode made, by their stored value:
// each Schedule in working time, and each occurrence of a schedule that
// keeps to a calendar, decodes its calendar again, and one with 10,000
// closed dates takes tens of milliseconds to decode, a cached one a
// fraction of one (BenchmarkDecode). Keyed by
// the value, an entry cannot outlive the calendar it is.
var decoded struct {
	mu sync.Mutex
	m  map[string]*Calendar
}

// maxDecoded bounds decoded; past it, it starts over.
const maxDecoded = 32

func decode(b []byte) (*Calendar, error) {
	var s stored
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w: stored calendar: %v", ErrInvalid, err)
	}
	var week [7][]Span
	for wd, spans := range s.days() {
		for _, t := range *spans {
			sp, err := ParseSpan(t)
			if err != nil {
				return nil, fmt.Errorf("%w (on %s)", err, time.Weekday(wd))
			}
			week[wd] = append(week[wd], sp)
		}
	}
	closed := make([]Date, 0, len(s.Closed))
	for _, t := range s.Closed {
		d, err := ParseDate(t)
		if err != nil {
			return nil, err
		}
		closed = append(closed, d)
	}
	return New(s.Zone, week, closed)
}

// ParseWeekday reads a weekday's name in English, in full or its first
// three letters, in any letter case ("mon", "Monday").
func ParseWeekday(s string) (time.Weekday, error) {
	for wd := time.Sunday; wd <= time.Saturday; wd++ {
		n := wd.String()
		if len(s) >= 3 && (strings.EqualFold(s, n) || strings.EqualFold(s, n[:3])) {
			return wd, nil
		}
	}
	return 0, fmt.Errorf("%w: weekday %q: want mon, tue, wed, thu, fri, sat or sun", ErrInvalid, s)
}
