package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/hourglassmq/hourglass/cluster/jsqueue"
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
	// of Options.CompactMargin and Options.CompactInterval.
	DefaultCompactMargin   = 10000
	DefaultCompactInterval = time.Minute
	// DefaultStallChecksPerSecond is the default of
	// Options.StallChecksPerSecond: every partition of a node owning up
	// to 40 is checked at each idle pause of 2 s.
	DefaultStallChecksPerSecond = 20
)

// ForwardedHeader marks a Cancel one node forwarded to the owner of the
// message's partition, so that it is not forwarded again.
const ForwardedHeader = "Hourglass-Forwarded"

// Options configure a Node. URL, NodeID, Advertise, DataDir and Sink are
// required.
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
	// SegmentDuration of the local engines; default the engine's.
	SegmentDuration time.Duration
	// Sink receives due messages with their cluster IDs (the NATS sink,
	// which uses the ID as Nats-Msg-Id). Required.
	Sink engine.Sink
	// AuthToken is sent with forwarded requests.
	AuthToken string
	// Now is the wall and monotonic clock; default time.Now.
	Now func() time.Time
	// Observer of the local engines' events, if set.
	Observer engine.Observer
	// NATSOptions are extra nats.Connect options.
	NATSOptions []nats.Option
	// Logger; default slog.Default().
	Logger *slog.Logger
	// CompactMargin: the owner of a partition compacts its streams when
	// the messages it consumed from the intake stream (since it took the
	// partition, or above its last compaction's snapshot point) exceed
	// 2 × pending + CompactMargin. Default DefaultCompactMargin; negative
	// turns compaction off (the streams then keep everything for MaxAge).
	CompactMargin int
	// CompactInterval is the least time between two compactions of a
	// partition; default DefaultCompactInterval.
	CompactInterval time.Duration
	// DeliveryStream and DeliveryPrefix are where Sink publishes: the
	// delivery stream, and the prefix of its subjects (a topic's messages
	// are on prefix+topic). Receive, Ack and Nack serve topics from
	// durable consumers of that stream (package jsqueue). Defaults
	// natsjs.DefaultStream and natsjs.DefaultPrefix.
	DeliveryStream, DeliveryPrefix string
	// Lease and MaxAttempts are those of the topic consumers this node
	// creates (jsqueue.Options); defaults queue.DefaultLease and
	// queue.DefaultMaxAttempts.
	Lease       time.Duration
	MaxAttempts int
	// MaxTopics bounds the topics this node serves consumers of;
	// default jsqueue.DefaultMaxTopics, -1 for no limit.
	MaxTopics int
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

	hooks *testHooks // nil outside tests
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

// Node is one member of a cluster. Its methods may be called from any
// goroutine.
type Node struct {
	opts      Options
	log       *slog.Logger
	nc        *nats.Conn
	js        jetstream.JetStream
	owners    jetstream.KeyValue
	inStreams []jetstream.Stream
	leases    *leases
	fwd       sync.Map // advertise URL -> *client.Client
	queue     *jsqueue.Queue
	// doneTimeout bounds one attempt to store done records:
	// DonePublishTimeout (tests shorten it).
	doneTimeout time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	loop   chan struct{} // closed when the ownership loop returns
	ready  chan struct{} // closed after the first ownership step

	stallChecks *rate.Limiter // nil: no stall checks; on the node's clock

	rr        atomic.Uint64 // round robin over partitions for unkeyed messages
	gather    gather        // group commit of unkeyed single Schedules
	scheduled atomic.Int64
	cancelled atomic.Int64

	mu struct {
		sync.Mutex
		parts map[int]*partition // the partitions this node runs
	}
}

