package crashtest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/cluster"
)

// TestJszLeaders reads the leaders out of a /jsz answer shaped as
// nats-server's: the meta group, replicated streams and consumers, and not
// a reader's ordered consumer of one replica.
func TestJszLeaders(t *testing.T) {
	const body = `{"server_id":"X","meta_cluster":{"name":"c","leader":"n2","cluster_size":3},
	"account_details":[{"name":"$G","stream_detail":[
	  {"name":"HG_IN_0","cluster":{"leader":"n1","leader_since":"2030-01-01T00:00:05Z","replicas":[{"name":"n0"},{"name":"n2"}]},
	   "consumer_detail":[{"name":"ord_1","cluster":{"leader":"n1"}}]},
	  {"name":"HOURGLASS","cluster":{"leader":"n0","replicas":[{"name":"n1"},{"name":"n2"}]},
	   "consumer_detail":[{"name":"hg_ct0","cluster":{"leader":"","replicas":[{"name":"n1"},{"name":"n2"}]}}]}]}]}`
	var z jszLeaders
	if err := json.Unmarshal([]byte(body), &z); err != nil {
		t.Fatal(err)
	}
	got := z.leaders()
	want := leaderView{
		"meta":             {leader: "n2"},
		"HG_IN_0":          {leader: "n1", since: time.Date(2030, 1, 1, 0, 0, 5, 0, time.UTC)},
		"HOURGLASS":        {leader: "n0"},
		"HOURGLASS/hg_ct0": {leader: ""},
	}
	if len(got) != len(want) {
		t.Fatalf("groups %v; want %v", got, want)
	}
	for g, l := range want {
		if gl, ok := got[g]; !ok || gl.leader != l.leader || !gl.since.Equal(l.since) {
			t.Errorf("group %s: %+v (present %v); want %+v", g, gl, ok, l)
		}
	}
}

// TestElectionWatch follows a forged sequence of survivors' views: a
// group counts as elected when a survivor names a leader other than the
// killed server, at its leader_since if that falls between the kill and
// the read; a group still led by the killed server, or leaderless, is
// not; one never elected is listed last with -1.
func TestElectionWatch(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	before := leaderView{"meta": {leader: "n1"}, "HG_IN_0": {leader: "n1"}, "HG_DONE_3": {leader: "n1"},
		"HOURGLASS/hg_ct0": {leader: "n1"}, "HOURGLASS": {leader: "n0"}, "KV_HG_OWNERS": {leader: "n2"}}
	w := newElectionWatch("n1", at(1000), before)
	if w.others != 2 || !slices.Equal(w.led, []string{"HG_DONE_3", "HG_IN_0", "HOURGLASS/hg_ct0", "meta"}) {
		t.Fatalf("led %v, others %d; want the four n1 led, 2 others", w.led, w.others)
	}
	w.observe(leaderView{"meta": {leader: "n1"}, "HG_IN_0": {leader: ""}, "HG_DONE_3": {leader: "n1"}}, at(2000))
	if len(w.elected) != 0 {
		t.Fatalf("elected %v from views naming n1 or nobody", w.elected)
	}
	w.observe(leaderView{"HG_IN_0": {leader: "n0", since: at(5400)}, "meta": {leader: "n2"}}, at(5500))
	// A leader_since before the kill is not believed: the read's time is.
	w.observe(leaderView{"HG_DONE_3": {leader: "n2", since: at(500)}, "HG_IN_0": {leader: "n2", since: at(5600)}}, at(7000))
	if w.done() {
		t.Fatal("done with the consumer never elected")
	}
	got := w.elections()
	want := []Election{{"HG_IN_0", 4400}, {"meta", 4500}, {"HG_DONE_3", 6000}, {"HOURGLASS/hg_ct0", -1}}
	if !slices.Equal(got, want) {
		t.Errorf("elections %v; want %v (soonest first, none last)", got, want)
	}
	if mp := movedPartitions(got, 8); !slices.Equal(mp, []int{0, 3}) {
		t.Errorf("moved partitions %v; want [0 3] (HG_IN_0, HG_DONE_3)", mp)
	}
}

// TestNATSKillTimeline summarises a forged history of one NATS kill whose
// server led partition 1's intake stream: the first delivery and the
// lateness of partition 1's messages are reported apart from the rest's,
// and the report prints them with the elections.
func TestNATSKillTimeline(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	id := func(p, seq int, dueMs int) string {
		return cluster.MakeID(p, uint64(seq), 0, at(dueMs).UnixMilli()).String()
	}
	var ev Events
	add := func(key string, p, dueMs, recvMs int) {
		ev.Schedules = append(ev.Schedules, Schedule{Key: key, Topic: "ct0", NotBefore: at(dueMs), Outcome: OK})
		ev.Deliveries = append(ev.Deliveries, Delivery{Key: key, ID: id(p, len(ev.Schedules), dueMs), Topic: "ct0", Received: at(recvMs)})
	}
	for i := range 50 { // partition 1 (moved): 6 s late, one 9 s
		add(fmt.Sprint("m", i), 1, 1100+i, 7100+i)
	}
	add("m-slow", 1, 1200, 10200)
	for i := range 50 { // partition 2: 10 ms late
		add(fmt.Sprint("r", i), 2, 1100+i, 1110+i)
	}
	add("r-before", 2, 900, 1050) // due before the kill; received after it, the first
	r := &runner{sum: &Summary{Cluster: &ClusterSummary{Kills: []KillReport{{
		Cycle: 2, Target: "nats n1", At: at(1000), FirstDeliveryMs: -1,
		Elections:       []Election{{"HG_IN_1", 5800}, {"KV_HG_OWNERS", 7200}},
		LedElsewhere:    20,
		MovedPartitions: []int{1},
	}}}}}
	r.finishCluster(ev, Result{})
	k := r.sum.Cluster.Kills[0]
	if k.FirstDeliveryMs != 50 || k.FirstMovedMs != 6100 {
		t.Errorf("first delivery %v ms, of moved partitions %v ms; want 50 and 6100", k.FirstDeliveryMs, k.FirstMovedMs)
	}
	if want := (Lateness{N: 51, P99Ms: 9000, MaxMs: 9000}); k.Moved != want {
		t.Errorf("moved %+v; want %+v", k.Moved, want)
	}
	if want := (Lateness{N: 50, P99Ms: 10, MaxMs: 10}); k.Rest != want {
		t.Errorf("rest %+v; want %+v", k.Rest, want)
	}
	var b strings.Builder
	writeNATSTimeline(&b, r.sum.Cluster.Kills)
	for _, s := range []string{
		"cycle 2, nats n1: led 2 of 22 raft groups; moved partitions [1]",
		"elected: HG_IN_1 5800 ms, KV_HG_OWNERS 7200 ms",
		"first delivery 50 ms (moved partitions 6100 ms); lateness p99 / max: moved 9000 / 9000 ms (51), rest 10 / 10 ms (50)",
	} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("timeline lacks %q:\n%s", s, b.String())
		}
	}
}
