package crashtest

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Config is one harness run. Zero fields take the defaults below.
type Config struct {
	Cycles          int           // kill-restart cycles (default 12)
	Duration        time.Duration // overall bound, drain included (default 10m)
	Seed            uint64        // random choices derive from it (default 1)
	SegmentDuration time.Duration // server --segment-duration (default 2s)
	Fsync           string        // server --fsync: always, interval, none (default always)
	CorruptTail     bool          // tear active files' tails after each SIGKILL
	// Damage damages the data directory after every stop (a flipped byte
	// in a record a valid record follows, or a deleted file; one of
	// DamageKinds per restart, seeded) and judges each restart: a refusal
	// naming the file (then hourglass repair), or a start that loses and
	// replays nothing the damage does not allow (damagecheck.go).
	Damage       bool
	Producers    int // default 2
	Consumers    int // default 2
	Topics       int // default 2
	OpsPerSecond int // per producer (default 40)
	// PoisonPercent is the share of messages, in percent, that consumers
	// fail on every delivery so that each must end on "<topic>.dlq"
	// (default 5; negative: none; from 0 to 50).
	PoisonPercent int
	// Cluster runs against a cluster instead of one server: a 3-node NATS
	// cluster (internal/natscluster) and 3 hourglass nodes (serve
	// --cluster); cycles SIGKILL one hourglass or one NATS node, and every
	// call and stream goes round-robin over the live nodes. The workload
	// is one node's (clusterOperations: every operation).
	Cluster bool
	// LeaseTTL is serve --lease-ttl with Cluster (default 3s).
	LeaseTTL time.Duration
	// Partitions is serve --partitions with Cluster (default 8).
	Partitions int
	Keep       bool // keep the work directory even on success
	// Embedded runs, in place of the hourglass binary, a program that
	// embeds the node as a library (internal/crashtest/embednode:
	// hourglass.Open, Serve, Shutdown, Close), killed and restarted the
	// same way. Not with Damage (repair is the binary's command) or
	// Cluster.
	Embedded bool
	// Bin is a built hourglass binary (with Embedded, an embednode);
	// empty: build it from the module containing the working directory.
	Bin string
	// WorkDir holds the data directory and server.log; empty: a new
	// temporary directory.
	WorkDir string
	// DrainGrace is how long the drain may go on after the last delivery
	// time (default 20s); the overall Duration bounds it too.
	DrainGrace time.Duration
	// Allow lists violation kinds that are reported but do not fail the
	// run (a known, open server bug), e.g. VAfterAck.
	Allow []string
	// Progress receives one line per cycle (nil: none).
	Progress io.Writer
}

// Defaults.
const (
	DefaultCycles          = 12
	DefaultDuration        = 10 * time.Minute
	DefaultSeed            = 1
	DefaultSegmentDuration = 2 * time.Second
	DefaultFsync           = "always"
	DefaultProducers       = 2
	DefaultConsumers       = 2
	DefaultTopics          = 2
	DefaultOpsPerSecond    = 40
	DefaultDrainGrace      = 20 * time.Second
	DefaultPoisonPercent   = 5
)