// Open connects to NATS, creates or checks the cluster's streams and
// buckets, and starts the ownership loop.
func Open(ctx context.Context, opts Options) (*Node, error) {
	switch {
	case opts.URL == "":
		return nil, errors.New("cluster: no NATS URL: give nats://HOST:PORT[,...]")
	case opts.NodeID == "":
		return nil, errors.New("cluster: empty node ID")
	case opts.Advertise == "":
		return nil, errors.New("cluster: empty advertise URL")
	case opts.DataDir == "":
		return nil, errors.New("cluster: no data directory")
	case opts.Sink == nil:
		return nil, errors.New("cluster: no sink")
	case opts.Partitions < 0 || opts.Partitions > MaxPartitions:
		return nil, fmt.Errorf("cluster: %d partitions: from 1 to %d", opts.Partitions, MaxPartitions)
	}
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = DefaultLeaseTTL
	}
	if opts.LeaseTTL < MinLeaseTTL {
		return nil, fmt.Errorf("cluster: lease TTL %v: at least %v", opts.LeaseTTL, MinLeaseTTL)
	}
	if opts.Replicas == 0 {
		opts.Replicas = DefaultReplicas
	}
	if opts.Replicas < 1 || opts.Replicas > 5 {
		return nil, fmt.Errorf("cluster: %d replicas: from 1 to 5 (JetStream's limit)", opts.Replicas)
	}
	if opts.MaxDelay == 0 {
		opts.MaxDelay = engine.DefaultMaxDelay
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.DeliveryStream == "" {
		opts.DeliveryStream = natsjs.DefaultStream
	}
	if opts.DeliveryPrefix == "" {
		opts.DeliveryPrefix = natsjs.DefaultPrefix
	}
	if opts.CompactMargin == 0 {
		opts.CompactMargin = DefaultCompactMargin
	}
	if opts.CompactInterval == 0 {
		opts.CompactInterval = DefaultCompactInterval
	}
	if opts.StallChecksPerSecond == 0 {
		opts.StallChecksPerSecond = DefaultStallChecksPerSecond
	}
	if w := opts.IdempotencyWindow; w != 0 && (w < 100*time.Millisecond || w > opts.MaxDelay+24*time.Hour) {
		return nil, fmt.Errorf("cluster: idempotency window %v: 0 (keys off) or from 100ms (JetStream's least duplicate window) to the max delay + 1 day, %v (the intake streams' MaxAge)", w, opts.MaxDelay+24*time.Hour)
	}
	if opts.CompactInterval < 0 {
		return nil, fmt.Errorf("cluster: compaction interval %v: want a positive duration (0 takes %v)", opts.CompactInterval, DefaultCompactInterval)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	log := opts.Logger
	nopts := append([]nats.Option{
		nats.Name("hourglass-cluster " + opts.NodeID),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn("cluster: disconnected from NATS", "err", err) }),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("cluster: reconnected to NATS", "url", nc.ConnectedUrl()) }),
	}, opts.NATSOptions...)
	nc, err := nats.Connect(opts.URL, nopts...)
	if err != nil {
		return nil, fmt.Errorf("cluster: connect to %s: %w", opts.URL, err)
	}
	n := &Node{opts: opts, log: log, nc: nc, loop: make(chan struct{}), ready: make(chan struct{}), doneTimeout: DonePublishTimeout}
	n.mu.parts = map[int]*partition{}
	if r := opts.StallChecksPerSecond; r > 0 {
		n.stallChecks = rate.NewLimiter(rate.Limit(r), int(math.Ceil(r)))
	}
	if err := n.setup(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	n.queue, err = jsqueue.New(jsqueue.Options{JS: n.js, Stream: opts.DeliveryStream, Prefix: opts.DeliveryPrefix,
		Lease: opts.Lease, MaxAttempts: opts.MaxAttempts, MaxTopics: opts.MaxTopics, Replicas: opts.Replicas, Now: opts.Now, Logger: log})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	go n.ownLoop()
	return n, nil
}

