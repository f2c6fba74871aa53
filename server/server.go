// Package server is Hourglass's network API: hourglass.v1.HourglassService
// over an engine and its built-in queue (or a cluster node), plus
// /healthz, /readyz and /metrics.
//
// One protocol-neutral implementation (type api: rpc.go, manage.go for
// the read-only Get and List, operate.go, schedules.go; the streams in
// streams.go) answers every call; grpc.go serves it as it is as native
// gRPC on grpc-go, connect.go adapts it to Connect, Connect-JSON and
// gRPC-Web on connect-go. Serve (listen.go) puts
// both on one listener: HTTP/2 connections whose first request is gRPC go
// to grpc-go, every other connection to net/http (HTTP/1.1 and HTTP/2).
//
// Guarantees:
//   - A request the server cannot accept fails with InvalidArgument and a
//     message naming the field, what was wrong, and what is allowed; JSON
//     with a field the schema does not name is refused the same way.
//     Nothing of a rejected Schedule or ScheduleBatch is stored: every
//     message of a batch is checked before the batch is handed, whole, to
//     the engine's atomic ScheduleBatch.
//   - With a token or credentials set, every RPC and /metrics need a
//     credential (a bearer token or a client certificate) whose verbs and
//     topics allow the call (access_rules.go); /healthz, /readyz,
//     grpc.health.v1's Check and reflection stay open (the health Watch
//     stream needs a credential).
//   - Conditions a client should retry later answer Unavailable or
//     ResourceExhausted, never Internal: shutting down, a full disk, too
//     many open files, a limit on long polls, streams or request size.
//   - BeginShutdown ends long polls and streams, so that a Shutdown that
//     follows finishes promptly.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/health"

	"github.com/hourglassmq/hourglass/access"
	"github.com/hourglassmq/hourglass/audit"
	"github.com/hourglassmq/hourglass/console"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/internal/units"
	"github.com/hourglassmq/hourglass/queue"
	"github.com/hourglassmq/hourglass/recur"
)

// Limits of the API. They are part of its contract (the schema's
// comments state them).
const (
	// MaxBatch is the most messages one ScheduleBatch may hold.
	MaxBatch = 1000
	// MaxReceive is the most messages one Receive (or one ReceiveStream
	// response) may ask for.
	MaxReceive = 1000
	// MaxAckBatch is the most receipts one AckBatch may hold, and the
	// most acks (and nacks) of one Consume settle.
	MaxAckBatch = 1000
	// MaxWait is the longest long poll one Receive may ask for.
	MaxWait = 5 * time.Minute
	// MaxHeaderBytes bounds the keys and values of one message's headers
	// together.
	MaxHeaderBytes = 64 << 10
	// MaxBodyLimit is the largest Options.MaxBody: a message must fit in
	// one record of the engine's and the queue's logs.
	MaxBodyLimit = 32 << 20
	// DefaultMaxBody is Options.MaxBody's default, 1 MiB.
	DefaultMaxBody = 1 << 20
	// DefaultStreamBatch is ReceiveStream's max_messages when 0.
	DefaultStreamBatch = 100
	// streamPoll is how long one long poll of a ReceiveStream waits
	// before it polls again (the stream itself stays open).
	streamPoll = time.Minute
)

