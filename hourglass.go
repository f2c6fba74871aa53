// Package hourglass is an embeddable Hourglass node: a durable
// delayed-message server that keeps every message on disk and delivers it
// when due, never early.
//
// Open assembles what `hourglass serve` runs from a Config: the engine
// (commitlog → reput → schedule segments → wheel → dispatch log, package
// engine), the built-in queue (package queue) or another sink, and the API
// (package server); in cluster mode a cluster node (package cluster)
// instead of the local engine and queue. It owns the couplings between
// them, so that an embedding program cannot get them wrong: the queue
// reschedules Nacks through the engine, the engine keeps no more messages
// in flight to the queue than the queue can recognize again after a crash,
// a webhook sink's dead letters go to the queue.
//
//	cfg := hourglass.DefaultConfig()
//	cfg.DataDir = "/var/lib/hourglass"
//	node, err := hourglass.Open(ctx, cfg)
//	if err != nil { ... }
//	defer node.Close()
//	ln, _ := net.Listen("tcp", "127.0.0.1:7420")
//	go node.Serve(ln)          // gRPC, Connect, gRPC-Web, /healthz, /readyz, /metrics
//	<-node.Ready()             // recovery done
//
// The data path and its invariants are in docs/DESIGN.md.
package hourglass

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/hourglassmq/hourglass/cluster"
	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/internal/units"
	"github.com/hourglassmq/hourglass/queue"
	"github.com/hourglassmq/hourglass/server"
	"github.com/hourglassmq/hourglass/sink/webhook"
)

// Defaults of Config.
const (
	DefaultSegmentDuration   = time.Hour
	DefaultMaxDelay          = engine.DefaultMaxDelay
	DefaultMaxBody           = server.DefaultMaxBody
	DefaultHandoffLead       = 20 * time.Millisecond
	DefaultIdempotencyWindow = 10 * time.Minute
	DefaultMaxAttempts       = queue.DefaultMaxAttempts
	DefaultLease             = queue.DefaultLease
	DefaultMaxTopics         = queue.DefaultMaxTopics
	DefaultTopicIdleTimeout  = queue.DefaultIdleTopic
	DefaultWebhookTimeout    = 10 * time.Second
	DefaultNATSSubjectPrefix = "hourglass."
	DefaultNATSStream        = "HOURGLASS"
	// QueueSinkBatch is the engine's SinkBatch when due messages go to the
	// built-in queue: in a burst (a hot second) each queue append and its
	// fsync carries up to this many messages. A quarter of the in-flight
	// cap (queue.DefaultDedupWindow), so that the batch being appended, the
	// one whose done-records are being written and the next ones fit in
	// flight together.
	QueueSinkBatch = 4096
)

// Sinks: where due messages go (Config.Sink).
const (
	SinkQueue   = "queue"   // the built-in queue: consumers Receive, Ack, Nack
	SinkWebhook = "webhook" // an HTTP POST per message (Config.Webhooks)
	SinkNATS    = "nats"    // publish to NATS JetStream (Config.NATSURL)
)

