package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass"
	"github.com/hourglassmq/hourglass/cluster"
	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/internal/buildinfo"
	"github.com/hourglassmq/hourglass/internal/units"
	"github.com/hourglassmq/hourglass/queue"
	"github.com/hourglassmq/hourglass/server"
	"github.com/hourglassmq/hourglass/sink/webhook"
)

const serveDescription = `Runs the Hourglass server: messages are kept in --data-dir and delivered to the
built-in queue when due; consumers Receive, then Ack or Nack them.

The API (proto/hourglass/v1/hourglass.proto) is served on one address: native
gRPC (grpc-go, with server reflection and grpc.health.v1, so grpcurl and
Kubernetes gRPC probes work without the .proto), and Connect, Connect-JSON and
gRPC-Web (connect-go), each over HTTP/1.1 or HTTP/2, plain or under TLS
(--tls-cert/--tls-key; docs/API.md). JSON with a field the schema does not
name is refused.

  curl -H 'Content-Type: application/json' \
    -d '{"topic":"orders","delayMs":"30000","body":"aGVsbG8="}' \
    http://127.0.0.1:7420/hourglass.v1.HourglassService/Schedule

  curl -H 'Content-Type: application/json' \
    -d '{"topic":"orders","maxMessages":10,"waitMs":"20000"}' \
    http://127.0.0.1:7420/hourglass.v1.HourglassService/Receive

  grpcurl -plaintext -d '{"topic":"orders","delayMs":"30000"}' \
    127.0.0.1:7420 hourglass.v1.HourglassService/Schedule

Also served: GET /healthz (200 while the process runs), GET /readyz (200 once
recovery has loaded the due buckets; 503 before and while shutting down) and
GET /metrics (Prometheus; needs the token when --auth-token is set).

Sinks (--sink): where due messages go.
  queue    the built-in queue (default): consumers Receive, Ack, Nack.
  webhook  an HTTP POST per message to the first --webhook route whose
           pattern matches the topic; 2xx is done, anything else is retried
           (rescheduled, 1s doubling to 5m) and after --max-attempts goes to
           the built-in queue's <topic>.dlq, where Receive gets it:
             --sink webhook --webhook 'orders.*=http://127.0.0.1:8080/hook'
  nats     publish to NATS JetStream, subject --nats-subject-prefix + topic,
           with the ID as Nats-Msg-Id; done once JetStream acknowledged it.
           The stream --nats-stream is created if missing:
             --sink nats --nats-url nats://127.0.0.1:4222

Every flag can also be set by an environment variable: HOURGLASS_ and the flag's
name in capitals with _ for -, such as HOURGLASS_DATA_DIR or HOURGLASS_AUTH_TOKEN
(better than the flag for the token: it stays out of the process list).

The server runs with Go's GC percent at 400 unless GOGC is set (its live heap
is small), under a soft memory limit of --memory-limit (512MiB) that rises to
twice the live heap when that is larger.

Durations take Go's units (ms, s, m, h) and also d (24h) and y (365d): 90s, 10m,
7d, 10y. Sizes take B, KiB, MiB: 65536, 512KiB, 1MiB.

On SIGTERM or SIGINT the server stops accepting connections, ends long polls,
lets in-flight requests finish (up to --shutdown-timeout), then closes the
engine and the queue cleanly. Leased messages not yet acked are delivered again
after a restart; acked ones never.

CLUSTER MODE (--cluster nats://h1:4222,...): the node is one of several that
share their state through NATS JetStream; any node takes Schedule and Cancel.
A message is stored in the JetStream stream of its partition and answered once
JetStream acknowledged it; each partition is owned by one live node (a lease
in the key-value bucket HG_OWNERS), which delivers its due messages to the
delivery stream --nats-stream (subjects --nats-subject-prefix + topic, with
the message ID as Nats-Msg-Id). Receive, Consume, Ack and Nack work on any
node, served from a durable JetStream consumer per topic on that stream
(lease --default-lease, dead letters after --max-attempts to <topic>.dlq);
other programs may read the stream too. Every other RPC works on any node as
on one: Get, List, Reschedule, Cancel by key, Redrive, Purge, topic policies
and pause, and the recurring schedules; the node that owns the message's (or
schedule's) partition decides. When a node dies, its partitions move within
--lease-ttl.
A ScheduleBatch (at most 1024 messages) is one JetStream message on one
partition: atomic. With a key on every message, resend the same batch to retry:
within --idempotency-window of the first it answers the first IDs, on any node.
  hourglass serve --cluster nats://127.0.0.1:4222 --listen 127.0.0.1:7420 \
    --partitions 8 --replicas 3
docs/CLUSTER.md says how it works.

The address it listens on is printed to stderr as "listening on HOST:PORT"
(useful with --listen 127.0.0.1:0).`

