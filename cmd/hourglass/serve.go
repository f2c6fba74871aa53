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
	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/internal/buildinfo"
	"github.com/hourglassmq/hourglass/internal/units"
	"github.com/hourglassmq/hourglass/queue"
	"github.com/hourglassmq/hourglass/server"
	"github.com/hourglassmq/hourglass/sink/webhook"
)

const serveDescription = `Runs the Hourglass server: messages are kept in --data-dir and delivered when
due to the built-in queue (consumers Receive, then Ack or Nack them), or to a
webhook or NATS JetStream (--sink).

One address (--listen) serves the API (proto/hourglass/v1/hourglass.proto):
gRPC with reflection and grpc.health.v1, Connect, Connect-JSON and gRPC-Web,
over HTTP/1.1 and HTTP/2, plain or with --tls-cert; and GET /healthz, /readyz
(200 once recovery is done) and /metrics (Prometheus). It prints "listening on
HOST:PORT" on stderr (useful with --listen 127.0.0.1:0).

Every flag is also an environment variable: HOURGLASS_ and its name in capitals
with _ for -, such as HOURGLASS_DATA_DIR or HOURGLASS_AUTH_TOKEN (better than the
flag for the token: it stays out of the process list). A DURATION takes ms, s,
m, h, d and y (90s, 7d, 10y); a SIZE B, KiB or MiB (512KiB).

On SIGTERM or SIGINT it stops accepting connections, ends long polls, lets calls
in flight finish (up to --shutdown-timeout) and closes its files cleanly. Leases
do not survive a restart: messages leased and not acked are delivered again.

With --cluster the node is one of several sharing their state through NATS
JetStream (docs/CLUSTER.md). docs/CLI.md says more of every flag below.`

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
		Name:         "serve",
		Usage:        "run the server: store delayed messages, deliver them to consumers when due",
		UsageText:    "hourglass serve [--data-dir PATH] [--listen HOST:PORT] [options]",
		Description:  serveDescription,
		Flags:        serveFlags(),
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
	scheme := "gRPC, Connect and gRPC-Web on HTTP/1.1 and HTTP/2"
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
