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
	"github.com/hourglassmq/hourglass/message"
)

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

	// life is the node's lifetime: ctx ends at Close, loop is closed when
	// the ownership loop returns, ready after its first step.
	life struct {
		ctx    context.Context
		cancel context.CancelFunc
		loop   chan struct{}
		ready  chan struct{}
	}

	stallChecks *rate.Limiter // nil: no stall checks; on the node's clock

	rr     atomic.Uint64 // round robin over partitions for unkeyed messages
	gather gather        // group commit of unkeyed single Schedules
	// counts are this node's requests (Stats).
	counts struct{ scheduled, cancelled atomic.Int64 }

	mu struct {
		sync.Mutex
		parts map[int]*partition // the partitions this node runs
	}
}

// Open connects to NATS, creates or checks the cluster's streams and
// buckets, and starts the ownership loop.
func Open(ctx context.Context, opts Options) (*Node, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
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
	n := &Node{opts: opts, log: log, nc: nc, doneTimeout: DonePublishTimeout}
	n.life.loop, n.life.ready = make(chan struct{}), make(chan struct{})
	n.mu.parts = map[int]*partition{}
	if r := opts.StallChecksPerSecond; r > 0 {
		n.stallChecks = rate.NewLimiter(rate.Limit(r), int(math.Ceil(r)))
	}
	if err := n.setup(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	n.queue, err = jsqueue.New(jsqueue.Options{JS: n.js, Stream: opts.Queue.Stream, Prefix: opts.Queue.Prefix,
		Lease: opts.Queue.Lease, MaxAttempts: opts.Queue.MaxAttempts, MaxTopics: opts.Queue.MaxTopics, Replicas: opts.Replicas, Now: opts.Now, Logger: log})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	n.life.ctx, n.life.cancel = context.WithCancel(context.Background())
	n.gather.publish = func(ms []message.Message) ([]message.ID, error) {
		p := int(n.rr.Add(1) % uint64(n.opts.Partitions))
		return n.publishIntake(n.life.ctx, p, ms, "")
	}
	// A gathered intake message must pass publishIntake's size check
	// (max_payload less copyOverhead, less its own framing) even where the
	// NATS servers set max_payload below gatherBytes.
	n.gather.limit = min(gatherBytes, int(nc.MaxPayload())-copyOverhead-16)
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
func (n *Node) Ready() <-chan struct{} { return n.life.ready }

// Now returns the node's clock.
func (n *Node) Now() time.Time { return n.opts.Now() }

func (n *Node) now() time.Time { return n.opts.Now() }

// ownLoop runs the ownership protocol every LeaseTTL/3 until Close.
func (n *Node) ownLoop() {
	defer close(n.life.loop)
	t := time.NewTicker(n.opts.LeaseTTL / 3)
	defer t.Stop()
	first := true
	for {
		n.ownStep()
		if first {
			close(n.life.ready)
			first = false
		}
		select {
		case <-n.life.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ownStep runs one step of the protocol and starts and stops partitions
// accordingly.
func (n *Node) ownStep() {
	ch, err := n.leases.step(n.life.ctx)
	if err != nil && n.life.ctx.Err() == nil {
		n.log.Warn("cluster: ownership step", "err", err)
	}
	for _, p := range ch.lost {
		n.log.Warn("cluster: lease lost; stopping partition", "partition", p)
		n.stopPartition(p)
	}
	for _, l := range ch.release {
		n.log.Info("cluster: giving partition up to spread the work", "partition", l.p, "live_nodes", ch.live)
		n.stopPartition(l.p)
		if err := n.leases.releaseKey(n.life.ctx, l); err != nil {
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
			n.leases.releaseKey(n.life.ctx, pt.lease)
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
	s.Scheduled = n.counts.scheduled.Load()
	s.Cancelled = n.counts.cancelled.Load()
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
	n.life.cancel()
	<-n.life.loop
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
