package crashtest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/hourglassmq/hourglass/cluster"
	"github.com/hourglassmq/hourglass/internal/natscluster"
	"github.com/hourglassmq/hourglass/message"
)

// Cluster-mode defaults.
const (
	DefaultClusterNodes = 3
	DefaultLeaseTTL     = 3 * time.Second
	DefaultPartitions   = 8
	// ClusterLease is the nodes' --default-lease: every topic's
	// consumer's AckWait, the lease of every cluster Receive (they send
	// lease_ms 0).
	ClusterLease = 3 * time.Second
)

// ClusterSummary is what a --cluster run adds to the Summary.
type ClusterSummary struct {
	Nodes          int    `json:"hourglass_nodes"`
	NATSNodes      int    `json:"nats_nodes"`
	Partitions     int    `json:"partitions"`
	LeaseTTL       string `json:"lease_ttl"`
	HourglassKills int    `json:"hourglass_kills"`
	NATSKills      int    `json:"nats_kills"`
	// Kills lists every SIGKILL with its takeover measurements.
	Kills []KillReport `json:"kills"`
	// StreamDuplicates: the same Hourglass-Id stored at two sequences of
	// the delivery stream (a republish JetStream's duplicate window did not
	// absorb). Allowed (at-least-once), reported.
	StreamDuplicates int `json:"stream_duplicates"`
	// Lateness of first deliveries: when the Receive that handed the
	// message out returned minus when it was due (the later of the
	// requested time and the server's deliver_at), in ms. It includes the
	// consumers' polling (each visits the topics in turn).
	LatenessP50Ms float64 `json:"lateness_p50_ms"`
	LatenessP99Ms float64 `json:"lateness_p99_ms"`
	LatenessMaxMs float64 `json:"lateness_max_ms"`
	// NATSRestartMaxMs: the longest natscluster.Restart (until the node
	// is healthy: caught up with the meta leader and every replica).
	NATSRestartMaxMs float64 `json:"nats_restart_max_ms"`
}

// KillReport is one SIGKILL of a cluster run.
type KillReport struct {
	Cycle  int       `json:"cycle"`
	Target string    `json:"target"` // "hourglass h1" or "nats n2"
	At     time.Time `json:"at"`
	// Partitions the hourglass node owned in HG_OWNERS when it was killed.
	Partitions []int `json:"partitions,omitempty"`
	// ReownedMs: from the kill until every one of those partitions had
	// another owner in HG_OWNERS; -1 if not within the bound.
	ReownedMs float64 `json:"reowned_ms"`
	// FirstDeliveryMs: from the kill until the first Receive returning a
	// first attempt of those partitions (of any partition for a NATS kill);
	// -1 if none.
	FirstDeliveryMs float64 `json:"first_delivery_ms"`
	// MaxLateMs: the largest lateness (received minus due) of the messages
	// of those partitions (of any for a NATS kill) due from the kill to
	// the next kill (or the end): how long the kill held deliveries up.
	MaxLateMs float64 `json:"max_late_ms"`
	// LateP99Ms: the 99th percentile of the same messages' lateness
	// (issue 46's bound after a NATS kill: the lease plus 2 s).
	LateP99Ms float64 `json:"late_p99_ms"`
	// ConsumeStreams: the Consume streams open on the hourglass node when
	// it was killed (the kill waits up to midStreamWait for one).
	ConsumeStreams int `json:"consume_streams"`
	// A NATS kill's timeline (natsleaders.go): the raft groups the killed
	// server led, with their elections, and how many other servers led;
	// the partitions whose intake or done stream was among them, and
	// FirstDeliveryMs and the lateness for their messages (FirstMovedMs,
	// Moved) and for the others' (Rest).
	Elections       []Election `json:"elections,omitempty"`
	LedElsewhere    int        `json:"led_elsewhere,omitempty"`
	MovedPartitions []int      `json:"moved_partitions,omitempty"`
	FirstMovedMs    float64    `json:"first_moved_ms,omitempty"`
	Moved           Lateness   `json:"moved"`
	Rest            Lateness   `json:"rest"`
	// Nodes: what the hourglass nodes' logs record from a NATS kill to
	// the next kill.
	Nodes *NodeStages `json:"nodes,omitempty"`
}

// midStreamWait bounds how long a cycle's hourglass kill waits, past its
// drawn moment, for a Consume stream open on the node, so that most kills
// land in the middle of a stream.
const midStreamWait = 2 * time.Second

