package engine

import (
	"testing"
	"time"
)

// checkAddCeilMs holds addCeilMs to what it replaces in ScheduleBatch,
// ceilMs(now.Add(d)), wherever time.Time.UnixNano is defined (years 1678
// to 2262).
func checkAddCeilMs(t *testing.T, nowNs int64, d time.Duration) {
	t.Helper()
	at := time.Unix(0, nowNs).Add(d)
	if at.Year() < 1679 || at.Year() > 2261 {
		return
	}
	if got, want := addCeilMs(nowNs, d), ceilMs(at); got != want {
		t.Fatalf("addCeilMs(%d, %v) = %d, ceilMs = %d", nowNs, d, got, want)
	}
}

func TestAddCeilMs(t *testing.T) {
	now := time.Date(2026, 11, 30, 5, 0, 0, 123_456_789, time.UTC).UnixNano()
	for _, nowNs := range []int64{now, now - now%1e6, now - now%1e6 + 1, 0, 1, -1, -1_500_000, 999_999} {
		for _, d := range []time.Duration{0, 1, -1, 999_999, 1_000_000, 1_000_001, -999_999, -1_000_000, -1_000_001,
			876_543_211, -876_543_211, time.Hour, -time.Hour, 10 * 365 * 24 * time.Hour, DefaultMaxDelay + 1} {
			checkAddCeilMs(t, nowNs, d)
		}
	}
}

func FuzzAddCeilMs(f *testing.F) {
	f.Add(int64(1_796_014_800_123_456_789), int64(3_600_000_000_000))
	f.Add(int64(-1_500_000), int64(-999_999))
	f.Fuzz(func(t *testing.T, nowNs, d int64) { checkAddCeilMs(t, nowNs, time.Duration(d)) })
}
