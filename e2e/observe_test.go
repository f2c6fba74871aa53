package e2e

import (
	"bufio"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// topicMetric returns the value of name{topic="topic"} on p's /metrics, and
// whether it is there.
func topicMetric(t *testing.T, p *proc, name, topic string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(p.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	prefix := name + `{topic="` + topic + `"} `
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("/metrics: %s%s: %v", prefix, v, err)
			}
			return f, true
		}
	}
	return 0, false
}

// eventually polls cond every 20 ms until it holds or within passes, then
// fails with what it last saw.
func eventually(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last saw %s", what, within, saw)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func pendingLoaded(t *testing.T, p *proc) int64 {
	t.Helper()
	st, err := p.client.Stats(ctxT(t), connect.NewRequest(&hourglassv1.StatsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	return st.Msg.Engine.PendingLoaded
}

// TestObservePendingAfterCancel: a cancelled message leaves Stats'
// pendingLoaded and hourglass_engine_pending_loaded at once, although it
// stays in the wheel until its time.
func TestObservePendingAfterCancel(t *testing.T) {
	// Hour buckets: a message a minute ahead is in a loaded one (the
	// preload lead is 10 min).
	p := start(t, t.TempDir(), nil, "--segment-duration", "1h")
	id := schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "obs-cancel", Body: []byte("x"), When: delayMs(60_000)})
	both := func(want int64) func() (bool, string) {
		return func() (bool, string) {
			s, m := pendingLoaded(t, p), metricValue(t, p, "hourglass_engine_pending_loaded")
			return s == want && m == float64(want), "Stats " + strconv.FormatInt(s, 10) + ", /metrics " + strconv.FormatFloat(m, 'g', -1, 64)
		}
	}
	eventually(t, 10*time.Second, "pending 1 after the Schedule", both(1))
	if r := cancelID(t, p.client, id); r != hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Fatalf("Cancel = %v", r)
	}
	eventually(t, 10*time.Second, "pending 0 after the Cancel", both(0))
	if v := metric(t, p, "hourglass_pending"); v != 0 {
		t.Errorf("hourglass_pending sums to %v after the Cancel, want 0", v)
	}
	p.stop(syscall.SIGTERM)
}

// TestObserveAlertMetrics: the per-topic metrics alerts are built on,
// consumer lag, the age of the oldest due message not received, and dead
// letters, follow what the queue holds.
func TestObserveAlertMetrics(t *testing.T) {
	p := start(t, t.TempDir(), nil, "--max-attempts", "1")
	c := p.client
	start := time.Now()
	for _, b := range []string{"a", "b"} {
		schedule(t, c, &hourglassv1.ScheduleRequest{Topic: "obs", Body: []byte(b), When: delayMs(0)})
	}
	eventually(t, 10*time.Second, "lag 2 and an oldest age", func() (bool, string) {
		lag, _ := topicMetric(t, p, "hourglass_queue_lag", "obs")
		age, _ := topicMetric(t, p, "hourglass_queue_oldest_ready_age_seconds", "obs")
		return lag == 2 && age > 0, "lag " + strconv.FormatFloat(lag, 'g', -1, 64) + ", age " + strconv.FormatFloat(age, 'g', -1, 64)
	})
	if age, _ := topicMetric(t, p, "hourglass_queue_oldest_ready_age_seconds", "obs"); age > time.Since(start).Seconds()+1 {
		t.Errorf("oldest age %vs; the messages were scheduled %v ago", age, time.Since(start))
	}
	if n, ok := topicMetric(t, p, "hourglass_dead_letters", "obs"); !ok || n != 0 {
		t.Errorf("hourglass_dead_letters{topic=obs} = %v (present %v), want 0", n, ok)
	}
	got := receive(t, c, "obs", 1, 10*time.Second)
	// One leased, one waiting: both are lag.
	if lag, _ := topicMetric(t, p, "hourglass_queue_lag", "obs"); lag != 2 {
		t.Errorf("lag %v with one leased and one waiting, want 2", lag)
	}
	// --max-attempts 1: a Nack dead-letters it.
	if _, err := c.Nack(ctxT(t), connect.NewRequest(&hourglassv1.NackRequest{Topic: "obs", Id: got[0].m.Id, DelayMs: 1000})); err != nil {
		t.Fatal(err)
	}
	rest := receive(t, c, "obs", 1, 10*time.Second)
	ack(t, c, "obs", rest[0].m.Id)
	eventually(t, 10*time.Second, "one dead letter, no lag", func() (bool, string) {
		dead, _ := topicMetric(t, p, "hourglass_dead_letters", "obs")
		lag, _ := topicMetric(t, p, "hourglass_queue_lag", "obs")
		age, _ := topicMetric(t, p, "hourglass_queue_oldest_ready_age_seconds", "obs")
		return dead == 1 && lag == 0 && age == 0, "dead " + strconv.FormatFloat(dead, 'g', -1, 64) + ", lag " + strconv.FormatFloat(lag, 'g', -1, 64) +
			", age " + strconv.FormatFloat(age, 'g', -1, 64)
	})
	if !strings.Contains(p.log(), "queue: message dead-lettered") || !strings.Contains(p.log(), "reason=max-attempts") {
		t.Errorf("no dead-letter log line with its reason")
	}
	p.stop(syscall.SIGTERM)
}

// TestObserveStartLog: a new data directory is logged as such with its
// absolute path; a restart logs what it recovered.
func TestObserveStartLog(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "sub") + "/../data" // not clean: the log names it cleaned
	abs := filepath.Join(tmp, "data")
	p := start(t, dir, nil)
	log := p.log()
	if !strings.Contains(log, "new, empty data directory") || !strings.Contains(log, "data_dir="+abs) {
		t.Errorf("no start-up line naming the new data directory %s:\n%s", abs, log)
	}
	schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "obs-start", Body: []byte("x"), When: delayMs(60_000)})
	p.stop(syscall.SIGKILL)
	p = start(t, abs, nil)
	// The line may reach the test's pipe a moment after /readyz answers.
	eventually(t, 10*time.Second, "the recovery line", func() (bool, string) {
		log := p.log()
		return strings.Contains(log, "engine: recovered") && strings.Contains(log, "new=false") && strings.Contains(log, "took="), log
	})
	if log := p.log(); strings.Contains(log, "new, empty data directory") {
		t.Errorf("a used data directory logged as new:\n%s", log)
	}
	p.stop(syscall.SIGTERM)
}
