package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/hourglassmq/hourglass/commitlog"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// qRecord is where one record of a stopped server's log lies.
type qRecord struct {
	path string
	pos  int64 // file position of its first byte
	size int64
}

// qRecords lists the records of the log in dir, oldest first.
func qRecords(t *testing.T, dir string) []qRecord {
	t.Helper()
	l, _, err := commitlog.Open(commitlog.Options{Dir: dir, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	bases := l.SegmentBases()
	it, err := l.NewIterator(l.FirstOffset())
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out []qRecord
	for it.Next() {
		off := it.Offset()
		i := len(bases) - 1
		for bases[i] > off {
			i--
		}
		out = append(out, qRecord{path: filepath.Join(dir, fmt.Sprintf("%020d.log", bases[i])),
			pos: commitlog.SegmentHeaderSize + off - bases[i], size: it.Pos() - off})
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// qFill schedules n messages due now on topic, receives them all and
// acks the first acked, one Ack each. It returns the IDs acked and not.
func qFill(t *testing.T, p *proc, topic string, n, acked int) (ackedIDs, open map[string]bool) {
	t.Helper()
	for i := range n {
		schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte(fmt.Sprintf("m-%d", i))})
	}
	ackedIDs, open = map[string]bool{}, map[string]bool{}
	for i, r := range receive(t, p.client, topic, n, 30*time.Second) {
		if i < acked {
			ack(t, p.client, topic, r.m.Id)
			ackedIDs[r.m.Id] = true
		} else {
			open[r.m.Id] = true
		}
	}
	return ackedIDs, open
}

// qVerify runs `hourglass inspect verify` and returns its exit code and
// output.
func qVerify(t *testing.T, dir string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "inspect", "verify", "--data-dir", dir).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee) && ctx.Err() == nil:
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("inspect verify: %v\n%s", err, out)
	return 0, ""
}

// qDrain receives what topic hands out within wait of nothing more
// coming, acking it, and returns the IDs.
func qDrain(t *testing.T, p *proc, topic string) []string {
	t.Helper()
	var ids []string
	for range 100 {
		res, err := p.client.Receive(ctxT(t), connect.NewRequest(&hourglassv1.ReceiveRequest{
			Topic: topic, MaxMessages: 1000, WaitMs: 2000, LeaseMs: 60_000}))
		if err != nil {
			t.Fatalf("Receive(%s): %v", topic, err)
		}
		if len(res.Msg.Messages) == 0 {
			return ids
		}
		for _, m := range res.Msg.Messages {
			ids = append(ids, m.Id)
			ack(t, p.client, topic, m.Id)
		}
	}
	return ids
}

// TestFaultQueueAckLogFlip: one flipped byte in the middle of a topic's
// ack log (a stopped server's, killed with acks after its last
// checkpoint) is damage: serve refuses naming the ack-log file, that acked
// messages could be handed out again, and `hourglass repair`, instead of
// truncating the acks and handing acked messages out again silently.
// inspect verify reports the file; repair keeps a copy, says the acks are
// lost and how many messages may come again; after it the server hands
// out no more acked messages than repair said.
func TestFaultQueueAckLogFlip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const topic = "qack"
	p := start(t, dir, nil)
	acked, open := qFill(t, p, topic, 200, 180)
	p.stop(syscall.SIGKILL)

	recs := qRecords(t, filepath.Join(dir, "queue", "topics", topic, "acks"))
	if len(recs) < 100 {
		t.Fatalf("the ack log holds %d records, want one per Ack (180)", len(recs))
	}
	r := recs[len(recs)/2]
	clFlip(t, r.path, r.pos+r.size/2)

	if code, out := qVerify(t, dir); code != 1 || !strings.Contains(out, filepath.Join("queue", "topics", topic, "acks", filepath.Base(r.path))) {
		t.Errorf("inspect verify exited %d without naming the damaged ack log:\n%s", code, out)
	}
	out := clServeRefuses(t, dir)
	for _, want := range []string{r.path, "hourglass repair", "acked could be handed out again"} {
		if !strings.Contains(out, want) {
			t.Errorf("serve's refusal lacks %q:\n%s", want, out)
		}
	}
	rep := clRepair(t, dir)
	m := regexp.MustCompile(`ACKS LOST: up to (\d+) messages`).FindStringSubmatch(rep)
	if m == nil {
		t.Fatalf("repair does not say the acks are lost and how many messages may come again:\n%s", rep)
	}
	said, _ := strconv.Atoi(m[1])
	if kept, _ := filepath.Glob(filepath.Join(dir, "quarantine", "*", "queue", "topics", topic, "acks", filepath.Base(r.path))); len(kept) != 1 {
		t.Errorf("no copy of %s in quarantine:\n%s", r.path, rep)
	}

	p = start(t, dir, nil)
	again, missing := 0, len(open)
	for _, id := range qDrain(t, p, topic) {
		switch {
		case acked[id]:
			again++
		case open[id]:
			missing--
		}
	}
	if again > said {
		t.Errorf("%d acked messages handed out again; repair said up to %d", again, said)
	}
	if missing != 0 {
		t.Errorf("%d of the %d messages never acked were not handed out again", missing, len(open))
	}
	t.Logf("serve refused:\n%s\nrepair:\n%s\nrepair said up to %d; %d acked messages came again", out, rep, said, again)
	p.stop(syscall.SIGTERM)
}

