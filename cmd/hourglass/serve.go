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

// serveConfig is the checked command line of serve: the node's
// hourglass.Config, which the flags set directly (one meaning of each
// value, zero included), and what the process itself needs.
type serveConfig struct {
	node            hourglass.Config
	listen          string
	tlsCert, tlsKey string
	clientCA        string // --tls-client-ca
	shutdownTO      time.Duration
	memLimit        uint64       // --memory-limit; 0: leave the runtime's alone
	logger          *slog.Logger // log.Logger, for what takes a *slog.Logger
	log             *serveLog
}

func parseServe(c *cli.Context) (*serveConfig, error) {
	if c.NArg() > 0 {
		return nil, fmt.Errorf("serve takes no arguments, got %q", c.Args().Slice())
	}
	if err := applyConfigFile(c); err != nil {
		return nil, err
	}
	cfg := &serveConfig{listen: c.String("listen"), tlsCert: c.String("tls-cert"), tlsKey: c.String("tls-key"), clientCA: c.String("tls-client-ca"), shutdownTO: c.Duration("shutdown-timeout")}
	n := &cfg.node
	*n = hourglass.DefaultConfig()
	n.DataDir, n.SegmentDuration, n.AuthToken, n.Pprof = c.String("data-dir"), c.Duration("segment-duration"), c.String("auth-token"), c.Bool("pprof")
	n.CredentialsFile = c.String("credentials")
	n.MaxAttempts, n.DefaultLease, n.MaxTopics, n.TopicIdleTimeout = c.Int("max-attempts"), c.Duration("default-lease"), c.Int("max-topics"), c.Duration("topic-idle-timeout")
	n.CORSOrigins, n.MaxStreams, n.MaxStreamsPerConn, n.IdleTimeout = c.StringSlice("cors-origin"), c.Int("max-streams"), c.Int("max-streams-per-conn"), c.Duration("idle-timeout")
	n.HandoffLead, n.IdempotencyWindow = c.Duration("handoff-lead"), c.Duration("idempotency-window")
	n.Sink, n.WebhookTimeout = c.String("sink"), c.Duration("webhook-timeout")
	n.NATSURL, n.NATSSubjectPrefix, n.NATSStream = c.String("nats-url"), c.String("nats-subject-prefix"), c.String("nats-stream")
	if n.MaxTopics < 1 && n.MaxTopics != -1 {
		return nil, fmt.Errorf("--max-topics %d: at least 1, or -1 for no limit", n.MaxTopics)
	}
	if n.TopicIdleTimeout <= 0 {
		return nil, fmt.Errorf("--topic-idle-timeout %v: must be positive", n.TopicIdleTimeout)
	}
	if n.MaxStreams < 1 || n.MaxStreamsPerConn < 1 {
		return nil, fmt.Errorf("--max-streams %d, --max-streams-per-conn %d: each at least 1", n.MaxStreams, n.MaxStreamsPerConn)
	}
	if n.IdleTimeout <= 0 {
		return nil, fmt.Errorf("--idle-timeout %v: must be positive", n.IdleTimeout)
	}
	if n.DataDir == "" {
		return nil, errors.New("--data-dir is empty: name a directory")
	}
	if c.IsSet("memory-limit") || os.Getenv("GOMEMLIMIT") == "" {
		m, err := units.ParseSize(c.String("memory-limit"))
		if err != nil || (m != 0 && m < 32<<20) {
			return nil, fmt.Errorf("--memory-limit %q: a size of at least 32MiB (256MiB, 1GiB), or 0 for none", c.String("memory-limit"))
		}
		cfg.memLimit = uint64(m)
	}
	if c.IsSet("preload-lead") {
		n.PreloadLead = c.Duration("preload-lead")
		if n.PreloadLead <= 0 || n.PreloadLead >= n.SegmentDuration {
			return nil, fmt.Errorf("--preload-lead %v: must be positive and shorter than --segment-duration %v", n.PreloadLead, n.SegmentDuration)
		}
	}
	var err error
	if n.Fsync, err = commitlog.ParseSyncPolicy(c.String("fsync")); err != nil {
		return nil, fmt.Errorf("--fsync %q: want always, interval or none", c.String("fsync"))
	}
	if n.MaxDelay, err = units.ParseDuration(c.String("max-delay")); err != nil {
		return nil, fmt.Errorf("--max-delay: %w", err)
	}
	if n.MaxDelay <= 0 {
		return nil, fmt.Errorf("--max-delay %q: must be positive", c.String("max-delay"))
	}
	body, err := units.ParseSize(c.String("max-body"))
	if err != nil {
		return nil, fmt.Errorf("--max-body: %w", err)
	}
	if body > server.MaxBodyLimit {
		return nil, fmt.Errorf("--max-body %s: at most %s", c.String("max-body"), units.FormatSize(server.MaxBodyLimit))
	}
	n.MaxBody = int(body)
	if c.IsSet("max-request-size") {
		m, err := units.ParseSize(c.String("max-request-size"))
		if err != nil {
			return nil, fmt.Errorf("--max-request-size: %w", err)
		}
		if m < body+server.MaxHeaderBytes || m > 1<<30 {
			return nil, fmt.Errorf("--max-request-size %s: from one message of --max-body with its headers (%s) to 1GiB",
				c.String("max-request-size"), units.FormatSize(body+server.MaxHeaderBytes))
		}
		n.MaxRequestBytes = int(m)
	}
	if (cfg.tlsCert == "") != (cfg.tlsKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together: give both, or neither for plain text (h2c)")
	}
	if n.AuditMaxBytes, err = units.ParseSize(c.String("audit-max-size")); err != nil || n.AuditMaxBytes < 64<<10 {
		return nil, fmt.Errorf("--audit-max-size %q: a size of at least 64KiB (64MiB, 1GiB)", c.String("audit-max-size"))
	}
	if a := c.String("audit-max-age"); a != "0" {
		if n.AuditMaxAge, err = units.ParseDuration(a); err != nil || n.AuditMaxAge <= 0 {
			return nil, fmt.Errorf("--audit-max-age %q: a positive duration (30d, 1y), or 0 to keep entries until --audit-max-size needs the room", a)
		}
	}
	if cfg.clientCA != "" && (cfg.tlsCert == "" || n.CredentialsFile == "") {
		return nil, errors.New("--tls-client-ca needs --tls-cert (client certificates come over TLS) and --credentials (which names the certificates)")
	}
	if n.DelayLevels, err = units.ParseDelayLevels(c.String("delay-levels")); err != nil {
		return nil, fmt.Errorf("--delay-levels: %w", err)
	}
	for i, d := range n.DelayLevels {
		if d > n.MaxDelay {
			return nil, fmt.Errorf("--delay-levels: level %d is %s, beyond --max-delay %s", i+1, units.FormatDuration(d), units.FormatDuration(n.MaxDelay))
		}
	}
	if n.HandoffLead < 0 || n.HandoffLead > engine.MaxHandoffLead {
		return nil, fmt.Errorf("--handoff-lead %v: from 0 to %v", n.HandoffLead, engine.MaxHandoffLead)
	}
	for _, w := range c.StringSlice("webhook") {
		r, err := webhook.ParseRoute(w)
		if err != nil {
			return nil, fmt.Errorf("--webhook: %w", err)
		}
		n.Webhooks = append(n.Webhooks, r)
	}
	if err := parseCluster(c, n); err != nil {
		return nil, err
	}
	switch n.Sink {
	case hourglass.SinkQueue:
		if len(n.Webhooks) > 0 || n.NATSURL != "" {
			return nil, errors.New("--webhook and --nats-url need --sink webhook or --sink nats")
		}
	case hourglass.SinkWebhook:
		if len(n.Webhooks) == 0 {
			return nil, errors.New("--sink webhook needs at least one --webhook PATTERN=URL")
		}
		if n.WebhookTimeout <= 0 {
			return nil, fmt.Errorf("--webhook-timeout %v: must be positive", n.WebhookTimeout)
		}
	case hourglass.SinkNATS:
		if n.NATSURL == "" {
			return nil, errors.New("--sink nats needs --nats-url nats://HOST:PORT")
		}
	default:
		return nil, fmt.Errorf("--sink %q: want queue, webhook or nats", n.Sink)
	}
	if n.Sink != hourglass.SinkQueue {
		// The lead is the queue's: its default does not apply to other
		// sinks, and one asked for is refused.
		if c.IsSet("handoff-lead") && n.HandoffLead > 0 {
			return nil, fmt.Errorf("--handoff-lead works only with --sink queue (a %s sink cannot hold a message until its time)", n.Sink)
		}
		n.HandoffLead = 0
	}
	if n.IdempotencyWindow < 0 {
		return nil, fmt.Errorf("--idempotency-window %v: 0 (off) or more", n.IdempotencyWindow)
	}
	if n.MaxAttempts < 1 {
		return nil, fmt.Errorf("--max-attempts %d: at least 1", n.MaxAttempts)
	}
	if n.DefaultLease <= 0 || n.DefaultLease > queue.DefaultMaxLease {
		return nil, fmt.Errorf("--default-lease %v: from 1ms to %v", n.DefaultLease, queue.DefaultMaxLease)
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
	n.Logger = cfg.logger
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
	hc := cfg.node
	tp, err := tracerProvider(c.Context)
	if err != nil {
		ln.Close()
		return err
	}
	if tp != nil {
		hc.TracerProvider = tp
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tp.Shutdown(ctx); err != nil {
				cfg.logger.Warn("traces: the last spans were not exported", "err", err)
			}
		}()
		cfg.logger.Info("traces: exporting spans over OTLP (OTEL_* environment)")
	}
	attrs := []any{"sink", hc.Sink, "handoff_lead", hc.HandoffLead}
	if cl := hc.Cluster; cl != nil {
		if err := defaultNodeID(cl, cfg.tlsCert != "", ln); err != nil {
			ln.Close()
			return err
		}
		attrs = []any{"cluster", cl.URL, "node_id", cl.NodeID, "advertise", cl.Advertise, "partitions", cl.Partitions,
			"lease_ttl", cl.LeaseTTL, "replicas", cl.Replicas, "delivery_stream", hc.NATSStream,
			"compact_margin", cl.CompactMargin, "compact_interval", cl.CompactInterval}
	}
	openStart := time.Now()
	node, err := hourglass.Open(c.Context, hc)
	if err != nil {
		ln.Close()
		if hc.Cluster != nil {
			return fmt.Errorf("--cluster %s: %w", hc.Cluster.URL, err)
		}
		return err
	}
	return serveNode(c, cfg, ln, node, func() {
		select {
		case <-node.Ready():
			if hc.Cluster != nil {
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
		tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if cfg.clientCA != "" {
			pool, err := loadCAs(cfg.clientCA)
			if err != nil {
				ln.Close()
				node.Close()
				return err
			}
			// A client without a certificate may still send a token.
			tc.ClientCAs, tc.ClientAuth = pool, tls.VerifyClientCertIfGiven
			scheme += " with client certificates"
		}
		go func() { served <- node.ServeTLS(ln, tc) }()
	} else {
		go func() { served <- node.Serve(ln) }()
	}
	cfg.log.listening(c.App.ErrWriter, ln.Addr().String(), scheme)
	n := &cfg.node
	log.Info("serving", append([]any{"addr", ln.Addr().String(), "data_dir", n.DataDir, "fsync", n.Fsync.String(),
		"segment_duration", n.SegmentDuration, "max_delay", units.FormatDuration(n.MaxDelay), "max_body", n.MaxBody,
		"max_attempts", n.MaxAttempts, "auth", n.AuthToken != "" || n.CredentialsFile != "", "tls", cfg.tlsCert != "", "cors", len(n.CORSOrigins) > 0}, attrs...)...)
	go waitReady()
	stopHUP := reloadOnHUP(log, cfg, node)
	defer stopHUP()

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