// Config configures a Node; `hourglass serve` binds its flags to it.
// Start from DefaultConfig. A zero means the same as on the command line:
// zero where zero is a value (HandoffLead: none; IdempotencyWindow: keys
// off), and the field's default where zero would not be valid (a zero
// SegmentDuration, MaxBody, MaxAttempts...). Open says what is wrong with a
// field and what is allowed.
type Config struct {
	// DataDir holds the messages; created if missing, locked while the
	// node runs. Required.
	DataDir string

	// SegmentDuration is the length of a schedule bucket (one file each):
	// whole seconds from 1s to 24h; default 1h. Existing buckets keep
	// theirs.
	SegmentDuration time.Duration
	// PreloadLead is how long before a bucket starts it is loaded into
	// memory; shorter than SegmentDuration; default 10m, or a sixth of
	// SegmentDuration when that is under 1h.
	PreloadLead time.Duration
	// Fsync is the durability policy; default commitlog.SyncAlways (an
	// answer waits for the fsync that covers it).
	Fsync commitlog.SyncPolicy
	// MaxDelay refuses messages due further ahead; default 10 years.
	MaxDelay time.Duration
	// MaxBody bounds a message body in bytes; default 1 MiB, at most
	// server.MaxBodyLimit.
	MaxBody int
	// DelayLevels are the RocketMQ-style delay levels 1, 2, ...; default
	// units.DefaultDelayLevels.
	DelayLevels []time.Duration
	// HandoffLead hands due messages to the queue this long before their
	// time, so that the queue's fsync is done when they are due (consumers
	// still never get one early); 0 (none) to 1s; DefaultConfig's is
	// DefaultHandoffLead. Other sinks take none: 0.
	HandoffLead time.Duration
	// IdempotencyWindow is how long a Schedule's idempotency key is
	// remembered per topic; 0 turns keys off; DefaultConfig's is
	// DefaultIdempotencyWindow.
	IdempotencyWindow time.Duration
	// MaxAttempts is the number of failed delivery attempts (Nacks and
	// expired leases) after which a message goes to "<topic>.dlq"; default
	// DefaultMaxAttempts.
	MaxAttempts int
	// DefaultLease is the lease of a received message when the consumer
	// asks for none; default DefaultLease, at most queue.DefaultMaxLease.
	DefaultLease time.Duration
	// MaxTopics bounds the topics of the built-in queue, dead-letter
	// topics included: a Schedule or Redrive that names a new topic beyond
	// it is refused (ResourceExhausted); a dead letter always finds its
	// topic. Default DefaultMaxTopics; -1 for no limit.
	MaxTopics int
	// TopicIdleTimeout is how long a queue topic with nothing leased keeps
	// its files open after its last use, and a topic with nothing to
	// deliver its engine lane's goroutines; default DefaultTopicIdleTimeout.
	TopicIdleTimeout time.Duration

	// Sink is where due messages go: SinkQueue (default), SinkWebhook or
	// SinkNATS. With another sink the queue holds only dead letters.
	Sink string
	// Webhooks are the routes of SinkWebhook, first match wins.
	Webhooks []webhook.Route
	// WebhookTimeout bounds one POST of SinkWebhook; default
	// DefaultWebhookTimeout.
	WebhookTimeout time.Duration
	// NATSURL is the NATS servers of SinkNATS, comma-separated.
	NATSURL string
	// NATSSubjectPrefix: messages of topic T go to subject prefix+T;
	// default DefaultNATSSubjectPrefix.
	NATSSubjectPrefix string
	// NATSStream is the JetStream stream capturing the subjects, created
	// if missing; default DefaultNATSStream.
	NATSStream string

	// Cluster, if set, makes the node one of a cluster whose state lives in
	// NATS JetStream (docs/CLUSTER.md) instead of a local engine and queue.
	Cluster *ClusterConfig

	// AuthToken, if set, is a bearer token that may do everything (the
	// credential "admin"); cluster nodes forward calls to each other with it.
	AuthToken string
	// CredentialsFile names the credentials file (package access): named
	// tokens and client certificate names with their verbs and topics;
	// read at Open and by ReloadCredentials. With neither AuthToken nor
	// CredentialsFile every caller may do everything.
	CredentialsFile string
	// AuditMaxBytes bounds the audit trail (DataDir/audit): whole old
	// segments are deleted beyond it; default audit.DefaultMaxBytes.
	AuditMaxBytes int64
	// AuditMaxAge deletes the audit trail's entries older than this, a
	// segment at a time; 0 keeps them until AuditMaxBytes needs the room.
	AuditMaxAge time.Duration
	// CORSOrigins are the browser origins allowed to call the API
	// (Connect, gRPC-Web); none by default.
	CORSOrigins []string
	// MaxStreams, MaxStreamsPerConn, MaxRequestBytes and IdleTimeout are
	// server.Options' fields of the same names (0: their defaults).
	MaxStreams, MaxStreamsPerConn, MaxRequestBytes int
	IdleTimeout                                    time.Duration
	// Pprof serves Go runtime profiles under /debug/pprof/.
	Pprof bool
	// TracerProvider records the server's spans (server.Options); nil:
	// none.
	TracerProvider trace.TracerProvider

	// Logger; default slog.Default().
	Logger *slog.Logger
}

