package queue

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// stepClock is a wall clock and a monotonic clock that tests move apart:
// the wall clock steps (an NTP correction, an operator's date), the
// monotonic clock only advances.
type stepClock struct {
	wall atomic.Int64 // offset of the wall clock from time.Now, ns
	mono atomic.Int64 // nanoseconds since origin
}

func (c *stepClock) now() time.Time                { return time.Now().Add(time.Duration(c.wall.Load())) }
func (c *stepClock) since(time.Time) time.Duration { return time.Duration(c.mono.Load()) }
func (c *stepClock) opts(o *Options)               { o.Now, o.since = c.now, c.since }
func (c *stepClock) step(wall, mono time.Duration) { c.wall.Add(int64(wall)); c.mono.Add(int64(mono)) }

// TestLeasesOnMonotonicClock: a step of the wall clock neither expires
// leases nor prolongs them; only monotonic time does. LeaseUntil shows
// the wall-clock time the lease ends.
func TestLeasesOnMonotonicClock(t *testing.T) {
	for _, tc := range []struct {
		name        string
		wall, mono  time.Duration // the step after Receive
		wantExpired bool
	}{
		{"wall_forward_day", 24 * time.Hour, 0, false},
		{"wall_forward_past_lease", 31 * time.Second, 0, false},
		{"wall_backward_hour", -time.Hour, 0, false},
		{"mono_past_lease", 0, 31 * time.Second, true},
		{"wall_back_mono_past_lease", -time.Hour, 31 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c stepClock
			q := openQ(t, t.TempDir(), c.opts)
			defer q.Close()
			ids := deliver(t, q, "t", "a", "b")
			before := c.now()
			ms := recv(t, q, "t", 2, 30*time.Second)
			if len(ms) != 2 {
				t.Fatalf("received %d, want 2", len(ms))
			}
			if d := ms[0].LeaseUntil.Sub(before); d < 30*time.Second || d > 31*time.Second {
				t.Fatalf("LeaseUntil %v is %v after Receive, want the 30 s lease on the wall clock", ms[0].LeaseUntil, d)
			}
			c.step(tc.wall, tc.mono)
			tp := topicOf(t, q, "t")
			tp.expire() // as the lease timer would
			err := q.Ack(context.Background(), "t", ids[0])
			rerr := q.AckReceipt(context.Background(), "t", ms[1].Receipt)
			if tc.wantExpired {
				if !errors.Is(err, ErrNotLeased) || !errors.Is(rerr, ErrNotLeased) {
					t.Fatalf("Acks after the lease ran out: %v, %v; want ErrNotLeased", err, rerr)
				}
				if st := q.Stats()["t"]; st.Expired != 2 || st.Backlog != 2 {
					t.Fatalf("stats %+v: want both expired and receivable again", st)
				}
				return
			}
			if err != nil || rerr != nil {
				t.Fatalf("Acks after a wall-clock step of %v: %v, %v; want both leases still held", tc.wall, err, rerr)
			}
			if st := q.Stats()["t"]; st.Expired != 0 || st.Acked != 2 {
				t.Fatalf("stats %+v: want no expiry, two acks", st)
			}
		})
	}
}
