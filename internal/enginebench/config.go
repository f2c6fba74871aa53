package enginebench

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// Scenario names, as given to --scenario.
const (
	Uniform     = "uniform"
	HotSecond   = "hot-second"
	FarFuture   = "far-future"
	Recovery    = "recovery"
	idxBodySize = 8 // the message index, little-endian, opens every body
)

// Scenarios lists the scenario names in the order the help shows them.
var Scenarios = []string{Uniform, HotSecond, FarFuture, Recovery}

// Defaults for the flags of `hourglass-bench engine`.
const (
	DefaultScenario        = Uniform
	DefaultMessages        = 1_000_000
	DefaultWindow          = 10 * time.Second
	DefaultBodySize        = 128
	DefaultFsync           = "interval"
	DefaultSegmentDuration = time.Hour
	DefaultProducers       = 4
	DefaultBatch           = 1000
	DefaultTimeout         = 5 * time.Minute
	DefaultGrace           = 30 * time.Second
)

// Limits a Config must stay within.
const (
	MaxMessages   = 100_000_000 // the tracker keeps 1 byte (and 8 for lateness) per message
	MaxWindow     = 24 * time.Hour
	MaxBodySize   = 1 << 20
	MaxProducers  = 1024
	MaxBatch      = 100_000
	MaxBatchBytes = 64 << 20 // one producer's batch of bodies
)

// Timing of the scenarios, relative to t0, the moment scheduling starts.
const (
	uniformStart     = time.Second          // uniform: due t0 + 1s + N/500000 s + U[0, window)
	hotSecondBase    = 2 * time.Second      // hot-second: due in the whole second at t0 + 2s + N/500000 s
	hotSecondRate    = 500_000              // messages per second the hot-second offset allows for scheduling
	farFutureMin     = 24 * time.Hour       // far-future: due t0 + U[1d, 30d)
	farFutureMax     = 30 * 24 * time.Hour  //
	recoveryBase     = 10 * time.Second     // recovery: due t0 + S + U[0, 5s), S = 10s + 2s per million
	recoveryPerMsg   = 2 * time.Microsecond // 2 s per million messages
	recoverySpread   = 5 * time.Second      //
	engineCloseLimit = time.Minute          // how long Close may take before the run reports it as stuck
)

// Config is one benchmark run. The zero value of a field is not its
// default: the command fills in the defaults above.
type Config struct {
	// Scenario is one of Scenarios.
	Scenario string
	// Messages is how many messages to schedule, 1 to MaxMessages.
	Messages int
	// Window is the span the uniform scenario spreads due times over.
	Window time.Duration
	// BodySize is each message body in bytes; at least 8, since the body
	// opens with the message index (duplicates are detected by it).
	BodySize int
	// Fsync is the commitlog policy: always, interval or none.
	Fsync string
	// Dir is the data directory. Empty means a fresh temporary directory,
	// removed afterwards; otherwise it must be empty or absent, and is
	// kept.
	Dir string
	// SegmentDuration is the engine's schedule bucket length.
	SegmentDuration time.Duration
	// Producers is how many goroutines call ScheduleBatch concurrently.
	Producers int
	// Batch is how many messages each ScheduleBatch call carries.
	Batch int
	// Timeout bounds the whole run; after it the run reports what it saw,
	// counting what was scheduled and not delivered as lost.
	Timeout time.Duration
	// Grace is how long to keep waiting once the last message is due and
	// no delivery has arrived; the rest then counts as lost.
	Grace time.Duration
	// Progress, if not nil, receives progress bars (a terminal).
	Progress io.Writer
	// Logger receives the engine's log; default slog.Default().
	Logger *slog.Logger

	// Overrides of the scenario timing, for tests: the due offset after
	// t0 and the spread of hot-second and recovery. Zero means the
	// scenario's own.
	offset, spread time.Duration
}

