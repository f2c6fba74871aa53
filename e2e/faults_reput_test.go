package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// openFDs returns how many descriptors process pid has open.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Skipf("cannot count descriptors: %v", err)
	}
	return len(ents)
}

// waitReadyz polls /readyz until it answers 200, within d.
func waitReadyz(t *testing.T, p *proc, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := 0
	for time.Now().Before(deadline) {
		resp, err := http.Get(p.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if last = resp.StatusCode; last == 200 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("/readyz answered %d, not 200, for %v", last, d)
}

// TestFaultReputDescriptorLimit: under a descriptor limit well below what
// one writer per bucket would take, one ScheduleBatch of 1,000 messages an
// hour apart (1,000 buckets) is routed all the same: open segment writers
// are bounded, routing that runs out of descriptors keeps fewer open and
// retries, a message scheduled after the batch is delivered (routing is in
// order, so it got past the batch), and /readyz is 200.
func TestFaultReputDescriptorLimit(t *testing.T) {
	t.Parallel()
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("no prlimit(1) here to lower the server's descriptor limit")
	}
	dir := t.TempDir()
	p := start(t, dir, nil)
	const topic = "fds"
	first := schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("first")})
	receive(t, p.client, topic, 1, 10*time.Second)
	ack(t, p.client, topic, first) // the topic's queue files are open now

	pid := p.cmd.Process.Pid
	limit := openFDs(t, pid) + 30 // fewer than the writers reput may keep (1,024 by default)
	if out, err := exec.Command(prlimit, "--pid", strconv.Itoa(pid), fmt.Sprintf("--nofile=%d:%d", limit, limit)).CombinedOutput(); err != nil {
		t.Skipf("prlimit: %v: %s", err, out)
	}
	reqs := make([]*hourglassv1.ScheduleRequest, 1000)
	for i := range reqs {
		reqs[i] = &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("later"), When: delayMs(int64(i+1) * 3_600_000)}
	}
	if _, err := p.client.ScheduleBatch(ctxT(t), connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: reqs})); err != nil {
		t.Fatalf("ScheduleBatch: %v", err)
	}
	// Schedules can be refused while routing is stalled: retry them.
	var after string
	deadline := time.Now().Add(30 * time.Second)
	for after == "" {
		res, err := p.client.Schedule(ctxT(t), connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("after"), When: delayMs(200)}))
		if err == nil {
			after = res.Msg.Id
			break
		}
		if c := connect.CodeOf(err); c != connect.CodeUnavailable && c != connect.CodeResourceExhausted || time.Now().After(deadline) {
			t.Fatalf("Schedule after the batch: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	got := receive(t, p.client, topic, 1, 30*time.Second)
	if got[0].m.Id != after {
		t.Fatalf("received %s (%q), want the message scheduled after the batch", got[0].m.Id, got[0].m.Body)
	}
	waitReadyz(t, p, 30*time.Second)
	segs, _ := filepath.Glob(filepath.Join(dir, "schedule", "*.sched"))
	if len(segs) < 1000 {
		t.Errorf("%d schedule segments, want the batch's 1,000", len(segs))
	}
	if n := openFDs(t, pid); n > limit {
		t.Errorf("%d descriptors open, limit %d", n, limit)
	}
	t.Logf("descriptor limit %d; stalls logged: %v", limit, strings.Contains(p.log(), "routing stalled"))
	p.stop(syscall.SIGTERM)
}

// bucketName is the schedule segment of a message ID under 2 s buckets.
func bucketName(t *testing.T, id string) string {
	t.Helper()
	mid, err := message.ParseID(id)
	if err != nil {
		t.Fatal(err)
	}
	return schedulelog.Name(schedulelog.BucketStart(mid.DeliverAt, 2*time.Second))
}

// TestFaultReputLostCheckpoint: after messages were delivered, acked and
// their buckets retired, a stopped server's reput.checkpoint is deleted;
// the restart says so, routes from the oldest commitlog segment (which
// still holds the delivered messages) and re-creates none of the retired
// buckets, so nothing is delivered twice; inspect verify finds the
// directory clean afterwards.
func TestFaultReputLostCheckpoint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, dir, nil)
	const topic, n = "lost-ckpt", 20
	var ids []string
	for i := range n {
		ids = append(ids, schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte(fmt.Sprint(i)), When: delayMs(int64(i * 50))}))
	}
	for _, r := range receive(t, p.client, topic, n, 20*time.Second) {
		ack(t, p.client, topic, r.m.Id)
	}
	buckets := map[string]bool{}
	for _, id := range ids {
		buckets[bucketName(t, id)] = true
	}
	// Retirement: each bucket is deleted once it is over, done and
	// covered by a durable checkpoint.
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := 0
		for b := range buckets {
			if _, err := os.Stat(filepath.Join(dir, "schedule", b)); err == nil {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d buckets not retired after 30 s", left, len(buckets))
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.stop(syscall.SIGTERM)
	if err := os.Remove(filepath.Join(dir, "schedule", "reput.checkpoint")); err != nil {
		t.Fatal(err)
	}

	p2 := start(t, dir, nil)
	if !strings.Contains(p2.log(), "checkpoint missing") {
		t.Errorf("the restart does not say that the checkpoint is missing")
	}
	for b := range buckets {
		if _, err := os.Stat(filepath.Join(dir, "schedule", b)); err == nil {
			t.Errorf("retired bucket %s was created again: its messages would be delivered twice", b)
		}
	}
	receiveNone(t, p2.client, topic, 500*time.Millisecond)
	next := schedule(t, p2.client, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("next")})
	if got := receive(t, p2.client, topic, 1, 10*time.Second); got[0].m.Id != next {
		t.Errorf("received %s, want the new message", got[0].m.Id)
	}
	p2.stop(syscall.SIGTERM)
	if _, err := os.Stat(filepath.Join(dir, "schedule", "reput.checkpoint")); err != nil {
		t.Errorf("the checkpoint was not written again: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, binary, "inspect", "verify", "--data-dir", dir).CombinedOutput()
	if !strings.Contains(string(out), "clean") {
		t.Errorf("inspect verify after the restart:\n%s", out)
	}
}

// TestFaultReputLostRetiredLog: with the retired log deleted as well as
// the checkpoint, the server refuses to start and names the file and the
// repair command.
func TestFaultReputLostRetiredLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, dir, nil)
	schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "t", Body: []byte("x"), When: delayMs(3_600_000)})
	p.stop(syscall.SIGTERM)
	os.Remove(filepath.Join(dir, "schedule", "reput.checkpoint"))
	os.Remove(filepath.Join(dir, "schedule", "reput.retired"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--segment-duration", "2s").CombinedOutput()
	if err == nil {
		t.Fatalf("the server started without its checkpoint and retired log:\n%s", out)
	}
	for _, want := range []string{"reput.checkpoint", "reput.retired", "hourglass repair --data-dir " + dir} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}
}

// TestFaultReputDamagedFarHeader: a damaged header of a far-future segment
// does not keep the server from starting (start-up reads only the
// segments' names) nor from delivering; inspect verify reports it.
func TestFaultReputDamagedFarHeader(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, dir, nil)
	const topic = "far"
	far := schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("far"), When: delayMs(7 * 24 * 3_600_000)})
	p.stop(syscall.SIGTERM)
	path := filepath.Join(dir, "schedule", bucketName(t, far))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{'X'}, 3); err != nil { // the magic
		t.Fatal(err)
	}
	f.Close()

	p2 := start(t, dir, nil) // waits for /readyz 200
	near := schedule(t, p2.client, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("near"), When: delayMs(100)})
	if got := receive(t, p2.client, topic, 1, 10*time.Second); got[0].m.Id != near {
		t.Errorf("received %s, want the near message", got[0].m.Id)
	}
	p2.stop(syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, binary, "inspect", "verify", "--data-dir", dir).CombinedOutput()
	if !strings.Contains(string(out), filepath.Base(path)) {
		t.Errorf("inspect verify does not report the damaged header of %s:\n%s", filepath.Base(path), out)
	}
}