// envVar is the environment variable of a flag: HOURGLASS_DATA_DIR for data-dir.
func envVar(flag string) []string {
	return []string{"HOURGLASS_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))}
}

// dataDirFlag is --data-dir of serve, repair and inspect: the same
// directory by default and from HOURGLASS_DATA_DIR; usage says what the
// command does with it.
func dataDirFlag(usage string) cli.Flag {
	return &cli.StringFlag{Name: "data-dir", Value: "hourglass-data", DefaultText: "./hourglass-data", EnvVars: envVar("data-dir"), Usage: usage}
}

// serveCommand is `hourglass serve`; the work is in packages engine, queue
// and server.
func serveCommand() *cli.Command {
	return &cli.Command{
		Name:        "serve",
		Usage:       "run the server: store delayed messages, deliver them to consumers when due",
		UsageText:   "hourglass serve [--data-dir PATH] [--listen HOST:PORT] [options]",
		Description: serveDescription,
		Flags: []cli.Flag{
			dataDirFlag("directory (`PATH`) holding the messages; created if missing, locked while the server runs"),
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:7420", EnvVars: envVar("listen"),
				Usage: "address (`HOST:PORT`) to listen on; port 0 picks a free port; 0.0.0.0:7420 listens on every interface"},
			&cli.DurationFlag{Name: "segment-duration", Value: time.Hour, DefaultText: "1h", EnvVars: envVar("segment-duration"),
				Usage: "length of a schedule bucket (one file each), a `DURATION` of whole seconds from 1s to 24h; existing buckets keep theirs"},
			&cli.DurationFlag{Name: "preload-lead", Value: 10 * time.Minute, DefaultText: "10m, or a sixth of --segment-duration when that is under 1h",
				EnvVars: envVar("preload-lead"),
				Usage:   "load a bucket into memory this `DURATION` before it starts; shorter than --segment-duration"},
			&cli.StringFlag{Name: "fsync", Value: "always", EnvVars: envVar("fsync"),
				Usage: "durability `POLICY`: always (answer a producer or consumer only after the fsync that covers it; no loss on a machine crash), " +
					"interval (fsync every 10 ms; a machine crash loses the last few ms; a due message is still handed to consumers after the fsync of the queue's log, not at the interval) or none (tests only)"},
			&cli.StringFlag{Name: "max-delay", Value: "10y", EnvVars: envVar("max-delay"),
				Usage: "refuse messages due further ahead than this `DURATION` (accepts d and y: 30d, 10y)"},
			&cli.StringFlag{Name: "max-body", Value: "1MiB", EnvVars: envVar("max-body"),
				Usage: fmt.Sprintf("refuse message bodies larger than this `SIZE`, at most %s", units.FormatSize(server.MaxBodyLimit))},
			&cli.StringFlag{Name: "auth-token", EnvVars: envVar("auth-token"),
				Usage: "require 'Authorization: Bearer `TOKEN`' on every RPC and /metrics (not /healthz, /readyz); prefer HOURGLASS_AUTH_TOKEN"},
			&cli.StringFlag{Name: "tls-cert", EnvVars: envVar("tls-cert"),
				Usage: "serve TLS (HTTP/2 and HTTP/1.1) with this certificate `FILE` (PEM, chain included); needs --tls-key"},
			&cli.StringFlag{Name: "tls-key", EnvVars: envVar("tls-key"),
				Usage: "private key `FILE` (PEM) of --tls-cert"},
			&cli.StringFlag{Name: "delay-levels", Value: units.DefaultDelayLevels, EnvVars: envVar("delay-levels"),
				Usage: "`DURATIONS` of the RocketMQ-style delay levels 1, 2, ..., separated by spaces or commas"},
			&cli.DurationFlag{Name: "handoff-lead", Value: hourglass.DefaultHandoffLead, DefaultText: "20ms", EnvVars: envVar("handoff-lead"),
				Usage: "hand due messages to the queue up to this `DURATION` (0 to 1s) before their time, so that the queue's fsync is done when they are due; " +
					"consumers still never get a message early. A cancel within this time of the message's time answers already-delivered"},
			&cli.DurationFlag{Name: "idempotency-window", Value: hourglass.DefaultIdempotencyWindow, DefaultText: "10m", EnvVars: envVar("idempotency-window"),
				Usage: "remember a Schedule's idempotency_key per topic for this `DURATION`: a retry with the same key gets the first message's ID instead of a second message, also after a restart; 0 turns keys off"},
			&cli.IntFlag{Name: "max-attempts", Value: queue.DefaultMaxAttempts, EnvVars: envVar("max-attempts"),
				Usage: "after `N` failed delivery attempts (each Nack or expired lease is one) a message goes to <topic>.dlq instead of being retried"},
			&cli.DurationFlag{Name: "default-lease", Value: queue.DefaultLease, DefaultText: "30s", EnvVars: envVar("default-lease"),
				Usage: "lease of a received message when the Receive asks for none: unacked after this `DURATION`, it is delivered again"},
			&cli.IntFlag{Name: "max-topics", Value: hourglass.DefaultMaxTopics, EnvVars: envVar("max-topics"),
				Usage: "the built-in queue holds at most `N` topics (dead-letter topics counted like any other); a Schedule or Redrive naming a new one beyond is refused with RESOURCE_EXHAUSTED (a dead letter always finds its topic); -1 for no limit"},
			&cli.DurationFlag{Name: "topic-idle-timeout", Value: hourglass.DefaultTopicIdleTimeout, DefaultText: "1m", EnvVars: envVar("topic-idle-timeout"),
				Usage: "a queue topic with no message leased closes its files, and a topic with nothing to deliver ends its delivery goroutines, after this `DURATION` without use; both start again when next used"},
			&cli.StringSliceFlag{Name: "cors-origin", EnvVars: envVar("cors-origin"),
				Usage: "let web pages from this `ORIGIN` (https://console.example.com, or * for any) call the API with Connect or gRPC-Web; repeatable; off by default"},
			&cli.IntFlag{Name: "max-streams", Value: server.DefaultMaxStreams, EnvVars: envVar("max-streams"),
				Usage: "at most `N` long polls (Receive with a wait) and streams open at once on the server; one more is refused with RESOURCE_EXHAUSTED"},
			&cli.IntFlag{Name: "max-streams-per-conn", Value: server.DefaultMaxStreamsPerConn, EnvVars: envVar("max-streams-per-conn"),
				Usage: "at most `N` long polls and streams open at once on one client connection"},
			&cli.StringFlag{Name: "memory-limit", Value: "512MiB", EnvVars: envVar("memory-limit"),
				Usage: "the Go runtime's soft memory limit (`SIZE`) while the live heap is under half of it; above, twice the live heap. " +
					"It returns freed memory to the OS and makes the collector run more often near it; 0 for none (GOMEMLIMIT, if set and this flag is not, is used as is)"},
			&cli.StringFlag{Name: "max-request-size", EnvVars: envVar("max-request-size"), DefaultText: "8MiB, or one message of --max-body with its headers if larger",
				Usage: "refuse a request larger than this `SIZE` after decompression (a ScheduleBatch is one request) with RESOURCE_EXHAUSTED"},
			&cli.DurationFlag{Name: "idle-timeout", Value: server.DefaultIdleTimeout, DefaultText: "5m", EnvVars: envVar("idle-timeout"),
				Usage: "close a client connection with no call in flight after this `DURATION`"},
			&cli.DurationFlag{Name: "shutdown-timeout", Value: 10 * time.Second, DefaultText: "10s", EnvVars: envVar("shutdown-timeout"),
				Usage: "on SIGTERM, wait at most this `DURATION` for in-flight requests before closing"},
			&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: envVar("log-level"),
				Usage: "`LEVEL` of the logs on stderr: debug (also every refused request), info, warn or error"},
			&cli.StringFlag{Name: "log-format", Value: "text", EnvVars: envVar("log-format"),
				Usage: "`FORMAT` of the logs on stderr: text (key=value) or json"},
			&cli.StringFlag{Name: "sink", Value: "queue", EnvVars: envVar("sink"),
				Usage: "where due messages go: `SINK` queue (the built-in queue), webhook (--webhook) or nats (--nats-url); see above"},
			&cli.StringSliceFlag{Name: "webhook", EnvVars: envVar("webhook"),
				Usage: "with --sink webhook: a route `PATTERN=URL`, repeatable, first match wins; * and ? in the pattern match topic characters"},
			&cli.DurationFlag{Name: "webhook-timeout", Value: 10 * time.Second, DefaultText: "10s", EnvVars: envVar("webhook-timeout"),
				Usage: "with --sink webhook: a POST not answered within this `DURATION` is a failed attempt"},
			&cli.StringFlag{Name: "nats-url", EnvVars: envVar("nats-url"),
				Usage: "with --sink nats: the NATS `URL`s, comma-separated (nats://127.0.0.1:4222)"},
			&cli.StringFlag{Name: "nats-subject-prefix", Value: "hourglass.", EnvVars: envVar("nats-subject-prefix"),
				Usage: "with --sink nats: messages of topic T go to subject `PREFIX`T"},
			&cli.StringFlag{Name: "nats-stream", Value: "HOURGLASS", EnvVars: envVar("nats-stream"),
				Usage: "with --sink nats: the JetStream `STREAM` capturing PREFIX>; created (file storage, 2m duplicate window) if missing"},
			&cli.StringFlag{Name: "cluster", EnvVars: envVar("cluster"),
				Usage: "run as a node of the cluster whose state lives in these NATS JetStream `URLS` (nats://h1:4222,nats://h2:4222); see CLUSTER MODE above"},
			&cli.StringFlag{Name: "node-id", EnvVars: envVar("node-id"), DefaultText: "hostname:port of --listen",
				Usage: "with --cluster: this node's `NAME`, unique in the cluster"},
			&cli.StringFlag{Name: "advertise", EnvVars: envVar("advertise"), DefaultText: "http://<listen address>",
				Usage: "with --cluster: the `URL` other nodes use to reach this node's API (they forward Cancel to the owner of a message)"},
			&cli.IntFlag{Name: "partitions", EnvVars: envVar("partitions"), DefaultText: "the cluster's; 8 for a new cluster",
				Usage: "with --cluster: `N` partitions, fixed when the cluster is created (stored in HG_META); a different number is refused"},
			&cli.DurationFlag{Name: "lease-ttl", Value: cluster.DefaultLeaseTTL, DefaultText: "10s", EnvVars: envVar("lease-ttl"),
				Usage: "with --cluster: a partition whose owner stops renewing for this `DURATION` is taken over by another node (at least 1s)"},
			&cli.IntFlag{Name: "replicas", Value: cluster.DefaultReplicas, EnvVars: envVar("replicas"),
				Usage: "with --cluster: `N` JetStream replicas of every stream and bucket the node creates (the delivery stream included); at most the NATS cluster's size"},
			&cli.IntFlag{Name: "compact-margin", Value: cluster.DefaultCompactMargin, EnvVars: envVar("compact-margin"),
				Usage: "with --cluster: the owner of a partition compacts its streams once it has read more than 2 × pending + `N` intake messages " +
					"since its last compaction; a negative N turns compaction off (the streams then keep every message for --max-delay + 1 day)"},
			&cli.DurationFlag{Name: "compact-interval", Value: cluster.DefaultCompactInterval, DefaultText: "1m", EnvVars: envVar("compact-interval"),
				Usage: "with --cluster: at least this `DURATION` between two compactions of a partition"},
			&cli.BoolFlag{Name: "pprof", EnvVars: envVar("pprof"),
				Usage: "serve Go runtime profiles under /debug/pprof/ (behind --auth-token), e.g. go tool pprof http://127.0.0.1:7420/debug/pprof/profile?seconds=10"},
		},
		OnUsageError: usageError,
		Action:       runServe,
	}
}