// Options configure a Server. Engine and Queue are required, or Cluster;
// the queue must be the engine's sink.
type Options struct {
	Engine *engine.Engine
	Queue  *queue.Queue
	// Schedules keeps the recurring schedules (CreateSchedule and the
	// others); nil answers them Unimplemented. In cluster mode the
	// Cluster's are served instead.
	Schedules recur.Service
	// Metrics collects what /metrics serves. Pass the same one as the
	// engine's Options.Observer to get lateness and per-topic delivery
	// counts; default a new one that sees no engine events.
	Metrics *Metrics
	// DataDir is the data directory, for the disk gauges of /metrics and
	// the pending counts of Stats; "" leaves them out.
	DataDir string
	// SegmentDuration is the engine's bucket length; default 1 h. It sizes
	// the buckets of Stats whose segment file is not listed yet.
	SegmentDuration time.Duration
	// MaxBody bounds a message body in bytes; default 1 MiB, at most
	// MaxBodyLimit.
	MaxBody int
	// MaxDelay must equal the engine's MaxDelay; default
	// engine.DefaultMaxDelay. Requests beyond it are refused with a
	// message naming it.
	MaxDelay time.Duration
	// DelayLevels maps delay_level 1, 2, ... to delays; default
	// units.DefaultDelayLevels.
	DelayLevels []time.Duration
	// AuthToken, if set, is a bearer token that may do everything (the
	// credential "admin").
	AuthToken string
	// Audit, if set, is the audit trail: every operator change (the RPCs
	// access_rules.go marks, a credentials reload) is appended to it, and
	// ListAudit reads it.
	Audit *audit.Log
	// CredentialsFile, if set, names the credentials file (package
	// access): named tokens and client certificate names, each with its
	// verbs on its topics. It is read by New and by ReloadCredentials.
	// With neither AuthToken nor CredentialsFile every caller may do
	// everything.
	CredentialsFile string
	// Logger; default slog.Default().
	Logger *slog.Logger
	// ExternalSink names the sink due messages go to when it is not the
	// built-in queue ("webhook", "nats"); the queue then holds only dead
	// letters, and Receive of any other topic is refused with a message
	// saying where the messages go. "" for the queue.
	ExternalSink string
	// TracerProvider, if set, records a span per Schedule call and per
	// message handed to a consumer (tracing.go); nil: no spans (a
	// caller's trace context is still stored with its messages).
	TracerProvider trace.TracerProvider
	// Pprof serves the Go runtime profiles (net/http/pprof) under
	// /debug/pprof/, behind AuthToken like /metrics.
	Pprof bool
	// Cluster, if set, is served instead of Engine and Queue (which must
	// then be nil): Schedule, ScheduleBatch, Cancel, Receive and the
	// Consume stream, and Ack and Nack by receipt go to it; the queue's
	// other RPCs (Ack or Nack by id, Extend, ...) are refused.
	Cluster Cluster
	// MaxRequestBytes bounds one request message after decompression, on
	// every protocol; default the larger of DefaultMaxRequestBytes and
	// one message of MaxBody with its headers. A larger request is
	// refused with ResourceExhausted.
	MaxRequestBytes int
	// MaxStreams bounds the long polls (Receive with a wait), ReceiveStream
	// and Consume streams, ScheduleStreams, grpc.health.v1 Watch and
	// reflection streams open at once on the whole server; default
	// DefaultMaxStreams. One more is refused with
	// ResourceExhausted naming the limit.
	MaxStreams int
	// MaxStreamsPerConn is MaxStreams for one client connection; default
	// DefaultMaxStreamsPerConn.
	MaxStreamsPerConn int
	// CORSOrigins are the browser origins ("https://console.example.com",
	// or "*") allowed to call the API from a page, for Connect and
	// gRPC-Web; empty (the default) sends no CORS headers.
	CORSOrigins []string
	// IdleTimeout closes a client connection with no call in flight after
	// this long; default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// HeaderTimeout bounds the reading of a request's head (and of an
	// HTTP/2 connection's preface); default DefaultHeaderTimeout.
	HeaderTimeout time.Duration
	// BodyTimeout bounds the reading of an HTTP/1.1 request's body;
	// default DefaultBodyTimeout.
	BodyTimeout time.Duration

	// streamCalls, if set, replaces a ScheduleStream's calls in flight
	// (streamCalls, or clusterStreamCalls): tests of the one-node limit
	// drive it through a fake cluster.
	streamCalls int
}

// Defaults of Options.
const (
	DefaultMaxRequestBytes   = 8 << 20
	DefaultMaxStreams        = 10_000
	DefaultMaxStreamsPerConn = 100
	DefaultIdleTimeout       = 5 * time.Minute
	DefaultHeaderTimeout     = 10 * time.Second
	DefaultBodyTimeout       = time.Minute
)

