package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass"
	"github.com/hourglassmq/hourglass/cluster"
	"github.com/hourglassmq/hourglass/internal/units"
	"github.com/hourglassmq/hourglass/server"
)

// The categories serve --help groups its flags in; urfave/cli lists them
// in the order of their names.
const (
	catAccess   = "Access (docs/OPERATIONS.md, Access)"
	catData     = "Data and durability"
	catListen   = "Listening"
	catLogs     = "Logs and profiles"
	catMessages = "Messages"
	catQueue    = "Queue"
	catLimits   = "Resource limits"
	catSinks    = "Sinks (--sink)"
	catCluster  = "With --cluster (cluster mode, docs/CLUSTER.md)"
	catConfig   = "Config file"
)

// serveFlags are serve's flags, each with a usage of one short line;
// docs/CLI.md ("The server") says the rest. Each can be set in the file
// --config names, too.
func serveFlags() []cli.Flag {
	return withConfigFile(append([]cli.Flag{configFlag()}, serveFlagList()...))
}

func serveFlagList() []cli.Flag {
	data := dataDirFlag("`PATH` of the messages; created if missing, locked while serving").(*cli.StringFlag)
	data.Category = catData
	d := hourglass.DefaultConfig() // the one owner of the defaults
	return []cli.Flag{
		data,
		&cli.DurationFlag{Name: "segment-duration", Category: catData, Value: d.SegmentDuration, DefaultText: "1h", EnvVars: envVar("segment-duration"),
			Usage: "bucket length (a file each), a `DURATION` of whole seconds, 1s to 24h"},
		&cli.DurationFlag{Name: "preload-lead", Category: catData, Value: 10 * time.Minute, EnvVars: envVar("preload-lead"),
			DefaultText: "10m; a sixth of a bucket under 1h", Usage: "load a bucket this `DURATION` before it starts"},
		&cli.StringFlag{Name: "fsync", Category: catData, Value: d.Fsync.String(), EnvVars: envVar("fsync"),
			Usage: "`POLICY`: always, interval (every 10ms) or none (tests)"},

		&cli.StringFlag{Name: "listen", Category: catListen, Value: "127.0.0.1:7420", EnvVars: envVar("listen"),
			Usage: "`HOST:PORT` to listen on; port 0: a free one"},
		&cli.StringFlag{Name: "tls-cert", Category: catListen, EnvVars: envVar("tls-cert"),
			Usage: "serve TLS with this certificate `FILE` (PEM)"},
		&cli.StringFlag{Name: "tls-key", Category: catListen, EnvVars: envVar("tls-key"),
			Usage: "the private key `FILE` (PEM) of --tls-cert"},
		&cli.StringFlag{Name: "auth-token", Category: catAccess, EnvVars: envVar("auth-token"),
			Usage: "a bearer `TOKEN` that may do everything (credential admin)"},
		&cli.StringFlag{Name: "credentials", Category: catAccess, EnvVars: envVar("credentials"),
			Usage: "named credentials `FILE` (YAML: tokens, roles, topics); reread on SIGHUP"},
		&cli.StringFlag{Name: "audit-max-size", Category: catAccess, Value: "64MiB", EnvVars: envVar("audit-max-size"),
			Usage: "keep at most this `SIZE` of audit trail (data-dir/audit)"},
		&cli.StringFlag{Name: "audit-max-age", Category: catAccess, Value: "0", EnvVars: envVar("audit-max-age"),
			Usage: "drop audit entries older than this `DURATION` (90d); 0: by size only"},
		&cli.StringFlag{Name: "tls-client-ca", Category: catAccess, EnvVars: envVar("tls-client-ca"),
			Usage: "verify client certificates against this CA `FILE` (PEM); needs --tls-cert"},
		&cli.StringSliceFlag{Name: "cors-origin", Category: catListen, EnvVars: envVar("cors-origin"),
			Usage: "let pages of this `ORIGIN` (or *) call the API; repeatable"},

		&cli.StringFlag{Name: "log-level", Category: catLogs, Value: "info", EnvVars: envVar("log-level"),
			Usage: "`LEVEL`: debug, info, warn or error"},
		&cli.StringFlag{Name: "log-format", Category: catLogs, Value: "text", EnvVars: envVar("log-format"),
			Usage: "`FORMAT`: text or json"},
		&cli.BoolFlag{Name: "pprof", Category: catLogs, EnvVars: envVar("pprof"),
			Usage: "serve Go's profiles under /debug/pprof/"},

		&cli.StringFlag{Name: "max-delay", Category: catMessages, Value: "10y", EnvVars: envVar("max-delay"),
			Usage: "refuse messages due further ahead than this `DURATION`"},
		&cli.StringFlag{Name: "max-body", Category: catMessages, Value: "1MiB", EnvVars: envVar("max-body"),
			Usage: fmt.Sprintf("refuse bodies larger than this `SIZE` (at most %s)", units.FormatSize(server.MaxBodyLimit))},
		&cli.StringFlag{Name: "delay-levels", Category: catMessages, Value: units.DefaultDelayLevels, EnvVars: envVar("delay-levels"),
			Usage: "`DURATIONS` of delay levels 1, 2, ..."},
		&cli.DurationFlag{Name: "handoff-lead", Category: catMessages, Value: d.HandoffLead, DefaultText: "20ms", EnvVars: envVar("handoff-lead"),
			Usage: "hand messages to the queue up to this `DURATION` early (at least half of it), 0 to 1s"},
		&cli.DurationFlag{Name: "idempotency-window", Category: catMessages, Value: d.IdempotencyWindow, DefaultText: "10m",
			EnvVars: envVar("idempotency-window"), Usage: "keep idempotency keys this `DURATION`; 0: off"},

		&cli.IntFlag{Name: "max-attempts", Category: catQueue, Value: d.MaxAttempts, EnvVars: envVar("max-attempts"),
			Usage: "dead-letter a message after `N` failed attempts"},
		&cli.DurationFlag{Name: "default-lease", Category: catQueue, Value: d.DefaultLease, DefaultText: "30s", EnvVars: envVar("default-lease"),
			Usage: "lease (`DURATION`) of a Receive that asks for none"},
		&cli.IntFlag{Name: "max-topics", Category: catQueue, Value: d.MaxTopics, EnvVars: envVar("max-topics"),
			Usage: "at most `N` queue topics, dead-letter ones too; -1: no limit"},
		&cli.DurationFlag{Name: "topic-idle-timeout", Category: catQueue, Value: d.TopicIdleTimeout, DefaultText: "1m",
			EnvVars: envVar("topic-idle-timeout"), Usage: "close an unused topic's files and goroutines after this `DURATION`"},

		&cli.IntFlag{Name: "max-streams", Category: catLimits, Value: d.MaxStreams, EnvVars: envVar("max-streams"),
			Usage: "at most `N` long polls and streams at once"},
		&cli.IntFlag{Name: "max-streams-per-conn", Category: catLimits, Value: d.MaxStreamsPerConn, EnvVars: envVar("max-streams-per-conn"),
			Usage: "at most `N` of them on one connection"},
		&cli.StringFlag{Name: "max-request-size", Category: catLimits, EnvVars: envVar("max-request-size"), DefaultText: "8MiB or one --max-body message",
			Usage: "refuse requests larger than this `SIZE`"},
		&cli.DurationFlag{Name: "idle-timeout", Category: catLimits, Value: d.IdleTimeout, DefaultText: "5m", EnvVars: envVar("idle-timeout"),
			Usage: "close a connection idle this `DURATION`"},
		&cli.DurationFlag{Name: "shutdown-timeout", Category: catLimits, Value: 10 * time.Second, DefaultText: "10s", EnvVars: envVar("shutdown-timeout"),
			Usage: "on SIGTERM, wait this `DURATION` for calls in flight"},
		&cli.StringFlag{Name: "memory-limit", Category: catLimits, Value: "512MiB", EnvVars: envVar("memory-limit"),
			Usage: "the Go runtime's soft memory limit (`SIZE`); 0: none"},

		&cli.StringFlag{Name: "sink", Category: catSinks, Value: d.Sink, EnvVars: envVar("sink"),
			Usage: "where due messages go: `SINK` queue, webhook or nats"},
		&cli.StringSliceFlag{Name: "webhook", Category: catSinks, EnvVars: envVar("webhook"),
			Usage: "a route `PATTERN=URL` (* and ? match); repeatable"},
		&cli.DurationFlag{Name: "webhook-timeout", Category: catSinks, Value: d.WebhookTimeout, DefaultText: "10s", EnvVars: envVar("webhook-timeout"),
			Usage: "a POST unanswered after this `DURATION` failed"},
		&cli.StringFlag{Name: "nats-url", Category: catSinks, EnvVars: envVar("nats-url"),
			Usage: "the NATS `URLS`, comma-separated"},
		&cli.StringFlag{Name: "nats-subject-prefix", Category: catSinks, Value: d.NATSSubjectPrefix, EnvVars: envVar("nats-subject-prefix"),
			Usage: "topic T goes to subject `PREFIX`T"},
		&cli.StringFlag{Name: "nats-stream", Category: catSinks, Value: d.NATSStream, EnvVars: envVar("nats-stream"),
			Usage: "the JetStream `STREAM`; created if missing"},

		&cli.StringFlag{Name: "cluster", Category: catCluster, EnvVars: envVar("cluster"),
			Usage: "the NATS `URLS` whose JetStream holds the state"},
		&cli.StringFlag{Name: "node-id", Category: catCluster, EnvVars: envVar("node-id"), DefaultText: "hostname:port",
			Usage: "this node's unique `NAME`"},
		&cli.StringFlag{Name: "advertise", Category: catCluster, EnvVars: envVar("advertise"), DefaultText: "http://<listen address>",
			Usage: "the `URL` other nodes reach this one at"},
		&cli.IntFlag{Name: "partitions", Category: catCluster, EnvVars: envVar("partitions"), DefaultText: "the cluster's, or 8",
			Usage: "`N` partitions of a new cluster"},
		&cli.DurationFlag{Name: "lease-ttl", Category: catCluster, Value: cluster.DefaultLeaseTTL, DefaultText: "10s", EnvVars: envVar("lease-ttl"),
			Usage: "move a silent owner's partitions after this `DURATION`"},
		&cli.IntFlag{Name: "replicas", Category: catCluster, Value: cluster.DefaultReplicas, EnvVars: envVar("replicas"),
			Usage: "`N` JetStream replicas of each stream and bucket"},
		&cli.IntFlag{Name: "compact-margin", Category: catCluster, Value: cluster.DefaultCompactMargin, EnvVars: envVar("compact-margin"),
			Usage: "compact after 2 × pending + `N` reads; <0: never"},
		&cli.DurationFlag{Name: "compact-interval", Category: catCluster, Value: cluster.DefaultCompactInterval, DefaultText: "1m",
			EnvVars: envVar("compact-interval"), Usage: "at least this `DURATION` between compactions"},
	}
}
