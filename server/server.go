// Package server is Hourglass's network API: the connect-go handlers of
// hourglass.v1.HourglassService over an engine and its built-in queue,
// plus /healthz, /readyz and /metrics.
//
// The same handler speaks gRPC, gRPC-Web and Connect (binary or JSON,
// HTTP/1.1 or HTTP/2); Serve adds plain-text HTTP/2 (h2c) so that gRPC
// clients reach it without TLS.
//
// Guarantees:
//   - A request the server cannot accept fails with InvalidArgument and a
//     message naming the field, what was wrong, and what is allowed.
//     Nothing of a rejected Schedule or ScheduleBatch is stored: every
//     message of a batch is checked before the batch is handed, whole, to
//     the engine's atomic ScheduleBatch.
//   - With a token set, every RPC and /metrics need "Authorization: Bearer
//     <token>"; /healthz and /readyz stay open.
//   - BeginShutdown ends long polls and streams, so that an
//     http.Server.Shutdown that follows finishes promptly.
//   - Schedule and ScheduleBatch in Connect's binary protocol, what
//     package client sends, are served on a path of their own (fast.go)
//     with the same checks and byte for byte the same answers as
//     connect-go's handler, at a fraction of its CPU.
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

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/internal/wirecodec"
	"github.com/hourglassmq/hourglass/queue"
)

// Limits of the API. They are part of its contract (the schema's
// comments state them).
const (
	// MaxBatch is the most messages one ScheduleBatch may hold.
	MaxBatch = 1000
	// MaxReceive is the most messages one Receive (or one ReceiveStream
	// response) may ask for.
	MaxReceive = 1000
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
	// DefaultDelayLevels.
	DelayLevels []time.Duration
	// AuthToken, if set, is the bearer token every RPC and /metrics need.
	AuthToken string
	// Logger; default slog.Default().
	Logger *slog.Logger
	// ExternalSink names the sink due messages go to when it is not the
	// built-in queue ("webhook", "nats"); the queue then holds only dead
	// letters, and Receive of any other topic is refused with a message
	// saying where the messages go. "" for the queue.
	ExternalSink string
	// Pprof serves the Go runtime profiles (net/http/pprof) under
	// /debug/pprof/, behind AuthToken like /metrics.
	Pprof bool
	// Cluster, if set, is served instead of Engine and Queue (which must
	// then be nil): Schedule, ScheduleBatch and Cancel go to it, and
	// Receive, Ack and Nack are refused (consumers read the delivery
	// stream).
	Cluster Cluster
}

// Server serves the API. Its methods may be called from any goroutine.
type Server struct {
	// loopHTTP serves the connection loop's httpCalls (loophttp.go), made once.
	loopHTTPOnce sync.Once
	loopHTTP     http.Handler
	hourglassv1connect.UnimplementedHourglassServiceHandler

	opts    Options
	eng     core
	q       *queue.Queue
	log     *slog.Logger
	metrics *Metrics

	// polls is cancelled by BeginShutdown: it ends long polls and streams.
	polls     context.Context
	stopPolls context.CancelFunc
	shutting  atomic.Bool
	// pollsActive counts Receive and ReceiveStream calls in progress.
	pollsActive atomic.Int64
	levelsText  string // "1=1s 2=5s ..." for error messages
	// lastTopic is the topic string the fast path made last (topicString).
	lastTopic atomic.Pointer[string]
	// fastServed counts the calls the fast path answered (for tests).
	fastServed atomic.Int64
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
		return nil, fmt.Errorf("server: max body %d bytes: from 0 to %s", opts.MaxBody, FormatSize(MaxBodyLimit))
	}
	if opts.MaxDelay == 0 {
		opts.MaxDelay = engine.DefaultMaxDelay
	}
	if opts.SegmentDuration == 0 {
		opts.SegmentDuration = engine.DefaultSegmentDuration
	}
	if opts.DelayLevels == nil {
		levels, err := ParseDelayLevels(DefaultDelayLevels)
		if err != nil {
			return nil, err
		}
		opts.DelayLevels = levels
	}
	for i, d := range opts.DelayLevels {
		if d <= 0 || d > opts.MaxDelay {
			return nil, fmt.Errorf("server: delay level %d is %s: each level must be positive and at most the max delay %s", i+1, FormatDuration(d), FormatDuration(opts.MaxDelay))
		}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = NewMetrics()
	}
	s := &Server{opts: opts, q: opts.Queue, log: opts.Logger, metrics: opts.Metrics}
	if opts.Cluster != nil {
		s.eng = opts.Cluster
	} else {
		s.eng = engineCore{opts.Engine}
		s.metrics.attach(&sources{eng: opts.Engine, q: opts.Queue, dataDir: opts.DataDir, segDur: opts.SegmentDuration})
	}
	s.polls, s.stopPolls = context.WithCancel(context.Background())
	s.levelsText = levelsText(opts.DelayLevels)
	return s, nil
}

