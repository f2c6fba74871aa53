package hourglass

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"

	"github.com/hourglassmq/hourglass/access"
	"github.com/hourglassmq/hourglass/audit"
	"github.com/hourglassmq/hourglass/cluster"
	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
	"github.com/hourglassmq/hourglass/recur"
	"github.com/hourglassmq/hourglass/server"
	"github.com/hourglassmq/hourglass/sink"
	"github.com/hourglassmq/hourglass/sink/natsjs"
	"github.com/hourglassmq/hourglass/sink/webhook"
)

// Node is one running Hourglass node. Its methods may be called from any
// goroutine.
type Node struct {
	cfg     Config
	lock    *os.File
	srv     *server.Server
	ready   <-chan struct{}
	eng     *engine.Engine // nil in cluster mode
	closers []func() error // in the order Close runs them
	audit   *audit.Log
	log     *slog.Logger
	opened  time.Time
}

// Open opens the data directory (recovering what a crash left: torn tails,
// unrouted records, undelivered due messages) and starts the node. It
// returns once the logs are open; Ready is closed once the due buckets are
// loaded. Only one Node may hold a data directory at a time.
func Open(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	fresh := newDataDir(cfg.DataDir)
	lock, err := lockDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, lock: lock, log: cfg.Logger, opened: time.Now()}
	if fresh {
		abs, aerr := filepath.Abs(cfg.DataDir)
		if aerr != nil {
			abs = cfg.DataDir
		}
		n.log.Info("hourglass: new, empty data directory: nothing to recover", "data_dir", abs)
	}
	n.audit, err = audit.Open(audit.Options{Dir: AuditDir(cfg.DataDir), MaxBytes: cfg.AuditMaxBytes, MaxAge: cfg.AuditMaxAge, Logger: n.log})
	if err != nil {
		n.closeAll()
		return nil, fmt.Errorf("hourglass: the audit trail: %w", err)
	}
	n.closers = append(n.closers, n.audit.Close)
	if cfg.Cluster != nil {
		err = n.openCluster(ctx)
	} else {
		err = n.openLocal(ctx)
	}
	if err != nil {
		n.closeAll()
		return nil, err
	}
	return n, nil
}

// newDataDir reports whether dir is missing or holds nothing but the lock
// file: a new data directory, with nothing to recover.
func newDataDir(dir string) bool {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	if err != nil {
		return false
	}
	for _, e := range ents {
		if e.Name() != LockName {
			return false
		}
	}
	return true
}

// AuditDir is where the audit trail is kept in a data directory.
func AuditDir(dataDir string) string { return filepath.Join(dataDir, "audit") }

// QueueDir is where the built-in queue keeps its logs in a data directory.
func QueueDir(dataDir string) string { return filepath.Join(dataDir, "queue") }