// hgNode is one hourglass node of a cluster run.
type hgNode struct {
	i       int
	id      string // --node-id
	dataDir string
	logPath string
	srv     *server // nil while down; guarded by clusterRunner.mu
}

// clusterRunner is a --cluster run: 3 NATS nodes, 3 hourglass nodes,
// producers and consumers calling the live hourglass nodes round-robin.
type clusterRunner struct {
	*runner
	nats     *natscluster.Cluster
	natsDown int // index of the NATS node killed last cycle, or -1
	nodes    []*hgNode
	nc       *nats.Conn
	owners   jetstream.KeyValue
	cycleNow atomic.Int64
	cs       *ClusterSummary
	rr       *rrClient

	mu sync.Mutex // guards hgNode.srv
}

func (r *runner) runCluster(ctx context.Context) (err error) {
	cr := &clusterRunner{runner: r, natsDown: -1,
		cs: &ClusterSummary{Nodes: DefaultClusterNodes, NATSNodes: 3, Partitions: r.cfg.Partitions, LeaseTTL: r.cfg.LeaseTTL.String()}}
	r.sum.Cluster = cr.cs
	r.progress("starting a 3-node NATS cluster (the first run on a machine builds nats-server: a minute or two)")
	cr.nats, err = natscluster.Start(ctx, natscluster.Options{Dir: filepath.Join(r.work, "nats"), Size: 3})
	if err != nil {
		return err
	}
	defer func() {
		if serr := cr.nats.Stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	for i := range DefaultClusterNodes {
		cr.nodes = append(cr.nodes, &hgNode{i: i, id: fmt.Sprintf("h%d", i),
			dataDir: filepath.Join(r.work, fmt.Sprintf("h%d", i)), logPath: filepath.Join(r.work, fmt.Sprintf("h%d.log", i))})
	}
	defer cr.stopAll(r.cfg.Cycles + 1)
	// One at a time: the first creates the cluster's streams and buckets.
	for _, n := range cr.nodes {
		if err := cr.startNode(n, 1); err != nil {
			return err
		}
	}
	cr.nc, err = nats.Connect(cr.nats.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		return fmt.Errorf("crashtest: connecting to NATS: %w", err)
	}
	defer cr.nc.Close()
	js, err := jetstream.New(cr.nc)
	if err != nil {
		return err
	}
	if cr.owners, err = js.KeyValue(ctx, "HG_OWNERS"); err != nil {
		return fmt.Errorf("crashtest: the cluster's HG_OWNERS bucket: %w", err)
	}
	cr.rr = &rrClient{w: cr.wl, up: cr.up}
	defer cr.rr.close()

	seg := r.cfg.SegmentDuration
	reserve := 8*seg + r.cfg.DrainGrace
	for cycle := 1; cycle <= r.cfg.Cycles; cycle++ {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < reserve+4*r.cfg.LeaseTTL+10*time.Second {
			r.progress("stopping after %d cycles: --duration leaves only the drain's time", cycle-1)
			break
		}
		if err := cr.restartDown(cycle); err != nil {
			return err
		}
		r.sum.Cycles = cycle
		cr.cycle(ctx, cycle)
	}
	if err := cr.restartDown(r.cfg.Cycles + 1); err != nil {
		return err
	}
	err = cr.drain(ctx)
	cr.scanNodeLogs()
	return err
}

// serverArgs are serve's flags for node n.
func (cr *clusterRunner) serverArgs(n *hgNode) []string {
	return []string{"--cluster", cr.nats.URLs(), "--node-id", n.id, "--partitions", fmt.Sprint(cr.cfg.Partitions),
		"--lease-ttl", cr.cfg.LeaseTTL.String(), "--replicas", "3",
		"--segment-duration", cr.cfg.SegmentDuration.String(), "--delay-levels", delayLevelsFlag,
		"--max-delay", "1d", "--shutdown-timeout", "5s",
		"--max-attempts", fmt.Sprint(MaxAttempts), "--default-lease", ClusterLease.String()}
}

// startNode starts hourglass node n and waits until it is ready; a failure
// after the first cycle is a start-failed violation.
func (cr *clusterRunner) startNode(n *hgNode, cycle int) error {
	t0 := time.Now()
	s, err := startServer(cr.cfg.Bin, n.dataDir, n.logPath, cr.serverArgs(n), time.Minute)
	if err == nil {
		if err = s.waitReady(time.Minute); err != nil {
			s.kill()
		}
	}
	// The partitions it takes open their recurring schedules then:
	// occurrences due before are missed (FIRE_ALL's bound, missedRun).
	cr.hist.AddStart(cycle, t0)
	if err != nil {
		err = fmt.Errorf("node %s: %w", n.id, err)
		if cycle == 1 {
			return err
		}
		cr.extra = append(cr.extra, Violation{Kind: VStartFailed, Cycle: cycle, At: time.Now(), Detail: err.Error()})
		return fmt.Errorf("%w: %v", errRestart, err)
	}
	if cycle > 1 {
		cr.recoveries = append(cr.recoveries, time.Since(t0))
	}
	cr.mu.Lock()
	n.srv = s
	cr.mu.Unlock()
	return cr.measureSkew(s.addr)
}

// restartDown starts every hourglass node and the NATS node that are down.
func (cr *clusterRunner) restartDown(cycle int) error {
	if cr.natsDown >= 0 {
		t0 := time.Now()
		if err := cr.nats.Restart(cr.natsDown); err != nil {
			cr.extra = append(cr.extra, Violation{Kind: VStartFailed, Cycle: cycle, At: time.Now(), Detail: "nats: " + err.Error()})
			return fmt.Errorf("%w: %v", errRestart, err)
		}
		cr.natsRest = append(cr.natsRest, time.Since(t0))
		cr.natsDown = -1
	}
	for _, n := range cr.nodes {
		cr.mu.Lock()
		down := n.srv == nil
		cr.mu.Unlock()
		if down {
			if err := cr.startNode(n, cycle); err != nil {
				return err
			}
		}
	}
	return nil
}

// up returns the API addresses of the hourglass nodes that run.
func (cr *clusterRunner) up() []string {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	var a []string
	for _, n := range cr.nodes {
		if n.srv != nil {
			a = append(a, n.srv.addr)
		}
	}
	return a
}

// cycle runs producers and consumers, SIGKILLs one hourglass node or one NATS node at a
// random moment while they go on, measures the takeover, and stops them.
func (cr *clusterRunner) cycle(ctx context.Context, cycle int) {
	cr.cycleNow.Store(int64(cycle))
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range cr.cfg.Producers {
		rng := rand.New(rand.NewPCG(cr.cfg.Seed, uint64(cycle)<<16|uint64(i)))
		wg.Go(func() { cr.wl.produce(wctx, cr.rr.lanes(), cycle, i, rng) })
	}
	for i := range cr.cfg.Consumers {
		rng := rand.New(rand.NewPCG(cr.cfg.Seed, uint64(cycle)<<16|0x8000|uint64(i)))
		wg.Go(func() { cr.wl.consume(wctx, cr.rr.lanes(), cycle, i, rng, false) })
	}
	cr.wl.operators(wctx, &wg, cr.rr.lanes(), cycle)
	t0 := time.Now()
	sleep(ctx, time.Second+time.Duration(cr.rng.Int64N(int64(2*time.Second))))
	k := KillReport{Cycle: cycle, ReownedMs: -1, FirstDeliveryMs: -1}
	if cr.rng.IntN(10) < 6 {
		n := cr.nodes[cr.rng.IntN(len(cr.nodes))]
		owned := cr.ownedBy(ctx, n.id)
		cr.mu.Lock()
		s := n.srv
		cr.mu.Unlock()
		for wait := time.Now().Add(midStreamWait); cr.rr.consuming(s.addr) == 0 && time.Now().Before(wait) && ctx.Err() == nil; {
			sleep(ctx, 10*time.Millisecond)
		}
		cr.mu.Lock()
		n.srv = nil // producers stop choosing it before it dies
		cr.mu.Unlock()
		k.Target, k.Partitions, k.At = "hourglass "+n.id, owned, time.Now()
		k.ConsumeStreams = cr.rr.consuming(s.addr)
		s.kill()
		cr.cs.HourglassKills++
		cr.sum.Kills++
		cr.sum.KillMoments["hourglass"]++
		if d, ok := cr.waitReowned(ctx, n.id, owned, k.At); ok {
			k.ReownedMs = ms(d)
		}
		// Its partitions open again on the nodes that take them over,
		// between the kill and now: a start of theirs, for missedRun.
		cr.hist.AddStart(cycle, k.At)
		sleep(ctx, time.Second) // load on the new owners
	} else {
		cr.killNATS(ctx, cycle, &k)
	}
	cr.cs.Kills = append(cr.cs.Kills, k)
	stop()
	wg.Wait()
	ev := cr.hist.Snapshot()
	reown := ""
	if k.ReownedMs >= 0 {
		reown = fmt.Sprintf("; its %d partitions re-owned after %.0f ms", len(k.Partitions), k.ReownedMs)
	}
	cr.progress("cycle %d/%d: SIGKILL %s at %s%s; %d scheduled, %d deliveries so far",
		cycle, cr.cfg.Cycles, k.Target, k.At.Sub(t0).Round(time.Millisecond), reown, len(ev.Schedules), len(ev.Deliveries))
}

// ownedBy lists the partitions whose HG_OWNERS entry names node.
func (cr *clusterRunner) ownedBy(ctx context.Context, node string) []int {
	var ps []int
	for p := range cr.cfg.Partitions {
		if o, ok := cr.owner(ctx, p); ok && o == node {
			ps = append(ps, p)
		}
	}
	return ps
}

// owner reads partition p's owner from HG_OWNERS ("" and false if none or
// unreadable).
func (cr *clusterRunner) owner(ctx context.Context, p int) (string, bool) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	e, err := cr.owners.Get(cctx, fmt.Sprintf("p%03d", p))
	if err != nil {
		return "", false
	}
	var o cluster.Owner
	if json.Unmarshal(e.Value(), &o) != nil {
		return "", false
	}
	return o.Node, true
}

