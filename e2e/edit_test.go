package e2e

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestEditKill9: `hourglass edit` by key and by ID replaces pending
// messages' content, `get` by the first ID shows it, and after a kill -9
// and a restart only the new content is delivered, once, under the IDs
// edit printed; an edit once delivered changes nothing.
func TestEditKill9(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, dir, nil)
	run := func(stdin string, args ...string) string {
		t.Helper()
		return hgOK(t, stdin, append(args, "--addr", p.url)...)
	}
	byKey := strings.TrimSpace(run("", "send", "ed", "--delay", "10s", "--key", "k1", "--body", "old-1", "--header", "a=1"))
	byID := strings.TrimSpace(run("", "send", "ed", "--delay", "10s", "--body", "old-2"))
	kept := strings.TrimSpace(run("", "send", "ed", "--delay", "10s", "--body", "kept"))

	out := run("", "edit", "--topic", "ed", "--key", "k1", "--body", "new-1", "--header", "b=2")
	f := strings.Fields(out)
	if len(f) != 4 || f[0] != "ed/k1" || f[1] != "edited" || f[2] == byKey {
		t.Fatalf("edit by key printed %q; want \"ed/k1 edited NEW_ID TIME\"", out)
	}
	newKey := f[2]
	var j struct {
		Result string `json:"result"`
		NewID  string `json:"new_id"`
	}
	out = run("new-2 from stdin", "edit", byID, "--body-file", "-", "--no-headers", "--json")
	if err := json.Unmarshal([]byte(out), &j); err != nil || j.Result != "edited" || j.NewID == "" {
		t.Fatalf("edit --json printed %q (%v)", out, err)
	}
	newID := j.NewID
	var g struct {
		ID      string `json:"id"`
		State   string `json:"state"`
		Message struct {
			Body string `json:"body"`
		} `json:"message"`
	}
	out = run("", "get", byKey, "--json")
	if err := json.Unmarshal([]byte(out), &g); err != nil || g.ID != newKey || g.State != "pending" || g.Message.Body != "new-1" {
		t.Fatalf("get of the first ID printed %q (%v); want %s pending with body new-1", out, err, newKey)
	}

	p.stop(syscall.SIGKILL)
	p = start(t, dir, nil)
	rs := receive(t, p.client, "ed", 3, 30*time.Second)
	got := map[string]string{}
	for _, r := range rs {
		got[r.m.Id] = string(r.m.Body)
		if r.m.Id == newKey {
			hs := map[string]string{}
			for _, h := range r.m.Headers {
				hs[h.Key] = h.Value
			}
			if hs["b"] != "2" || hs["a"] != "" || hs["hourglass-idempotency-key"] != "k1" || r.m.OriginId != byKey {
				t.Errorf("edited by key: headers %v, origin %s; want b=2, no a, the key kept, origin %s", hs, r.m.OriginId, byKey)
			}
		}
	}
	if got[newKey] != "new-1" || got[newID] != "new-2 from stdin" || got[kept] != "kept" {
		t.Fatalf("delivered %v; want %s=new-1, %s=\"new-2 from stdin\", %s=kept", got, newKey, newID, kept)
	}
	receiveNone(t, p.client, "ed", 1500*time.Millisecond)
	// Delivered (and leased): too late, also once its bucket (2s here)
	// retired, as the queue holds it; nothing changes.
	if out := strings.TrimSpace(hgOK(t, "", "edit", byID, "--body", "late", "--addr", p.url)); out != byID+" already-delivered" {
		t.Fatalf("edit once delivered printed %q; want already-delivered", out)
	}
	receiveNone(t, p.client, "ed", 500*time.Millisecond)
	if _, errOut, err := hg(t, "", "edit", byID, "--addr", p.url); err == nil || !strings.Contains(errOut, "nothing to edit") {
		t.Fatalf("edit without a change: %v, %q; want an error naming what to give", err, errOut)
	}
}
