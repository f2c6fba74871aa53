package crashtest

import (
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
