package serverbench

import (
	"strings"
	"testing"
	"time"
)

func TestSpreadOrderIsAPermutationOverTheRange(t *testing.T) {
	from := time.Date(2026, 12, 2, 21, 0, 0, 0, time.UTC)
	for _, n := range []int{1, 2, 7, 1000, 1024, 9973, 10_000} {
		spread := 30 * 24 * time.Hour
		o := newSpreadOrder(n, from, spread)
		seen := make([]bool, n)
		for i := range uint64(n) {
			k := o.k(i)
			if k >= uint64(n) || seen[k] {
				t.Fatalf("n %d: k(%d) = %d, out of range or seen before (multiplier %d)", n, i, k, o.mult)
			}
			seen[k] = true
			if d := o.due(i); d.Before(from) || !d.Before(from.Add(spread)) {
				t.Fatalf("n %d: message %d due %v, outside [%v, %v)", n, i, d, from, from.Add(spread))
			}
		}
		if n >= 1000 && (o.k(1) < uint64(n)/10 || o.k(1) > uint64(n)*9/10) {
			t.Errorf("n %d: k(1) = %d; want consecutive messages far apart in due order", n, o.k(1))
		}
		for _, w := range []time.Duration{0, time.Millisecond, time.Hour, 24 * time.Hour, spread, 2 * spread} {
			var want uint64
			for k := range uint64(n) {
				if o.offset(k) < w {
					want++
				}
			}
			if got := o.within(w); got != want {
				t.Errorf("n %d: within(%v) = %d, want %d", n, w, got, want)
			}
		}
	}
}

func TestNormalizeBacklogAndDrain(t *testing.T) {
	from := time.Now().Add(time.Hour)
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"spread_on_batch", Config{Spread: time.Hour}, "--spread and --due-from apply to --scenario backlog and drain only"},
		{"due_from_on_lateness", Config{Scenario: Lateness, DueFrom: from}, "--spread and --due-from apply"},
		{"keys_on_lateness", Config{Scenario: Lateness, Keys: true}, "--keys applies to --scenario backlog only"},
		{"keys_on_drain", Config{Scenario: Drain, Messages: 10, Topic: "t", DueFrom: from, Keys: true}, "--keys applies to --scenario backlog only"},
		{"short_spread", Config{Scenario: Backlog, Spread: time.Millisecond}, "--spread 1ms is out of range; it must be from 1s"},
		{"drain_without_messages", Config{Scenario: Drain, Topic: "t", DueFrom: from}, "drain needs the backlog run's --messages"},
		{"drain_without_topic_and_from", Config{Scenario: Drain, Messages: 10}, "give its --topic and --due-from"},
		{"drain_without_from", Config{Scenario: Drain, Messages: 10, Topic: "t"}, "give its --due-from"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.BodySize, cfg.Batch = DefaultBodySize, DefaultBatch
			err := cfg.normalize()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}

	b := Config{Scenario: Backlog, BodySize: 64, Batch: 1000}
	if err := b.normalize(); err != nil {
		t.Fatal(err)
	}
	if b.Messages != 10_000_000 || b.Spread != DefaultSpread || b.Timeout != DefaultBacklogTimeout || !b.DueFrom.IsZero() {
		t.Errorf("backlog defaults: messages %d, spread %v, timeout %v, due from %v", b.Messages, b.Spread, b.Timeout, b.DueFrom)
	}
	d := Config{Scenario: Drain, BodySize: 64, Batch: 1000, Messages: 10, Topic: "t", DueFrom: from}
	if err := d.normalize(); err != nil {
		t.Fatal(err)
	}
	if d.Window != DefaultDrainWindow || d.Timeout < time.Until(from.Add(time.Hour))+d.Grace {
		t.Errorf("drain defaults: window %v, timeout %v; want 1h and past the window's end plus the grace", d.Window, d.Timeout)
	}
}
