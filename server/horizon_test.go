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