func (c *Config) fill() error {
	c.Cycles = cmp.Or(c.Cycles, DefaultCycles)
	c.Duration = cmp.Or(c.Duration, DefaultDuration)
	c.Seed = cmp.Or(c.Seed, DefaultSeed)
	c.SegmentDuration = cmp.Or(c.SegmentDuration, DefaultSegmentDuration)
	c.Fsync = cmp.Or(c.Fsync, DefaultFsync)
	c.Producers = cmp.Or(c.Producers, DefaultProducers)
	c.Consumers = cmp.Or(c.Consumers, DefaultConsumers)
	c.Topics = cmp.Or(c.Topics, DefaultTopics)
	c.OpsPerSecond = cmp.Or(c.OpsPerSecond, DefaultOpsPerSecond)
	c.DrainGrace = cmp.Or(c.DrainGrace, DefaultDrainGrace)
	c.PoisonPercent = cmp.Or(c.PoisonPercent, DefaultPoisonPercent)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, DefaultLeaseTTL)
	c.Partitions = cmp.Or(c.Partitions, DefaultPartitions)
	if c.Damage && c.Cluster {
		return errors.New("--damage cannot run with --cluster: a cluster's durable state is in JetStream, whose files the harness does not damage")
	}
	if c.Embedded && (c.Damage || c.Cluster) {
		return errors.New("--node embedded cannot run with --damage or --cluster: repair and cluster mode are the hourglass binary's")
	}
	if c.Damage && c.CorruptTail {
		return errors.New("--damage cannot run with --corrupt-tail: a loss must be attributable to one of them")
	}
	if c.Cluster {
		switch {
		case c.CorruptTail:
			return errors.New("--corrupt-tail cannot run with --cluster: a cluster's durable state is in JetStream, whose files the harness does not tear")
		case c.LeaseTTL < time.Second || c.LeaseTTL > time.Minute:
			return fmt.Errorf("--lease-ttl %v: from 1s (serve's minimum) to 1m (each cycle waits for a takeover)", c.LeaseTTL)
		case c.Partitions < 1 || c.Partitions > 64:
			return fmt.Errorf("--partitions %d: from 1 to 64", c.Partitions)
		}
	}
	switch {
	case c.Cycles < 1 || c.Cycles > 100_000:
		return fmt.Errorf("--cycles %d: from 1 to 100000", c.Cycles)
	case c.Duration < 10*time.Second:
		return fmt.Errorf("--duration %v: at least 10s (it bounds the drain too)", c.Duration)
	case c.SegmentDuration < time.Second || c.SegmentDuration > time.Hour || c.SegmentDuration%time.Second != 0:
		return fmt.Errorf("--segment-duration %v: whole seconds from 1s to 1h (the server allows up to 24h; the harness waits for several)", c.SegmentDuration)
	case c.Fsync != "always" && c.Fsync != "interval" && c.Fsync != "none":
		return fmt.Errorf("--fsync %q: always, interval or none", c.Fsync)
	case c.Producers < 1 || c.Producers > 64:
		return fmt.Errorf("--producers %d: from 1 to 64", c.Producers)
	case c.Consumers < 1 || c.Consumers > 64:
		return fmt.Errorf("--consumers %d: from 1 to 64", c.Consumers)
	case c.Topics < 1 || c.Topics > 16:
		return fmt.Errorf("topics %d: from 1 to 16", c.Topics)
	case c.OpsPerSecond < 1 || c.OpsPerSecond > 1000:
		return fmt.Errorf("ops per second %d: from 1 to 1000", c.OpsPerSecond)
	case c.PoisonPercent > 50:
		return fmt.Errorf("--poison-percent %d: from 0 to 50 (each poison message costs %d deliveries)", c.PoisonPercent, MaxAttempts+1)
	}
	for _, k := range c.Allow {
		if !slices.Contains(Kinds, k) {
			return fmt.Errorf("--allow %q: not a violation kind; one of %s", k, strings.Join(Kinds, ", "))
		}
	}
	return nil
}

// Summary is what a run reports (the table, or --json).
type Summary struct {
	Seed            uint64         `json:"seed"`
	MaxAttempts     int            `json:"max_attempts"`   // the server's --max-attempts
	PoisonPercent   int            `json:"poison_percent"` // share of poison messages (0: none)
	Fsync           string         `json:"fsync"`
	SegmentDuration string         `json:"segment_duration"`
	CorruptTail     bool           `json:"corrupt_tail"`
	Cycles          int            `json:"cycles"`
	Kills           int            `json:"kills"`        // SIGKILL
	Terms           int            `json:"sigterms"`     // SIGTERM
	KillMoments     map[string]int `json:"kill_moments"` // what the kill aimed at
	Counts          Counts         `json:"counts"`
	// Ops counts the workload's calls by operation and protocol
	// ("schedule/grpc", "receive/connect", "ack/stream": an ack sent in a
	// Consume settle, "stream-request/stream": a request of a
	// ScheduleStream burst).
	Ops map[string]int `json:"ops"`
	// Operations names the calls operating what the server holds that
	// the workload made (opReschedule, ...): all on one node, fewer in a
	// cluster.
	Operations     []string       `json:"operations"`
	RecoveryMedian float64        `json:"recovery_median_ms"` // start to /readyz 200, per restart
	RecoveryMax    float64        `json:"recovery_max_ms"`
	Restarts       int            `json:"restarts"`
	SkewMs         float64        `json:"skew_ms"`       // largest |server - harness| measured
	SkewBoundMs    float64        `json:"skew_bound_ms"` // skew plus half the round trip: the early check's allowance
	Cuts           int            `json:"cuts"`
	CutBytes       int64          `json:"cut_bytes"`
	CutsByMode     map[string]int `json:"cuts_by_mode"`
	DrainMs        float64        `json:"drain_ms"`
	DrainComplete  bool           `json:"drain_complete"`
	WallSeconds    float64        `json:"wall_seconds"`
	Violations     []Violation    `json:"violations"` // the first 50
	ViolationCount int            `json:"violation_count"`
	// ViolationsByKind counts every violation by kind (allowed ones too).
	ViolationsByKind map[string]int `json:"violations_by_kind,omitempty"`
	Failed           bool           `json:"failed"`
	Allowed          []string       `json:"allowed_kinds,omitempty"`
	WorkDir          string         `json:"work_dir,omitempty"` // kept: data directory and server.log
	// Cluster is set by a --cluster run.
	Cluster *ClusterSummary `json:"cluster,omitempty"`
	// Damage is set by a --damage run.
	Damage *DamageSummary `json:"damage,omitempty"`
}

// errRestart ends a run whose server did not come back.
var errRestart = errors.New("crashtest: the server did not restart")
