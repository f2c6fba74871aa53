package units

import (
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{in: "10y", want: 10 * Year},
		{in: "30d", want: 30 * Day},
		{in: "1y6d12h", want: Year + 6*Day + 12*time.Hour},
		{in: "1.5d", want: 36 * time.Hour},
		{in: "90s", want: 90 * time.Second},
		{in: "500ms", want: 500 * time.Millisecond},
		{in: "0", want: 0},
		{in: " 2h ", want: 2 * time.Hour},
		{in: "", bad: true},
		{in: "10", bad: true},
		{in: "-5s", bad: true},
		{in: "1h1d", bad: true},
		{in: "y", bad: true},
		{in: "300y", bad: true},
		{in: "ten years", bad: true},
	} {
		got, err := ParseDuration(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseDuration(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		10 * Year: "10y", 7 * Day: "7d", time.Hour: "1h", 90 * time.Minute: "1h30m", time.Minute: "1m",
		90 * time.Second: "1m30s", 5 * time.Second: "5s", 250 * time.Millisecond: "250ms", 36 * time.Hour: "1.5d",
	} {
		if got := FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%v) = %q, want %q", d, got, want)
		}
		if back, err := ParseDuration(FormatDuration(d)); err != nil || back != d {
			t.Errorf("ParseDuration(FormatDuration(%v)) = %v, %v", d, back, err)
		}
	}
}

func TestParseDelayLevels(t *testing.T) {
	levels, err := ParseDelayLevels(DefaultDelayLevels)
	if err != nil || len(levels) != 18 || levels[0] != time.Second || levels[17] != 2*time.Hour {
		t.Fatalf("default levels = %v, %v", levels, err)
	}
	if levels, err := ParseDelayLevels("1s,5s, 1d"); err != nil || len(levels) != 3 || levels[2] != Day {
		t.Errorf("commas: %v, %v", levels, err)
	}
	for _, bad := range []string{"", " , ", "1s 0s", "1s x"} {
		if _, err := ParseDelayLevels(bad); err == nil {
			t.Errorf("ParseDelayLevels(%q) accepted", bad)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"1MiB": 1 << 20, "512KiB": 512 << 10, "65536": 65536, "2 MB": 2 << 20, "1k": 1024, "3B": 3} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "MiB", "1.5MiB", "1TB", "-1", "99999999999999999999"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
}