// TestFaultQueueLogFlip: one flipped byte in a message of a topic's queue
// log (valid records after it) is damage: inspect verify reports the file
// and serve refuses naming the same file, instead of starting on a log
// with the record zeroed or refusing while verify calls the directory
// clean. After repair the server hands out every other message not acked.
func TestFaultQueueLogFlip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const topic = "qlog"
	p := start(t, dir, nil)
	acked, open := qFill(t, p, topic, 100, 50)
	p.stop(syscall.SIGTERM)

	recs := qRecords(t, filepath.Join(dir, "queue", "topics", topic, "log"))
	if len(recs) != 100 {
		t.Fatalf("the queue log holds %d records, want 100", len(recs))
	}
	r := recs[75]
	clFlip(t, r.path, r.pos+r.size/2)

	rel := filepath.Join("queue", "topics", topic, "log", filepath.Base(r.path))
	if code, out := qVerify(t, dir); code != 1 || !strings.Contains(out, rel) {
		t.Errorf("inspect verify exited %d without naming %s:\n%s", code, rel, out)
	}
	out := clServeRefuses(t, dir)
	for _, want := range []string{r.path, "hourglass repair", "would be lost"} {
		if !strings.Contains(out, want) {
			t.Errorf("serve's refusal lacks %q:\n%s", want, out)
		}
	}
	rep := clRepair(t, dir)
	if !strings.Contains(rep, "cannot be read: the messages there are lost") {
		t.Errorf("repair does not say messages are lost:\n%s", rep)
	}
	p = start(t, dir, nil)
	got := 0
	for _, id := range qDrain(t, p, topic) {
		if acked[id] {
			t.Errorf("acked message %s handed out again", id)
		}
		if open[id] {
			got++
		}
	}
	if got != len(open)-1 {
		t.Errorf("%d of the %d messages not acked handed out after repair, want all but the damaged one", got, len(open))
	}
	p.stop(syscall.SIGTERM)
}

// TestQueueMaxTopics: a Schedule naming a new topic beyond --max-topics is
// refused with ResourceExhausted naming the flag; existing topics go on.
func TestQueueMaxTopics(t *testing.T) {
	t.Parallel()
	p := start(t, t.TempDir(), nil, "--max-topics", "3")
	for _, tp := range []string{"a", "b", "c", "a"} {
		schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: tp, Body: []byte("x"), When: delayMs(60_000)})
	}
	_, err := p.client.Schedule(ctxT(t), connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "d", Body: []byte("x")}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "--max-topics") {
		t.Fatalf("Schedule to a fourth topic: %v; want ResourceExhausted naming --max-topics", err)
	}
	_, err = p.client.ScheduleBatch(ctxT(t), connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{
		{Topic: "b", Body: []byte("x")}, {Topic: "e", Body: []byte("x")}}}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "messages[1]") {
		t.Fatalf("ScheduleBatch naming a new topic: %v; want ResourceExhausted for messages[1]", err)
	}
	schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "c", Body: []byte("y")})
	p.stop(syscall.SIGTERM)
}

