package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/hourglassmq/hourglass/cluster"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// got is one occurrence received through the API.
type got struct {
	id, schedule string
	at           time.Time // the occurrence's time
	received     time.Time
	attempt      uint32
}

// occurrenceLog receives a topic's occurrences from a node and acks them.
type occurrenceLog struct {
	mu  sync.Mutex
	all []got // guarded by mu
}

func (l *occurrenceLog) of(schedule string) []got {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []got
	for _, g := range l.all {
		if g.schedule == schedule {
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b got) int { return a.at.Compare(b.at) })
	return out
}

// headerFold is the value of the header k, whatever its case.
func headerFold(hs []*hourglassv1.Header, k string) string {
	for _, h := range hs {
		if strings.EqualFold(h.Key, k) {
			return h.Value
		}
	}
	return ""
}

// receive long-polls p for topic and acks what it gets until ctx ends.
func (l *occurrenceLog) receive(ctx context.Context, t *testing.T, p *proc, topic string) {
	for ctx.Err() == nil {
		res, err := p.client.Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: topic, MaxMessages: 10, WaitMs: 1000}))
		if err != nil {
			if ctx.Err() == nil {
				t.Logf("Receive %s from %s: %v", topic, p.addr, err)
			}
			continue
		}
		for _, m := range res.Msg.Messages {
			at, err := time.Parse(time.RFC3339Nano, headerFold(m.Headers, "hourglass-occurrence"))
			if err != nil {
				t.Errorf("%s: no occurrence time in its headers %v", m.Id, m.Headers)
			}
			g := got{id: m.Id, schedule: headerFold(m.Headers, "hourglass-schedule"), at: at, received: m.ReceivedAt.AsTime(), attempt: m.Attempt}
			if g.received.Before(m.DeliverAt.AsTime()) || g.received.Before(at) {
				t.Errorf("%s (%s at %v) handed out early, at %v", m.Id, g.schedule, at, g.received)
			}
			l.mu.Lock()
			l.all = append(l.all, g)
			l.mu.Unlock()
			if _, err := p.client.Ack(ctx, connect.NewRequest(&hourglassv1.AckRequest{Topic: topic, Receipt: m.Receipt})); err != nil && ctx.Err() == nil {
				t.Logf("Ack %s: %v", m.Id, err)
			}
		}
	}
}

