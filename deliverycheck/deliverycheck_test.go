package deliverycheck

import (
	"sync"
	"testing"
	"time"
)

func TestCounter(t *testing.T) {
	due := time.Unix(1000, 0)
	c := New(6, 2*time.Millisecond)
	c.Acked(0, 5)    // message 5 is never acked
	c.Unacked(4, 5)  // nor is 4: its batch failed
	c.Acked(-3, -1)  // outside the run: ignored
	c.Acked(100, 90) // empty
	if !c.Delivered(0, due, due.Add(time.Millisecond)) {
		t.Error("the first delivery of 0 is not its first")
	}
	if c.Delivered(0, due, due.Add(time.Second)) {
		t.Error("the second delivery of 0 is its first")
	}
	c.Delivered(0, due, due)
	c.Delivered(1, due, due.Add(-time.Millisecond)) // within the slack: not early
	c.Delivered(2, due, due.Add(-3*time.Millisecond))
	c.Delivered(4, due, due) // never acked
	c.Delivered(6, due, due) // not of the run
	c.Unknown()
	got := c.Tally()
	want := Tally{Messages: 6, Acked: 4, Delivered: 4, Deliveries: 6, Lost: 1, Duplicates: 2, Early: 1, Unknown: 2, UnackedDelivered: 1}
	if got != want {
		t.Errorf("Tally = %+v\nwant    %+v", got, want)
	}
	if c.Distinct() != 4 || c.Len() != 6 {
		t.Errorf("Distinct %d, Len %d; want 4, 6", c.Distinct(), c.Len())
	}
}

func TestEarly(t *testing.T) {
	due := time.Unix(1000, 0)
	for _, tc := range []struct {
		received time.Duration
		slack    time.Duration
		want     bool
	}{
		{0, 0, false},
		{-time.Nanosecond, 0, true},
		{-time.Millisecond, time.Millisecond, false},
		{-time.Millisecond - 1, time.Millisecond, true},
		{time.Hour, 0, false},
	} {
		if got := Early(due, due.Add(tc.received), tc.slack); got != tc.want {
			t.Errorf("Early(received %v from due, slack %v) = %v, want %v", tc.received, tc.slack, got, tc.want)
		}
	}
}

// TestCounterConcurrent: producers and consumers at once lose no count.
func TestCounterConcurrent(t *testing.T) {
	const n, workers = 10000, 8
	c := New(n, 0)
	due := time.Unix(1000, 0)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				c.Acked(i, i+1)
				c.Delivered(uint64(i), due, due)
				c.Delivered(uint64(i), due, due)
			}
		})
	}
	wg.Wait()
	got := c.Tally()
	if got.Acked != n || got.Delivered != n || got.Deliveries != 2*n || got.Duplicates != n || got.Lost != 0 || c.Distinct() != n {
		t.Errorf("Tally = %+v, Distinct %d; want %d acked, delivered and duplicated, 0 lost", got, c.Distinct(), n)
	}
}

// TestRecordAndLost: Record reports a delivery's first and early as it
// counts them (a zero deliverAt is never early); Lost names each message
// acked and not delivered, as Tally counts them.
func TestRecordAndLost(t *testing.T) {
	due := time.Unix(1000, 0)
	c := New(4, 0)
	c.Acked(0, 3) // 3 is never acked
	for _, tc := range []struct {
		name         string
		i            uint64
		deliverAt    time.Time
		first, early bool
	}{
		{"first_on_time", 0, due, true, false},
		{"repeat_early", 0, due, false, true},
		{"first_early", 1, due, true, true},
		{"no_time", 3, time.Time{}, true, false},
		{"unknown", 9, due, false, false},
	} {
		received := due
		if tc.early {
			received = due.Add(-time.Millisecond)
		}
		if first, early := c.Record(tc.i, tc.deliverAt, received); first != tc.first || early != tc.early {
			t.Errorf("%s: Record = %v, %v; want %v, %v", tc.name, first, early, tc.first, tc.early)
		}
	}
	for i, want := range []bool{false, false, true, false, false} {
		if c.Lost(i) != want {
			t.Errorf("Lost(%d) = %v; want %v", i, !want, want)
		}
	}
	if got := c.Tally(); got.Lost != 1 || got.Early != 2 || got.Duplicates != 1 || got.Unknown != 1 {
		t.Errorf("Tally %+v; want 1 lost, 2 early, 1 duplicate, 1 unknown", got)
	}
}
