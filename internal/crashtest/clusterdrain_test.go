package crashtest

import (
	"fmt"
	"testing"
	"time"
)

// clusterTestDrainGrace is TestRunCluster's Config.DrainGrace.
const clusterTestDrainGrace = 15 * time.Second

// TestClusterDrainOutlastsLease: a message JetStream handed to a pull that
// was lost (the NATS node or hourglass node serving it killed, a Consume
// stream broken) comes again only once its consumer's AckWait has passed.
// The drain goes on for SegmentDuration + DrainGrace past the last due
// time, so that AckWait, twice over, must fit in it, or such a message is
// reported lost although the cluster delivered it. Issue 25 was this: the
// harness's reader then had a 30 s AckWait, and a Fetch in flight at a
// NATS kill left two delivered messages unseen past the drain.
func TestClusterDrainOutlastsLease(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"defaults", Config{Cluster: true}},
		{"TestRunCluster", Config{Cluster: true, LeaseTTL: 2 * time.Second, DrainGrace: clusterTestDrainGrace}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			if err := cfg.fill(); err != nil {
				t.Fatal(err)
			}
			if drain := cfg.SegmentDuration + cfg.DrainGrace; drain < 2*ClusterLease {
				t.Errorf("the drain lasts %v past the last due time, less than twice the consumers' lease %v: a message in a lost pull comes again after it",
					drain, ClusterLease)
			}
		})
	}
}

// TestClusterKillLateness checks the per-kill lateness the cluster report
// gives: for a NATS kill, every first attempt due from the kill until the
// next kill counts (p99 and max of received minus due); one due before the
// kill or after the next does not, nor a retry.
func TestClusterKillLateness(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var ev Events
	add := func(key string, dueMs, recvMs, attempt int) {
		ev.Schedules = append(ev.Schedules, Schedule{Key: key, Topic: "ct0", NotBefore: at(dueMs), Outcome: OK})
		ev.Deliveries = append(ev.Deliveries, Delivery{Key: key, Topic: "ct0", Attempt: uint32(attempt), Received: at(recvMs)})
	}
	for i := range 100 { // due after the kill: lateness i ms, and one of 5 s
		add(fmt.Sprint("k", i), 1000+i, 1000+2*i, 0)
	}
	add("slow", 1500, 6500, 0)
	add("before", 500, 9500, 0)  // due before the kill
	add("next", 20000, 29000, 0) // due after the next kill
	add("retry", 1200, 12000, 1) // not a first attempt
	// Held by a pause of its topic from 1,100 to 7,000 ms: not counted;
	// one due after the resume is.
	ev.Policies = []PolicyChange{
		{Topic: "ct1", Paused: true, Sent: at(1100), Answered: at(1101), Outcome: OK},
		{Topic: "ct1", Paused: false, Sent: at(6999), Answered: at(7000), Outcome: OK},
	}
	ev.Schedules = append(ev.Schedules, Schedule{Key: "paused", Topic: "ct1", NotBefore: at(1050), Outcome: OK},
		Schedule{Key: "after", Topic: "ct1", NotBefore: at(7100), Outcome: OK})
	ev.Deliveries = append(ev.Deliveries, Delivery{Key: "paused", Topic: "ct1", Received: at(7050)},
		Delivery{Key: "after", Topic: "ct1", Received: at(7100)})
	r := &runner{sum: &Summary{Cluster: &ClusterSummary{Kills: []KillReport{
		{Cycle: 1, Target: "nats n1", At: at(1000), FirstDeliveryMs: -1},
		{Cycle: 2, Target: "nats n2", At: at(20000), FirstDeliveryMs: -1},
	}}}}
	r.finishCluster(ev, Result{})
	k := r.sum.Cluster.Kills[0]
	if k.MaxLateMs != 5000 {
		t.Errorf("max lateness after the first kill %v ms; want 5000 (the slow one)", k.MaxLateMs)
	}
	if k.LateP99Ms != 99 {
		t.Errorf("p99 lateness after the first kill %v ms; want 99 (102 messages counted: the 101st)", k.LateP99Ms)
	}
	if k2 := r.sum.Cluster.Kills[1]; k2.MaxLateMs != 9000 || k2.LateP99Ms != 9000 {
		t.Errorf("after the second kill: p99 %v, max %v ms; want 9000 both", k2.LateP99Ms, k2.MaxLateMs)
	}
}