// serveConfig is the checked command line of serve.
type serveConfig struct {
	dataDir, listen   string
	segDur, lead      time.Duration
	fsync             commitlog.SyncPolicy
	maxDelay          time.Duration
	maxBody           int
	token             string
	tlsCert, tlsKey   string
	levels            []time.Duration
	maxAttempts       int
	maxTopics         int
	topicIdle         time.Duration
	lease, shutdownTO time.Duration
	pprof             bool
	sink              string
	webhooks          []webhook.Route
	webhookTO         time.Duration
	natsURL, natsPfx  string
	natsStream        string
	handoff           time.Duration
	idemWindow        time.Duration
	memLimit          uint64       // --memory-limit; 0: leave the runtime's alone
	logger            *slog.Logger // log.Logger, for what takes a *slog.Logger
	log               *serveLog

	cluster              string // NATS URLs; "" when not in cluster mode
	corsOrigins          []string
	maxStreams           int
	maxStreamsPerConn    int
	maxRequest           int
	idleTimeout          time.Duration
	nodeID, advertise    string
	partitions, replicas int
	leaseTTL             time.Duration
	compactMargin        int
	compactInterval      time.Duration
}

func parseServe(c *cli.Context) (*serveConfig, error) {
	if c.NArg() > 0 {
		return nil, fmt.Errorf("serve takes no arguments, got %q", c.Args().Slice())
	}
	cfg := &serveConfig{
		dataDir: c.String("data-dir"), listen: c.String("listen"),
		segDur: c.Duration("segment-duration"), token: c.String("auth-token"),
		tlsCert: c.String("tls-cert"), tlsKey: c.String("tls-key"),
		pprof: c.Bool("pprof"), maxAttempts: c.Int("max-attempts"), lease: c.Duration("default-lease"), shutdownTO: c.Duration("shutdown-timeout"),
		corsOrigins: c.StringSlice("cors-origin"), maxStreams: c.Int("max-streams"), maxStreamsPerConn: c.Int("max-streams-per-conn"),
		idleTimeout: c.Duration("idle-timeout"), maxTopics: c.Int("max-topics"), topicIdle: c.Duration("topic-idle-timeout"),
	}
	if cfg.maxTopics < 1 && cfg.maxTopics != -1 {
		return nil, fmt.Errorf("--max-topics %d: at least 1, or -1 for no limit", cfg.maxTopics)
	}
	if cfg.topicIdle <= 0 {
		return nil, fmt.Errorf("--topic-idle-timeout %v: must be positive", cfg.topicIdle)
	}
	if cfg.maxStreams < 1 || cfg.maxStreamsPerConn < 1 {
		return nil, fmt.Errorf("--max-streams %d, --max-streams-per-conn %d: each at least 1", cfg.maxStreams, cfg.maxStreamsPerConn)
	}
	if cfg.idleTimeout <= 0 {
		return nil, fmt.Errorf("--idle-timeout %v: must be positive", cfg.idleTimeout)
	}
	if cfg.dataDir == "" {
		return nil, errors.New("--data-dir is empty: name a directory")
	}
	if c.IsSet("memory-limit") || os.Getenv("GOMEMLIMIT") == "" {
		n, err := units.ParseSize(c.String("memory-limit"))
		if err != nil || (n != 0 && n < 32<<20) {
			return nil, fmt.Errorf("--memory-limit %q: a size of at least 32MiB (256MiB, 1GiB), or 0 for none", c.String("memory-limit"))
		}
		cfg.memLimit = uint64(n)
	}
	if c.IsSet("preload-lead") {
		cfg.lead = c.Duration("preload-lead")
		if cfg.lead <= 0 || cfg.lead >= cfg.segDur {
			return nil, fmt.Errorf("--preload-lead %v: must be positive and shorter than --segment-duration %v", cfg.lead, cfg.segDur)
		}
	}
	var err error
	if cfg.fsync, err = commitlog.ParseSyncPolicy(c.String("fsync")); err != nil {
		return nil, fmt.Errorf("--fsync %q: want always, interval or none", c.String("fsync"))
	}
	if cfg.maxDelay, err = units.ParseDuration(c.String("max-delay")); err != nil {
		return nil, fmt.Errorf("--max-delay: %w", err)
	}
	if cfg.maxDelay <= 0 {
		return nil, fmt.Errorf("--max-delay %q: must be positive", c.String("max-delay"))
	}
	body, err := units.ParseSize(c.String("max-body"))
	if err != nil {
		return nil, fmt.Errorf("--max-body: %w", err)
	}
	if body > server.MaxBodyLimit {
		return nil, fmt.Errorf("--max-body %s: at most %s", c.String("max-body"), units.FormatSize(server.MaxBodyLimit))
	}
	cfg.maxBody = int(body)
	if c.IsSet("max-request-size") {
		n, err := units.ParseSize(c.String("max-request-size"))
		if err != nil {
			return nil, fmt.Errorf("--max-request-size: %w", err)
		}
		if n < body+server.MaxHeaderBytes || n > 1<<30 {
			return nil, fmt.Errorf("--max-request-size %s: from one message of --max-body with its headers (%s) to 1GiB",
				c.String("max-request-size"), units.FormatSize(body+server.MaxHeaderBytes))
		}
		cfg.maxRequest = int(n)
	}
	if (cfg.tlsCert == "") != (cfg.tlsKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together: give both, or neither for plain text (h2c)")
	}
	if cfg.levels, err = units.ParseDelayLevels(c.String("delay-levels")); err != nil {
		return nil, fmt.Errorf("--delay-levels: %w", err)
	}
	for i, d := range cfg.levels {
		if d > cfg.maxDelay {
			return nil, fmt.Errorf("--delay-levels: level %d is %s, beyond --max-delay %s", i+1, units.FormatDuration(d), units.FormatDuration(cfg.maxDelay))
		}
	}
	if cfg.handoff = c.Duration("handoff-lead"); cfg.handoff < 0 || cfg.handoff > engine.MaxHandoffLead {
		return nil, fmt.Errorf("--handoff-lead %v: from 0 to %v", cfg.handoff, engine.MaxHandoffLead)
	}
	cfg.sink, cfg.webhookTO = c.String("sink"), c.Duration("webhook-timeout")
	cfg.natsURL, cfg.natsPfx, cfg.natsStream = c.String("nats-url"), c.String("nats-subject-prefix"), c.String("nats-stream")
	for _, w := range c.StringSlice("webhook") {
		r, err := webhook.ParseRoute(w)
		if err != nil {
			return nil, fmt.Errorf("--webhook: %w", err)
		}
		cfg.webhooks = append(cfg.webhooks, r)
	}
	if err := parseCluster(c, cfg); err != nil {
		return nil, err
	}
	switch cfg.sink {
	case "queue":
		if len(cfg.webhooks) > 0 || cfg.natsURL != "" {
			return nil, errors.New("--webhook and --nats-url need --sink webhook or --sink nats")
		}
	case "webhook":
		if len(cfg.webhooks) == 0 {
			return nil, errors.New("--sink webhook needs at least one --webhook PATTERN=URL")
		}
		if cfg.webhookTO <= 0 {
			return nil, fmt.Errorf("--webhook-timeout %v: must be positive", cfg.webhookTO)
		}
	case "nats":
		if cfg.natsURL == "" {
			return nil, errors.New("--sink nats needs --nats-url nats://HOST:PORT")
		}
	default:
		return nil, fmt.Errorf("--sink %q: want queue, webhook or nats", cfg.sink)
	}
	if cfg.sink != "queue" && c.IsSet("handoff-lead") && cfg.handoff > 0 {
		return nil, fmt.Errorf("--handoff-lead works only with --sink queue (a %s sink cannot hold a message until its time)", cfg.sink)
	}
	if cfg.idemWindow = c.Duration("idempotency-window"); cfg.idemWindow < 0 {
		return nil, fmt.Errorf("--idempotency-window %v: 0 (off) or more", cfg.idemWindow)
	}
	if cfg.maxAttempts < 1 {
		return nil, fmt.Errorf("--max-attempts %d: at least 1", cfg.maxAttempts)
	}
	if cfg.lease <= 0 || cfg.lease > queue.DefaultMaxLease {
		return nil, fmt.Errorf("--default-lease %v: from 1ms to %v", cfg.lease, queue.DefaultMaxLease)
	}
	if cfg.shutdownTO <= 0 {
		return nil, fmt.Errorf("--shutdown-timeout %v: must be positive", cfg.shutdownTO)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", c.String("log-level"))
	}
	if cfg.log, err = newServeLog(c.App.ErrWriter, c.String("log-format"), level); err != nil {
		return nil, err
	}
	cfg.logger = cfg.log.Logger
	return cfg, nil
}

