package e2e

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// TestFreezeMessageKill9: `hourglass freeze` by key and by ID holds two
// pending messages, `get` by the first ID shows one frozen with its
// remaining delay; after a kill -9 and a restart neither is delivered at
// or after its old time while a third, not frozen, is; `thaw` by key
// makes one due its remaining delay from the thaw (delivered once, under
// the ID thaw printed), `cancel` by the first ID cancels the other, which
// a kill -9 does not bring back (a fourth, frozen throughout, keeps their
// bucket from retiring).
func TestFreezeMessageKill9(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, dir, nil)
	run := func(args ...string) string {
		t.Helper()
		return strings.TrimSpace(hgOK(t, "", append(args, "--addr", p.url)...))
	}
	// 10 s ahead: under load the CLI calls below take seconds (4 s was
	// due before TestEditKill9's edits).
	byKey := run("send", "fm", "--delay", "10s", "--key", "k1", "--body", "by-key")
	byID := run("send", "fm", "--delay", "10s", "--body", "by-id")
	kept := run("send", "fm", "--delay", "10s", "--body", "kept")
	// Frozen throughout: the FrozenAt bucket keeps an entry not done, so
	// it does not retire (TestFrozenBucketRetires) and the cancelled
	// message's state is still read from it after the restart below.
	stays := run("send", "fm", "--delay", "10s", "--body", "stays")
	if out := run("freeze", stays); !strings.HasPrefix(out, stays+" frozen ") {
		t.Fatalf("freeze printed %q; want %s frozen NEW_ID REMAINING", out, stays)
	}

	f := strings.Fields(run("freeze", "--topic", "fm", "--key", "k1"))
	if len(f) != 4 || f[0] != "fm/k1" || f[1] != "frozen" || f[2] == byKey {
		t.Fatalf("freeze by key printed %q; want \"fm/k1 frozen NEW_ID REMAINING\"", f)
	}
	var j struct {
		Result      string `json:"result"`
		NewID       string `json:"new_id"`
		RemainingMs int64  `json:"remaining_ms"`
	}
	out := run("freeze", byID, "--json")
	if err := json.Unmarshal([]byte(out), &j); err != nil || j.Result != "frozen" || j.NewID == "" || j.RemainingMs <= 0 || j.RemainingMs > 10_000 {
		t.Fatalf("freeze --json printed %q (%v); want frozen with 0-10000 ms left", out, err)
	}
	if out := run("freeze", byID); out != byID+" already-frozen" {
		t.Fatalf("freeze twice printed %q; want already-frozen", out)
	}
	if out := run("thaw", kept); out != kept+" not-frozen" {
		t.Fatalf("thaw of a message not frozen printed %q; want not-frozen", out)
	}
	var g struct {
		ID      string `json:"id"`
		State   string `json:"state"`
		Message struct {
			Frozen            bool   `json:"frozen"`
			FrozenRemainingMs *int64 `json:"frozen_remaining_ms"`
		} `json:"message"`
	}
	out = run("get", byID, "--json")
	if err := json.Unmarshal([]byte(out), &g); err != nil || g.ID != j.NewID || g.State != "pending" || !g.Message.Frozen ||
		g.Message.FrozenRemainingMs == nil || *g.Message.FrozenRemainingMs != j.RemainingMs {
		t.Fatalf("get of the first ID printed %q (%v); want %s pending, frozen with %d ms left", out, err, j.NewID, j.RemainingMs)
	}
	if out := run("get", byID); !strings.Contains(out, "frozen:") {
		t.Fatalf("get printed %q; want a frozen: line", out)
	}

	p.stop(syscall.SIGKILL)
	p = start(t, dir, nil)
	rs := receive(t, p.client, "fm", 1, 30*time.Second)
	if rs[0].m.Id != kept {
		t.Fatalf("received %s (%q); want only %s, the message not frozen", rs[0].m.Id, rs[0].m.Body, kept)
	}
	// The frozen ones were due with it: none comes.
	receiveNone(t, p.client, "fm", 2*time.Second)

	thawedAt := time.Now()
	f = strings.Fields(run("thaw", "--topic", "fm", "--key", "k1"))
	if len(f) != 4 || f[1] != "thawed" {
		t.Fatalf("thaw printed %q; want \"fm/k1 thawed NEW_ID DELIVER_AT\"", f)
	}
	due, err := time.Parse(time.RFC3339Nano, f[3])
	if err != nil || due.Before(thawedAt) {
		t.Fatalf("thawed to %q (%v); want a time after the thaw, %v", f[3], err, thawedAt)
	}
	rs = receive(t, p.client, "fm", 1, 30*time.Second)
	if rs[0].m.Id != f[2] || string(rs[0].m.Body) != "by-key" || rs[0].m.OriginId != byKey || rs[0].at.Before(due) {
		t.Fatalf("received %s %q (origin %s) at %v; want %s by-key (origin %s) at or after %v", rs[0].m.Id, rs[0].m.Body, rs[0].m.OriginId, rs[0].at, f[2], byKey, due)
	}
	for _, h := range rs[0].m.Headers {
		if h.Key == "hourglass-frozen" {
			t.Fatalf("delivered with the frozen mark: %v", rs[0].m.Headers)
		}
	}
	if out := run("cancel", byID); out != byID+" cancelled" {
		t.Fatalf("cancel of the frozen message printed %q; want cancelled", out)
	}
	if out := run("thaw", byID); out != byID+" already-cancelled" {
		t.Fatalf("thaw of the cancelled message printed %q; want already-cancelled", out)
	}
	p.stop(syscall.SIGKILL)
	p = start(t, dir, nil)
	if out := run("get", byID, "--json"); !strings.Contains(out, `"cancelled"`) {
		t.Fatalf("get of the cancelled frozen message after a restart printed %q; want cancelled", out)
	}
	// The messages received before (not acked) may come again; the
	// cancelled one never does.
	res, err := p.client.Receive(ctxT(t), connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: "fm", MaxMessages: 100, WaitMs: 1500}))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range res.Msg.Messages {
		if string(m.Body) == "by-id" {
			t.Fatalf("the cancelled frozen message was delivered: %s", m.Id)
		}
	}
}
