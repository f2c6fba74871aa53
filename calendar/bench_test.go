package calendar

import (
	"testing"
	"time"
)

// bigCalendar has 10,000 closed dates (every day of 27 years).
func bigCalendar(b *testing.B) []byte {
	var ds []Date
	d := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	for range MaxClosed {
		ds = append(ds, dateOf(d))
		d = d.AddDate(0, 0, 1)
	}
	c, err := New("Europe/Berlin", [7][]Span{1: {{540, 1020}}}, ds)
	if err != nil {
		b.Fatal(err)
	}
	return c.Encode()
}

// BenchmarkDecode: the first decode of a calendar of 10,000 closed dates
// (uncached) against Decode of the same value again (the cache).
func BenchmarkDecode(b *testing.B) {
	enc := bigCalendar(b)
	b.Run("uncached", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			if _, err := decode(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cached", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			if _, err := Decode(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAddDays: 3 working days at 09:00 in a calendar with closed
// dates, across a weekend.
func BenchmarkAddDays(b *testing.B) {
	c, err := Decode([]byte(`{"zone":"Europe/Berlin","mon":["09:00-17:00"],"tue":["09:00-17:00"],"wed":["09:00-17:00"],` +
		`"thu":["09:00-17:00"],"fri":["09:00-17:00"],"closed":["2030-12-24","2030-12-25","2030-12-26"]}`))
	if err != nil {
		b.Fatal(err)
	}
	t := time.Date(2030, 12, 20, 15, 0, 0, 0, time.UTC)
	for b.Loop() {
		if _, err := c.AddDays(t, 3, 9*60); err != nil {
			b.Fatal(err)
		}
	}
}