// Server serves the API. Its methods may be called from any goroutine.
type Server struct {
	opts    Options
	tracer  trace.Tracer // nil: tracing off (tracing.go)
	eng     core
	q       *queue.Queue // nil in cluster mode
	recv    Receiver     // q, or the cluster node
	log     *slog.Logger
	metrics *Metrics

	levelsText string // "1=1s 2=5s ..." for error messages
	limits     *limiter
	paths      pathNamer  // names files relative to the data directory for callers
	disk       diskSample // Stats' measure of the data directory
	// creds are the credentials of Options.CredentialsFile, swapped whole
	// by ReloadCredentials; nil without a file.
	creds atomic.Pointer[access.Set]
	// denied bounds the denied calls the audit trail records.
	denied *deniedLog

	// life is what Serve starts and BeginShutdown ends.
	life struct {
		// polls is cancelled by BeginShutdown: it ends long polls and
		// streams.
		polls     context.Context
		stopPolls context.CancelFunc
		shutting  atomic.Bool
		// pollsActive counts Receive and ReceiveStream calls in progress.
		pollsActive atomic.Int64
		// serving is set by Serve.
		serving atomic.Pointer[serving]

		healthMu sync.Mutex
		healths  []*health.Server // guarded by healthMu: those of GRPCServer
	}

	// changes serializes the management changes that read, check and then
	// write.
	changes struct {
		// backingUp is set while a backup (serveBackup) runs: one at a
		// time.
		backingUp atomic.Bool
		// calendar serializes the changes of calendars (a check of what is
		// stored, then a control record) with those of the recurring
		// schedules that name one (calendarsLocked).
		calendar sync.Mutex
		// policies holds a *sync.Mutex per topic: SetPolicy reads, changes
		// and writes a topic's policy under it (lockPolicy).
		policies sync.Map
	}
}

// New returns a Server over opts.Engine and opts.Queue.
func New(opts Options) (*Server, error) {
	if opts.Cluster != nil && (opts.Engine != nil || opts.Queue != nil) {
		return nil, errors.New("server: Options.Cluster replaces Engine and Queue: set only Cluster")
	}
	if opts.Cluster == nil && (opts.Engine == nil || opts.Queue == nil) {
		return nil, errors.New("server: Options.Engine and Options.Queue are required (or Options.Cluster)")
	}
	if opts.MaxBody == 0 {
		opts.MaxBody = DefaultMaxBody
	}
	if opts.MaxBody < 0 || opts.MaxBody > MaxBodyLimit {
		return nil, fmt.Errorf("server: max body %d bytes: from 0 to %s", opts.MaxBody, units.FormatSize(MaxBodyLimit))
	}
	if opts.MaxDelay == 0 {
		opts.MaxDelay = engine.DefaultMaxDelay
	}
	if opts.SegmentDuration == 0 {
		opts.SegmentDuration = engine.DefaultSegmentDuration
	}
	if opts.DelayLevels == nil {
		levels, err := units.ParseDelayLevels(units.DefaultDelayLevels)
		if err != nil {
			return nil, err
		}
		opts.DelayLevels = levels
	}
	for i, d := range opts.DelayLevels {
		if d <= 0 || d > opts.MaxDelay {
			return nil, fmt.Errorf("server: delay level %d is %s: each level must be positive and at most the max delay %s", i+1, units.FormatDuration(d), units.FormatDuration(opts.MaxDelay))
		}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics()
	}
	if opts.MaxRequestBytes == 0 {
		opts.MaxRequestBytes = max(DefaultMaxRequestBytes, opts.MaxBody+MaxHeaderBytes+(64<<10))
	}
	if opts.MaxRequestBytes < opts.MaxBody+MaxHeaderBytes {
		return nil, fmt.Errorf("server: max request %s: at least one message of the max body %s with its headers (%s)",
			units.FormatSize(int64(opts.MaxRequestBytes)), units.FormatSize(int64(opts.MaxBody)), units.FormatSize(int64(opts.MaxBody+MaxHeaderBytes)))
	}
	if opts.MaxStreams == 0 {
		opts.MaxStreams = DefaultMaxStreams
	}
	if opts.MaxStreamsPerConn == 0 {
		opts.MaxStreamsPerConn = DefaultMaxStreamsPerConn
	}
	if opts.MaxStreams < 1 || opts.MaxStreamsPerConn < 1 {
		return nil, fmt.Errorf("server: max streams %d, per connection %d: each at least 1", opts.MaxStreams, opts.MaxStreamsPerConn)
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.HeaderTimeout == 0 {
		opts.HeaderTimeout = DefaultHeaderTimeout
	}
	if opts.BodyTimeout == 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	if opts.IdleTimeout < 0 || opts.HeaderTimeout < 0 || opts.BodyTimeout < 0 {
		return nil, errors.New("server: idle, header and body timeouts must be positive (0 means the default)")
	}
	s := &Server{opts: opts, denied: newDeniedLog(), q: opts.Queue, log: opts.Logger, metrics: opts.Metrics,
		limits: newLimiter(opts.MaxStreams, opts.MaxStreamsPerConn), paths: newPathNamer(opts.DataDir)}
	s.metrics.streams.Store(s.limits)
	if opts.Cluster != nil {
		s.eng, s.recv = opts.Cluster, opts.Cluster
	} else {
		s.eng, s.recv = engineCore{opts.Engine}, opts.Queue
		s.metrics.attach(&sources{eng: opts.Engine, q: opts.Queue, dataDir: opts.DataDir, segDur: opts.SegmentDuration})
	}
	if opts.CredentialsFile != "" {
		set, err := access.Load(opts.CredentialsFile)
		if err == nil {
			if qerr := s.quotasUsable(set); qerr != nil {
				err = fmt.Errorf("%s: %w", opts.CredentialsFile, qerr)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		s.creds.Store(set)
	}
	if opts.TracerProvider != nil {
		s.tracer = opts.TracerProvider.Tracer(tracerName)
	}
	s.life.polls, s.life.stopPolls = context.WithCancel(context.Background())
	s.levelsText = levelsText(opts.DelayLevels)
	return s, nil
}

// Handler returns the HTTP handler of the whole API on net/http: the
// Connect, Connect-JSON and gRPC-Web service under
// /hourglass.v1.HourglassService/, and /healthz, /readyz, /metrics, the
// web console at /ui/ (and /debug/pprof/ with Options.Pprof), behind CORS
// when Options.CORSOrigins is set. Serve serves it on HTTP/1.1 and HTTP/2
// connections; native gRPC is GRPCServer's.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	path, h := s.connectHandler()
	mux.Handle(path, h)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", s.require(access.Read,
		promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)})))
	mux.Handle("POST "+BackupPath, s.require(access.Manage, http.HandlerFunc(s.serveBackup)))
	// The web console: static files; its data comes from the API above.
	mux.Handle("GET "+console.Prefix, console.Handler())
	if s.opts.Pprof {
		mux.Handle("GET /debug/pprof/", s.require(access.Manage, http.HandlerFunc(pprof.Index)))
		mux.Handle("GET /debug/pprof/cmdline", s.require(access.Manage, http.HandlerFunc(pprof.Cmdline)))
		mux.Handle("GET /debug/pprof/profile", s.require(access.Manage, http.HandlerFunc(pprof.Profile)))
		mux.Handle("GET /debug/pprof/symbol", s.require(access.Manage, http.HandlerFunc(pprof.Symbol)))
		mux.Handle("GET /debug/pprof/trace", s.require(access.Manage, http.HandlerFunc(pprof.Trace)))
	}
	return s.withCORS(bodyDeadline(s.opts.BodyTimeout, s.opts.MaxRequestBytes+(64<<10), mux))
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if why := s.notReady(); why != "" {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, why)
		return
	}
	fmt.Fprintln(w, "ready")
}