// serveGCPercent is the server's Go GC percent unless GOGC is set: its
// live heap is small (the loaded window's index) and most of what it
// allocates lives for one call, so the default 100 made it collect, and
// shrink and regrow the stacks of its call goroutines, many times a second
// (docs/BENCHMARKS.md, "The network layer"). GOMEMLIMIT, when set, still
// bounds the heap.
const serveGCPercent = 400

func runServe(c *cli.Context) error {
	cfg, err := parseServe(c)
	if err != nil {
		err = fmt.Errorf("%w (see 'hourglass serve --help')", err)
		if c.String("log-format") == "json" {
			l, _ := newServeLog(c.App.ErrWriter, "json", slog.LevelInfo)
			return l.failed(err)
		}
		return err
	}
	cfg.log.adopt()
	b := buildinfo.Get()
	cfg.logger.Info("starting", "version", b.Version, "revision", b.RevisionText(), "go_version", b.GoVersion, "platform", b.Platform)
	return cfg.log.failed(openAndServe(c, cfg))
}

// openAndServe opens the node of cfg and serves it.
func openAndServe(c *cli.Context, cfg *serveConfig) error {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(serveGCPercent)
	}
	followMemoryLimit(c.Context, cfg.memLimit, cfg.logger)
	releaseIdleMemory(c.Context, cfg.logger)
	// Listen first: in cluster mode the node's default ID and advertise
	// URL name the port.
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", cfg.listen, err)
	}
	hc := cfg.config()
	attrs := []any{"sink", hc.Sink, "handoff_lead", hc.HandoffLead}
	if cfg.cluster != "" {
		if hc.Cluster, err = clusterConfig(cfg, ln); err != nil {
			ln.Close()
			return err
		}
		cl := hc.Cluster
		attrs = []any{"cluster", cl.URL, "node_id", cl.NodeID, "advertise", cl.Advertise, "partitions", cl.Partitions,
			"lease_ttl", cl.LeaseTTL, "replicas", cl.Replicas, "delivery_stream", cfg.natsStream,
			"compact_margin", cl.CompactMargin, "compact_interval", cl.CompactInterval}
	}
	openStart := time.Now()
	node, err := hourglass.Open(c.Context, hc)
	if err != nil {
		ln.Close()
		if cfg.cluster != "" {
			return fmt.Errorf("--cluster %s: %w", cfg.cluster, err)
		}
		return err
	}
	return serveNode(c, cfg, ln, node, func() {
		select {
		case <-node.Ready():
			if cfg.cluster != "" {
				cfg.logger.Info("ready: joined the cluster", "after", time.Since(openStart).Round(time.Millisecond))
			} else {
				cfg.logger.Info("ready: recovery done, due buckets loaded", "after", time.Since(openStart).Round(time.Millisecond))
			}
			notifySystemd(cfg.logger, daemon.SdNotifyReady)
		case <-c.Context.Done():
		}
	}, attrs...)
}