// setup creates (or checks) HG_META, HG_OWNERS, HG_NODES and the streams.
func (n *Node) setup(ctx context.Context) error {
	o := &n.opts
	js, err := jetstream.New(n.nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	n.js = js
	kv := func(name string, ttl time.Duration) (jetstream.KeyValue, error) {
		var b jetstream.KeyValue
		err := retry(ctx, func() (err error) {
			b, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, TTL: ttl, Replicas: o.Replicas, Storage: jetstream.FileStorage})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("cluster: key-value bucket %s (%d replicas): %w", name, o.Replicas, err)
		}
		return b, nil
	}
	meta, err := kv("HG_META", 0)
	if err != nil {
		return err
	}
	if err := n.partitions(ctx, meta); err != nil {
		return err
	}
	if n.owners, err = kv("HG_OWNERS", o.LeaseTTL); err != nil {
		return err
	}
	nodes, err := kv("HG_NODES", o.LeaseTTL)
	if err != nil {
		return err
	}
	maxAge := o.MaxDelay + 24*time.Hour
	dups := o.IdempotencyWindow
	if dups == 0 {
		dups = offDuplicates
	}
	for p := 0; p < o.Partitions; p++ {
		var st jetstream.Stream
		err := retry(ctx, func() (err error) {
			st, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: inStream(p), Subjects: []string{inSubject(p)},
				Storage: jetstream.FileStorage, Replicas: o.Replicas, Duplicates: dups, MaxAge: maxAge})
			return err
		})
		if err != nil {
			return fmt.Errorf("cluster: intake stream %s (%d replicas): %w", inStream(p), o.Replicas, err)
		}
		n.inStreams = append(n.inStreams, st)
		if err := retry(ctx, func() error {
			_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: doneStream(p), Subjects: []string{doneSubject(p)},
				Storage: jetstream.FileStorage, Replicas: o.Replicas, MaxAge: maxAge})
			return err
		}); err != nil {
			return fmt.Errorf("cluster: done stream %s (%d replicas): %w", doneStream(p), o.Replicas, err)
		}
	}
	n.leases = newLeases(n.owners, nodes, Owner{Node: o.NodeID, URL: o.Advertise}, o.Partitions, o.LeaseTTL, o.Now)
	return nil
}

// setupTimeout bounds how long Open retries creating the streams and
// buckets while JetStream answers nothing (a NATS cluster electing its
// leaders, or several nodes creating the same stream at once).
const setupTimeout = time.Minute

