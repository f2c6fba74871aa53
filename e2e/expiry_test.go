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
