package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/hourglassmq/hourglass/dispatchlog"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/schedulelog"
	"github.com/hourglassmq/hourglass/segfile"
)

// TestFaultDoneFlipFiresNothing: a recurring schedule due every second
// whose armed occurrence is overdue, and a bucket due at start, later than
// that occurrence's, whose dispatch log has a flipped done-record (the
// crash harness's done-flip). serve refuses to start (exit 1, naming the
// file and `hourglass repair`) and fires nothing before: the commitlog
// gains no record (firing an occurrence appends the next one with the
// schedule's progress), no dispatch log gains a done-record, the queue's
// logs of the schedule's topic are unchanged.
func TestFaultDoneFlipFiresNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const seg = 2 * time.Second // start's
	p := start(t, dir, nil)
	const topic, other = "rf-tick", "rf-held"
	if _, err := p.client.CreateSchedule(ctxT(t), connect.NewRequest(&hourglassv1.CreateScheduleRequest{Schedule: &hourglassv1.RecurringSchedule{
		Name: "tick", Topic: topic, Spec: "@every 1s", Body: []byte("tick"), MisfirePolicy: hourglassv1.MisfirePolicy_MISFIRE_POLICY_FIRE_ALL,
	}})); err != nil {
		t.Fatal(err)
	}
	receive(t, p.client, topic, 1, 10*time.Second)

	// Six messages in a bucket that starts after the next occurrence
	// (armed a second ahead at most), three of them cancelled: three
	// done-records in its dispatch log.
	due := time.Now().Add(2*seg + seg/2)
	bucket := schedulelog.BucketStart(due.UnixMilli(), seg)
	ids := clScheduleAt(t, p, other, "m", 6, due)
	for _, id := range ids[:3] {
		if r := cancelID(t, p.client, id); r != hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED {
			t.Fatalf("Cancel(%s) = %v", id, r)
		}
	}
	done := filepath.Join(dir, "schedule", dispatchlog.Name(bucket))
	const records = segfile.HeaderSize + 3*dispatchlog.RecordSize
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if st, err := os.Stat(done); err == nil && st.Size() >= records {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds no 3 done-records 10 s after the cancels", done)
		}
	}
	p.stop(syscall.SIGTERM)
	stopped := time.Now()
	if armed := stopped.Add(time.Second); schedulelog.BucketStart(armed.UnixMilli(), seg) >= bucket {
		t.Logf("the armed occurrence (by %s) is not in a bucket before the held one (%s)", armed.Format(time.StampMilli), time.UnixMilli(bucket).Format(time.StampMilli))
	}
	// The second of three done-records: damage, not a torn tail.
	clFlip(t, done, segfile.HeaderSize+dispatchlog.RecordSize+10)
	before := fireState(t, dir, topic)

	// At the start the armed occurrence is overdue and the held bucket
	// has begun: let that time pass on the server's clock.
	time.Sleep(time.Until(later(stopped.Add(1500*time.Millisecond), time.UnixMilli(bucket).Add(100*time.Millisecond))))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--segment-duration", seg.String()).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || ctx.Err() != nil {
		t.Fatalf("serve with a damaged dispatch log due at start: %v (want exit 1)\n%s", err, out)
	}
	if !strings.Contains(string(out), dispatchlog.Name(bucket)) || !strings.Contains(string(out), "hourglass repair") {
		t.Fatalf("serve's refusal does not name %s and `hourglass repair`:\n%s", dispatchlog.Name(bucket), out)
	}
	if after := fireState(t, dir, topic); after != before {
		t.Fatalf("the refused start changed what was fired or delivered:\nbefore:\n%s\nafter:\n%s\nserve:\n%s", before, after, out)
	}
}

// fireState describes what firing changes in the data directory dir: the
// commitlog's end and record count, each schedule segment's entries and
// done-records by reason (`hourglass inspect`), and a hash of each file of
// the queue's message log of topic.
func fireState(t *testing.T, dir, topic string) string {
	t.Helper()
	var lines []string
	for _, o := range inspectJSON(t, dir, "commitlog") {
		if o["kind"] == "summary" {
			lines = append(lines, fmt.Sprintf("commitlog end %v records %v", o["end"], o["records"]))
		}
	}
	for _, o := range inspectJSON(t, dir, "segments") {
		if o["kind"] == "segment" {
			lines = append(lines, fmt.Sprintf("segment %v entries %v delivered %v cancelled %v dead-lettered %v",
				o["file"], o["entries"], o["delivered"], o["cancelled"], o["dead_lettered"]))
		}
	}
	qlog := filepath.Join(dir, "queue", "topics", topic, "log")
	err := filepath.WalkDir(qlog, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		lines = append(lines, fmt.Sprintf("queue %s %x", filepath.Base(p), sha256.Sum256(b)))
		return nil
	})
	if err != nil {
		t.Fatalf("reading %s: %v", qlog, err)
	}
	if len(lines) < 3 {
		t.Fatalf("inspect and %s describe too little:\n%s", qlog, strings.Join(lines, "\n"))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// inspectJSON runs `hourglass inspect CMD --json` on dir and returns its
// objects.
func inspectJSON(t *testing.T, dir, cmd string) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, binary, "inspect", cmd, "--data-dir", dir, "--json")
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("hourglass inspect %s: %v\n%s", cmd, err, stderr.String())
	}
	var objs []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var o map[string]any
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			t.Fatalf("hourglass inspect %s: %v in %q", cmd, err, sc.Text())
		}
		objs = append(objs, o)
	}
	return objs
}