// waitReowned polls HG_OWNERS until every partition of owned has an owner
// other than node, bounded by 3 lease TTLs plus 20 s.
func (cr *clusterRunner) waitReowned(ctx context.Context, node string, owned []int, killed time.Time) (time.Duration, bool) {
	deadline := killed.Add(3*cr.cfg.LeaseTTL + 20*time.Second)
	left := slices.Clone(owned)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		left = slices.DeleteFunc(left, func(p int) bool {
			o, ok := cr.owner(ctx, p)
			return ok && o != node
		})
		if len(left) == 0 {
			return time.Since(killed), true
		}
		sleep(ctx, 50*time.Millisecond)
	}
	return 0, false
}

// drain runs the consumers, acking what they get, until every
// acknowledged message was delivered and acked, or the deadline.
func (cr *clusterRunner) drain(ctx context.Context) error {
	cr.cycleNow.Store(int64(cr.cfg.Cycles + 1))
	t0 := time.Now()
	cr.wl.settleOperations(ctx, cr.rr.lanes())
	cr.hist.SetDrainFrom(time.Now())
	last := lastDue(cr.hist.Snapshot())
	// The grace counts from the later of the last due time and now: the
	// restarts and repairs before the drain may have taken longer than it.
	deadline := laterOf(last, time.Now()).Add(cr.cfg.SegmentDuration + cr.cfg.DrainGrace)
	cr.progress("draining: last delivery time in %v, deadline in %v", time.Until(last).Round(time.Millisecond), time.Until(deadline).Round(time.Millisecond))
	dctx, stop := context.WithDeadline(ctx, deadline)
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	for i := range cr.cfg.Consumers {
		rng := rand.New(rand.NewPCG(cr.cfg.Seed, 0xd0000|uint64(i)))
		wg.Go(func() { cr.wl.consume(dctx, cr.rr.lanes(), cr.cfg.Cycles+1, i, rng, true) })
	}
	complete := false
	for dctx.Err() == nil {
		sleep(dctx, 250*time.Millisecond)
		if time.Now().Before(last) {
			continue
		}
		if res := Check(cr.hist.Snapshot(), cr.checkParams()); len(res.Pending) == 0 {
			complete = true
			cr.hist.SetDrainEnd(time.Now())
			sleep(dctx, time.Second) // late duplicates
			break
		}
	}
	cr.sum.DrainComplete = complete
	cr.sum.DrainMs = ms(time.Since(t0))
	return nil
}

