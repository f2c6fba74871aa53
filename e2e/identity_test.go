package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// TestOneIdentityThroughRetries: the ID a producer was given names its
// message through the retries a backoff policy makes (each under an ID
// of its own), and Get by it, over the API and the CLI, says where the
// message is now: waiting for its next attempt, leased, and at the end
// dead-lettered with the reason. Cancel by it acts on the retry waiting.
func TestOneIdentityThroughRetries(t *testing.T) {
	p := start(t, t.TempDir(), nil)
	ctx := ctxT(t)
	c := p.client
	if _, err := c.SetPolicy(ctx, connect.NewRequest(&hourglassv1.SetPolicyRequest{Topic: "work",
		Policy: &hourglassv1.Policy{MaxAttempts: ptr(int32(3)), Backoff: &hourglassv1.Backoff{InitialMs: 300, Multiplier: 1}}})); err != nil {
		t.Fatal(err)
	}
	get := func(id string) *hourglassv1.GetResponse {
		t.Helper()
		res, err := c.Get(ctx, connect.NewRequest(&hourglassv1.GetRequest{Id: id}))
		if err != nil {
			t.Fatalf("Get(%s): %v", id, err)
		}
		return res.Msg
	}
	first := schedule(t, c, &hourglassv1.ScheduleRequest{Topic: "work", Body: []byte("job"), When: delayMs(0)})
	for attempt := range 3 {
		m := receive(t, c, "work", 1, 10*time.Second)[0].m
		if m.Attempt != uint32(attempt) || m.OriginId != first {
			t.Fatalf("attempt %d: received %s attempt %d origin %s", attempt, m.Id, m.Attempt, m.OriginId)
		}
		g := get(first)
		if g.State != hourglassv1.MessageState_MESSAGE_STATE_LEASED || g.Message.GetId() != m.Id {
			t.Errorf("attempt %d: Get(first) = %v as %s; want leased as %s", attempt, g.State, g.Message.GetId(), m.Id)
		}
		if _, err := c.Nack(ctx, connect.NewRequest(&hourglassv1.NackRequest{Topic: "work", Receipt: m.Receipt, Reason: "boom"})); err != nil {
			t.Fatal(err)
		}
		g = get(first)
		if attempt < 2 {
			// Waiting for the next attempt, under the retry's ID.
			if g.State != hourglassv1.MessageState_MESSAGE_STATE_PENDING && g.State != hourglassv1.MessageState_MESSAGE_STATE_DUE ||
				g.Message.GetAttempt() != uint32(attempt+1) || g.RescheduledTo == "" || g.RescheduledTo == m.Id {
				t.Errorf("after nack %d: Get(first) = %v attempt %d as %q; want pending or due, attempt %d, as the retry",
					attempt+1, g.State, g.Message.GetAttempt(), g.RescheduledTo, attempt+1)
			}
			continue
		}
		if g.State != hourglassv1.MessageState_MESSAGE_STATE_DEAD_LETTERED || g.DeadLetterTopic != "work.dlq" ||
			g.Message.GetDeadLetter().GetReason() != "max-attempts" || g.Message.GetDeadLetter().GetLastError() != "boom" ||
			g.Message.GetDeadLetter().GetAttempts() != 3 {
			t.Errorf("after the last nack: Get(first) = %v", g)
		}
	}
	out, err := exec.Command(binary, "get", first, "--addr", p.url).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "dead-lettered") || !strings.Contains(string(out), "max-attempts") {
		t.Errorf("hourglass get %s: %v\n%s\nwant dead-lettered, max-attempts", first, err, out)
	}

	// Cancel by the first ID while a retry waits cancels the retry.
	if _, err := c.SetPolicy(ctx, connect.NewRequest(&hourglassv1.SetPolicyRequest{Topic: "slow",
		Policy: &hourglassv1.Policy{Backoff: &hourglassv1.Backoff{InitialMs: 3_600_000, Multiplier: 1}}})); err != nil {
		t.Fatal(err)
	}
	job := schedule(t, c, &hourglassv1.ScheduleRequest{Topic: "slow", Body: []byte("later"), When: delayMs(0)})
	m := receive(t, c, "slow", 1, 10*time.Second)[0].m
	if _, err := c.Nack(ctx, connect.NewRequest(&hourglassv1.NackRequest{Topic: "slow", Receipt: m.Receipt})); err != nil {
		t.Fatal(err)
	}
	if res := cancelID(t, c, job); res != hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Errorf("Cancel of the first ID while its retry waits: %v; want cancelled", res)
	}
	if g := get(job); g.State != hourglassv1.MessageState_MESSAGE_STATE_CANCELLED || g.Message.GetAttempt() != 1 {
		t.Errorf("Get(first) after the cancel: %v attempt %d; want its retry cancelled", g.State, g.Message.GetAttempt())
	}
}

