package e2e

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
)

// jsonLines decodes each line of out into a T.
func jsonLines[T any](t *testing.T, out string) []T {
	t.Helper()
	var vs []T
	for line := range strings.Lines(out) {
		var v T
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("%v in line %q", err, line)
		}
		vs = append(vs, v)
	}
	return vs
}

// listLine is the part of a `hourglass list --json` line these tests read.
type listLine struct {
	ID         string `json:"id"`
	Topic      string `json:"topic"`
	Body       string `json:"body"`
	Attempt    int    `json:"attempt"`
	LeaseUntil string `json:"lease_until"`
	DeadLetter *struct {
		OriginTopic string `json:"origin_topic"`
		Reason      string `json:"reason"`
		LastError   string `json:"last_error"`
		Attempts    int    `json:"attempts"`
	} `json:"dead_letter"`
}

// policyOut is what the policy commands print with --json.
type policyOut struct {
	Topic     string         `json:"topic"`
	Policy    map[string]any `json:"policy"`
	Effective map[string]any `json:"effective"`
}

// TestCLIOperate runs the commands that operate what is scheduled
// (reschedule, cancel and get by key, nack with a reason, extend, list of
// the queue's states, redrive, purge, delete-topic, topics, policy, pause,
// resume) through the binary against a server.
func TestCLIOperate(t *testing.T) {
	t.Parallel()
	p := start(t, t.TempDir(), nil, "--max-attempts", "2")
	// hgp runs a command against p with stdin and fails the test on an
	// error; hgErr expects one and returns its stderr.
	hgp := func(t *testing.T, stdin string, args ...string) string {
		t.Helper()
		return hgOK(t, stdin, append(args, "--addr", p.url)...)
	}
	run := func(t *testing.T, args ...string) string { t.Helper(); return hgp(t, "", args...) }
	hgErr := func(t *testing.T, stdin string, args ...string) string {
		t.Helper()
		out, errOut, err := hg(t, stdin, append(args, "--addr", p.url)...)
		if err == nil {
			t.Fatalf("hourglass %q succeeded (%q); want an error", args, out)
		}
		return errOut
	}
	// eventually runs args until cond holds on what they print.
	eventually := func(t *testing.T, what string, cond func(string) bool, args ...string) string {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			out := run(t, args...)
			if cond(out) {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: still %q after 20s", what, out)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	recvOne := func(t *testing.T, topic string) cliLine {
		t.Helper()
		return parseLine(t, run(t, "recv", "--topic", topic, "--count", "1", "--timeout", "20s", "--no-ack"))
	}
	send := func(t *testing.T, args ...string) string {
		t.Helper()
		return strings.TrimSpace(run(t, append([]string{"send"}, args...)...))
	}

	t.Run("reschedule_by_key", func(t *testing.T) {
		old := send(t, "--topic", "rk", "--delay", "1h", "--key", "order-1", "--body", "moved")
		before := time.Now()
		f := strings.Fields(run(t, "reschedule", "--topic", "rk", "--key", "order-1", "--delay", "300ms"))
		if len(f) != 4 || f[0] != "rk/order-1" || f[1] != "rescheduled" || f[2] == old {
			t.Fatalf("reschedule by key printed %q; want rk/order-1 rescheduled NEW_ID DELIVER_AT", f)
		}
		moved := f[2]
		at, err := time.Parse(time.RFC3339Nano, f[3])
		if err != nil || at.Before(before.Add(300*time.Millisecond-time.Second)) || at.After(time.Now().Add(300*time.Millisecond+time.Second)) {
			t.Errorf("new time %q: want about 300ms from now", f[3])
		}
		if out := run(t, "get", old); !strings.Contains(out, "id:          "+moved) || !regexp.MustCompile(`state: +(pending|delivering|due)\n`).MatchString(out) ||
			!strings.Contains(out, "asked:       "+old) {
			t.Errorf("get of the old ID:\n%s\nwant pending as %s", out, moved)
		}
		var g struct {
			ID    string `json:"id"`
			State string `json:"state"`
		}
		// Due 300 ms after the reschedule: pending, or on its way by now.
		if err := json.Unmarshal([]byte(run(t, "get", "--topic", "rk", "--key", "order-1", "--json")), &g); err != nil || g.ID != moved ||
			g.State != "pending" && g.State != "delivering" && g.State != "due" {
			t.Errorf("get by key = %+v, %v; want %s pending (or delivering, or due)", g, err, moved)
		}
		l := parseLine(t, run(t, "recv", "--topic", "rk", "--count", "1", "--timeout", "20s"))
		if l.ID != moved || l.OriginID != old || *l.Body != "moved" {
			t.Errorf("received %+v; want %s with origin %s", l, moved, old)
		}
		if out := run(t, "reschedule", moved, "--now"); out != moved+" already-delivered\n" {
			t.Errorf("reschedule of a delivered message printed %q", out)
		}
		var r struct {
			Ref       string `json:"ref"`
			Result    string `json:"result"`
			NewID     string `json:"new_id"`
			DeliverAt string `json:"deliver_at"`
		}
		// The first ID names the message where it is now: delivered.
		if err := json.Unmarshal([]byte(run(t, "reschedule", old, "--at", "2030-01-02T09:00:00Z", "--json")), &r); err != nil || r.Ref != old || r.Result != "already-delivered" || r.NewID != "" {
			t.Errorf("reschedule --json of the first ID = %+v, %v; want already-delivered (as its replacement)", r, err)
		}
		if out := run(t, "reschedule", strings.Repeat("0", 31)+"1", "--now"); !strings.HasSuffix(out, " unknown\n") {
			t.Errorf("reschedule of an ID never sent printed %q; want unknown", out)
		}

		later := send(t, "--topic", "rk", "--delay", "1h")
		out := run(t, "reschedule", later, "--at", "2030-01-02T09:00:00Z", "--json")
		if err := json.Unmarshal([]byte(out), &r); err != nil || r.Result != "rescheduled" || r.DeliverAt != "2030-01-02T09:00:00.000000000Z" {
			t.Fatalf("reschedule --at --json printed %q; want it rescheduled to 2030-01-02T09:00:00Z", out)
		}
		if out := run(t, "cancel", r.NewID); out != r.NewID+" cancelled\n" {
			t.Errorf("cancel of the rescheduled message printed %q", out)
		}
	})

	t.Run("cancel_by_key", func(t *testing.T) {
		id := send(t, "--topic", "ck", "--delay", "1h", "--key", "k1")
		if out := run(t, "cancel", "--topic", "ck", "--key", "k1"); out != "ck/k1 cancelled\n" {
			t.Errorf("cancel by key printed %q", out)
		}
		if out := run(t, "cancel", id); out != id+" already-cancelled\n" {
			t.Errorf("cancel by ID after by key printed %q", out)
		}
		if out := run(t, "get", "--topic", "ck", "--key", "no-such-key"); !strings.Contains(out, "state:       not-found") {
			t.Errorf("get of an unknown key:\n%s", out)
		}
	})

	t.Run("dead_letter_redriven", func(t *testing.T) {
		x := send(t, "--topic", "dl", "--now", "--body", "x")
		l := recvOne(t, "dl")
		if out := run(t, "nack", l.ID, "--topic", "dl", "--reason", "db timeout"); out != l.ID+" nacked\n" {
			t.Errorf("nack --reason printed %q", out)
		}
		l = recvOne(t, "dl")
		if l.ID != x || l.Attempt != 1 {
			t.Fatalf("after nack: %+v; want %s on attempt 1", l, x)
		}
		run(t, "nack", l.ID, "--topic", "dl", "--reason", "db timeout again") // its second failure: dead
		y := send(t, "--topic", "dl", "--now", "--body", "y")
		l = recvOne(t, "dl")
		if out := run(t, "nack", l.ID, "--topic", "dl", "--dead-letter", "--reason", "poison"); l.ID != y || out != y+" dead-lettered\n" {
			t.Errorf("nack --dead-letter of %s printed %q; want %s dead-lettered", l.ID, out, y)
		}

		dead := jsonLines[listLine](t, eventually(t, "two dead letters", func(s string) bool { return strings.Count(s, "\n") == 2 },
			"list", "--topic", "dl", "--state", "dead-lettered", "--json"))
		why := map[string]listLine{}
		for _, d := range dead {
			why[d.Body] = d
		}
		if d := why["x"].DeadLetter; d == nil || d.Reason != "max-attempts" || d.LastError != "db timeout again" || d.OriginTopic != "dl" || d.Attempts != 2 {
			t.Errorf("dead letter x: %+v", d)
		}
		if d := why["y"].DeadLetter; d == nil || d.Reason != "nacked" || d.LastError != "poison" {
			t.Errorf("dead letter y: %+v", d)
		}
		if out := run(t, "list", "--topic", "dl", "--state", "dead-lettered"); !strings.Contains(out, `reason=nacked origin=dl attempts=1 error="poison"`) {
			t.Errorf("list --state dead-lettered:\n%s", out)
		}
		if out := run(t, "topics"); !strings.Contains(out, "dead letters") || !regexpLine(out, `^dl\s+0\s+0\s+2\s+-\s+defaults$`) {
			t.Errorf("topics:\n%s\nwant a row dl 0 0 2 - defaults", out)
		}

		if out := run(t, "redrive", "dl.dlq", "--reason", "max-attempts"); out != "dl.dlq: 1 redriven, 1 skipped\n" {
			t.Errorf("redrive --reason max-attempts printed %q", out)
		}
		back := parseLine(t, run(t, "recv", "--topic", "dl", "--count", "1", "--timeout", "20s"))
		if *back.Body != "x" || back.Attempt != 0 || back.OriginID != x {
			t.Errorf("redriven message: %+v; want x on attempt 0 with origin %s", back, x)
		}
		if out := run(t, "purge", "dl", "--state", "dead-lettered", "--yes"); out != "purged 1 dead-lettered messages of dl\n" {
			t.Errorf("purge --state dead-lettered printed %q", out)
		}
	})

	t.Run("redrive_progress", func(t *testing.T) {
		// One attempt, and leases of 1ms: each message dies once received.
		run(t, "policy", "set", "rp", "--max-attempts", "1")
		send(t, "--topic", "rp", "--now", "--count", "25")
		if n := strings.Count(run(t, "recv", "--topic", "rp", "--count", "25", "--timeout", "20s", "--no-ack", "--lease", "1ms"), "\n"); n != 25 {
			t.Fatalf("received %d of 25", n)
		}
		eventually(t, "25 dead letters", func(s string) bool { return strings.Contains(s, `"dead_lettered":25`) }, "topics", "--json")
		out, errOut, err := hg(t, "", "redrive", "rp.dlq", "--rate", "10", "--max", "22", "--addr", p.url)
		if err != nil || out != "rp.dlq: 22 redriven, 0 skipped, more remain (--max 22 reached; run it again for more)\n" {
			t.Errorf("redrive --max 22: %v, %q", err, out)
		}
		// A second's worth (10) per call: progress after the first two.
		want := "hourglass redrive: rp.dlq: 10 redriven so far, going on\nhourglass redrive: rp.dlq: 20 redriven so far, going on\n"
		if errOut != want {
			t.Errorf("redrive's progress on stderr: %q; want %q", errOut, want)
		}
		var res struct {
			Redriven, Skipped int64
			More              bool
		}
		if err := json.Unmarshal([]byte(run(t, "redrive", "rp.dlq", "--json")), &res); err != nil || res.Redriven != 3 || res.More {
			t.Errorf("redrive --json of the rest = %+v, %v; want 3 redriven and no more", res, err)
		}
		for _, l := range jsonLines[cliLine](t, run(t, "recv", "--topic", "rp", "--count", "25", "--timeout", "20s")) {
			if l.Attempt != 0 {
				t.Errorf("redriven %s on attempt %d; want 0", l.ID, l.Attempt)
			}
		}
	})

	t.Run("list_states_extend", func(t *testing.T) {
		send(t, "--topic", "ls", "--now", "--count", "2")
		var l struct {
			ID             string `json:"id"`
			Receipt        string `json:"receipt"`
			LeaseExpiresAt string `json:"lease_expires_at"`
		}
		if err := json.Unmarshal([]byte(run(t, "recv", "--topic", "ls", "--count", "1", "--timeout", "20s", "--no-ack", "--lease", "1m")), &l); err != nil || !strings.HasPrefix(l.Receipt, l.ID+".") {
			t.Fatalf("recv --no-ack: %+v, %v; want a receipt ID.SERIAL", l, err)
		}
		leased := jsonLines[listLine](t, run(t, "list", "--topic", "ls", "--state", "leased", "--json"))
		if len(leased) != 1 || leased[0].ID != l.ID || leased[0].LeaseUntil != l.LeaseExpiresAt {
			t.Errorf("list --state leased = %+v; want %s until %s", leased, l.ID, l.LeaseExpiresAt)
		}
		due := jsonLines[listLine](t, eventually(t, "one due", func(s string) bool { return s != "" }, "list", "--topic", "ls", "--state", "due", "--json"))
		if len(due) != 1 || due[0].ID == l.ID || due[0].LeaseUntil != "" {
			t.Errorf("list --state due = %+v; want the other message, without a lease", due)
		}

		f := strings.Fields(run(t, "extend", l.Receipt, "--topic", "ls", "--lease", "10m"))
		if len(f) != 3 || f[0] != l.Receipt || f[1] != "lease-until" {
			t.Fatalf("extend RECEIPT printed %q", f)
		}
		first, _ := time.Parse(time.RFC3339Nano, l.LeaseExpiresAt)
		until, err := time.Parse(time.RFC3339Nano, f[2])
		if err != nil || until.Sub(first) < 8*time.Minute {
			t.Errorf("lease until %q after extend --lease 10m; it was %s", f[2], l.LeaseExpiresAt)
		}
		var ex struct {
			Ref        string `json:"ref"`
			LeaseUntil string `json:"lease_until"`
		}
		if err := json.Unmarshal([]byte(run(t, "extend", l.ID, "--topic", "ls", "--lease", "20m", "--json")), &ex); err != nil || ex.Ref != l.ID {
			t.Fatalf("extend ID --json: %+v, %v", ex, err)
		}
		if out := run(t, "get", l.ID, "--json"); !strings.Contains(out, `"lease_until":"`+ex.LeaseUntil+`"`) {
			t.Errorf("get after extend:\n%s\nwant lease_until %s", out, ex.LeaseUntil)
		}
		run(t, "ack", l.ID, "--topic", "ls")
		if errOut := hgErr(t, "", "extend", l.Receipt, "--topic", "ls", "--lease", "1m"); !strings.Contains(errOut, "not leased") {
			t.Errorf("extend of an acked message: %q; want it says not leased", errOut)
		}
	})

	t.Run("pause_resume", func(t *testing.T) {
		if out := run(t, "pause", "pr"); out != "pr paused\n" {
			t.Errorf("pause printed %q", out)
		}
		if out := run(t, "topics"); !regexpLine(out, `^pr\s+0\s+0\s+0\s+-\s+paused yes$`) {
			t.Errorf("topics:\n%s\nwant a row of pr, paused", out)
		}
		id := send(t, "--topic", "pr", "--now", "--body", "held")
		eventually(t, "the message due", func(s string) bool { return strings.Contains(s, id) }, "list", "--topic", "pr", "--state", "due")
		if out := run(t, "recv", "--topic", "pr", "--timeout", "300ms"); out != "" {
			t.Errorf("recv of a paused topic printed %q; want nothing", out)
		}
		var po policyOut
		if err := json.Unmarshal([]byte(run(t, "resume", "pr", "--json")), &po); err != nil || po.Policy["paused"] != nil || po.Effective["paused"] != false {
			t.Errorf("resume --json = %+v, %v; want paused unset, effective false", po, err)
		}
		if l := parseLine(t, run(t, "recv", "--topic", "pr", "--count", "1", "--timeout", "20s")); l.ID != id {
			t.Errorf("after resume received %+v; want %s", l, id)
		}
	})

	t.Run("policy", func(t *testing.T) {
		var po policyOut
		out := run(t, "policy", "set", "ps", "--max-attempts", "5", "--backoff", "1s:5m:2:0.1", "--rate", "50", "--lease", "2m", "--json")
		if err := json.Unmarshal([]byte(out), &po); err != nil {
			t.Fatal(err)
		}
		wantBackoff := map[string]any{"initial_ms": 1000.0, "max_ms": 300000.0, "multiplier": 2.0, "jitter": 0.1}
		if b, _ := po.Policy["backoff"].(map[string]any); po.Policy["max_attempts"] != 5.0 || po.Policy["max_dispatch_rate"] != 50.0 ||
			po.Policy["lease_ms"] != 120000.0 || len(b) != 4 || b["initial_ms"] != wantBackoff["initial_ms"] || b["max_ms"] != wantBackoff["max_ms"] ||
			b["multiplier"] != wantBackoff["multiplier"] || b["jitter"] != wantBackoff["jitter"] {
			t.Errorf("policy set --json:\n%s", out)
		}
		show := run(t, "policy", "show", "ps")
		for _, re := range []string{`^ps\s+set\s+effective$`, `^max-attempts\s+5\s+5$`, `^backoff\s+1s:5m:2:0.1\s+1s:5m:2:0.1$`, `^paused\s+-\s+no$`, `^rate\s+50/s\s+50/s$`, `^lease\s+2m\s+2m$`} {
			if !regexpLine(show, re) {
				t.Errorf("policy show lacks a line %s:\n%s", re, show)
			}
		}
		po = policyOut{} // Unmarshal would add to the maps of the first
		if err := json.Unmarshal([]byte(run(t, "policy", "set", "ps", "--default", "backoff", "--default", "rate", "--default", "max_attempts", "--json")), &po); err != nil {
			t.Fatal(err)
		}
		if len(po.Policy) != 1 || po.Policy["lease_ms"] != 120000.0 || po.Effective["max_attempts"] != 2.0 || po.Effective["max_dispatch_rate"] != 0.0 {
			t.Errorf("after --default backoff, rate, max_attempts: %+v; want only the lease set, the server's 2 attempts", po)
		}
		if errOut := hgErr(t, "", "policy", "set", "ps", "--backoff", "1s:20y"); !strings.Contains(errOut, "max-delay") {
			t.Errorf("a backoff past the server's --max-delay: %q; want the server's refusal naming it", errOut)
		}
	})

	t.Run("purge_confirm", func(t *testing.T) {
		for range 3 {
			send(t, "--topic", "pg", "--delay", "1h")
		}
		pending := func() int { return strings.Count(run(t, "list", "--topic", "pg"), "\n") }
		for _, answer := range []string{"n\n", "", "maybe\n"} {
			if errOut := hgErr(t, answer, "purge", "pg", "--state", "pending"); !strings.Contains(errOut, "Go ahead? [y/N]") || !strings.Contains(errOut, "nothing was changed") {
				t.Errorf("purge answered %q: %q; want the question and nothing changed", answer, errOut)
			}
		}
		if n := pending(); n != 3 {
			t.Fatalf("%d pending after unconfirmed purges; want 3", n)
		}
		if out := hgp(t, "y\n", "purge", "pg", "--state", "pending"); out != "purged 3 pending messages of pg\n" {
			t.Errorf("purge answered y printed %q", out)
		}
		send(t, "--topic", "pg", "--delay", "1h")
		if out := run(t, "purge", "pg", "--state", "pending", "--yes", "--json"); out != `{"topic":"pg","state":"pending","purged":1}`+"\n" {
			t.Errorf("purge --yes --json printed %q", out)
		}
		if n := pending(); n != 0 {
			t.Errorf("%d pending after the purges; want 0", n)
		}
		id := send(t, "--topic", "pg", "--now")
		eventually(t, "the message due", func(s string) bool { return strings.Contains(s, id) }, "list", "--topic", "pg", "--state", "due")
		if out := run(t, "purge", "pg", "--state", "due", "--yes"); out != "purged 1 due messages of pg\n" {
			t.Errorf("purge --state due printed %q", out)
		}
	})

	t.Run("delete_topic", func(t *testing.T) {
		send(t, "--topic", "dt", "--delay", "1h", "--count", "2")
		id := send(t, "--topic", "dt", "--now")
		eventually(t, "the message due", func(s string) bool { return strings.Contains(s, id) }, "list", "--topic", "dt", "--state", "due")
		run(t, "policy", "set", "dt", "--max-attempts", "3")
		if errOut := hgErr(t, "no\n", "delete-topic", "dt"); !strings.Contains(errOut, `delete topic "dt"`) || !strings.Contains(errOut, "nothing was changed") {
			t.Errorf("delete-topic answered no: %q", errOut)
		}
		if out := run(t, "delete-topic", "dt", "--yes", "--json"); out != `{"topic":"dt","cancelled":2,"removed":1}`+"\n" {
			t.Errorf("delete-topic --yes --json printed %q", out)
		}
		var po policyOut
		if err := json.Unmarshal([]byte(run(t, "policy", "show", "dt", "--json")), &po); err != nil || len(po.Policy) != 0 {
			t.Errorf("policy after delete-topic = %+v, %v; want none set", po, err)
		}
		if out := run(t, "list", "--topic", "dt"); out != "" {
			t.Errorf("pending after delete-topic: %q", out)
		}
	})
}

// regexpLine reports whether a line of s matches re.
func regexpLine(s, re string) bool {
	return regexp.MustCompile(`(?m)` + re).MatchString(s)
}
