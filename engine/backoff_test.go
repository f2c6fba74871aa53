package engine

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/internal/logtest"
)

// TestMaxSinkBackoff: the retry waits of a failing sink double from 50 ms
// and stop growing at Options.MaxSinkBackoff.
func TestMaxSinkBackoff(t *testing.T) {
	for _, tc := range []struct {
		name  string
		max   time.Duration
		fails int
		want  []time.Duration
	}{
		{"capped_at_100ms", 100 * time.Millisecond, 5, []time.Duration{50, 100, 100, 100, 100}},
		{"below_the_first_wait", 20 * time.Millisecond, 3, []time.Duration{20, 20, 20}},
		{"default_doubles", 0, 4, []time.Duration{50, 100, 200, 400}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &logtest.Durations{Key: "backoff"}
			sink := &recSink{fail: map[string]int{"t": tc.fails}}
			e := openEngine(t, t.TempDir(), sink, func(o *Options) {
				o.MaxSinkBackoff = tc.max
				o.Logger = slog.New(h)
			})
			defer e.Close()
			schedule(t, e, "t", 0, "x")
			deadline := time.Now().Add(10 * time.Second)
			for len(sink.snapshot()) == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("not delivered after %d failures in 10s; backoffs %v", tc.fails, h.Seen())
				}
				time.Sleep(10 * time.Millisecond) // polling for the delivery, not waiting for time
			}
			want := make([]time.Duration, len(tc.want))
			for i, w := range tc.want {
				want[i] = w * time.Millisecond
			}
			if got := h.Seen(); !slices.Equal(got, want) {
				t.Fatalf("backoffs %v; want %v", got, want)
			}
		})
	}
}

func TestMaxSinkBackoffBounds(t *testing.T) {
	for _, d := range []time.Duration{-time.Second, time.Millisecond, 2 * time.Hour} {
		_, err := Open(Options{Dir: t.TempDir(), Sink: &recSink{}, MaxSinkBackoff: d})
		if err == nil || !strings.Contains(err.Error(), "max sink backoff "+d.String()+": from 10ms to 1h0m0s") {
			t.Fatalf("MaxSinkBackoff %v: err %v; want one naming the range", d, err)
		}
	}
}
