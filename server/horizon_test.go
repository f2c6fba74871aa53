package server

import (
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/internal/units"
)

func TestByHorizon(t *testing.T) {
	const now = int64(1_000_000_000)
	min := time.Minute.Milliseconds()
	got := byHorizon([]bucketCount{
		{start: now - 10*min, end: now - 5*min, count: 7}, // overdue
		{start: now - min, end: now + min, count: 10},     // half left, all within 1m
		{start: now + 2*min, end: now + 6*min, count: 8},  // 3/4 in 1-5m, 1/4 in 5m-1h
		{start: now + 2*units.Day.Milliseconds(), end: now + 2*units.Day.Milliseconds() + 60*min, count: 5},
	}, now)
	want := []float64{17, 6, 2, 0, 5}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("byHorizon = %v, want %v", got, want)
		}
	}
}

// TestByHorizonWholeMessages: a bucket spread over horizons counts whole
// messages that add up to its count.
func TestByHorizonWholeMessages(t *testing.T) {
	const now = int64(1_000_000_000)
	min := time.Minute.Milliseconds()
	for _, tc := range []struct {
		name   string
		bucket bucketCount
	}{
		{"thirds", bucketCount{start: now, end: now + 15*min, count: 10}},     // 1/15 in 1m, 4/15 in 5m, 10/15 in 1h
		{"one_message", bucketCount{start: now, end: now + 10*min, count: 1}}, // less than one per horizon
		{"odd", bucketCount{start: now + 30*time.Second.Milliseconds(), end: now + 61*min, count: 1001}},
	} {
		got := byHorizon([]bucketCount{tc.bucket}, now)
		var sum float64
		for _, v := range got {
			if v != float64(int64(v)) || v < 0 {
				t.Errorf("%s: byHorizon = %v: not whole messages", tc.name, got)
			}
			sum += v
		}
		if sum != float64(tc.bucket.count) {
			t.Errorf("%s: byHorizon = %v, sum %v; want %d", tc.name, got, sum, tc.bucket.count)
		}
	}
}