// retry calls f until it succeeds, fails with an answer, or setupTimeout
// passes.
func retry(ctx context.Context, f func() error) error {
	end := time.Now().Add(setupTimeout)
	for {
		err := f()
		if err == nil || !(isTransient(err) || noPeersYet(err)) || time.Now().After(end) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// errCodeNoPeers is JetStream's answer when a stream's replicas cannot be
// placed because a peer is offline (err_code 10005), as while a NATS
// cluster is starting or a node restarts.
const errCodeNoPeers jetstream.ErrorCode = 10005

// noPeersYet reports whether err is JetStream saying that too few of its
// servers are online to place the replicas: at setup that passes once
// they are.
func noPeersYet(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeNoPeers
}

// partitions fixes the partition count: the one in HG_META, or this node's
// when it creates the cluster.
func (n *Node) partitions(ctx context.Context, meta jetstream.KeyValue) error {
	want := n.opts.Partitions
	if want == 0 {
		want = DefaultPartitions
	}
	err := retry(ctx, func() error {
		_, err := meta.Create(ctx, "partitions", []byte(strconv.Itoa(want)))
		return err
	})
	if err == nil {
		n.opts.Partitions = want
		n.log.Info("cluster: created", "partitions", want)
		return nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("cluster: reading HG_META: %w", err)
	}
	e, err := meta.Get(ctx, "partitions")
	if err != nil {
		return fmt.Errorf("cluster: reading HG_META partitions: %w", err)
	}
	have, err := strconv.Atoi(string(e.Value()))
	if err != nil || have < 1 || have > MaxPartitions {
		return fmt.Errorf("cluster: HG_META partitions is %q, not a partition count from 1 to %d", e.Value(), MaxPartitions)
	}
	if n.opts.Partitions != 0 && n.opts.Partitions != have {
		return fmt.Errorf("cluster: this cluster has %d partitions, fixed when it was created; this node was started with --partitions %d: start it with --partitions %d (or without the flag)",
			have, n.opts.Partitions, have)
	}
	n.opts.Partitions = have
	return nil
}

// Partitions returns the cluster's partition count.
func (n *Node) Partitions() int { return n.opts.Partitions }

// Ready is closed once the ownership loop ran once.
func (n *Node) Ready() <-chan struct{} { return n.ready }

// Now returns the node's clock.
func (n *Node) Now() time.Time { return n.opts.Now() }

func (n *Node) now() time.Time { return n.opts.Now() }

// ownLoop runs the ownership protocol every LeaseTTL/3 until Close.
func (n *Node) ownLoop() {
	defer close(n.loop)
	t := time.NewTicker(n.opts.LeaseTTL / 3)
	defer t.Stop()
	first := true
	for {
		n.ownStep()
		if first {
			close(n.ready)
			first = false
		}
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ownStep runs one step of the protocol and starts and stops partitions
// accordingly.
func (n *Node) ownStep() {
	ch, err := n.leases.step(n.ctx)
	if err != nil && n.ctx.Err() == nil {
		n.log.Warn("cluster: ownership step", "err", err)
	}
	for _, p := range ch.lost {
		n.log.Warn("cluster: lease lost; stopping partition", "partition", p)
		n.stopPartition(p)
	}
	for _, l := range ch.release {
		n.log.Info("cluster: giving partition up to spread the work", "partition", l.p, "live_nodes", ch.live)
		n.stopPartition(l.p)
		if err := n.leases.releaseKey(n.ctx, l); err != nil {
			n.log.Warn("cluster: releasing partition; it expires instead", "partition", l.p, "err", err)
		}
	}
	for _, l := range ch.acquired {
		n.mu.Lock()
		n.mu.parts[l.p] = n.startPartition(l)
		n.mu.Unlock()
	}
	// A partition whose runner failed is given up, so that another node
	// (or this one, later) tries again.
	n.mu.Lock()
	var failed []*partition
	for _, pt := range n.mu.parts {
		select {
		case <-pt.exited:
			failed = append(failed, pt)
		default:
		}
	}
	n.mu.Unlock()
	for _, pt := range failed {
		pt.lease.giveUp()
		n.stopPartition(pt.p)
		if n.leases.drop(pt.p) {
			n.leases.releaseKey(n.ctx, pt.lease)
		}
	}
}

func (n *Node) stopPartition(p int) {
	n.mu.Lock()
	pt := n.mu.parts[p]
	delete(n.mu.parts, p)
	n.mu.Unlock()
	if pt != nil {
		pt.stop()
	}
}

func (n *Node) partition(p int) *partition {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.mu.parts[p]
}

// Owned returns the partitions this node runs.
func (n *Node) Owned() []int {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]int, 0, len(n.mu.parts))
	for p := 0; p < n.opts.Partitions; p++ {
		if n.mu.parts[p] != nil {
			out = append(out, p)
		}
	}
	return out
}

// Stats adds up the local engines of this node's partitions; Scheduled and
// Cancelled count this node's requests.
func (n *Node) Stats() engine.Stats {
	n.mu.Lock()
	parts := make([]*partition, 0, len(n.mu.parts))
	for _, pt := range n.mu.parts {
		parts = append(parts, pt)
	}
	n.mu.Unlock()
	var s engine.Stats
	for _, pt := range parts {
		es, ok := pt.stats()
		if !ok {
			continue
		}
		s.Fired += es.Fired
		s.Delivered += es.Delivered
		s.Retries += es.Retries
		s.Pending += es.Pending
		s.Inflight += es.Inflight
		s.Loaded += es.Loaded
		s.Segments += es.Segments
		s.ReputLag += es.ReputLag
		s.Corrupt += es.Corrupt
		s.Unconfirmed += es.Unconfirmed
	}
	s.Scheduled = n.scheduled.Load()
	s.Cancelled = n.cancelled.Load()
	return s
}

// Health returns the first stalled local engine's StallError, naming its
// partition, or nil.
func (n *Node) Health() error {
	n.mu.Lock()
	parts := make([]*partition, 0, len(n.mu.parts))
	for _, pt := range n.mu.parts {
		parts = append(parts, pt)
	}
	n.mu.Unlock()
	for _, pt := range parts {
		if err := pt.health(); err != nil {
			return fmt.Errorf("partition %d: %w", pt.p, err)
		}
	}
	return nil
}

// Close stops the ownership loop and every partition, releases their
// keys so that other nodes take them at once, and disconnects.
func (n *Node) Close() error {
	n.cancel()
	<-n.loop
	n.mu.Lock()
	parts := n.mu.parts
	n.mu.parts = map[int]*partition{}
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), n.opts.LeaseTTL)
	defer cancel()
	for _, pt := range parts {
		pt.lease.giveUp()
		pt.stop()
		if n.leases.drop(pt.p) {
			if err := n.leases.releaseKey(ctx, pt.lease); err != nil {
				n.log.Warn("cluster: releasing partition at close; it expires instead", "partition", pt.p, "err", err)
			}
		}
	}
	return n.nc.Drain()
}
