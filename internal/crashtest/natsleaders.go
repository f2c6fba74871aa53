package crashtest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/hourglassmq/hourglass/cluster"
)

// The timeline of a NATS kill: which raft groups of the cluster (the
// JetStream meta group, every replicated stream and consumer) the killed
// server led, and when another server led each of them, read from the
// servers' monitoring endpoint /jsz. While a group has no leader its
// stream takes no publish (a partition's intake or done records, the
// delivery stream) and its consumer hands nothing out.

// Election is one raft group the killed NATS server led.
type Election struct {
	// Group is "meta", a stream's name, or "STREAM/CONSUMER".
	Group string `json:"group"`
	// ElectedMs: from the kill until another server led the group (the
	// new leader's leader_since, else when a survivor first named it);
	// -1 if none did within electionBound.
	ElectedMs float64 `json:"elected_ms"`
}

// electionBound bounds how long the elections after a NATS kill are
// watched (nats-server's followers campaign after a random 4-9 s without
// their leader).
const electionBound = 20 * time.Second

// electionPoll is the pause between two reads of the survivors' /jsz.
const electionPoll = 100 * time.Millisecond

// groupLeader is a raft group's leader as one server reports it.
type groupLeader struct {
	leader string
	since  time.Time // zero if not reported (the meta group)
}

// leaderView maps each raft group to its leader as one server sees it.
type leaderView map[string]groupLeader

// jszLeaders is the part of /jsz?accounts=true&streams=true&consumers=true
// the timeline reads.
type jszLeaders struct {
	Meta     *jszCluster `json:"meta_cluster"`
	Accounts []struct {
		Streams []struct {
			Name      string      `json:"name"`
			Cluster   *jszCluster `json:"cluster"`
			Consumers []struct {
				Name    string      `json:"name"`
				Cluster *jszCluster `json:"cluster"`
			} `json:"consumer_detail"`
		} `json:"stream_detail"`
	} `json:"account_details"`
}

type jszCluster struct {
	Leader      string            `json:"leader"`
	LeaderSince *time.Time        `json:"leader_since"`
	Replicas    []json.RawMessage `json:"replicas"`
}

// leaders turns a /jsz answer into a view. Groups of one replica (the
// readers' ordered consumers) are left out: they die with their server
// and are made again, never elected.
func (z *jszLeaders) leaders() leaderView {
	v := leaderView{}
	add := func(group string, c *jszCluster) {
		if c == nil || len(c.Replicas) == 0 {
			return
		}
		gl := groupLeader{leader: c.Leader}
		if c.LeaderSince != nil {
			gl.since = *c.LeaderSince
		}
		v[group] = gl
	}
	if z.Meta != nil {
		v["meta"] = groupLeader{leader: z.Meta.Leader}
	}
	for _, a := range z.Accounts {
		for _, s := range a.Streams {
			add(s.Name, s.Cluster)
			for _, c := range s.Consumers {
				add(s.Name+"/"+c.Name, c.Cluster)
			}
		}
	}
	return v
}

// readLeaders reads the leaders as the NATS server whose monitoring base
// URL is base sees them.
func readLeaders(ctx context.Context, hc *http.Client, base string) (leaderView, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/jsz?accounts=true&streams=true&consumers=true", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		return nil, fmt.Errorf("%s/jsz answered %d: %s", base, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	var z jszLeaders
	if err := json.NewDecoder(resp.Body).Decode(&z); err != nil {
		return nil, fmt.Errorf("%s/jsz: %w", base, err)
	}
	return z.leaders(), nil
}

// electionWatch follows the groups a killed server led until each has
// another leader. One goroutine uses it.
type electionWatch struct {
	victim  string
	at      time.Time // the kill
	led     []string  // the groups victim led, sorted
	others  int       // the groups other servers led
	elected map[string]time.Time
}

// newElectionWatch starts watching what before, the victim's own view
// just before its kill at at, says it led.
func newElectionWatch(victim string, at time.Time, before leaderView) *electionWatch {
	w := &electionWatch{victim: victim, at: at, elected: map[string]time.Time{}}
	for g, l := range before {
		if l.leader == victim {
			w.led = append(w.led, g)
		} else {
			w.others++
		}
	}
	slices.Sort(w.led)
	return w
}

// observe notes what one survivor's view, read at seen, says of the
// groups still without a new leader.
func (w *electionWatch) observe(v leaderView, seen time.Time) {
	for _, g := range w.led {
		if _, ok := w.elected[g]; ok {
			continue
		}
		l, ok := v[g]
		if !ok || l.leader == "" || l.leader == w.victim {
			continue
		}
		t := seen
		if l.since.After(w.at) && l.since.Before(seen) {
			t = l.since
		}
		w.elected[g] = t
	}
}

func (w *electionWatch) done() bool { return len(w.elected) == len(w.led) }

// elections lists the led groups, soonest elected first, those not
// elected (-1) last.
func (w *electionWatch) elections() []Election {
	es := make([]Election, 0, len(w.led))
	for _, g := range w.led {
		e := Election{Group: g, ElectedMs: -1}
		if t, ok := w.elected[g]; ok {
			e.ElectedMs = ms(t.Sub(w.at))
		}
		es = append(es, e)
	}
	slices.SortStableFunc(es, func(a, b Election) int {
		if (a.ElectedMs < 0) != (b.ElectedMs < 0) {
			return cmp.Compare(b.ElectedMs, a.ElectedMs)
		}
		return cmp.Compare(a.ElectedMs, b.ElectedMs)
	})
	return es
}