// notReady says why the server is not ready, or "" when it is.
func (s *Server) notReady() string {
	if s.life.shutting.Load() {
		return "shutting down"
	}
	select {
	case <-s.eng.Ready():
		if err := s.eng.Health(); err != nil {
			return "stalled: " + s.paths.text(err.Error())
		}
		if s.q != nil {
			if err := s.q.Health(); err != nil {
				return "stalled: " + s.paths.text(err.Error())
			}
		}
		return ""
	default:
		if s.opts.Cluster != nil {
			return "joining the cluster: connecting and taking partitions"
		}
		return "recovering: loading the due buckets"
	}
}

// BeginShutdown makes /readyz answer 503 and grpc.health.v1 NOT_SERVING,
// and ends every long poll and stream (a Receive then answers with what
// it has, possibly nothing). Call it before http.Server.Shutdown, which
// waits for them otherwise.
func (s *Server) BeginShutdown() {
	s.life.shutting.Store(true)
	s.life.healthMu.Lock()
	for _, hs := range s.life.healths {
		hs.Shutdown() // NOT_SERVING from now on
	}
	s.life.healthMu.Unlock()
	s.life.stopPolls()
}

// pollContext returns ctx, cancelled also by BeginShutdown. Its cancel
// may be called more than once (Consume's reader and its handler both do).
func (s *Server) pollContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.life.polls, cancel)
	s.life.pollsActive.Add(1)
	var once sync.Once
	return ctx, func() { once.Do(func() { stop(); cancel(); s.life.pollsActive.Add(-1) }) }
}

// compressMinBytes is the smallest response the server gzips when a client
// accepts it: compressing small responses costs more CPU than it saves.
const compressMinBytes = 64 << 10

// Metrics returns the server's metrics.
func (s *Server) Metrics() *Metrics { return s.metrics }
