// Package units parses and formats the durations and sizes of the command
// line and of error messages: Go durations plus d and y, sizes in B, KiB,
// MiB. Shared by the root package, server and cmd/hourglass; it imports
// only the standard library.
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Day and Year are the units ParseDuration adds to Go's: 24 h and 365 days.
const (
	Day  = 24 * time.Hour
	Year = 365 * Day
)

// DefaultDelayLevels is the RocketMQ-style delay level table: level 1 is
// the first entry.
const DefaultDelayLevels = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

// ParseDuration parses a Go duration ("90s", "1h30m") that may also use
// the units y (365 days) and d (24 hours) ahead of the others: "10y",
// "30d", "1y6d12h". It rejects a negative duration and one that overflows.
func ParseDuration(s string) (time.Duration, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return 0, fmt.Errorf("empty duration: want a number and a unit, such as 500ms, 30s, 10m, 2h, 7d or 10y")
	}
	var total time.Duration
	rest := in
	for rest != "" {
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		if i == 0 || i == len(rest) || (rest[i] != 'y' && rest[i] != 'd') {
			break
		}
		n, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil {
			return 0, fmt.Errorf("duration %q: %q is not a number", s, rest[:i])
		}
		unit := Day
		if rest[i] == 'y' {
			unit = Year
		}
		v := n * float64(unit)
		if v > math.MaxInt64-float64(total) {
			return 0, fmt.Errorf("duration %q is too long: at most about 292y", s)
		}
		total += time.Duration(v)
		rest = rest[i+1:]
	}
	if rest != "" {
		d, err := time.ParseDuration(rest)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("duration %q: want a number and a unit (ns, us, ms, s, m, h, d = 24h, y = 365d), such as 500ms, 10m, 7d or 10y; units may be combined (1d12h)", s)
		}
		if d > math.MaxInt64-total {
			return 0, fmt.Errorf("duration %q is too long: at most about 292y", s)
		}
		total += d
	}
	return total, nil
}

// FormatDuration prints d the way ParseDuration reads it, in the largest
// unit that keeps it short: 10y, 7d, 1h30m0s, 500ms.
func FormatDuration(d time.Duration) string {
	switch {
	case d >= Year && d%Year == 0:
		return strconv.FormatInt(int64(d/Year), 10) + "y"
	case d >= Day && d%Day == 0:
		return strconv.FormatInt(int64(d/Day), 10) + "d"
	case d >= Year:
		return strconv.FormatFloat(float64(d)/float64(Year), 'g', 4, 64) + "y"
	case d >= Day:
		return strconv.FormatFloat(float64(d)/float64(Day), 'g', 4, 64) + "d"
	}
	s := d.String()
	if d >= time.Minute {
		// 1h0m0s -> 1h, 1m30s stays.
		if strings.HasSuffix(s, "m0s") {
			s = s[:len(s)-2]
		}
		if strings.HasSuffix(s, "h0m") {
			s = s[:len(s)-2]
		}
	}
	return s
}

// ParseDelayLevels parses a delay level table: durations (ParseDuration)
// separated by spaces or commas, each positive. Level 1 is the first.
func ParseDelayLevels(s string) ([]time.Duration, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ',' || r == '\t' || r == '\n' })
	if len(fields) == 0 {
		return nil, fmt.Errorf("delay levels %q: want at least one duration, such as %q", s, DefaultDelayLevels)
	}
	out := make([]time.Duration, len(fields))
	for i, f := range fields {
		d, err := ParseDuration(f)
		if err != nil {
			return nil, fmt.Errorf("delay level %d: %w", i+1, err)
		}
		if d <= 0 {
			return nil, fmt.Errorf("delay level %d is %q: each level must be a positive duration", i+1, f)
		}
		out[i] = d
	}
	return out, nil
}

// ParseSize parses a byte count: a whole number with an optional unit B,
// KiB, MiB, GiB (powers of 1024; K, M, G, KB, MB and GB mean the same).
func ParseSize(s string) (int64, error) {
	in := strings.TrimSpace(s)
	i := 0
	for i < len(in) && in[i] >= '0' && in[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("size %q: want a whole number of bytes with an optional unit, such as 65536, 512KiB or 1MiB", s)
	}
	n, err := strconv.ParseInt(in[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	var mult int64
	switch strings.ToLower(strings.TrimSpace(in[i:])) {
	case "", "b":
		mult = 1
	case "k", "kb", "kib":
		mult = 1 << 10
	case "m", "mb", "mib":
		mult = 1 << 20
	case "g", "gb", "gib":
		mult = 1 << 30
	default:
		return 0, fmt.Errorf("size %q: unknown unit %q; use B, KiB, MiB or GiB", s, in[i:])
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n * mult, nil
}

// FormatSize prints n bytes in the largest binary unit that divides it.
func FormatSize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + " GiB"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
