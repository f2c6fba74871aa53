package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/sink/natsjs"
)

// Defaults for zero Options fields.
const (
	DefaultPartitions = 8
	DefaultLeaseTTL   = 10 * time.Second
	DefaultReplicas   = 3
	// offDuplicates is the intake streams' duplicate window while keys
	// are off (no intake publish then carries a Nats-Msg-Id).
	offDuplicates = 2 * time.Minute
	// MinLeaseTTL bounds Options.LeaseTTL from below.
	MinLeaseTTL = time.Second
	// DefaultCompactMargin and DefaultCompactInterval are the defaults
	// of Options.Compaction.Margin and Options.Compaction.Interval.
	DefaultCompactMargin   = 10000
	DefaultCompactInterval = time.Minute
	// DefaultStallChecksPerSecond is the default of
	// Options.StallChecksPerSecond: every partition of a node owning up
	// to 40 is checked at each idle pause of 2 s.
	DefaultStallChecksPerSecond = 20
)

// Options configure a Node. URL, NodeID, Advertise, DataDir and Sink are
// required. The settings of the local engines, the topic consumers and
// compaction are grouped by concern (Engine, Queue, Compaction).
type Options struct {
	// URL of the NATS servers, comma-separated.
	URL string
	// NodeID names this node in HG_OWNERS; unique in the cluster.
	NodeID string
	// Advertise is the base URL of this node's API for the other nodes
	// (http://127.0.0.1:7420).
	Advertise string
	// Partitions is the number of partitions when this node creates the
	// cluster; 0 takes the cluster's (DefaultPartitions for a new one).
	// A number different from the cluster's is an error.
	Partitions int
	// LeaseTTL is how long a partition's lease lives unrenewed; default
	// 10 s, at least MinLeaseTTL. Renewals run every LeaseTTL/3.
	LeaseTTL time.Duration
	// Replicas of every stream and bucket the node creates; default 3.
	Replicas int
	// DataDir holds the local engines, one directory per owned
	// partition, wiped when the partition is taken.
	DataDir string
	// MaxDelay bounds how far ahead a message may be due; it also sets
	// the intake streams' MaxAge (MaxDelay + 1 day). Default
	// engine.DefaultMaxDelay.
	MaxDelay time.Duration
	// Sink receives due messages with their cluster IDs (the NATS sink,
	// which uses the ID as Nats-Msg-Id). Required.
	Sink engine.Sink
	// AuthToken is sent with forwarded requests.
	AuthToken string
	// Now is the wall and monotonic clock; default time.Now.
	Now func() time.Time
	// NATSOptions are extra nats.Connect options.
	NATSOptions []nats.Option
	// Logger; default slog.Default().
	Logger *slog.Logger
	// IdempotencyWindow is how long a Schedule's idempotency key (a keyed
	// batch's keys, in order) names the first message, measured from
	// when JetStream stored it: it is the intake streams' duplicate
	// window, set on every intake stream when the node opens. Default
	// 0 turns keys off (nothing is deduplicated), as in engine.Options and
	// hourglass.Config. Else at least 100 ms and at most MaxDelay + 1 day
	// (the streams' MaxAge).
	IdempotencyWindow time.Duration
	// StallChecksPerSecond bounds how often this node's partitions ask
	// their intake stream whether their reader has stalled (see feed):
	// each partition asks after 2 s without a message, and a node owning
	// thousands of idle partitions would otherwise ask hundreds of times a
	// second. Checks over the budget are skipped, so a stalled reader is
	// then found later. Default DefaultStallChecksPerSecond, with a burst
	// of as many; negative turns the checks off.
	StallChecksPerSecond float64
	// Engine configures the local engines of the partitions.
	Engine EngineOptions
	// Queue configures the topic consumers this node serves.
	Queue QueueOptions
	// Compaction says when the owner of a partition compacts its streams.
	Compaction CompactionOptions

	hooks *testHooks // nil outside tests
}

// EngineOptions configure the local engine of each partition this node
// owns.
type EngineOptions struct {
	// SegmentDuration of the local engines; default the engine's.
	SegmentDuration time.Duration
	// Observer of the local engines' events, if set.
	Observer engine.Observer
}

// QueueOptions configure the topic consumers of the delivery stream
// (package jsqueue), which serve Receive, Ack and Nack.
type QueueOptions struct {
	// Stream and Prefix are where Options.Sink publishes: the delivery
	// stream, and the prefix of its subjects (a topic's messages are on
	// Prefix+topic). Defaults natsjs.DefaultStream and
	// natsjs.DefaultPrefix.
	Stream, Prefix string
	// Lease and MaxAttempts are those of the topic consumers this node
	// creates (jsqueue.Options); defaults queue.DefaultLease and
	// queue.DefaultMaxAttempts.
	Lease       time.Duration
	MaxAttempts int
	// MaxTopics bounds the topics this node serves consumers of;
	// default jsqueue.DefaultMaxTopics, -1 for no limit.
	MaxTopics int
}