// TestClusterSchedules runs a 3-node NATS cluster and two `serve --cluster`
// nodes (4 partitions, lease 2 s). Two `@every 1s` schedules, FIRE_ALL and
// FIRE_LATEST, on partitions of node b, are created through node a;
// their occurrences are received through a. Node b is killed -9: after
// a took its partitions over, the FIRE_ALL schedule has delivered every
// occurrence once, the FIRE_LATEST one every occurrence once but those
// that fell within the takeover (delivered as one), and no occurrence
// key came under two IDs. Then pause, resume and delete through a stop,
// restart and end the occurrences, and ListSchedules through either node
// shows every partition's schedules.
func TestClusterSchedules(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 nats-server and 2 hourglass processes; takes about 30 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const partitions = 4
	_, nodes := startCluster(t, ctx, 2, partitions)
	a, b := nodes[0], nodes[1]
	// Names on b's partitions, and one on a's.
	name := func(prefix string, owner *proc) string {
		for i := 0; ; i++ {
			n := fmt.Sprintf("%s-%d", prefix, i)
			if owned(owner)[cluster.SchedulePartition(n, partitions)] {
				return n
			}
		}
	}
	all, latest, onA := name("all", b), name("latest", b), name("on-a", a)
	create := func(p *proc, name, spec string, misfire hourglassv1.MisfirePolicy) time.Time {
		t.Helper()
		res, err := p.client.CreateSchedule(ctx, connect.NewRequest(&hourglassv1.CreateScheduleRequest{Schedule: &hourglassv1.RecurringSchedule{
			Name: name, Topic: "ticks", Spec: spec, MisfirePolicy: misfire, Headers: []*hourglassv1.Header{{Key: "x-run", Value: name}}}}))
		if err != nil {
			t.Fatalf("CreateSchedule %s through %s: %v", name, p.addr, err)
		}
		return res.Msg.Next.AsTime()
	}
	create(a, all, "@every 1s", hourglassv1.MisfirePolicy_MISFIRE_POLICY_FIRE_ALL)
	create(a, latest, "@every 1s", hourglassv1.MisfirePolicy_MISFIRE_POLICY_FIRE_LATEST)
	create(b, onA, "0 9 * * MON-FRI", hourglassv1.MisfirePolicy_MISFIRE_POLICY_SKIP)
	if _, err := a.client.CreateSchedule(ctx, connect.NewRequest(&hourglassv1.CreateScheduleRequest{Schedule: &hourglassv1.RecurringSchedule{
		Name: all, Topic: "ticks", Spec: "@daily"}})); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("CreateSchedule of a taken name through the other node: %v; want ALREADY_EXISTS", err)
	}
	list := func(p *proc) []string {
		t.Helper()
		var names []string
		token := ""
		for {
			res, err := p.client.ListSchedules(ctx, connect.NewRequest(&hourglassv1.ListSchedulesRequest{PageSize: 2, PageToken: token}))
			if err != nil {
				t.Fatalf("ListSchedules through %s: %v", p.addr, err)
			}
			for _, s := range res.Msg.Schedules {
				names = append(names, s.Schedule.Name)
			}
			if token = res.Msg.NextPageToken; token == "" {
				return names
			}
		}
	}
	want := []string{all, latest, onA}
	slices.Sort(want)
	for _, p := range nodes {
		if got := list(p); !slices.Equal(got, want) {
			t.Errorf("ListSchedules through %s: %v; want %v", p.addr, got, want)
		}
	}
	g, err := a.client.GetSchedule(ctx, connect.NewRequest(&hourglassv1.GetScheduleRequest{Name: onA, NextCount: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Msg.Next) != 2 || g.Msg.ArmedId == "" || g.Msg.Schedule.MisfirePolicy != hourglassv1.MisfirePolicy_MISFIRE_POLICY_SKIP {
		t.Errorf("GetSchedule %s: %v", onA, g.Msg)
	}

	log := &occurrenceLog{}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); log.receive(rctx, t, a, "ticks") }()
	defer func() { stop(); wg.Wait() }()
	waitUntil := func(d time.Duration, what string, cond func() bool) {
		t.Helper()
		end := time.Now().Add(d)
		for !cond() {
			if time.Now().After(end) {
				t.Fatalf("after %v: %s", d, what)
			}
			time.Sleep(50 * time.Millisecond) // polling what was received
		}
	}
	waitUntil(15*time.Second, "fewer than 3 occurrences of each", func() bool { return len(log.of(all)) >= 3 && len(log.of(latest)) >= 3 })

	if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-b.exited
	killed := time.Now()
	after := func(s string, d time.Duration) func() bool {
		return func() bool {
			os := log.of(s)
			return len(os) > 0 && os[len(os)-1].at.After(killed.Add(d))
		}
	}
	waitUntil(40*time.Second, "no occurrence 5 s after the takeover", func() bool {
		return len(owned(a)) == partitions && after(all, 0)() && after(latest, 0)()
	})
	took := time.Since(killed)
	waitUntil(20*time.Second, "occurrences stopped after the takeover", func() bool { return after(all, took+3*time.Second)() && after(latest, took+3*time.Second)() })
	t.Logf("b killed at %v; a delivered its first occurrence after %v", killed.Format("15:04:05.000"), took.Round(time.Millisecond))

	// No occurrence doubled: one ID per occurrence key, each received
	// once (a redelivery would be attempt > 0).
	check := func(s string, maxGaps int) {
		t.Helper()
		os := log.of(s)
		gaps := 0
		for i, o := range os {
			if o.attempt > 0 {
				t.Errorf("%s at %v handed out again (attempt %d)", s, o.at.Format("15:04:05.000"), o.attempt)
			}
			if i == 0 {
				continue
			}
			prev := os[i-1]
			switch d := o.at.Sub(prev.at); {
			case d == 0 && o.id != prev.id:
				t.Errorf("%s at %v doubled: IDs %s and %s", s, o.at.Format("15:04:05.000"), prev.id, o.id)
			case d == 0:
				t.Errorf("%s at %v (%s) received twice", s, o.at.Format("15:04:05.000"), o.id)
			case d != time.Second:
				gaps++
				// Occurrences missed during the takeover come as one.
				if gaps > maxGaps || prev.at.Before(killed.Add(-2*time.Second)) || o.at.After(killed.Add(took+2*time.Second)) {
					t.Errorf("%s: %v then %v, %v apart (b killed at %v, a's first after %v)", s, prev.at.Format("15:04:05.000"), o.at.Format("15:04:05.000"), d,
						killed.Format("15:04:05.000"), took)
				}
			}
		}
	}
	check(all, 0)
	check(latest, 1)

	// Pause, resume and delete through a, which now owns every partition.
	if _, err := a.client.PauseSchedule(ctx, connect.NewRequest(&hourglassv1.PauseScheduleRequest{Name: all})); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	g, err = a.client.GetSchedule(ctx, connect.NewRequest(&hourglassv1.GetScheduleRequest{Name: all}))
	if err != nil || !g.Msg.Schedule.Paused || len(g.Msg.Next) != 0 || g.Msg.ArmedId != "" {
		t.Fatalf("GetSchedule %s after the pause: %v, %v", all, g, err)
	}
	n := len(log.of(latest))
	waitUntil(10*time.Second, latest+" did not go on during the pause", func() bool { return len(log.of(latest)) >= n+2 })
	for _, o := range log.of(all) {
		if o.at.After(paused) {
			t.Errorf("%s at %v delivered after the pause at %v", all, o.at.Format("15:04:05.000"), paused.Format("15:04:05.000"))
		}
	}
	res, err := a.client.ResumeSchedule(ctx, connect.NewRequest(&hourglassv1.ResumeScheduleRequest{Name: all}))
	if err != nil {
		t.Fatal(err)
	}
	resumed := res.Msg.Next.AsTime()
	waitUntil(10*time.Second, all+" did not fire after the resume", func() bool {
		os := log.of(all)
		return !os[len(os)-1].at.Before(resumed)
	})
	if _, err := a.client.DeleteSchedule(ctx, connect.NewRequest(&hourglassv1.DeleteScheduleRequest{Name: all})); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	if _, err := a.client.GetSchedule(ctx, connect.NewRequest(&hourglassv1.GetScheduleRequest{Name: all})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("GetSchedule after the delete: %v; want NOT_FOUND", err)
	}
	n = len(log.of(latest))
	waitUntil(10*time.Second, latest+" did not go on after the delete", func() bool { return len(log.of(latest)) >= n+2 })
	for _, o := range log.of(all) {
		if o.at.After(deleted) {
			t.Errorf("%s at %v delivered after the delete at %v", all, o.at.Format("15:04:05.000"), deleted.Format("15:04:05.000"))
		}
	}
	want = slices.DeleteFunc(want, func(s string) bool { return s == all })
	if got := list(a); !slices.Equal(got, want) {
		t.Errorf("ListSchedules after the delete: %v; want %v", got, want)
	}
}
