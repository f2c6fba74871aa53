package client_test

// Tests of the operator's calls against a whole node in this process
// (the root package: its stored policies reach the queue as in `hourglass
// serve`), so they live outside package client, which the node imports.

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass"
	"github.com/hourglassmq/hourglass/client"
	"github.com/hourglassmq/hourglass/commitlog"
)

// opTimeout bounds every wait of these tests: far beyond what a step
// needs, so that only a hang reaches it.
const opTimeout = 20 * time.Second

// startNode runs a node of the default config (DataDir, Fsync and Logger
// filled in) changed by set, if not nil, on a loopback port until the test
// ends, and returns a client of it.
func startNode(t *testing.T, set func(*hourglass.Config)) *client.Client {
	t.Helper()
	cfg := hourglass.DefaultConfig()
	cfg.DataDir, cfg.Fsync, cfg.Logger = t.TempDir(), commitlog.SyncNone, slog.New(slog.DiscardHandler)
	if set != nil {
		set(&cfg)
	}
	node, err := hourglass.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go node.Serve(ln)
	t.Cleanup(func() { node.Close() })
	select {
	case <-node.Ready():
	case <-time.After(opTimeout):
		t.Fatal("node not ready")
	}
	c, err := client.New(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// receiveN receives n messages of topic, failing the test if they do not
// come within opTimeout.
func receiveN(t *testing.T, c *client.Client, topic string, n int) []client.Delivery {
	t.Helper()
	var out []client.Delivery
	deadline := time.Now().Add(opTimeout)
	for len(out) < n {
		if time.Now().After(deadline) {
			t.Fatalf("topic %s: %d of %d messages within %v", topic, len(out), n, opTimeout)
		}
		ds, err := c.Receive(context.Background(), topic, client.ReceiveOptions{MaxMessages: n - len(out), Wait: time.Until(deadline), Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ds...)
	}
	return out
}

// receiveNone checks that topic hands out nothing within wait.
func receiveNone(t *testing.T, c *client.Client, topic string, wait time.Duration) {
	t.Helper()
	ds, err := c.Receive(context.Background(), topic, client.ReceiveOptions{MaxMessages: 100, Wait: wait})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		t.Errorf("topic %s handed out %s (%q)", topic, d.ID, d.Body)
	}
}

func listAll(t *testing.T, c *client.Client, topic string, o client.ListOptions) []client.Scheduled {
	t.Helper()
	var out []client.Scheduled
	for m, err := range c.List(context.Background(), topic, o) {
		if err != nil {
			t.Fatalf("List(%s, %+v): %v", topic, o, err)
		}
		out = append(out, m)
	}
	return out
}

// TestDeadLettersRedrive dead-letters two messages (one past its
// attempts, one at once), lists them with why, counts them in Topics,
// redrives them by reason and by ID, and purges what is left.
func TestDeadLettersRedrive(t *testing.T) {
	c := startNode(t, func(c *hourglass.Config) { c.MaxAttempts = 2 })
	ctx := context.Background()
	x, err := c.Schedule(ctx, client.Message{Topic: "dl", Body: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	y, err := c.Schedule(ctx, client.Message{Topic: "dl", Body: []byte("y")})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range receiveN(t, c, "dl", 2) {
		o := client.NackOptions{Reason: "db timeout"}
		if d.ID == y {
			o = client.NackOptions{Reason: "poison", DeadLetter: true, Delay: time.Hour}
		}
		if err := c.NackWith(ctx, d, o); err != nil {
			t.Fatal(err)
		}
	}
	d := receiveN(t, c, "dl", 1)[0]
	if d.ID != x || d.Attempt != 1 {
		t.Fatalf("redelivered %s attempt %d; want %s attempt 1", d.ID, d.Attempt, x)
	}
	if err := c.NackWith(ctx, d, client.NackOptions{Reason: "db timeout again"}); err != nil {
		t.Fatal(err)
	}
	if err := c.NackWith(ctx, d, client.NackOptions{Delay: -time.Second}); !errors.Is(err, client.ErrInvalidMessage) {
		t.Errorf("NackWith a negative delay: %v; want ErrInvalidMessage", err)
	}

	dead := listAll(t, c, "dl", client.ListOptions{State: client.StateDeadLettered})
	why := map[string]*client.DeadLetterInfo{}
	for _, m := range dead {
		why[string(m.Body)] = m.DeadLetter
	}
	if dl := why["x"]; len(dead) != 2 || dl == nil || dl.Reason != "max-attempts" || dl.LastError != "db timeout again" || dl.OriginTopic != "dl" || dl.Attempts != 2 || dl.At.IsZero() {
		t.Errorf("dead letter x: %+v (of %d)", dl, len(dead))
	}
	if dl := why["y"]; dl == nil || dl.Reason != "nacked" || dl.LastError != "poison" {
		t.Errorf("dead letter y: %+v", dl)
	}
	// The same dead letters listed as the due messages of the dead-letter
	// topic.
	if due := listAll(t, c, "dl.dlq", client.ListOptions{State: client.StateDue}); len(due) != 2 || due[0].DeadLetter == nil {
		t.Errorf("List(dl.dlq, due) = %+v; want the 2 dead letters", due)
	}
	topics, err := c.Topics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(topics, func(ti client.TopicInfo) bool { return ti.Topic == "dl" }); i < 0 || topics[i].DeadLettered != 2 || topics[i].Due != 0 {
		t.Errorf("Topics = %+v; want dl with 2 dead letters and nothing due", topics)
	}

	res, err := c.Redrive(ctx, "dl.dlq", client.RedriveOptions{Reason: "max-attempts"})
	if err != nil || res != (client.RedriveResult{Redriven: 1, Skipped: 1}) {
		t.Fatalf("Redrive by reason = %+v, %v; want 1 redriven, 1 skipped", res, err)
	}
	back := receiveN(t, c, "dl", 1)[0]
	if string(back.Body) != "x" || back.Attempt != 0 || back.OriginID != x || back.DeadLetter != nil {
		t.Errorf("redriven: %+v; want x on attempt 0 with origin %s", back, x)
	}
	var yDead client.ID
	for _, m := range listAll(t, c, "dl", client.ListOptions{State: client.StateDeadLettered}) {
		yDead = m.ID
	}
	res, err = c.Redrive(ctx, "dl.dlq", client.RedriveOptions{IDs: []client.ID{yDead}, To: "elsewhere"})
	if err != nil || res.Redriven != 1 {
		t.Fatalf("Redrive by ID = %+v, %v", res, err)
	}
	if moved := receiveN(t, c, "elsewhere", 1)[0]; string(moved.Body) != "y" {
		t.Errorf("redriven to elsewhere: %q; want y", moved.Body)
	}
	if _, err := c.Redrive(ctx, "dl", client.RedriveOptions{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("Redrive of a topic that is not a dead-letter topic: %v; want InvalidArgument", err)
	}
}

// TestRedriveMax moves dead letters a few per call, as the CLI does:
// More says when to call again, and each message moves once.
func TestRedriveMax(t *testing.T) {
	c := startNode(t, nil)
	ctx := context.Background()
	for range 5 {
		if _, err := c.Schedule(ctx, client.Message{Topic: "m"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range receiveN(t, c, "m", 5) {
		if err := c.NackWith(ctx, d, client.NackOptions{DeadLetter: true}); err != nil {
			t.Fatal(err)
		}
	}
	var calls []client.RedriveResult
	for {
		res, err := c.Redrive(ctx, "m.dlq", client.RedriveOptions{Max: 2, Rate: 100})
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, res)
		if !res.More {
			break
		}
		if len(calls) > 5 {
			t.Fatalf("Redrive keeps saying More: %+v", calls)
		}
	}
	want := []client.RedriveResult{{Redriven: 2, More: true}, {Redriven: 2, More: true}, {Redriven: 1}}
	if !slices.Equal(calls, want) {
		t.Errorf("Redrive calls = %+v; want %+v", calls, want)
	}
	receiveN(t, c, "m", 5)
	if _, err := c.Redrive(ctx, "m.dlq", client.RedriveOptions{Max: 1 << 40}); !errors.Is(err, client.ErrInvalidMessage) {
		t.Errorf("Redrive Max 1<<40: %v; want ErrInvalidMessage", err)
	}
}

// TestListQueueStates lists due and leased messages, and refuses what
// the queue's states do not take.
func TestListQueueStates(t *testing.T) {
	c := startNode(t, nil)
	ctx := context.Background()
	for _, b := range []string{"a", "b", "c"} {
		if _, err := c.Schedule(ctx, client.Message{Topic: "q", Body: []byte(b)}); err != nil {
			t.Fatal(err)
		}
	}
	leased := receiveN(t, c, "q", 1)[0]
	ls := listAll(t, c, "q", client.ListOptions{State: client.StateLeased})
	if len(ls) != 1 || ls[0].ID != leased.ID || !ls[0].LeaseUntil.Equal(leased.LeaseExpiresAt) {
		t.Errorf("List leased = %+v; want %s until %v", ls, leased.ID, leased.LeaseExpiresAt)
	}
	due := listAll(t, c, "q", client.ListOptions{State: client.StateDue, PageSize: 1})
	if len(due) != 2 || slices.ContainsFunc(due, func(m client.Scheduled) bool { return m.ID == leased.ID || !m.LeaseUntil.IsZero() }) {
		t.Errorf("List due = %+v; want the other 2, without a lease", due)
	}
	if pending := listAll(t, c, "q", client.ListOptions{}); len(pending) != 0 {
		t.Errorf("List pending = %+v; want none (all are due)", pending)
	}
	if _, _, err := c.ListPage(ctx, "q", client.ListOptions{State: client.StateAcked}, ""); !errors.Is(err, client.ErrInvalidMessage) {
		t.Errorf("List acked: %v; want ErrInvalidMessage", err)
	}
	if _, _, err := c.ListPage(ctx, "q", client.ListOptions{State: client.StateDue, From: time.Now()}, ""); status.Code(err) != codes.InvalidArgument {
		t.Errorf("List due From now: %v; want InvalidArgument", err)
	}
}

// TestPolicy sets, reads, pauses, resumes and resets a topic's policy.
func TestPolicy(t *testing.T) {
	c := startNode(t, func(c *hourglass.Config) { c.MaxAttempts, c.DefaultLease = 4, 30*time.Second })
	ctx := context.Background()
	p, err := c.GetPolicy(ctx, "pol")
	if err != nil {
		t.Fatal(err)
	}
	if p.Set != (client.Policy{}) || *p.Effective.MaxAttempts != 4 || *p.Effective.Lease != 30*time.Second || *p.Effective.Paused {
		t.Errorf("GetPolicy of a topic without one = %+v; want nothing set, the server's defaults effective", p)
	}
	p, err = c.SetPolicy(ctx, "pol", client.Policy{MaxAttempts: new(7), Lease: new(2 * time.Minute), MaxDispatchRate: new(50.0),
		Backoff: &client.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.1}})
	if err != nil {
		t.Fatal(err)
	}
	wantB := client.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.1}
	if *p.Set.MaxAttempts != 7 || *p.Set.Lease != 2*time.Minute || *p.Set.MaxDispatchRate != 50 || *p.Set.Backoff != wantB || p.Set.Paused != nil {
		t.Errorf("SetPolicy = %+v", p.Set)
	}

	if _, err := c.Pause(ctx, "pol"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Schedule(ctx, client.Message{Topic: "pol", Body: []byte("held")}); err != nil {
		t.Fatal(err)
	}
	receiveNone(t, c, "pol", 300*time.Millisecond)
	p, err = c.Resume(ctx, "pol")
	if err != nil || p.Set.Paused != nil || *p.Effective.Paused || *p.Set.MaxAttempts != 7 {
		t.Fatalf("Resume = %+v, %v; want unpaused, the rest kept", p, err)
	}
	// A Receive that asks for no lease gets the policy's.
	ds, err := c.Receive(ctx, "pol", client.ReceiveOptions{Wait: opTimeout})
	if err != nil || len(ds) != 1 {
		t.Fatalf("Receive after Resume: %v, %v", ds, err)
	}
	if d := ds[0]; string(d.Body) != "held" || d.LeaseExpiresAt.Sub(d.ReceivedAt) != 2*time.Minute {
		t.Errorf("after Resume: %q leased %v; want held, for the policy's 2m", d.Body, d.LeaseExpiresAt.Sub(d.ReceivedAt))
	}

	p, err = c.SetPolicy(ctx, "pol", client.Policy{}, client.PolicyFields...)
	if err != nil || p.Set != (client.Policy{}) || *p.Effective.MaxAttempts != 4 {
		t.Errorf("SetPolicy back to every default = %+v, %v", p, err)
	}
	if _, err := c.SetPolicy(ctx, "pol", client.Policy{MaxAttempts: new(5000)}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("MaxAttempts 5000: %v; want InvalidArgument", err)
	}
	if _, err := c.SetPolicy(ctx, "pol", client.Policy{}, "no_such_field"); status.Code(err) != codes.InvalidArgument {
		t.Errorf("defaults no_such_field: %v; want InvalidArgument", err)
	}
	if _, err := c.SetPolicy(ctx, "pol", client.Policy{Lease: new(time.Duration(0))}); !errors.Is(err, client.ErrInvalidMessage) {
		t.Errorf("Lease 0: %v; want ErrInvalidMessage", err)
	}
	if _, err := c.SetPolicy(ctx, "pol", client.Policy{Backoff: &client.Backoff{Initial: -time.Second}}); !errors.Is(err, client.ErrInvalidMessage) {
		t.Errorf("Backoff -1s: %v; want ErrInvalidMessage", err)
	}
}

// TestPurgeDeleteTopic purges pending, due and dead-lettered messages,
// then deletes a topic with its policy.
func TestPurgeDeleteTopic(t *testing.T) {
	c := startNode(t, nil)
	ctx := context.Background()
	sched := func(m client.Message) client.ID {
		t.Helper()
		id, err := c.Schedule(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	// The due message first: wait until the queue holds it, so that the
	// purge of pending messages cannot find it still pending.
	sched(client.Message{Topic: "p", Body: []byte("due")})
	deadline := time.Now().Add(opTimeout)
	for len(listAll(t, c, "p", client.ListOptions{State: client.StateDue})) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the due message never reached the queue")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for range 3 {
		sched(client.Message{Topic: "p", Delay: time.Hour})
	}
	keep := sched(client.Message{Topic: "other", Delay: time.Hour})
	if n, err := c.Purge(ctx, "p", client.StatePending); err != nil || n != 3 {
		t.Errorf("Purge pending = %d, %v; want 3", n, err)
	}
	if f, err := c.Get(ctx, keep); err != nil || f.State != client.StatePending {
		t.Errorf("another topic's message after the purge: %+v, %v; want pending", f, err)
	}
	if n, err := c.Purge(ctx, "p", client.StateDue); err != nil || n != 1 {
		t.Errorf("Purge due = %d, %v; want 1", n, err)
	}
	sched(client.Message{Topic: "p", Body: []byte("dead")})
	if err := c.NackWith(ctx, receiveN(t, c, "p", 1)[0], client.NackOptions{DeadLetter: true}); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Purge(ctx, "p", client.StateDeadLettered); err != nil || n != 1 {
		t.Errorf("Purge dead-lettered = %d, %v; want 1", n, err)
	}
	if _, err := c.Purge(ctx, "p", client.StateLeased); !errors.Is(err, client.ErrInvalidMessage) {
		t.Errorf("Purge leased: %v; want ErrInvalidMessage", err)
	}

	if _, err := c.Pause(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	sched(client.Message{Topic: "p", Delay: time.Hour})
	del, err := c.DeleteTopic(ctx, "p")
	if err != nil || del.Cancelled != 1 {
		t.Errorf("DeleteTopic = %+v, %v; want 1 cancelled", del, err)
	}
	if p, err := c.GetPolicy(ctx, "p"); err != nil || p.Set != (client.Policy{}) {
		t.Errorf("policy after DeleteTopic = %+v, %v; want none set", p, err)
	}
}

// TestGetAfterBackoffRetries: three nacks under a topic's backoff policy
// (each retry scheduled under an ID of its own) end in a dead letter, and
// Get by the ID Schedule answered says so, with the reason and the
// consumer's last error, under the ID that carries the message now.
func TestGetAfterBackoffRetries(t *testing.T) {
	c := startNode(t, nil)
	ctx := context.Background()
	three := 3
	if _, err := c.SetPolicy(ctx, "retried", client.Policy{MaxAttempts: &three,
		Backoff: &client.Backoff{Initial: 50 * time.Millisecond, Max: 50 * time.Millisecond, Multiplier: 1}}); err != nil {
		t.Fatal(err)
	}
	first, err := c.Schedule(ctx, client.Message{Topic: "retried", Body: []byte("job")})
	if err != nil {
		t.Fatal(err)
	}
	var last client.ID
	for attempt := range 3 {
		d := receiveN(t, c, "retried", 1)[0]
		if d.Attempt != attempt {
			t.Fatalf("attempt %d: received attempt %d", attempt, d.Attempt)
		}
		if err := c.NackWith(ctx, d, client.NackOptions{Reason: "boom"}); err != nil {
			t.Fatal(err)
		}
		last = d.ID
	}
	f, err := c.Get(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	if f.State != client.StateDeadLettered || f.DeadLetterTopic != "retried.dlq" || f.RescheduledTo != last {
		t.Fatalf("Get(first) after three nacks: %s in %q as %s; want dead-lettered in retried.dlq as %s", f.State, f.DeadLetterTopic, f.RescheduledTo, last)
	}
	if dl := f.Message.DeadLetter; dl == nil || dl.Reason != "max-attempts" || dl.LastError != "boom" || dl.Attempts != 3 {
		t.Errorf("Get(first) after three nacks: dead letter %+v; want max-attempts after 3 attempts, boom", dl)
	}
}
