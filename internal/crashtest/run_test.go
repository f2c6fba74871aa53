package crashtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunRealServer runs the harness for real: it builds hourglass, runs
// three kill-restart cycles with torn tails on one-second buckets, drains,
// and checks that the harness did its job (kills, restarts, deliveries, a
// complete drain, poison messages dead-lettered, measured recovery and
// skew, every protocol and stream used, recurring schedules) and that the
// server broke no promise. Bounded by a 90 s context; about 20-30 s on 2
// cores.
func TestRunRealServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and SIGKILLs the real server for ~25 s; run without -short")
	}
	work := keptWorkDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sum, err := Run(ctx, Config{
		Cycles: 3, Seed: 11, SegmentDuration: time.Second, CorruptTail: true,
		Producers: 1, Consumers: 2, OpsPerSecond: 20, DrainGrace: 15 * time.Second,
		Duration: 90 * time.Second, WorkDir: work,
	})
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	for _, v := range sum.Violations {
		t.Logf("violation: %s (allowed %v)", v, v.Allowed)
	}
	if sum.Failed {
		v, _ := sum.FirstViolation()
		t.Errorf("the server broke a promise: %s (data kept in %s)", v, sum.WorkDir)
	}
	c := sum.Counts
	if sum.Cycles != 3 || sum.Kills+sum.Terms != 3 || sum.Restarts != 3 {
		t.Errorf("cycles %d, kills %d + SIGTERMs %d, restarts %d; want 3, 3 in all, 3", sum.Cycles, sum.Kills, sum.Terms, sum.Restarts)
	}
	if c.Scheduled < 50 || c.Delivered < c.Scheduled-c.Cancelled-c.CancelInDoubt || !sum.DrainComplete {
		t.Errorf("scheduled %d, delivered %d, cancelled %d (and %d Cancels in doubt), drain complete %v: the load or the drain did not happen",
			c.Scheduled, c.Delivered, c.Cancelled, c.CancelInDoubt, sum.DrainComplete)
	}
	// Poison messages (5% by default) must have reached their .dlq
	// topics; Check fails the run for any that did not, so this asserts
	// that the workload made some.
	if c.Poison == 0 || c.DeadLetteredPoison == 0 || sum.MaxAttempts != MaxAttempts {
		t.Errorf("poison %d, dead-lettered poison %d, max-attempts %d: the dead-letter path was not exercised",
			c.Poison, c.DeadLetteredPoison, sum.MaxAttempts)
	}
	// Every protocol and stream was used: unary Connect and gRPC calls,
	// ScheduleStream bursts, Consume streams and their settles.
	for _, op := range []string{"schedule/connect", "schedule/grpc", "batch/connect", "batch/grpc", "stream-burst/stream",
		"receive/connect", "receive/grpc", "consume-stream/stream", "ack/stream", "ack/connect", "ack/grpc"} {
		if sum.Ops[op] == 0 {
			t.Errorf("no %s call in %v", op, sum.Ops)
		}
	}
	// The recurring schedules were created and their occurrences
	// delivered. (The other calls of issues 21 and 22 are a few percent
	// of a run this short, or come later in the plan: the 16-cycle runs
	// show them, the checker's tests hold their rules.)
	if n := sum.Ops["create-schedule/connect"] + sum.Ops["create-schedule/grpc"]; n < 3 || c.Schedules < 3 || c.Occurrences < 5 {
		t.Errorf("%d CreateSchedule calls, %d schedules, %d occurrences delivered: the recurring schedules did not run", n, c.Schedules, c.Occurrences)
	}
	// Messages in working time (issue 44) were sent once the calendar was
	// created; Check holds each to the time the server answered.
	if n := sum.Ops["create-calendar/connect"] + sum.Ops["create-calendar/grpc"]; n < 1 || c.ScheduledWorking == 0 {
		t.Errorf("%d CreateCalendar calls, %d messages in working time answered OK: the calendar workload did not run", n, c.ScheduledWorking)
	}
	if n := sum.Ops["consume-over-credit/stream"]; n > 0 {
		t.Errorf("Consume streams pushed %d messages beyond their credits", n)
	}
	if sum.Kills > 0 && sum.Cuts == 0 {
		t.Errorf("%d SIGKILLs with --corrupt-tail, no file damaged", sum.Kills)
	}
	if sum.RecoveryMax <= 0 || sum.RecoveryMedian > sum.RecoveryMax || sum.SkewBoundMs <= 0 {
		t.Errorf("recovery median %v max %v, skew bound %v: not measured", sum.RecoveryMedian, sum.RecoveryMax, sum.SkewBoundMs)
	}
	if _, err := os.Stat(filepath.Join(work, "server.log")); err != nil {
		t.Errorf("no server log: %v", err)
	}
}

