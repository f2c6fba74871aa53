package enginebench

import (
	"strings"
	"testing"
	"time"
)

// defaults returns a valid configuration: the command's defaults.
func defaults() Config {
	return Config{
		Scenario:        DefaultScenario,
		Messages:        DefaultMessages,
		Window:          DefaultWindow,
		BodySize:        DefaultBodySize,
		Fsync:           DefaultFsync,
		SegmentDuration: DefaultSegmentDuration,
		Producers:       DefaultProducers,
		Batch:           DefaultBatch,
		Timeout:         DefaultTimeout,
		Grace:           DefaultGrace,
	}
}

func TestValidate(t *testing.T) {
	for _, s := range Scenarios {
		c := defaults()
		c.Scenario = s
		if err := c.Validate(); err != nil {
			t.Errorf("defaults with --scenario %s: %v", s, err)
		}
	}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string // in the error
	}{
		{"unknown_scenario", func(c *Config) { c.Scenario = "steady" }, `--scenario "steady" is unknown; use one of uniform, hot-second, far-future, recovery`},
		{"no_messages", func(c *Config) { c.Messages = 0 }, "--messages 0 is out of range; it must be from 1 to 100000000"},
		{"too_many_messages", func(c *Config) { c.Messages = MaxMessages + 1 }, "--messages 100000001 is out of range"},
		{"zero_window", func(c *Config) { c.Window = 0 }, "--window 0s is out of range; it must be from 1ms to 24h0m0s"},
		{"long_window", func(c *Config) { c.Window = 25 * time.Hour }, "--window 25h0m0s is out of range"},
		{"small_body", func(c *Config) { c.BodySize = 7 }, "--body-size 7 is out of range; it must be from 8"},
		{"big_body", func(c *Config) { c.BodySize = MaxBodySize + 1 }, "--body-size 1048577 is out of range"},
		{"bad_fsync", func(c *Config) { c.Fsync = "sometimes" }, `--fsync "sometimes" is unknown; use always, interval or none`},
		{"fractional_segment", func(c *Config) { c.SegmentDuration = 1500 * time.Millisecond }, "--segment-duration 1.5s is not allowed; it must be a whole number of seconds from 1s to 24h0m0s"},
		{"long_segment", func(c *Config) { c.SegmentDuration = 48 * time.Hour }, "--segment-duration 48h0m0s is not allowed"},
		{"no_producers", func(c *Config) { c.Producers = 0 }, "--producers 0 is out of range; it must be from 1 to 1024"},
		{"no_batch", func(c *Config) { c.Batch = 0 }, "--batch 0 is out of range; it must be from 1 to 100000"},
		{"batch_too_big", func(c *Config) { c.Batch, c.BodySize = 100_000, 1000 }, "is 100000000 bytes per call; at most 67108864"},
		{"zero_timeout", func(c *Config) { c.Timeout = 0 }, "--timeout 0s must be positive"},
		{"negative_grace", func(c *Config) { c.Grace = -time.Second }, "--grace -1s must be positive"},
		{"timeout_before_due", func(c *Config) { c.Timeout = 5 * time.Second }, "--timeout 5s ends before the last message of --scenario uniform is due (13s after scheduling starts); raise --timeout or lower --window"},
		{"timeout_before_hot_second", func(c *Config) { c.Scenario, c.Timeout = HotSecond, 2*time.Second }, "raise --timeout or lower --messages"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := defaults()
			tc.mod(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestDueSpan(t *testing.T) {
	for _, tc := range []struct {
		scenario       string
		messages       int
		offset, spread time.Duration
	}{
		{Uniform, 1_000_000, 3 * time.Second, DefaultWindow},
		{HotSecond, 1_000_000, 4 * time.Second, time.Second},
		{FarFuture, 1_000_000, 24 * time.Hour, 29 * 24 * time.Hour},
		{Recovery, 1_000_000, 12 * time.Second, 5 * time.Second},
		{Recovery, 10_000_000, 30 * time.Second, 5 * time.Second},
	} {
		c := defaults()
		c.Scenario, c.Messages = tc.scenario, tc.messages
		if o, s := c.dueSpan(); o != tc.offset || s != tc.spread {
			t.Errorf("%s with %d messages: due t0+%v for %v, want t0+%v for %v", tc.scenario, tc.messages, o, s, tc.offset, tc.spread)
		}
	}
}

func TestCheckRecoveryBuckets(t *testing.T) {
	minute := time.Unix(1_700_000_040, 0) // a whole minute, UTC
	for _, tc := range []struct {
		name    string
		segment time.Duration
		now     time.Time
		ok      bool
	}{
		{"hour_any_time", time.Hour, minute.Add(59 * time.Second), true},
		{"minute_current_bucket", time.Minute, minute, true},                              // due by +17s, same bucket
		{"minute_next_bucket_preloaded", time.Minute, minute.Add(50 * time.Second), true}, // next bucket loads at +50s
		{"minute_next_bucket_not_loaded", time.Minute, minute.Add(45 * time.Second), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := defaults()
			c.Scenario, c.SegmentDuration = Recovery, tc.segment
			err := c.checkRecoveryBuckets(tc.now)
			if tc.ok && err != nil {
				t.Fatal(err)
			}
			if !tc.ok && (err == nil || !strings.Contains(err.Error(), "use a --segment-duration of an hour or more")) {
				t.Fatalf("got %v, want a refusal", err)
			}
		})
	}
}
