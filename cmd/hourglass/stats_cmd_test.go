package main

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// TestPendingRows: stats groups the pending buckets by hour for a day,
// then by day, month and year, each row named by its time, the rows in
// time order and only those with messages.
func TestPendingRows(t *testing.T) {
	now := time.Date(2030, 1, 30, 20, 17, 0, 0, time.UTC)
	bucket := func(start time.Time, n int64, approx bool) *hourglassv1.PendingBucket {
		return &hourglassv1.PendingBucket{Start: timestamppb.New(start), End: timestamppb.New(start.Add(time.Hour)), Pending: n, Approximate: approx}
	}
	st := &hourglassv1.StatsResponse{ServerTime: timestamppb.New(now), Pending: []*hourglassv1.PendingBucket{
		bucket(time.Date(2035, 6, 1, 0, 0, 0, 0, time.UTC), 7, true),
		bucket(now.Add(-20*time.Minute), 1, false), // started: the first row
		bucket(now.Add(43*time.Minute), 2, false),  // 21:00, the next hour
		bucket(now.Add(3*time.Hour+43*time.Minute), 0, false),
		bucket(time.Date(2030, 1, 31, 20, 0, 0, 0, time.UTC), 3, false), // less than 24 h ahead
		bucket(time.Date(2030, 1, 31, 21, 0, 0, 0, time.UTC), 4, false), // the rest of that day
		bucket(time.Date(2030, 1, 31, 23, 0, 0, 0, time.UTC), 5, true),
		bucket(time.Date(2030, 2, 28, 0, 0, 0, 0, time.UTC), 6, false), // 29 days after the day of the clock
		bucket(time.Date(2030, 3, 1, 0, 0, 0, 0, time.UTC), 8, true),   // 30 days after it: by month
		bucket(time.Date(2030, 3, 31, 23, 0, 0, 0, time.UTC), 9, false),
		bucket(time.Date(2031, 12, 31, 0, 0, 0, 0, time.UTC), 10, false), // month 23 after January 2030
		bucket(time.Date(2032, 1, 1, 0, 0, 0, 0, time.UTC), 11, false),   // month 24: by year
		bucket(time.Date(2035, 12, 31, 0, 0, 0, 0, time.UTC), 12, false),
	}}
	want := []pendingRow{
		{"2030-01-30 20:00", 1, false},
		{"2030-01-30 21:00", 2, false},
		{"2030-01-31 20:00", 3, false},
		{"2030-01-31", 9, true},
		{"2030-02-28", 6, false},
		{"2030-03", 17, true},
		{"2031-12", 10, false},
		{"2032", 11, false},
		{"2035", 19, true},
	}
	if got := pendingRows(st); !slices.Equal(got, want) {
		t.Errorf("pendingRows =\n%v\nwant\n%v", got, want)
	}

	// Ten months of hourly buckets fit a screen: 24 hours, 30 days and
	// the months after.
	st.Pending = nil
	for h := time.Duration(0); h < 300*24*time.Hour; h += time.Hour {
		st.Pending = append(st.Pending, bucket(now.Truncate(time.Hour).Add(h), 1, false))
	}
	if rows := pendingRows(st); len(rows) > 24+31+10 {
		t.Errorf("%d rows for %d hourly buckets; want at most %d", len(rows), len(st.Pending), 24+31+10)
	}
}