// openLocal wires a local engine, the built-in queue and the sink.
func (n *Node) openLocal(ctx context.Context) error {
	cfg := &n.cfg
	if cfg.Fsync == commitlog.SyncNone {
		n.log.Warn("fsync none: a machine crash can lose any acknowledged message; for tests only")
	}
	q, err := queue.Open(queue.Options{
		Dir:          QueueDir(cfg.DataDir),
		MaxAttempts:  cfg.MaxAttempts,
		DefaultLease: cfg.DefaultLease,
		MaxTopics:    cfg.MaxTopics,
		IdleTopic:    cfg.TopicIdleTimeout,
		Logger:       n.log,
		Fsync:        cfg.Fsync,
		// Nothing is handed out before the topics' policies are set.
		HoldReceives: true,
		// A message must fit in one queue-log segment.
		SegmentSize: max(queue.DefaultSegmentSize, int64(cfg.MaxBody)+server.MaxHeaderBytes+1<<20),
	})
	if err != nil {
		return err
	}
	n.closers = append(n.closers, q.Close)
	metrics := server.NewMetrics()
	// The engine's sink: the queue, or a webhook or NATS sink beside it
	// (the queue then holds only dead letters).
	var out engine.Sink = q
	sinkBatch := QueueSinkBatch
	var eng *engine.Engine
	pol := &policies{q: q, log: n.log.Error}
	switch cfg.Sink {
	case SinkWebhook:
		sinkBatch = 0
		out, err = webhook.New(webhook.Options{
			Routes: cfg.Webhooks, Timeout: cfg.WebhookTimeout, MaxAttempts: cfg.MaxAttempts, Logger: n.log,
			Tracing:    sink.NewTracing(cfg.TracerProvider, "webhook"),
			Reschedule: func(ctx context.Context, r engine.Request) (message.ID, error) { return eng.Schedule(ctx, r) },
			DeadLetter: func(ctx context.Context, topic string, d engine.Delivery) error {
				return q.Deliver(ctx, topic+queue.DLQSuffix, []engine.Delivery{d})
			},
		})
	case SinkNATS:
		sinkBatch = 0
		var ns *natsjs.Sink
		ns, err = natsjs.Open(ctx, natsjs.Options{URL: cfg.NATSURL, Prefix: cfg.NATSSubjectPrefix, Stream: cfg.NATSStream, Logger: n.log,
			Tracing: sink.NewTracing(cfg.TracerProvider, "nats")})
		if err == nil {
			out = ns
			n.closers = append([]func() error{ns.Close}, n.closers...)
		}
	}
	if err != nil {
		return fmt.Errorf("hourglass: sink %s: %w", cfg.Sink, err)
	}
	// Recurring schedules arm their next occurrence as the engine hands
	// one over, before it reaches the sink.
	sched := recur.New(out, n.log, n.opened)
	eng, err = engine.Open(engine.Options{
		Dir:               cfg.DataDir,
		SegmentDuration:   cfg.SegmentDuration,
		PreloadLead:       cfg.PreloadLead,
		Fsync:             cfg.Fsync,
		MaxDelay:          cfg.MaxDelay,
		Sink:              sched,
		HandoffLead:       cfg.HandoffLead,
		SinkBatch:         sinkBatch,
		IdempotencyWindow: cfg.IdempotencyWindow,
		// The queue remembers this many recent IDs per topic to drop what
		// the engine delivers again after a crash: no more may be in flight.
		MaxInflight: queue.DefaultDedupWindow,
		// An idle topic's delivery lane ends when its queue topic closes.
		LaneIdle:  cfg.TopicIdleTimeout,
		Logger:    n.log,
		Observer:  metrics,
		OnFsync:   metrics.Fsynced,
		OnControl: pol.onControl,
		// Quotas ask the engine's pending counts, which a start after a
		// crash must make by reading what is scheduled.
		CountPending: credentialsHaveQuotas(cfg.CredentialsFile),
	})
	if err != nil {
		return err
	}
	// The engine stops first: it hands nothing to a closed queue.
	n.closers = append([]func() error{eng.Close}, n.closers...)
	q.SetReschedule(eng.Schedule)
	sched.Attach(eng)
	repairCtx, stopRepair := context.WithCancel(context.Background())
	go sched.Run(repairCtx)
	n.closers = append([]func() error{func() error { stopRepair(); return nil }}, n.closers...)
	ready := make(chan struct{})
	go pol.start(eng, ready)
	n.ready, n.eng = ready, eng
	external := ""
	if cfg.Sink != SinkQueue {
		external = cfg.Sink
	}
	n.srv, err = server.New(n.serverOptions(server.Options{
		Engine: eng, Queue: q, Schedules: sched, Metrics: metrics, DataDir: cfg.DataDir, ExternalSink: external,
	}))
	return err
}

// openCluster wires a cluster node and its delivery stream.
func (n *Node) openCluster(ctx context.Context) error {
	cfg, cl := &n.cfg, n.cfg.Cluster
	metrics := server.NewMetrics()
	// Each delivery attempt waits for its PubAcks as long as a done
	// record's (cluster.DonePublishTimeout): a publish the delivery
	// stream's dying leader took is never answered, and the retry is
	// deduplicated by the message ID.
	ns, err := natsjs.Open(ctx, natsjs.Options{URL: cfg.NATSURL, Prefix: cfg.NATSSubjectPrefix, Stream: cfg.NATSStream, Replicas: cl.Replicas,
		Timeout: cluster.DonePublishTimeout, Logger: n.log})
	if err != nil {
		return fmt.Errorf("hourglass: cluster: the delivery stream: %w", err)
	}
	n.closers = append(n.closers, ns.Close)
	node, err := cluster.Open(ctx, cluster.Options{
		URL: cl.URL, NodeID: cl.NodeID, Advertise: cl.Advertise, Partitions: cl.Partitions,
		LeaseTTL: cl.LeaseTTL, Replicas: cl.Replicas, DataDir: filepath.Join(cfg.DataDir, "cluster"),
		MaxDelay: cfg.MaxDelay, Sink: ns, AuthToken: cfg.AuthToken, Logger: n.log, IdempotencyWindow: cfg.IdempotencyWindow,
		Engine:     cluster.EngineOptions{SegmentDuration: cfg.SegmentDuration, Observer: metrics},
		Queue:      cluster.QueueOptions{Stream: ns.Stream(), Prefix: ns.Prefix(), Lease: cfg.DefaultLease, MaxAttempts: cfg.MaxAttempts, MaxTopics: cfg.MaxTopics},
		Compaction: cluster.CompactionOptions{Margin: cl.CompactMargin, Interval: cl.CompactInterval},
	})
	if err != nil {
		return fmt.Errorf("hourglass: cluster %s: %w", cl.URL, err)
	}
	n.closers = append([]func() error{node.Close}, n.closers...)
	n.ready = node.Ready()
	n.srv, err = server.New(n.serverOptions(server.Options{Cluster: clusterAPI{node}, Metrics: metrics, ExternalSink: SinkNATS}))
	return err
}