// Validate checks every field and says what is wrong and what is allowed.
func (c *Config) Validate() error {
	if !isScenario(c.Scenario) {
		return fmt.Errorf("--scenario %q is unknown; use one of %s", c.Scenario, strings.Join(Scenarios, ", "))
	}
	if c.Messages < 1 || c.Messages > MaxMessages {
		return fmt.Errorf("--messages %d is out of range; it must be from 1 to %d", c.Messages, MaxMessages)
	}
	if c.Window < time.Millisecond || c.Window > MaxWindow {
		return fmt.Errorf("--window %v is out of range; it must be from 1ms to %v", c.Window, MaxWindow)
	}
	if c.BodySize < idxBodySize || c.BodySize > MaxBodySize {
		return fmt.Errorf("--body-size %d is out of range; it must be from %d (the body carries the message index) to %d bytes", c.BodySize, idxBodySize, MaxBodySize)
	}
	if _, err := commitlog.ParseSyncPolicy(c.Fsync); err != nil {
		return fmt.Errorf("--fsync %q is unknown; use always, interval or none", c.Fsync)
	}
	if err := schedulelog.ValidateDuration(c.SegmentDuration); err != nil {
		return fmt.Errorf("--segment-duration %v is not allowed; it must be a whole number of seconds from %v to %v", c.SegmentDuration, schedulelog.MinDuration, schedulelog.MaxDuration)
	}
	if c.Producers < 1 || c.Producers > MaxProducers {
		return fmt.Errorf("--producers %d is out of range; it must be from 1 to %d", c.Producers, MaxProducers)
	}
	if c.Batch < 1 || c.Batch > MaxBatch {
		return fmt.Errorf("--batch %d is out of range; it must be from 1 to %d", c.Batch, MaxBatch)
	}
	if int64(c.Batch)*int64(c.BodySize) > MaxBatchBytes {
		return fmt.Errorf("--batch %d × --body-size %d is %d bytes per call; at most %d (64 MiB): lower one of them", c.Batch, c.BodySize, c.Batch*c.BodySize, MaxBatchBytes)
	}
	if c.Timeout <= 0 {
		return fmt.Errorf("--timeout %v must be positive", c.Timeout)
	}
	if c.Grace <= 0 {
		return fmt.Errorf("--grace %v must be positive", c.Grace)
	}
	if c.Scenario != FarFuture {
		if last := c.lastDue(); last >= c.Timeout {
			lower := "--messages"
			if c.Scenario == Uniform {
				lower = "--window"
			}
			return fmt.Errorf("--timeout %v ends before the last message of --scenario %s is due (%v after scheduling starts); raise --timeout or lower %s",
				c.Timeout, c.Scenario, last, lower)
		}
	}
	return nil
}

func isScenario(s string) bool {
	for _, n := range Scenarios {
		if s == n {
			return true
		}
	}
	return false
}

// dueSpan returns the scenario's due times relative to t0: from offset to
// offset+spread. Hot-second's start is also aligned to a whole second by
// the scheduler.
func (c *Config) dueSpan() (offset, spread time.Duration) {
	switch c.Scenario {
	case Uniform:
		// Start the window once scheduling is done (at the measured
		// rate of about a million a second, with margin), so that the
		// lateness measured is the engine's firing, not a CPU shared
		// with the producers.
		offset, spread = uniformStart+time.Duration(c.Messages)*time.Second/hotSecondRate, c.Window
	case HotSecond:
		offset, spread = hotSecondBase+time.Duration(c.Messages)*time.Second/hotSecondRate, time.Second
	case FarFuture:
		offset, spread = farFutureMin, farFutureMax-farFutureMin
	case Recovery:
		offset, spread = recoveryBase+time.Duration(c.Messages)*recoveryPerMsg, recoverySpread
	}
	if c.offset > 0 {
		offset = c.offset
	}
	if c.spread > 0 && c.Scenario != Uniform {
		spread = c.spread
	}
	return offset, spread
}

// lastDue is when, after t0, the last message is due.
func (c *Config) lastDue() time.Duration {
	o, s := c.dueSpan()
	return o + s
}

// preloadLead is the engine's preload lead for the segment duration, as
// engine.Options documents its default.
func (c *Config) preloadLead() time.Duration {
	return min(engine.DefaultPreloadLead, c.SegmentDuration/6)
}

func (c *Config) syncPolicy() commitlog.SyncPolicy {
	p, _ := commitlog.ParseSyncPolicy(c.Fsync) // validated
	return p
}
