package e2e

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
)

// TestExpiryThroughBinary: `hourglass send --ttl` on a paused topic: once
// resumed, the message past its expiry is never received but
// dead-lettered with reason expired and counted in hourglass_expired_total;
// one whose expiry is later is received; a TTL of nothing is refused.
func TestExpiryThroughBinary(t *testing.T) {
	t.Parallel()
	p := start(t, t.TempDir(), nil)
	run := func(args ...string) string {
		t.Helper()
		return strings.TrimSpace(hgOK(t, "", append(args, "--addr", p.url)...))
	}
	run("pause", "exp")
	stale := run("send", "exp", "--delay", "100ms", "--ttl", "300ms", "--body", "stale")
	fresh := run("send", "exp", "--delay", "100ms", "--ttl", "1h", "--body", "fresh")
	if _, errOut, err := hg(t, "", "send", "exp", "--now", "--ttl", "0s", "--addr", p.url); err == nil || !strings.Contains(errOut, "--ttl") {
		t.Fatalf("send --ttl 0s: %v, %q; want an error naming --ttl", err, errOut)
	}
	// Wait, on the server's clock, until the first is past its expiry.
	sid, err := message.ParseID(stale)
	if err != nil {
		t.Fatal(err)
	}
	due := sid.Time()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := p.client.Time(ctxT(t), connect.NewRequest(&hourglassv1.TimeRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if res.Msg.Now.AsTime().After(due.Add(400 * time.Millisecond)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server's clock did not pass %v within 30s", due)
		}
		time.Sleep(20 * time.Millisecond)
	}
	run("resume", "exp")
	rs := receive(t, p.client, "exp", 1, 30*time.Second)
	if rs[0].m.Id != fresh {
		t.Fatalf("received %s %q; want only %s (fresh)", rs[0].m.Id, rs[0].m.Body, fresh)
	}
	receiveNone(t, p.client, "exp", 500*time.Millisecond)
	ds := receive(t, p.client, "exp.dlq", 1, 30*time.Second)
	if d := ds[0].m; d.Id != stale || d.DeadLetter.GetReason() != "expired" || d.DeadLetter.GetOriginTopic() != "exp" {
		t.Fatalf("dead letter %s %v; want %s, reason expired, from exp", d.Id, d.DeadLetter, stale)
	}
	if v := metricValue(t, p, `hourglass_expired_total\{topic="exp"\}`); v != 1 {
		t.Fatalf("hourglass_expired_total{topic=\"exp\"} = %v; want 1", v)
	}
}

// TestExpiredAtHandOver: a message already past its expiry when the engine
// hands it over (here due 10 s ago with a TTL of 1 ms; as after a server
// down past a message's expiry) still reaches <topic>.dlq with reason
// expired when a Receive reaches it: the queue keeps it from consumers,
// the recurring-schedule sink in front of it included.
func TestExpiredAtHandOver(t *testing.T) {
	t.Parallel()
	p := start(t, t.TempDir(), nil)
	at := time.Now().Add(-10 * time.Second).UTC().Format(time.RFC3339Nano)
	id := strings.TrimSpace(hgOK(t, "", "send", "exp2", "--at", at, "--ttl", "1ms", "--body", "stale", "--addr", p.url))
	receiveNone(t, p.client, "exp2", 500*time.Millisecond)
	ds := receive(t, p.client, "exp2.dlq", 1, 30*time.Second)
	if d := ds[0].m; d.Id != id || d.DeadLetter.GetReason() != "expired" || string(d.Body) != "stale" {
		t.Fatalf("dead letter %s %q %v; want %s, stale, reason expired", d.Id, d.Body, d.DeadLetter, id)
	}
}

// waitServerPast waits, on the server's clock, until it is after t.
func waitServerPast(tb *testing.T, p *proc, at time.Time) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := p.client.Time(ctxT(tb), connect.NewRequest(&hourglassv1.TimeRequest{}))
		if err != nil {
			tb.Fatal(err)
		}
		if res.Msg.Now.AsTime().After(at) {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the server's clock did not pass %v within 30s", at)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestExpiryPoliciesThroughBinary sets the expiry policies with `hourglass
// policy set` on the real binary. --expiry-drop: a message past its
// expiry is never received nor dead-lettered, but counted in
// hourglass_expired_dropped_total. --expiry-unacked: `hourglass ack` of a
// message received before its expiry, after it, fails saying why and the
// message is dead-lettered with reason expired; one whose lease ends after
// its expiry is dead-lettered at the lease's end, never received again.
func TestExpiryPoliciesThroughBinary(t *testing.T) {
	t.Parallel()
	p := start(t, t.TempDir(), nil)
	run := func(args ...string) string {
		t.Helper()
		return strings.TrimSpace(hgOK(t, "", append(args, "--addr", p.url)...))
	}
	if out := run("policy", "set", "expd", "--expiry-drop"); !strings.Contains(out, "expiry-drop") {
		t.Errorf("policy set --expiry-drop printed %q; want the field shown", out)
	}
	run("policy", "set", "expa", "--expiry-unacked")

	// Drop: past its expiry when handed over.
	at := time.Now().Add(-10 * time.Second).UTC().Format(time.RFC3339Nano)
	run("send", "expd", "--at", at, "--ttl", "1ms", "--body", "stale")
	receiveNone(t, p.client, "expd", 500*time.Millisecond)
	for deadline := time.Now().Add(30 * time.Second); metricValue(t, p, `hourglass_expired_dropped_total\{topic="expd"\}`) != 1; {
		if time.Now().After(deadline) {
			t.Fatalf("hourglass_expired_dropped_total{topic=\"expd\"} = %v after 30s; want 1", metricValue(t, p, `hourglass_expired_dropped_total\{topic="expd"\}`))
		}
		time.Sleep(20 * time.Millisecond)
	}
	receiveNone(t, p.client, "expd.dlq", 100*time.Millisecond)

	// Not acked by its expiry: the Ack after it is refused.
	late := run("send", "expa", "--now", "--ttl", "2s", "--body", "late-ack")
	rs := receive(t, p.client, "expa", 1, 30*time.Second) // a 60 s lease
	if rs[0].m.Id != late {
		t.Fatalf("received %s; want %s", rs[0].m.Id, late)
	}
	id, err := message.ParseID(late)
	if err != nil {
		t.Fatal(err)
	}
	waitServerPast(t, p, id.Time().Add(2*time.Second))
	if _, errOut, err := hg(t, "", "ack", "expa", late, "--addr", p.url); err == nil || !strings.Contains(errOut, "expired") || !strings.Contains(errOut, "expiry_unacked") {
		t.Fatalf("ack after the expiry: %v, %q; want an error saying it expired (expiry_unacked)", err, errOut)
	}
	ds := receive(t, p.client, "expa.dlq", 1, 30*time.Second)
	if d := ds[0].m; d.Id != late || d.DeadLetter.GetReason() != "expired" {
		t.Fatalf("dead letter %s %v; want %s, reason expired", d.Id, d.DeadLetter, late)
	}

	// Its lease ends after its expiry: dead-lettered, not received again.
	lapse := run("send", "expa", "--now", "--ttl", "1s", "--body", "lapse")
	res, err := p.client.Receive(ctxT(t), connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: "expa", MaxMessages: 1, WaitMs: 10_000, LeaseMs: 2000}))
	if err != nil || len(res.Msg.Messages) != 1 || res.Msg.Messages[0].Id != lapse {
		t.Fatalf("Receive = %v, %v; want %s", res, err, lapse)
	}
	ds = receive(t, p.client, "expa.dlq", 1, 30*time.Second)
	if d := ds[0].m; d.Id != lapse || d.DeadLetter.GetReason() != "expired" {
		t.Fatalf("dead letter %s %v; want %s, reason expired", d.Id, d.DeadLetter, lapse)
	}
	receiveNone(t, p.client, "expa", 300*time.Millisecond)
	if v := metricValue(t, p, `hourglass_expired_total\{topic="expa"\}`); v != 2 {
		t.Errorf("hourglass_expired_total{topic=\"expa\"} = %v; want 2", v)
	}
}