// serverOptions adds the Config's API settings to o.
func (n *Node) serverOptions(o server.Options) server.Options {
	c := &n.cfg
	o.SegmentDuration, o.MaxBody, o.MaxDelay, o.DelayLevels = c.SegmentDuration, c.MaxBody, c.MaxDelay, c.DelayLevels
	o.AuthToken, o.Logger, o.Pprof, o.CORSOrigins = c.AuthToken, n.log, c.Pprof, c.CORSOrigins
	o.CredentialsFile, o.Audit = c.CredentialsFile, n.audit
	o.TracerProvider = c.TracerProvider
	o.MaxStreams, o.MaxStreamsPerConn, o.MaxRequestBytes, o.IdleTimeout = c.MaxStreams, c.MaxStreamsPerConn, c.MaxRequestBytes, c.IdleTimeout
	return o
}

// Ready is closed once recovery is done and the due buckets are loaded (in
// cluster mode: once the node has joined and taken its partitions).
func (n *Node) Ready() <-chan struct{} { return n.ready }

// Refused is closed when recovery finds what the node must not serve
// past without an operator (a bucket due at start whose done log is
// damaged or lost, a damaged record in the retained commitlog); RefusedErr
// says what and names the repair command. Those checks come before
// anything is delivered: a node that refuses has handed nothing to the
// queue or a sink and fired no recurring occurrence (engine.Refused).
// hourglass serve then exits with that error. It is never closed in
// cluster mode.
func (n *Node) Refused() <-chan struct{} {
	if n.eng == nil {
		return nil
	}
	return n.eng.Refused()
}

// RefusedErr is why Refused was closed, or nil.
func (n *Node) RefusedErr() error {
	if n.eng == nil {
		return nil
	}
	return n.eng.RefusedErr()
}

// Handler is the API on net/http (Connect, Connect-JSON, gRPC-Web,
// /healthz, /readyz, /metrics), for a program that serves it with its own
// http.Server (HTTP/1.1, or HTTP/2); Serve serves it and gRPC together.
func (n *Node) Handler() http.Handler { return n.srv.Handler() }

// GRPCServer is the API as a grpc-go server, for a program that serves it
// on a listener of its own.
func (n *Node) GRPCServer() *grpc.Server { return n.srv.GRPCServer() }

// Serve serves the whole API on ln (every protocol on one address,
// docs/API.md) until Shutdown or Close; it returns http.ErrServerClosed
// then.
func (n *Node) Serve(ln net.Listener) error { return n.srv.Serve(ln, nil) }

// ServeTLS is Serve over TLS with config's certificates.
func (n *Node) ServeTLS(ln net.Listener, config *tls.Config) error { return n.srv.Serve(ln, config) }

// ReloadCredentials reads Config.CredentialsFile again; a file that is
// not valid is the error and leaves the credentials in use. who names the
// operator (or signal) in the audit trail.
func (n *Node) ReloadCredentials(who string) error { return n.srv.ReloadCredentials(who) }

// Shutdown stops Serve gracefully: readiness goes false, long polls and
// streams end, calls in flight finish until ctx ends. The node keeps its
// data open: Close it afterwards.
func (n *Node) Shutdown(ctx context.Context) error { return n.srv.Shutdown(ctx) }

// Close shuts the API down (if Serve runs, giving calls in flight a few
// seconds), then closes the engine, the queue and the sinks cleanly and
// releases the data directory.
func (n *Node) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := n.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		n.log.Warn("hourglass: calls in flight did not finish in time; their connections were closed")
		err = nil
	}
	if cerr := n.closeAll(); err == nil {
		err = cerr
	}
	return err
}

func (n *Node) closeAll() error {
	var err error
	for _, c := range n.closers {
		if cerr := c(); err == nil {
			err = cerr
		}
	}
	n.closers = nil
	if n.lock != nil {
		n.lock.Close()
		n.lock = nil
	}
	return err
}

// credentialsHaveQuotas reports whether the credentials file at path sets
// quotas (a file that does not load is server.New's to report).
func credentialsHaveQuotas(path string) bool {
	if path == "" {
		return false
	}
	set, err := access.Load(path)
	return err == nil && set.HasQuotas()
}