// TestRunEmbedded runs the harness against a program that embeds the node
// as a library (--node embedded): built, SIGKILLed and restarted like the
// binary, it keeps every promise, and the embedding program's own
// executable is what ran.
func TestRunEmbedded(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and SIGKILLs a program embedding the node for ~20 s; run without -short")
	}
	work := keptWorkDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sum, err := Run(ctx, Config{
		Embedded: true, Cycles: 2, Seed: 12, SegmentDuration: time.Second,
		Producers: 1, Consumers: 2, OpsPerSecond: 20, DrainGrace: 15 * time.Second,
		Duration: 90 * time.Second, WorkDir: work,
	})
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	if sum.Failed {
		v, _ := sum.FirstViolation()
		t.Errorf("the embedded node broke a promise: %s (data kept in %s)", v, sum.WorkDir)
	}
	if c := sum.Counts; sum.Restarts != 2 || c.Scheduled < 30 || c.Delivered < c.Scheduled-c.Cancelled-c.CancelInDoubt || !sum.DrainComplete {
		t.Errorf("restarts %d, scheduled %d, delivered %d, drain complete %v: the load, the kills or the drain did not happen",
			sum.Restarts, c.Scheduled, c.Delivered, sum.DrainComplete)
	}
	log, err := os.ReadFile(filepath.Join(work, "server.log"))
	if err != nil || !strings.Contains(string(log), "embednode: listening on") {
		t.Errorf("server.log does not show the embedding program serving (err %v)", err)
	}
}

// TestRunCluster runs --cluster for real: 3 NATS nodes and 3 hourglass
// nodes, two cycles each killing one of them, a drain, and checks that the
// harness did its job (kills, takeover measured for an hourglass kill,
// deliveries received through the nodes, a complete drain) and that the
// cluster broke no promise. Bounded by a 3 minute context; about 40 s on 2
// cores.
//
// It was skipped (issue 25) while it failed about one run in three with a
// message "never delivered" after a NATS kill. That loss was the harness's:
// its reader of the delivery stream then was a durable consumer with a 30 s
// AckWait, and a Fetch in flight on the NATS node killed lost two messages
// the cluster had delivered (in the stream, a delivered done record, 2 acks
// pending on the reader's consumer); they would have come again 30 s later,
// after the drain had ended. Consumers now receive through the nodes, whose
// topic consumers' AckWait is ClusterLease (TestClusterDrainOutlastsLease).
func TestRunCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds hourglass and nats-server and SIGKILLs cluster nodes for ~40 s; run without -short")
	}
	work := keptWorkDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sum, err := Run(ctx, Config{
		Cluster: true, Cycles: 2, Seed: 3, LeaseTTL: 2 * time.Second, Producers: 1, OpsPerSecond: 20,
		DrainGrace: clusterTestDrainGrace, Duration: 3 * time.Minute, WorkDir: work, Keep: true,
	})
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	for _, v := range sum.Violations {
		t.Logf("violation: %s (allowed %v)", v, v.Allowed)
	}
	if sum.Failed {
		v, _ := sum.FirstViolation()
		t.Errorf("the cluster broke a promise: %s (data kept in %s)", v, sum.WorkDir)
	}
	cs, c := sum.Cluster, sum.Counts
	if cs == nil {
		t.Fatal("no cluster summary")
	}
	if sum.Cycles != 2 || cs.HourglassKills+cs.NATSKills != 2 || len(cs.Kills) != 2 {
		t.Errorf("cycles %d, kills %d hourglass + %d NATS, %d reports; want 2, 2 in all, 2", sum.Cycles, cs.HourglassKills, cs.NATSKills, len(cs.Kills))
	}
	for _, k := range cs.Kills {
		if strings.HasPrefix(k.Target, "hourglass ") && len(k.Partitions) > 0 && k.ReownedMs < 0 {
			t.Errorf("cycle %d: %s owned %v and they were not taken over", k.Cycle, k.Target, k.Partitions)
		}
	}
	if c.Scheduled < 30 || c.Delivered < c.Scheduled-c.Cancelled-c.CancelInDoubt || !sum.DrainComplete {
		t.Errorf("scheduled %d, delivered %d, cancelled %d (and %d Cancels in doubt), drain complete %v: the load or the drain did not happen",
			c.Scheduled, c.Delivered, c.Cancelled, c.CancelInDoubt, sum.DrainComplete)
	}
	// Every operation a cluster serves is in the workload (issue 25; not
	// calendars, which a cluster does not have, nor frozen pauses, which it
	// refuses), and the recurring schedules ran.
	if got, want := strings.Join(sum.Operations, ","), strings.Join(clusterOperations.names(), ","); got != want || !strings.HasSuffix(want, "recurring") {
		t.Errorf("operations %s, want %s", got, want)
	}
	if c.Schedules == 0 || c.Occurrences == 0 {
		t.Errorf("%d schedules, %d occurrences delivered: the recurring schedules did not run", c.Schedules, c.Occurrences)
	}
	// The three nodes' first starts at least: FIRE_ALL's bound is
	// allowed from them (missedRun).
	checkStarts(t, filepath.Join(work, "events.json"), 3)
	for i := range 3 {
		if _, err := os.Stat(filepath.Join(work, fmt.Sprintf("h%d.log", i))); err != nil {
			t.Errorf("no log of hourglass node %d: %v", i, err)
		}
	}
}