// CompactionOptions say when the owner of a partition compacts its
// streams (compact.go).
type CompactionOptions struct {
	// Margin: the owner compacts when the messages it consumed from the
	// intake stream (since it took the partition, or above its last
	// compaction's snapshot point) exceed 2 × pending + Margin. Default
	// DefaultCompactMargin; negative turns compaction off (the streams
	// then keep everything for MaxAge).
	Margin int
	// Interval is the least time between two compactions of a
	// partition; default DefaultCompactInterval.
	Interval time.Duration
}

// testHooks let the tests hold compaction back and interleave work with it.
type testHooks struct {
	// allowCompact, if set, must answer true for a compaction to start.
	allowCompact func() bool
	// compactStage, if set, is called at each stage of a compaction
	// ("snapshot": the snapshot point is chosen, nothing is copied yet;
	// "copied": the copies are stored, nothing is purged yet); an error
	// ends the compaction there, as a crash would.
	compactStage func(p int, stage string) error
	// keepRecent, if set, replaces keepRecent (how long a compaction
	// keeps intake messages).
	keepRecent *time.Duration
	// capL0, if set, lowers a compaction's snapshot point.
	capL0 func(l0 uint64) uint64
	// feedIdle, if set, replaces feedIdleCheck.
	feedIdle time.Duration
	// stallFeed, if set, is asked about each intake message a partition's
	// reader gets; from the first it answers true for, that reader passes
	// nothing on, as a consumer that went silent would.
	stallFeed func(p int, seq uint64) bool
	// stallChecked, if set, is called after each stall check with whether
	// it found the reader stalled.
	stallChecked func(p int, stalled bool)
	// idle, if set, is called at each idle pause of a reader, whether or
	// not the budget let it check.
	idle func(p int)
}

// normalize fills in the defaults of o's zero fields and checks o; the
// error says which field is wrong and what is allowed.
func (o *Options) normalize() error {
	switch {
	case o.URL == "":
		return errors.New("cluster: no NATS URL: give nats://HOST:PORT[,...]")
	case o.NodeID == "":
		return errors.New("cluster: empty node ID")
	case o.Advertise == "":
		return errors.New("cluster: empty advertise URL")
	case o.DataDir == "":
		return errors.New("cluster: no data directory")
	case o.Sink == nil:
		return errors.New("cluster: no sink")
	case o.Partitions < 0 || o.Partitions > MaxPartitions:
		return fmt.Errorf("cluster: %d partitions: from 1 to %d", o.Partitions, MaxPartitions)
	}
	if o.LeaseTTL == 0 {
		o.LeaseTTL = DefaultLeaseTTL
	}
	if o.LeaseTTL < MinLeaseTTL {
		return fmt.Errorf("cluster: lease TTL %v: at least %v", o.LeaseTTL, MinLeaseTTL)
	}
	if o.Replicas == 0 {
		o.Replicas = DefaultReplicas
	}
	if o.Replicas < 1 || o.Replicas > 5 {
		return fmt.Errorf("cluster: %d replicas: from 1 to 5 (JetStream's limit)", o.Replicas)
	}
	if o.MaxDelay == 0 {
		o.MaxDelay = engine.DefaultMaxDelay
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Queue.Stream == "" {
		o.Queue.Stream = natsjs.DefaultStream
	}
	if o.Queue.Prefix == "" {
		o.Queue.Prefix = natsjs.DefaultPrefix
	}
	if o.Compaction.Margin == 0 {
		o.Compaction.Margin = DefaultCompactMargin
	}
	if o.Compaction.Interval == 0 {
		o.Compaction.Interval = DefaultCompactInterval
	}
	if o.StallChecksPerSecond == 0 {
		o.StallChecksPerSecond = DefaultStallChecksPerSecond
	}
	if w := o.IdempotencyWindow; w != 0 && (w < 100*time.Millisecond || w > o.MaxDelay+24*time.Hour) {
		return fmt.Errorf("cluster: idempotency window %v: 0 (keys off) or from 100ms (JetStream's least duplicate window) to the max delay + 1 day, %v (the intake streams' MaxAge)", w, o.MaxDelay+24*time.Hour)
	}
	if o.Compaction.Interval < 0 {
		return fmt.Errorf("cluster: compaction interval %v: want a positive duration (0 takes %v)", o.Compaction.Interval, DefaultCompactInterval)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}