// TestGetAfterRetirement: once a message's bucket is retired (every entry
// of it delivered, its segment deleted), Get by the first ID still finds
// it in the queue, under its retry's ID too: due, leased, and dead-lettered
// with the reason.
func TestGetAfterRetirement(t *testing.T) {
	dir := t.TempDir()
	p := start(t, dir, nil) // 2 s buckets
	ctx := ctxT(t)
	c := p.client
	get := func(id string) *hourglassv1.GetResponse {
		t.Helper()
		res, err := c.Get(ctx, connect.NewRequest(&hourglassv1.GetRequest{Id: id}))
		if err != nil {
			t.Fatalf("Get(%s): %v", id, err)
		}
		return res.Msg
	}
	// segmentsGone waits until no schedule segment is left: every bucket
	// of the test was retired.
	segmentsGone := func() {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			segs, _ := filepath.Glob(filepath.Join(dir, "schedule", "*.sched"))
			if len(segs) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("segments not retired after 30s: %v", segs)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waiting := schedule(t, c, &hourglassv1.ScheduleRequest{Topic: "wait", Body: []byte("w"), When: delayMs(0)})
	first := schedule(t, c, &hourglassv1.ScheduleRequest{Topic: "old", Body: []byte("r"), When: delayMs(0)})
	m := receive(t, c, "old", 1, 10*time.Second)[0].m
	// Retried after 100 ms under a new ID, then leased again.
	if _, err := c.Nack(ctx, connect.NewRequest(&hourglassv1.NackRequest{Topic: "old", Receipt: m.Receipt, DelayMs: 100})); err != nil {
		t.Fatal(err)
	}
	retry := receive(t, c, "old", 1, 10*time.Second)[0].m
	if retry.OriginId != first || retry.Id == first {
		t.Fatalf("the retry: %s origin %s", retry.Id, retry.OriginId)
	}
	segmentsGone()
	if g := get(waiting); g.State != hourglassv1.MessageState_MESSAGE_STATE_DUE || string(g.Message.GetBody()) != "w" {
		t.Errorf("Get(waiting) after retirement: %v %q; want due", g.State, g.Message.GetBody())
	}
	if g := get(first); g.State != hourglassv1.MessageState_MESSAGE_STATE_LEASED || g.RescheduledTo != retry.Id || g.Message.GetAttempt() != 1 {
		t.Errorf("Get(first) after retirement: %v as %q attempt %d; want leased as %s", g.State, g.RescheduledTo, g.Message.GetAttempt(), retry.Id)
	}
	if _, err := c.Nack(ctx, connect.NewRequest(&hourglassv1.NackRequest{Topic: "old", Receipt: retry.Receipt, DeadLetter: true, Reason: "bad"})); err != nil {
		t.Fatal(err)
	}
	if g := get(first); g.State != hourglassv1.MessageState_MESSAGE_STATE_DEAD_LETTERED || g.DeadLetterTopic != "old.dlq" || g.Message.GetDeadLetter().GetLastError() != "bad" {
		t.Errorf("Get(first) after its dead letter: %v", g)
	}
	// Acked after its bucket retired: Get says acked, and Cancel and
	// Reschedule say already delivered, as before the retirement.
	w := receive(t, c, "wait", 1, 10*time.Second)[0].m
	if _, err := c.Ack(ctx, connect.NewRequest(&hourglassv1.AckRequest{Topic: "wait", Receipt: w.Receipt})); err != nil {
		t.Fatal(err)
	}
	if g := get(waiting); g.State != hourglassv1.MessageState_MESSAGE_STATE_ACKED {
		t.Errorf("Get(waiting) acked after retirement: %v; want acked", g.State)
	}
	if res := cancelID(t, c, waiting); res != hourglassv1.CancelResult_CANCEL_RESULT_ALREADY_DELIVERED {
		t.Errorf("Cancel of a message acked after retirement: %v; want already delivered", res)
	}
	rs, err := c.Reschedule(ctx, connect.NewRequest(&hourglassv1.RescheduleRequest{Id: first, When: &hourglassv1.RescheduleRequest_Now{Now: true}}))
	if err != nil || rs.Msg.Result != hourglassv1.RescheduleResult_RESCHEDULE_RESULT_ALREADY_DELIVERED {
		t.Errorf("Reschedule of a dead letter after retirement: %v, %v; want already delivered", rs, err)
	}
	// After a restart too.
	p.stop(syscall.SIGTERM)
	p = start(t, dir, nil)
	c = p.client
	if g := get(first); g.State != hourglassv1.MessageState_MESSAGE_STATE_DEAD_LETTERED {
		t.Errorf("Get(first) after a restart: %v", g.State)
	}
}
