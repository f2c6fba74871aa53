package e2e

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
)

// TestFreezeThroughBinary freezes a topic with `hourglass pause --freeze`,
// kills the server with SIGKILL while frozen and again after `hourglass
// resume`, and checks that every message stored before the freeze is
// received no earlier than its time plus the freeze's length (and not much
// later), that one sent while frozen keeps its time, and that the
// freeze's record survives both kills.
func TestFreezeThroughBinary(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, dir, nil)
	run := func(args ...string) string {
		t.Helper()
		return strings.TrimSpace(hgOK(t, "", append(args, "--addr", p.url)...))
	}
	a := schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "fz", Body: []byte("a"), When: delayMs(2500)})
	b := schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "fz", Body: []byte("b"), When: delayMs(5000)})
	before := time.Now()
	if out := run("pause", "fz", "--freeze"); out != "fz frozen" {
		t.Fatalf("pause --freeze printed %q; want \"fz frozen\"", out)
	}
	frozenBy := time.Now() // the freeze began in [before, frozenBy]
	c := schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "fz", Body: []byte("c"), When: delayMs(1000)})

	var got struct {
		Message struct {
			DueAt  string `json:"due_at"`
			Frozen bool   `json:"frozen"`
		} `json:"message"`
	}
	if err := json.Unmarshal([]byte(run("get", a, "--json")), &got); err != nil || !got.Message.Frozen {
		t.Errorf("get --json of a while frozen: %+v, %v; want frozen", got, err)
	}

	p.stop(syscall.SIGKILL)
	p = start(t, dir, nil)
	var pol struct {
		Effective struct {
			Freeze *bool `json:"freeze"`
		} `json:"effective"`
		Freezes []struct {
			BeganAt string `json:"began_at"`
			EndedAt string `json:"ended_at"`
		} `json:"freezes"`
	}
	if err := json.Unmarshal([]byte(run("policy", "show", "fz", "--json")), &pol); err != nil || pol.Effective.Freeze == nil || !*pol.Effective.Freeze || len(pol.Freezes) != 1 {
		t.Fatalf("policy show after kill -9 while frozen: %+v, %v; want still frozen, one freeze", pol, err)
	}
	// Frozen past a's and c's times (and b's stored time minus a little).
	waitServerTime(t, p, idTime(t, b).Add(-time.Second))
	receiveNone(t, p.client, "fz", 200*time.Millisecond)
	resumeFrom := time.Now()
	if out := run("resume", "fz"); out != "fz resumed" {
		t.Fatalf("resume printed %q", out)
	}
	resumedBy := time.Now()
	minLen, maxLen := resumeFrom.Sub(frozenBy), resumedBy.Sub(before)

	// c, sent while frozen, keeps its time: due already, received now.
	rs := receive(t, p.client, "fz", 1, 10*time.Second)
	if rs[0].m.Id != c {
		t.Fatalf("first received after resume: %s %q; want c (%s), sent while frozen and due", rs[0].m.Id, rs[0].m.Body, c)
	}
	ack(t, p.client, "fz", rs[0].m.Id)

	p.stop(syscall.SIGKILL)
	p = start(t, dir, nil)
	for _, want := range []struct {
		name, id string
	}{{"a", a}, {"b", b}} {
		rs := receive(t, p.client, "fz", 1, 30*time.Second)
		m := rs[0].m
		if string(m.Body) != want.name || (m.Id != want.id && m.OriginId != want.id) {
			t.Fatalf("received %s %q (origin %s); want %s (%s)", m.Id, m.Body, m.OriginId, want.name, want.id)
		}
		stored := idTime(t, want.id)
		at := m.ReceivedAt.AsTime()
		if early := stored.Add(minLen); at.Before(early) {
			t.Errorf("%s received at %v; due %v plus the freeze (at least %v) is %v: early", want.name, at, stored, minLen, early)
		}
		if late := stored.Add(maxLen).Add(3 * time.Second); at.After(late) {
			t.Errorf("%s received at %v; due %v plus the freeze (at most %v) is %v: more than 3 s late", want.name, at, stored, maxLen, late)
		}
		ack(t, p.client, "fz", m.Id)
	}
	receiveNone(t, p.client, "fz", 300*time.Millisecond)
}

// idTime is the delivery time an ID carries.
func idTime(t *testing.T, id string) time.Time {
	t.Helper()
	mid, err := message.ParseID(id)
	if err != nil {
		t.Fatal(err)
	}
	return mid.Time()
}

// waitServerTime waits until the server's clock is past at.
func waitServerTime(t *testing.T, p *proc, at time.Time) {
	t.Helper()
	deadline := time.Now().Add(time.Until(at) + 30*time.Second)
	for {
		res, err := p.client.Time(ctxT(t), connect.NewRequest(&hourglassv1.TimeRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if res.Msg.Now.AsTime().After(at) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server's clock did not pass %v", at)
		}
		time.Sleep(20 * time.Millisecond) // polling the server's clock
	}
}