// serveNode serves node on ln until SIGTERM or SIGINT (c.Context), then
// shuts down: no new connections, in-flight requests finish (up to
// --shutdown-timeout), the node closes. waitReady runs in its own
// goroutine and logs when the node is ready. attrs are added to the
// "serving" log line.
func serveNode(c *cli.Context, cfg *serveConfig, ln net.Listener, node *hourglass.Node, waitReady func(), attrs ...any) error {
	log := cfg.logger
	scheme := "gRPC on HTTP/2, Connect and gRPC-Web on HTTP/1.1"
	served := make(chan error, 1)
	if cfg.tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.tlsCert, cfg.tlsKey)
		if err != nil {
			ln.Close()
			node.Close()
			return fmt.Errorf("--tls-cert %s, --tls-key %s: %w", cfg.tlsCert, cfg.tlsKey, err)
		}
		scheme += ", over TLS"
		go func() {
			served <- node.ServeTLS(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		}()
	} else {
		go func() { served <- node.Serve(ln) }()
	}
	cfg.log.listening(c.App.ErrWriter, ln.Addr().String(), scheme)
	log.Info("serving", append([]any{"addr", ln.Addr().String(), "data_dir", cfg.dataDir, "fsync", cfg.fsync.String(),
		"segment_duration", cfg.segDur, "max_delay", units.FormatDuration(cfg.maxDelay), "max_body", cfg.maxBody,
		"max_attempts", cfg.maxAttempts, "auth", cfg.token != "", "tls", cfg.tlsCert != "", "cors", len(cfg.corsOrigins) > 0}, attrs...)...)
	go waitReady()

	var serveErr error
	select {
	case <-c.Context.Done():
		log.Info("shutting down: no new connections; finishing in-flight requests", "timeout", cfg.shutdownTO)
	case serveErr = <-served:
		log.Error("server stopped", "err", serveErr)
	case <-node.Refused():
		serveErr = node.RefusedErr()
		log.Error("refusing to serve: recovery found what an operator must decide", "err", serveErr)
	}
	notifySystemd(log, daemon.SdNotifyStopping)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTO)
	defer cancel()
	if err := node.Shutdown(ctx); err != nil {
		log.Warn("in-flight requests did not finish in time; closed their connections", "err", err)
	}
	if err := node.Close(); err != nil {
		log.Error("closing the engine and the queue", "err", err)
		return err
	}
	log.Info("stopped cleanly")
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return nil
}