// watch reads the survivors' views every electionPoll until every group
// has a new leader or electionBound has passed since the kill.
func (w *electionWatch) watch(ctx context.Context, survivors []string) {
	hc := &http.Client{Timeout: time.Second}
	end := w.at.Add(electionBound)
	for !w.done() && ctx.Err() == nil && time.Now().Before(end) {
		for _, u := range survivors {
			if v, err := readLeaders(ctx, hc, u); err == nil {
				w.observe(v, time.Now())
			}
		}
		sleep(ctx, electionPoll)
	}
}

// killNATS SIGKILLs a NATS node drawn at random while the load goes on,
// and fills k with the elections of the raft groups it led. The load
// goes on for two lease TTLs, or until the elections are over (or
// electionBound) if later.
func (cr *clusterRunner) killNATS(ctx context.Context, cycle int, k *KillReport) {
	i := cr.rng.IntN(cr.nats.Size())
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	before, lerr := readLeaders(rctx, http.DefaultClient, cr.nats.MonitorURL(i))
	cancel()
	k.Target, k.At = "nats "+cr.nats.Name(i), time.Now()
	watched := make(chan *electionWatch, 1)
	if err := cr.nats.Kill(i); err != nil {
		cr.progress("cycle %d: killing NATS node %d: %v", cycle, i, err)
		close(watched)
	} else {
		cr.natsDown = i
		cr.cs.NATSKills++
		cr.sum.Kills++
		cr.sum.KillMoments["nats"]++
		if lerr != nil {
			cr.progress("cycle %d: reading NATS node %d's leaders before its kill: %v", cycle, i, lerr)
			close(watched)
		} else {
			go func() {
				w := newElectionWatch(cr.nats.Name(i), k.At, before)
				w.watch(ctx, cr.survivors(i))
				watched <- w
			}()
		}
	}
	sleep(ctx, 2*cr.cfg.LeaseTTL)
	if w := <-watched; w != nil {
		k.Elections, k.LedElsewhere = w.elections(), w.others
		k.MovedPartitions = movedPartitions(k.Elections, cr.cfg.Partitions)
	}
}

// survivors are the monitoring URLs of the NATS nodes other than i.
func (cr *clusterRunner) survivors(i int) []string {
	var out []string
	for j := range cr.nats.Size() {
		if j != i {
			out = append(out, cr.nats.MonitorURL(j))
		}
	}
	return out
}

// movedPartitions lists the partitions (of partitions) whose intake or
// done stream is among es.
func movedPartitions(es []Election, partitions int) []int {
	var out []int
	for p := range partitions {
		in, done := cluster.PartitionStreams(p)
		if slices.ContainsFunc(es, func(e Election) bool { return e.Group == in || e.Group == done }) {
			out = append(out, p)
		}
	}
	return out
}

// writeNATSTimeline prints, for each NATS kill, the groups its server led
// and their elections, and the lateness split by moved partitions.
func writeNATSTimeline(w io.Writer, kills []KillReport) {
	first := true
	for _, k := range kills {
		if !strings.HasPrefix(k.Target, "nats ") {
			continue
		}
		if first {
			fmt.Fprintln(w, "\nNATS kills stage by stage (elected: ms from the kill until another server led each raft group the")
			fmt.Fprintln(w, "killed server led, by the new leader's leader_since (the meta group: when a survivor named it), none")
			fmt.Fprintf(w, "within %v; moved partitions: their intake or done stream was led there; first delivery and lateness as\n", electionBound)
			fmt.Fprintln(w, "above, also for the moved partitions' messages alone and for the rest, with their counts; hourglass")
			fmt.Fprintln(w, "nodes: what their logs record until the next kill, count and ms after the kill of the first and last):")
			first = false
		}
		if k.Elections == nil && k.LedElsewhere == 0 {
			fmt.Fprintf(w, "  cycle %d, %s: leaders not read\n", k.Cycle, k.Target)
			continue
		}
		fmt.Fprintf(w, "  cycle %d, %s: led %d of %d raft groups; moved partitions %s\n", k.Cycle, k.Target,
			len(k.Elections), len(k.Elections)+k.LedElsewhere, partList(k.MovedPartitions))
		for i := 0; i < len(k.Elections); i += 6 {
			var parts []string
			for _, e := range k.Elections[i:min(i+6, len(k.Elections))] {
				parts = append(parts, e.Group+" "+msOrNone(e.ElectedMs))
			}
			lead := "    elected: "
			if i > 0 {
				lead = "             "
			}
			fmt.Fprintln(w, lead+strings.Join(parts, ", "))
		}
		fmt.Fprintf(w, "    first delivery %s (moved partitions %s); lateness p99 / max: moved %.0f / %.0f ms (%d), rest %.0f / %.0f ms (%d)\n",
			msOrNone(k.FirstDeliveryMs), msOrNone(k.FirstMovedMs), k.Moved.P99Ms, k.Moved.MaxMs, k.Moved.N, k.Rest.P99Ms, k.Rest.MaxMs, k.Rest.N)
		if k.Nodes != nil {
			fmt.Fprintf(w, "    hourglass nodes until the next kill: %s\n", k.Nodes.stagesLine())
		}
	}
}

func partList(ps []int) string {
	if len(ps) == 0 {
		return "none"
	}
	return fmt.Sprint(ps)
}

// Lateness is the p99 and max of a set of first attempts' lateness.
type Lateness struct {
	N     int     `json:"n"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

func latenessOf(d []time.Duration) Lateness {
	return Lateness{N: len(d), P99Ms: pct(d, 99), MaxMs: pct(d, 100)}
}