// ClusterConfig configures cluster mode (cluster.Options has the details
// of each field).
type ClusterConfig struct {
	// URL of the NATS JetStream servers, comma-separated. Required.
	URL string
	// NodeID names this node, unique in the cluster. Required.
	NodeID string
	// Advertise is the URL other nodes reach this node's API at. Required.
	Advertise string
	// Partitions, fixed when the cluster is created; 0 takes the
	// cluster's (8 for a new one).
	Partitions int
	// LeaseTTL: a partition whose owner stops renewing for this long is
	// taken over; default cluster.DefaultLeaseTTL.
	LeaseTTL time.Duration
	// Replicas of every stream and bucket the node creates; default
	// cluster.DefaultReplicas.
	Replicas int
	// CompactMargin and CompactInterval: see cluster.CompactionOptions;
	// 0 for the defaults, a negative CompactMargin turns compaction off.
	CompactMargin   int
	CompactInterval time.Duration
}

// DefaultConfig is a Config with every default filled in (DataDir aside):
// the one owner of the defaults, which serve's flags show.
func DefaultConfig() Config {
	return Config{
		SegmentDuration: DefaultSegmentDuration, Fsync: commitlog.SyncAlways, MaxDelay: DefaultMaxDelay, MaxBody: DefaultMaxBody,
		HandoffLead: DefaultHandoffLead, IdempotencyWindow: DefaultIdempotencyWindow,
		MaxAttempts: DefaultMaxAttempts, DefaultLease: DefaultLease, MaxTopics: DefaultMaxTopics, TopicIdleTimeout: DefaultTopicIdleTimeout,
		Sink: SinkQueue, WebhookTimeout: DefaultWebhookTimeout, NATSSubjectPrefix: DefaultNATSSubjectPrefix, NATSStream: DefaultNATSStream,
		MaxStreams: server.DefaultMaxStreams, MaxStreamsPerConn: server.DefaultMaxStreamsPerConn, IdleTimeout: server.DefaultIdleTimeout,
	}
}