// config is the hourglass.Config of the command line.
func (cfg *serveConfig) config() hourglass.Config {
	handoff := cfg.handoff
	if handoff == 0 || cfg.sink != "queue" {
		handoff = -1 // off
	}
	idem := cfg.idemWindow
	if idem == 0 {
		idem = -1 // off
	}
	return hourglass.Config{
		DataDir: cfg.dataDir, SegmentDuration: cfg.segDur, PreloadLead: cfg.lead, Fsync: cfg.fsync,
		MaxDelay: cfg.maxDelay, MaxBody: cfg.maxBody, DelayLevels: cfg.levels, HandoffLead: handoff,
		IdempotencyWindow: idem, MaxAttempts: cfg.maxAttempts, DefaultLease: cfg.lease,
		MaxTopics: cfg.maxTopics, TopicIdleTimeout: cfg.topicIdle,
		Sink: cfg.sink, Webhooks: cfg.webhooks, WebhookTimeout: cfg.webhookTO,
		NATSURL: cfg.natsURL, NATSSubjectPrefix: cfg.natsPfx, NATSStream: cfg.natsStream,
		AuthToken: cfg.token, CORSOrigins: cfg.corsOrigins, MaxStreams: cfg.maxStreams, MaxStreamsPerConn: cfg.maxStreamsPerConn,
		MaxRequestBytes: cfg.maxRequest, IdleTimeout: cfg.idleTimeout, Pprof: cfg.pprof, Logger: cfg.logger,
	}
}
