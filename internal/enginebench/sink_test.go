package enginebench

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/deliverycheck"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// delivery builds a delivery of message idx due at due.
func delivery(idx uint64, due time.Time) engine.Delivery {
	body := make([]byte, 16)
	binary.LittleEndian.PutUint64(body, idx)
	return engine.Delivery{ID: message.ID{DeliverAt: due.UnixMilli(), Seq: idx}, Message: &message.Message{Body: body}}
}

func TestTrackerTally(t *testing.T) {
	tr := newTracker(6, true)
	tr.markScheduled(0, 5, true) // message 5 is never scheduled
	tr.markScheduled(4, 5, false)
	past, future := time.Now().Add(-time.Second), time.Now().Add(time.Hour)
	batch := []engine.Delivery{
		delivery(0, past), delivery(1, past), delivery(1, past), // 1 twice
		delivery(2, future), // early
		delivery(5, past),   // never scheduled
		delivery(99, past),  // not a message of the run
		{ID: message.ID{DeliverAt: past.UnixMilli()}, Message: &message.Message{Body: []byte("short")}},
	}
	if err := tr.Deliver(context.Background(), topic, batch); err != nil {
		t.Fatal(err)
	}
	got := tr.tally()
	want := deliverycheck.Tally{Messages: 6, Acked: 4, Delivered: 4, Deliveries: 5, Duplicates: 1, Lost: 1, UnackedDelivered: 1, Unknown: 2, Early: 1}
	if got.Tally != want || got.first.IsZero() {
		t.Fatalf("tally %+v\nwant  %+v", got, want)
	}
	if tr.counts.Distinct() != 4 {
		t.Fatalf("distinct counter %d, want 4", tr.counts.Distinct())
	}
	lat := tr.latencies()
	if len(lat) != 6 || lat[0] > -3_590_000 || lat[len(lat)-1] < 1000 {
		t.Fatalf("latencies %v: want 7, from about -1h to at least 1s", lat)
	}
}

func TestTrackerCountsEveryRepeat(t *testing.T) {
	tr := newTracker(1, false)
	tr.markScheduled(0, 1, true)
	d := []engine.Delivery{delivery(0, time.Now())}
	for range 300 {
		tr.Deliver(context.Background(), topic, d)
	}
	if got := tr.tally(); got.Duplicates != 299 || got.Deliveries != 300 || got.Lost != 0 {
		t.Fatalf("tally %+v: want 299 duplicates, 300 deliveries", got)
	}
	if len(tr.latencies()) != 0 {
		t.Fatal("latencies kept without keepLat")
	}
}

func TestPercentile(t *testing.T) {
	xs := make([]float64, 100)
	for i := range xs {
		xs[i] = float64(i + 1)
	}
	for _, tc := range []struct {
		p    float64
		want float64
	}{{0.5, 50}, {0.99, 99}, {1, 100}, {0.001, 1}} {
		if got := percentile(xs, tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if percentile(nil, 0.5) != 0 {
		t.Error("percentile of nothing is not 0")
	}
}

func TestWaitDelivered(t *testing.T) {
	past := time.Now().Add(-time.Hour)
	t.Run("complete", func(t *testing.T) {
		tr := newTracker(2, false)
		tr.markScheduled(0, 2, true)
		go tr.Deliver(context.Background(), topic, []engine.Delivery{delivery(0, past), delivery(1, past)})
		if end := waitDelivered(context.Background(), tr, 2, time.Now().Add(time.Hour), time.Hour, nil); end != endComplete {
			t.Fatalf("end %q", end)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		ctx, cancel := context.WithTimeoutCause(context.Background(), 50*time.Millisecond, errTimeout)
		defer cancel()
		if end := waitDelivered(ctx, newTracker(1, false), 1, time.Now().Add(time.Hour), time.Hour, nil); end != endTimeout {
			t.Fatalf("end %q", end)
		}
	})
	t.Run("interrupted", func(t *testing.T) {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(errors.New("stop"))
		if end := waitDelivered(ctx, newTracker(1, false), 1, time.Now().Add(time.Hour), time.Hour, nil); end != endInterrupted {
			t.Fatalf("end %q", end)
		}
	})
	t.Run("no_progress", func(t *testing.T) {
		if end := waitDelivered(context.Background(), newTracker(1, false), 1, past, 50*time.Millisecond, nil); end != endNoProgress {
			t.Fatalf("end %q", end)
		}
	})
}
