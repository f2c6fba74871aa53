package reput

import (
	"slices"
	"testing"
	"time"
)

// TestRetiredOverlapping: Watch hands a loader the retirements of the
// buckets overlapping its segment's time, and Covers answers as routing
// does (retiredState.covers) for a record of that time.
func TestRetiredOverlapping(t *testing.T) {
	s := &retiredState{}
	for _, r := range []Retirement{
		{Start: 0, Duration: 10 * time.Second, SeqEnd: 100},
		{Start: 20_000, Duration: 10 * time.Second, SeqEnd: 300},
		{Start: 20_000, Duration: 10 * time.Second, SeqEnd: 200}, // an older retirement of the same bucket
		{Start: 0, Duration: time.Hour, SeqEnd: 50},              // a bucket of another length over both
		{Start: 40_000, Duration: 0, Floor: 900},                 // a floor only
	} {
		s.add(r)
	}
	for _, tc := range []struct {
		name       string
		start, end int64
		want       []int64 // SeqEnd of each retirement returned
	}{
		{"same_bucket", 20_000, 30_000, []int64{300, 50}},
		{"none_but_the_long_one", 30_000, 40_000, []int64{50}},
		{"past_every_one", 3_600_000, 3_610_000, nil},
		{"overlapping_two", 5_000, 25_000, []int64{300, 100, 50}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := s.overlapping(tc.start, tc.end)
			var got []int64
			for _, r := range rs {
				got = append(got, int64(r.SeqEnd))
			}
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("overlapping(%d, %d) SeqEnds %v, want %v", tc.start, tc.end, got, want)
			}
			for _, rec := range []struct {
				at  int64
				seq uint64
			}{{tc.start, 0}, {tc.start, 49}, {tc.start, 99}, {tc.start, 250}, {tc.end - 1, 299}, {tc.end - 1, 300}} {
				if rec.at < tc.start || rec.at >= tc.end {
					continue
				}
				if got, want := rs.Covers(rec.at, rec.seq), s.covers(rec.at, rec.seq); got != want {
					t.Errorf("Covers(%d, %d) = %v; routing says %v", rec.at, rec.seq, got, want)
				}
			}
		})
	}
}