// stopAll ends every hourglass node with SIGTERM; an unclean stop is a
// violation.
func (cr *clusterRunner) stopAll(cycle int) {
	for _, n := range cr.nodes {
		cr.mu.Lock()
		s := n.srv
		n.srv = nil
		cr.mu.Unlock()
		if s == nil {
			continue
		}
		if err := s.terminate(20 * time.Second); err != nil {
			cr.extra = append(cr.extra, Violation{Kind: VUncleanStop, Cycle: cycle, At: time.Now(), Detail: "final stop of " + n.id + ": " + err.Error()})
		}
	}
}

// finishCluster fills the cluster numbers from the history.
func (r *runner) finishCluster(ev Events, res Result) {
	cs := r.sum.Cluster
	cs.StreamDuplicates = res.Counts.DupStream
	due := map[string]time.Time{}
	for _, s := range ev.Schedules {
		due[s.Key] = s.NotBefore
	}
	var late []time.Duration
	type firstDelivery struct {
		d   *Delivery
		due time.Time
	}
	var firsts []firstDelivery
	first := map[string]bool{}
	for i := range ev.Deliveries {
		d := &ev.Deliveries[i]
		if first[d.Key] || d.Attempt > 0 || isDLQ(d.Topic) {
			continue
		}
		first[d.Key] = true
		nb, ok := due[d.Key]
		if !ok {
			continue
		}
		if d.DeliverAt.After(nb) {
			nb = d.DeliverAt
		}
		if pausedBetween(ev.Policies, d.Topic, nb, d.Received) {
			continue // held by a pause, as it should be: not the cluster's lateness
		}
		late = append(late, d.Received.Sub(nb))
		firsts = append(firsts, firstDelivery{d, nb})
	}
	cs.LatenessP50Ms, cs.LatenessP99Ms, cs.LatenessMaxMs = pct(late, 50), pct(late, 99), pct(late, 100)
	for i := range cs.Kills {
		k := &cs.Kills[i]
		ours := func(d *Delivery) bool {
			if !strings.HasPrefix(k.Target, "hourglass ") {
				return true
			}
			p, ok := partitionOf(d.ID)
			return ok && slices.Contains(k.Partitions, p)
		}
		// moved: a message of a partition whose intake or done stream the
		// killed NATS server led.
		moved := func(d *Delivery) bool {
			p, ok := partitionOf(d.ID)
			return ok && slices.Contains(k.MovedPartitions, p)
		}
		if k.Elections != nil {
			k.FirstMovedMs = -1
		}
		for j := range ev.Deliveries {
			d := &ev.Deliveries[j]
			if d.Attempt > 0 || isDLQ(d.Topic) || !d.Received.After(k.At) || !ours(d) {
				continue
			}
			t := ms(d.Received.Sub(k.At))
			if k.FirstDeliveryMs < 0 || t < k.FirstDeliveryMs {
				k.FirstDeliveryMs = t
			}
			if k.Elections != nil && moved(d) && (k.FirstMovedMs < 0 || t < k.FirstMovedMs) {
				k.FirstMovedMs = t
			}
		}
		var until time.Time // the next kill, or never
		if i+1 < len(cs.Kills) {
			until = cs.Kills[i+1].At
		}
		var after, movedAfter, restAfter []time.Duration
		for _, f := range firsts {
			if f.due.Before(k.At) || (!until.IsZero() && !f.due.Before(until)) || !ours(f.d) {
				continue
			}
			late := f.d.Received.Sub(f.due)
			after = append(after, late)
			if moved(f.d) {
				movedAfter = append(movedAfter, late)
			} else {
				restAfter = append(restAfter, late)
			}
		}
		k.LateP99Ms, k.MaxLateMs = pct(after, 99), pct(after, 100)
		if k.Elections != nil {
			k.Moved, k.Rest = latenessOf(movedAfter), latenessOf(restAfter)
		}
	}
	for _, d := range r.natsRest {
		cs.NATSRestartMaxMs = max(cs.NATSRestartMaxMs, ms(d))
	}
}

// pausedBetween reports whether topic was paused at some moment from
// from to to: a pause sent before to whose resume (the topic's next
// PolicyChange unpausing it) was not answered before from. Calls in doubt
// count as taking effect.
func pausedBetween(ps []PolicyChange, topic string, from, to time.Time) bool {
	for i, p := range ps {
		if p.Topic != topic || !p.Paused || !p.Sent.Before(to) || p.Outcome == Rejected {
			continue
		}
		resumed := false
		for _, q := range ps[i+1:] {
			if q.Topic == topic && !q.Paused && q.Outcome == OK {
				resumed = q.Answered.Before(from)
				break
			}
		}
		if !resumed {
			return true
		}
	}
	return false
}

// partitionOf is the cluster partition in a message ID.
func partitionOf(id string) (int, bool) {
	mid, err := message.ParseID(id)
	if err != nil {
		return 0, false
	}
	p, _, _ := cluster.SplitID(mid)
	return p, true
}

// pct is the q-th percentile of d in ms (0 for none).
func pct(d []time.Duration, q int) float64 {
	if len(d) == 0 {
		return 0
	}
	d = slices.Clone(d)
	slices.Sort(d)
	i := min(len(d)-1, (len(d)*q)/100)
	return ms(d[i])
}