// TestRunDamage runs --damage for real: four kill-restart cycles on
// one-second buckets, each followed by a damage of the data directory,
// and checks that the harness did its job: every restart met a damage (or
// found no file to damage), each was judged (started, refused, hung), a
// refusal was followed by hourglass repair or by putting the damage back,
// the first round covered distinct kinds, and the summary names every
// kind; and that the server lost and replayed nothing beyond what
// hourglass repair reported.
func TestRunDamage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and SIGKILLs the real server and damages its files for ~40 s; run without -short")
	}
	work := keptWorkDir(t)
	// The bound is for a hang, not a speed check: every cycle must run
	// (the test counts them), and a loaded machine's repairs take longer.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const cycles = 4
	sum, err := Run(ctx, Config{
		Cycles: cycles, Seed: 5, SegmentDuration: time.Second, Damage: true,
		Producers: 1, Consumers: 2, OpsPerSecond: 20, DrainGrace: 15 * time.Second,
		Duration: 4 * time.Minute, WorkDir: work, Keep: true,
	})
	if err != nil {
		t.Fatalf("harness: %v", err)
	}
	var out strings.Builder
	sum.WriteTable(&out)
	t.Logf("summary:\n%s", out.String())
	checkStarts(t, filepath.Join(work, "events.json"), cycles)
	d := sum.Damage
	if d == nil {
		t.Fatal("no damage summary")
	}
	if sum.Cycles != cycles || len(d.Events)+d.NoTarget != cycles {
		t.Errorf("cycles %d, damages %d + %d restarts without a target; want %d damages in all", sum.Cycles, len(d.Events), d.NoTarget, cycles)
	}
	kinds := map[string]bool{}
	injected := 0
	for _, e := range d.Events {
		kinds[e.Kind] = true
		switch e.Outcome {
		case RestartStarted, RestartRefused, RestartHung, RestartExit0:
		default:
			t.Errorf("cycle %d: %s of %s: outcome %q not judged", e.Cycle, e.Kind, e.Rel, e.Outcome)
		}
		if e.Outcome == RestartRefused && e.Repair == nil && !e.Undone {
			t.Errorf("cycle %d: %s: refused, and neither repaired nor put back", e.Cycle, e.Kind)
		}
		if e.Outcome == RestartStarted && e.Undone {
			t.Errorf("cycle %d: %s: started and still put back", e.Cycle, e.Kind)
		}
		if !isDelete(e.Kind) && (e.Offset < 0 || e.Held.What == "") {
			t.Errorf("cycle %d: %s flipped byte %d of a record holding %+v: not decoded first", e.Cycle, e.Kind, e.Offset, e.Held)
		}
	}
	for _, k := range DamageKinds {
		injected += d.ByKind[k].Injected
		if !strings.Contains(out.String(), "  "+k+" ") {
			t.Errorf("the table has no row for %s", k)
		}
	}
	if injected != len(d.Events) || len(kinds) < min(len(d.Events), 3) {
		t.Errorf("%d injected by kind, %d events, %d distinct kinds (%v): the rounds do not cycle through the kinds", injected, len(d.Events), len(kinds), kinds)
	}
	if c := sum.Counts; c.Scheduled < 30 {
		t.Errorf("scheduled %d: the load did not happen", c.Scheduled)
	}
	for _, v := range sum.Violations {
		if v.counts("always") {
			t.Errorf("violation: %s", v)
		} else {
			t.Logf("allowed: %s", v)
		}
	}
	if sum.Failed {
		t.Errorf("the run failed (see the summary)")
	}
}

// checkStarts checks that the history in the events file path records
// every server process (each cycle's at least), one after the other, each
// begun before it was up: the checker tells missed occurrences by them.
func checkStarts(t *testing.T, path string, cycles int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ev Events
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatal(err)
	}
	if len(ev.Starts) < cycles {
		t.Errorf("%d server starts recorded in %d cycles", len(ev.Starts), cycles)
	}
	for i, s := range ev.Starts {
		if s.Up.Before(s.Began) || i > 0 && s.Began.Before(ev.Starts[i-1].Up) {
			t.Errorf("start %d (cycle %d): began %v, up %v, the one before up %v", i, s.Cycle, s.Began, s.Up, ev.Starts[max(i-1, 0)].Up)
		}
	}
}

// keptWorkDir is a work directory for a run that is removed when the test
// passes and kept when it fails, so that the failure's logs and data (the
// nodes' logs, the NATS servers' streams, events.json) can be read; the
// failure message names it. t.TempDir would remove it either way.
func keptWorkDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "crashtest-"+t.Name()+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("work directory kept: %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}