// normalize fills in defaults and checks c; the error says which field is
// wrong and what is allowed.
func (c *Config) normalize() error {
	if c.DataDir == "" {
		return errors.New("hourglass: Config.DataDir is empty: name a directory")
	}
	if c.SegmentDuration == 0 {
		c.SegmentDuration = DefaultSegmentDuration
	}
	if c.SegmentDuration < time.Second || c.SegmentDuration > 24*time.Hour || c.SegmentDuration%time.Second != 0 {
		return fmt.Errorf("hourglass: SegmentDuration %v: whole seconds from 1s to 24h", c.SegmentDuration)
	}
	if c.PreloadLead != 0 && (c.PreloadLead < 0 || c.PreloadLead >= c.SegmentDuration) {
		return fmt.Errorf("hourglass: PreloadLead %v: positive and shorter than SegmentDuration %v", c.PreloadLead, c.SegmentDuration)
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = DefaultMaxDelay
	}
	if c.MaxDelay < 0 {
		return fmt.Errorf("hourglass: MaxDelay %v: must be positive", c.MaxDelay)
	}
	if c.MaxBody == 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.MaxBody < 0 || c.MaxBody > server.MaxBodyLimit {
		return fmt.Errorf("hourglass: MaxBody %d: from 1 to %d bytes (%s)", c.MaxBody, server.MaxBodyLimit, units.FormatSize(server.MaxBodyLimit))
	}
	if c.DelayLevels == nil {
		levels, err := units.ParseDelayLevels(units.DefaultDelayLevels)
		if err != nil {
			return err
		}
		c.DelayLevels = levels
	}
	for i, d := range c.DelayLevels {
		if d <= 0 || d > c.MaxDelay {
			return fmt.Errorf("hourglass: delay level %d is %s: each level must be positive and at most MaxDelay %s", i+1, units.FormatDuration(d), units.FormatDuration(c.MaxDelay))
		}
	}
	if c.Sink == "" {
		c.Sink = SinkQueue
	}
	switch c.Sink {
	case SinkQueue:
		if len(c.Webhooks) > 0 || c.NATSURL != "" {
			return errors.New("hourglass: Webhooks and NATSURL need Sink webhook or nats")
		}
	case SinkWebhook:
		if len(c.Webhooks) == 0 {
			return errors.New("hourglass: Sink webhook needs at least one route in Webhooks")
		}
		if c.WebhookTimeout == 0 {
			c.WebhookTimeout = DefaultWebhookTimeout
		}
		if c.WebhookTimeout < 0 {
			return fmt.Errorf("hourglass: WebhookTimeout %v: must be positive", c.WebhookTimeout)
		}
	case SinkNATS:
		if c.NATSURL == "" && c.Cluster == nil {
			return errors.New("hourglass: Sink nats needs NATSURL nats://HOST:PORT")
		}
	default:
		return fmt.Errorf("hourglass: Sink %q: want %s, %s or %s", c.Sink, SinkQueue, SinkWebhook, SinkNATS)
	}
	if c.NATSSubjectPrefix == "" {
		c.NATSSubjectPrefix = DefaultNATSSubjectPrefix
	}
	if c.NATSStream == "" {
		c.NATSStream = DefaultNATSStream
	}
	switch {
	case c.HandoffLead < 0 || c.HandoffLead > engine.MaxHandoffLead:
		return fmt.Errorf("hourglass: HandoffLead %v: from 0 (none) to %v", c.HandoffLead, engine.MaxHandoffLead)
	case c.Sink != SinkQueue && c.Cluster == nil && c.HandoffLead > 0:
		return fmt.Errorf("hourglass: HandoffLead works only with Sink queue (a %s sink cannot hold a message until its time): set it to 0", c.Sink)
	}
	if c.IdempotencyWindow < 0 {
		return fmt.Errorf("hourglass: IdempotencyWindow %v: 0 (keys off) or more", c.IdempotencyWindow)
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.MaxAttempts < 1 {
		return fmt.Errorf("hourglass: MaxAttempts %d: at least 1", c.MaxAttempts)
	}
	if c.DefaultLease == 0 {
		c.DefaultLease = DefaultLease
	}
	if c.DefaultLease < 0 || c.DefaultLease > queue.DefaultMaxLease {
		return fmt.Errorf("hourglass: DefaultLease %v: from 1ms to %v", c.DefaultLease, queue.DefaultMaxLease)
	}
	if c.MaxTopics == 0 {
		c.MaxTopics = DefaultMaxTopics
	}
	if c.MaxTopics < -1 {
		return fmt.Errorf("hourglass: MaxTopics %d: at least 1, or -1 for no limit", c.MaxTopics)
	}
	if c.TopicIdleTimeout == 0 {
		c.TopicIdleTimeout = DefaultTopicIdleTimeout
	}
	if c.TopicIdleTimeout < 0 {
		return fmt.Errorf("hourglass: TopicIdleTimeout %v: must be positive", c.TopicIdleTimeout)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if cl := c.Cluster; cl != nil {
		if c.Sink != SinkNATS && c.Sink != SinkQueue {
			return fmt.Errorf("hourglass: Sink %s cannot run with Cluster: in cluster mode due messages go to the replicated JetStream delivery stream (NATSStream)", c.Sink)
		}
		c.Sink = SinkNATS
		if cl.URL == "" || cl.NodeID == "" || cl.Advertise == "" {
			return errors.New("hourglass: Cluster needs URL, NodeID and Advertise")
		}
		if c.NATSURL == "" {
			c.NATSURL = cl.URL
		}
		if cl.Partitions < 0 || cl.Partitions > cluster.MaxPartitions {
			return fmt.Errorf("hourglass: Cluster.Partitions %d: from 1 to %d (0 takes the cluster's)", cl.Partitions, cluster.MaxPartitions)
		}
		if cl.Replicas == 0 {
			cl.Replicas = cluster.DefaultReplicas
		}
		if cl.Replicas < 1 || cl.Replicas > 5 {
			return fmt.Errorf("hourglass: Cluster.Replicas %d: from 1 to 5 (JetStream's limit), at most the NATS cluster's size", cl.Replicas)
		}
		if cl.LeaseTTL == 0 {
			cl.LeaseTTL = cluster.DefaultLeaseTTL
		}
		if cl.LeaseTTL < cluster.MinLeaseTTL {
			return fmt.Errorf("hourglass: Cluster.LeaseTTL %v: at least %v", cl.LeaseTTL, cluster.MinLeaseTTL)
		}
		if cl.CompactMargin == 0 {
			cl.CompactMargin = cluster.DefaultCompactMargin
		}
		if cl.CompactInterval == 0 {
			cl.CompactInterval = cluster.DefaultCompactInterval
		}
		if cl.CompactInterval < 0 {
			return fmt.Errorf("hourglass: Cluster.CompactInterval %v: must be positive", cl.CompactInterval)
		}
	}
	return nil
}