// Handler returns the HTTP handler of the whole API: the connect service
// under /hourglass.v1.HourglassService/ (Schedule and ScheduleBatch in
// Connect's binary protocol on a path of their own, fast.go), and
// /healthz, /readyz, /metrics.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	path, h := hourglassv1connect.NewHourglassServiceHandler(s,
		authGate(s.opts.AuthToken),
		connect.WithInterceptors(newLogInterceptor(s.log)),
		connect.WithReadMaxBytes(s.readMaxBytes()),
		// The standard protobuf codec, with a decoder of the common
		// ScheduleBatchRequest that allocates per batch, not per message.
		connect.WithCodec(wirecodec.Codec{}),
		// Compressing small responses costs more CPU than it saves, above
		// all on loopback: a profile under ScheduleBatch load showed a
		// tenth of the server's CPU resetting gzip writers.
		connect.WithCompressMinBytes(compressMinBytes),
		connect.WithRecover(func(ctx context.Context, spec connect.Spec, _ http.Header, p any) error {
			s.log.Error("server: panic in handler", "procedure", spec.Procedure, "panic", fmt.Sprint(p))
			return connect.NewError(connect.CodeInternal, errors.New("internal error"))
		}),
	)
	mux.Handle(path, h)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", requireToken(s.opts.AuthToken,
		promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)})))
	if s.opts.Pprof {
		mux.Handle("GET /debug/pprof/", requireToken(s.opts.AuthToken, http.HandlerFunc(pprof.Index)))
		mux.Handle("GET /debug/pprof/cmdline", requireToken(s.opts.AuthToken, http.HandlerFunc(pprof.Cmdline)))
		mux.Handle("GET /debug/pprof/profile", requireToken(s.opts.AuthToken, http.HandlerFunc(pprof.Profile)))
		mux.Handle("GET /debug/pprof/symbol", requireToken(s.opts.AuthToken, http.HandlerFunc(pprof.Symbol)))
		mux.Handle("GET /debug/pprof/trace", requireToken(s.opts.AuthToken, http.HandlerFunc(pprof.Trace)))
	}
	return &front{s: s, connect: h, mux: mux}
}

// readMaxBytes bounds one request message: room for a batch of bodies of
// the largest allowed size, up to 64 MiB, and at least one whole message.
func (s *Server) readMaxBytes() int {
	return max(64<<20, s.opts.MaxBody+MaxHeaderBytes+(1<<20))
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.shutting.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "shutting down")
		return
	}
	select {
	case <-s.eng.Ready():
		fmt.Fprintln(w, "ready")
	default:
		w.WriteHeader(http.StatusServiceUnavailable)
		if s.opts.Cluster != nil {
			fmt.Fprintln(w, "joining the cluster: connecting and taking partitions")
			return
		}
		fmt.Fprintln(w, "recovering: loading the due buckets")
	}
}

// BeginShutdown makes /readyz answer 503 and ends every long poll and
// stream (a Receive then answers with what it has, possibly nothing).
// Call it before http.Server.Shutdown, which waits for them otherwise.
func (s *Server) BeginShutdown() {
	s.shutting.Store(true)
	s.stopPolls()
}

// pollContext returns ctx, cancelled also by BeginShutdown.
func (s *Server) pollContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.polls, cancel)
	s.pollsActive.Add(1)
	return ctx, func() { stop(); cancel(); s.pollsActive.Add(-1) }
}

// compressMinBytes is the smallest response the server gzips when a client
// accepts it.
const compressMinBytes = 64 << 10

// Metrics returns the server's metrics.
func (s *Server) Metrics() *Metrics { return s.metrics }