// TestQueueMaxTopicsDeadLetterNames: dead-letter topics count against
// --max-topics like any other, so that a batch of "<name>.dlq" topics
// cannot take the server past it; nor can a Redrive to a new topic.
func TestQueueMaxTopicsDeadLetterNames(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, dir, nil, "--max-topics", "10")
	var msgs []*hourglassv1.ScheduleRequest
	for i := range 1000 {
		msgs = append(msgs, &hourglassv1.ScheduleRequest{Topic: fmt.Sprintf("x%d.dlq", i), Body: []byte("x")})
	}
	_, err := p.client.ScheduleBatch(ctxT(t), connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: msgs}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "messages[10]") || !strings.Contains(err.Error(), "--max-topics") {
		t.Fatalf("ScheduleBatch to 1,000 dead-letter topics with --max-topics 10: %v; want ResourceExhausted for messages[10] naming --max-topics", err)
	}
	res, err := p.client.ScheduleBatch(ctxT(t), connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: msgs[:10]}))
	if err != nil || len(res.Msg.Results) != 10 {
		t.Fatalf("ScheduleBatch to 10 dead-letter topics with --max-topics 10: %v", err)
	}
	_, err = p.client.Schedule(ctxT(t), connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "y.dlq", Body: []byte("x")}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("Schedule to an 11th topic, a dead-letter one: %v; want ResourceExhausted", err)
	}
	_, err = p.client.Redrive(ctxT(t), connect.NewRequest(&hourglassv1.RedriveRequest{DeadLetterTopic: "x0.dlq", ToTopic: "new-topic"}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "to_topic") {
		t.Errorf("Redrive to an 11th topic: %v; want ResourceExhausted naming to_topic", err)
	}
	// The ten messages are due now: wait for their topics, then count them.
	for i := range 10 {
		receive(t, p.client, fmt.Sprintf("x%d.dlq", i), 1, 20*time.Second)
	}
	tr, err := p.client.Topics(ctxT(t), connect.NewRequest(&hourglassv1.TopicsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(tr.Msg.Topics); n > 10 {
		t.Errorf("%d topics held with --max-topics 10: %v", n, tr.Msg.Topics)
	}
	ents, err := os.ReadDir(filepath.Join(dir, "queue", "topics"))
	if err != nil || len(ents) != 10 {
		t.Errorf("%d topic directories on disk (%v); want the 10 admitted", len(ents), err)
	}
	p.stop(syscall.SIGTERM)
}

// metric returns the sum of the samples of name on /metrics.
func metric(t *testing.T, p *proc, name string) float64 {
	t.Helper()
	resp, err := http.Get(p.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("/metrics: %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// allocated is the disk space (allocated blocks) of the files under dir.
func allocated(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					n += st.Blocks * 512
				}
			}
		}
		return nil
	})
	return n
}

// TestQueueIdleTopicsCostNothing: topics that each received one message
// and sit idle hold no goroutines once --topic-idle-timeout passed (their
// files close; the messages wait on disk), take tens of KiB of disk each
// rather than a preallocated segment pair, and each message is still
// received afterwards. At most 100 topics get per-topic metric series.
func TestQueueIdleTopicsCostNothing(t *testing.T) {
	t.Parallel()
	const topics = 150
	dir := t.TempDir()
	p := start(t, dir, nil, "--topic-idle-timeout", "1s")
	base := metric(t, p, "go_goroutines")
	var msgs []*hourglassv1.ScheduleRequest
	for i := range topics {
		msgs = append(msgs, &hourglassv1.ScheduleRequest{Topic: fmt.Sprintf("idle-%03d", i), Body: []byte("x")})
	}
	if _, err := p.client.ScheduleBatch(ctxT(t), connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: msgs})); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for metric(t, p, "hourglass_queue_appended_total") < topics {
		if time.Now().After(deadline) {
			t.Fatalf("%v of %d messages in the queue after 30s", metric(t, p, "hourglass_queue_appended_total"), topics)
		}
		time.Sleep(50 * time.Millisecond)
	}
	peak := metric(t, p, "go_goroutines")
	// The queue's topics close after --topic-idle-timeout, and so do the
	// engine's per-topic delivery lanes (two goroutines each).
	waitG := func(max float64, within time.Duration, what string) float64 {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			g := metric(t, p, "go_goroutines")
			if g <= max {
				return g
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v goroutines %v after %d topics went idle (%v before them, %v at the peak): %s", g, within, topics, base, peak, what)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	g := waitG(base+20, 30*time.Second, "idle topics keep goroutines")
	disk := allocated(t, filepath.Join(dir, "queue", "topics"))
	t.Logf("goroutines: %v before, %v with %d topics open, %v once they were idle; disk %d KiB per topic",
		base, peak, topics, g, disk/topics>>10)
	if disk/topics > 256<<10 {
		t.Errorf("%d KiB of disk per topic holding one message; want tens of KiB", disk/topics>>10)
	}
	resp, err := http.Get(p.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	series := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "hourglass_queue_ready{") {
			series++
		}
	}
	resp.Body.Close()
	if series > 101 {
		t.Errorf("%d hourglass_queue_ready series for %d topics; at most 100 and (other)", series, topics)
	}
	// The messages wait on disk: each idle topic opens again when received.
	for _, i := range []int{0, topics / 2, topics - 1} {
		tp := fmt.Sprintf("idle-%03d", i)
		if ids := qDrain(t, p, tp); len(ids) != 1 {
			t.Errorf("topic %s handed out %d messages after going idle, want its one", tp, len(ids))
		}
	}
	p.stop(syscall.SIGTERM)
}
