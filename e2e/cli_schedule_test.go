package e2e

import (
	"encoding/json"
	"errors"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// scheduleOut is what `hourglass schedule get --json` and each line of
// `schedule list --json` print.
type scheduleOut struct {
	Name     string            `json:"name"`
	Topic    string            `json:"topic"`
	Spec     string            `json:"spec"`
	TimeZone string            `json:"time_zone"`
	Misfire  string            `json:"misfire"`
	Paused   bool              `json:"paused"`
	Start    string            `json:"start"`
	End      string            `json:"end"`
	Headers  map[string]string `json:"headers"`
	Body     *string           `json:"body"`
	Next     []string          `json:"next"`
	ArmedID  string            `json:"armed_id"`
	Fired    int64             `json:"fired"`
}

// occurrenceAt is the time an occurrence's hourglass-occurrence header
// names.
func occurrenceAt(t *testing.T, l cliLine) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, l.Headers["hourglass-occurrence"])
	if err != nil {
		t.Fatalf("occurrence %s: header hourglass-occurrence %q: %v", l.ID, l.Headers["hourglass-occurrence"], err)
	}
	return at
}

var createdRE = regexp.MustCompile(`^(\S+) (created|updated|resumed), next (\S+)\n$`)

// TestCLISchedule runs the schedule commands through the binary: an
// @every 1s schedule delivers occurrences with their own IDs and keys,
// list and get show it with its next times, pause stops it, resume starts
// it again, delete ends it; bad input exits 1 saying what is allowed.
func TestCLISchedule(t *testing.T) {
	t.Parallel()
	p := start(t, t.TempDir(), nil)
	hgp := func(t *testing.T, stdin string, args ...string) string {
		t.Helper()
		return hgOK(t, stdin, append(args, "--addr", p.url)...)
	}
	run := func(t *testing.T, args ...string) string { t.Helper(); return hgp(t, "", args...) }
	// fails runs a command that must exit 1 and returns its stderr.
	fails := func(t *testing.T, args ...string) string {
		t.Helper()
		out, errOut, err := hg(t, "", append(args, "--addr", p.url)...)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("hourglass %q: %v (printed %q); want exit status 1", args, err, out)
		}
		return errOut
	}
	get := func(t *testing.T, name string, args ...string) scheduleOut {
		t.Helper()
		var s scheduleOut
		out := run(t, append([]string{"schedule", "get", name, "--json"}, args...)...)
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("schedule get --json printed %q: %v", out, err)
		}
		return s
	}
	// recv receives what topic hands out within timeout, at most count
	// messages (0: no limit), and acks it.
	recv := func(t *testing.T, topic string, count int, timeout string) []cliLine {
		t.Helper()
		var ls []cliLine
		for line := range strings.Lines(run(t, "recv", "--topic", topic, "--count", strconv.Itoa(count), "--timeout", timeout)) {
			ls = append(ls, parseLine(t, line))
		}
		return ls
	}

	before := time.Now()
	out := run(t, "schedule", "create", "tick", "--topic", "ticks", "--spec", "@every 1s", "--body", "tick", "--header", "k=v")
	m := createdRE.FindStringSubmatch(out)
	if m == nil || m[1] != "tick" || m[2] != "created" {
		t.Fatalf("schedule create printed %q; want \"tick created, next TIME\"", out)
	}
	if next, err := time.Parse(time.RFC3339Nano, m[3]); err != nil || !next.After(before) || next.After(time.Now().Add(time.Second)) {
		t.Errorf("first occurrence %q: want within a second", m[3])
	}

	ls := recv(t, "ticks", 2, "20s")
	if len(ls) != 2 || ls[0].ID == ls[1].ID {
		t.Fatalf("received %+v; want two occurrences with their own IDs", ls)
	}
	for _, l := range ls {
		if l.Body == nil || *l.Body != "tick" || l.Headers["k"] != "v" || l.Headers["hourglass-schedule"] != "tick" {
			t.Errorf("occurrence %+v; want body tick, header k=v and hourglass-schedule tick", l)
		}
		if key := l.Headers["hourglass-idempotency-key"]; key != "tick@"+occurrenceAt(t, l).UTC().Format("2006-01-02T15:04:05.000Z") {
			t.Errorf("occurrence of %v has the key %q; want tick@<its time>", occurrenceAt(t, l), key)
		}
	}

	t.Run("list_get", func(t *testing.T) {
		row := regexp.MustCompile(`(?m)^tick +ticks +@every 1s +UTC +(\S+) +no +(\d+)$`)
		out := run(t, "schedule", "list")
		r := row.FindStringSubmatch(out)
		if !strings.HasPrefix(out, "name ") || r == nil {
			t.Fatalf("schedule list printed:\n%s\nwant a header and a row for tick", out)
		}
		if _, err := time.Parse(time.RFC3339Nano, r[1]); err != nil {
			t.Errorf("next %q: %v", r[1], err)
		}
		if out := run(t, "schedule", "list", "--topic", "nothing-here"); strings.Count(out, "\n") != 1 {
			t.Errorf("schedule list of another topic printed %q; want the header alone", out)
		}
		lines := jsonLines[scheduleOut](t, run(t, "schedule", "list", "--json"))
		if len(lines) != 1 || lines[0].Name != "tick" || len(lines[0].Next) != 3 {
			t.Errorf("schedule list --json = %+v; want tick with 3 next times", lines)
		}
		s := get(t, "tick", "--next", "4")
		if s.Topic != "ticks" || s.Spec != "@every 1s" || s.TimeZone != "UTC" || s.Misfire != "fire-latest" || s.Paused ||
			s.Body == nil || *s.Body != "tick" || s.Headers["k"] != "v" || s.Fired < 2 || !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(s.ArmedID) || len(s.Next) != 4 {
			t.Fatalf("schedule get --json = %+v", s)
		}
		for i := 1; i < len(s.Next); i++ {
			a, _ := time.Parse(time.RFC3339Nano, s.Next[i-1])
			b, err := time.Parse(time.RFC3339Nano, s.Next[i])
			if err != nil || b.Sub(a) != time.Second {
				t.Errorf("next times %q: want a second apart", s.Next)
			}
		}
		text := run(t, "schedule", "get", "tick")
		for _, w := range []string{"spec:        @every 1s\n", "fired:       ", "next:        2", "header:      k=v\n", "body:        \"tick\"\n"} {
			if !strings.Contains(text, w) {
				t.Errorf("schedule get printed:\n%s\nwant %q", text, w)
			}
		}
	})

	t.Run("pause_resume", func(t *testing.T) {
		if out := run(t, "schedule", "pause", "tick"); out != "tick paused\n" {
			t.Errorf("schedule pause printed %q", out)
		}
		paused := time.Now()
		s := get(t, "tick")
		if !s.Paused || len(s.Next) != 0 || s.ArmedID != "" {
			t.Fatalf("schedule get of a paused schedule = %+v; want paused, no next times, nothing armed", s)
		}
		// The occurrences fired before the pause answered are received;
		// then nothing comes for 2 s.
		received := len(ls)
		if more := int(s.Fired) - received; more > 0 {
			received += len(recv(t, "ticks", more, "20s"))
		}
		if received != int(s.Fired) {
			t.Fatalf("received %d occurrences, fired %d", received, s.Fired)
		}
		if ls := recv(t, "ticks", 0, "2s"); len(ls) != 0 {
			t.Errorf("a paused schedule delivered %+v", ls)
		}
		if again := get(t, "tick"); again.Fired != s.Fired {
			t.Errorf("fired went from %d to %d while paused", s.Fired, again.Fired)
		}

		out := run(t, "schedule", "resume", "tick")
		if m := createdRE.FindStringSubmatch(out); m == nil || m[2] != "resumed" {
			t.Fatalf("schedule resume printed %q; want \"tick resumed, next TIME\"", out)
		}
		ls := recv(t, "ticks", 1, "20s")
		if len(ls) != 1 || !occurrenceAt(t, ls[0]).After(paused) {
			t.Errorf("after resume received %+v; want an occurrence after the pause", ls)
		}
	})

	t.Run("delete", func(t *testing.T) {
		if errOut := fails(t, "schedule", "delete", "tick"); !strings.Contains(errOut, "no answer on standard input") {
			t.Errorf("schedule delete without --yes: %q", errOut)
		}
		if out := run(t, "schedule", "delete", "tick", "--yes"); out != "tick deleted\n" {
			t.Errorf("schedule delete --yes printed %q", out)
		}
		deleted := time.Now()
		// What fired before it answered may still come; nothing after.
		for _, l := range recv(t, "ticks", 0, "2s") {
			if at := occurrenceAt(t, l); at.After(deleted) {
				t.Errorf("an occurrence of %v came after delete answered at %v", at, deleted)
			}
		}
		if errOut := fails(t, "schedule", "get", "tick"); !strings.Contains(errOut, "(not found)") || !strings.Contains(errOut, `"tick"`) {
			t.Errorf("schedule get of a deleted schedule: %q", errOut)
		}
		if out := run(t, "schedule", "list", "--json"); out != "" {
			t.Errorf("schedule list --json after delete printed %q", out)
		}
	})

	t.Run("fields_update", func(t *testing.T) {
		hgp(t, "piped\n", "schedule", "create", "nightly", "--topic", "backups", "--spec", "30 2 * * *", "--tz", "Europe/Berlin",
			"--body-file", "-", "--header", "a=1", "--start", "2h", "--end", "2099-01-01T00:00:00Z", "--misfire", "skip", "--paused")
		s := get(t, "nightly")
		if s.TimeZone != "Europe/Berlin" || s.Misfire != "skip" || !s.Paused || s.Body == nil || *s.Body != "piped\n" ||
			s.Start == "" || s.End != "2099-01-01T00:00:00.000000000Z" || s.Headers["a"] != "1" || len(s.Next) != 0 {
			t.Fatalf("schedule get --json = %+v", s)
		}
		out := run(t, "schedule", "update", "nightly", "--spec", "0 3 * * *", "--header", "b=2", "--end", "", "--paused=false")
		if m := createdRE.FindStringSubmatch(out); m == nil || m[2] != "updated" {
			t.Fatalf("schedule update printed %q; want \"nightly updated, next TIME\"", out)
		}
		s = get(t, "nightly", "--next", "2")
		berlin, _ := time.LoadLocation("Europe/Berlin")
		if s.Spec != "0 3 * * *" || s.Paused || s.End != "" || s.Start == "" || s.Misfire != "skip" || s.Headers["a"] != "" || s.Headers["b"] != "2" || len(s.Next) != 2 {
			t.Fatalf("after update: %+v; want the new spec and headers, resumed, no end, the rest kept", s)
		}
		for _, n := range s.Next {
			if at, err := time.Parse(time.RFC3339Nano, n); err != nil || at.In(berlin).Hour() != 3 || at.In(berlin).Minute() != 0 {
				t.Errorf("next %s: want 03:00 in Berlin", n)
			}
		}
		// The armed occurrence is a pending message keyed NAME@TIME, as
		// --help says: get and cancel take it.
		at, _ := time.Parse(time.RFC3339Nano, s.Next[0])
		key := "nightly@" + at.UTC().Format("2006-01-02T15:04:05.000Z")
		var g struct {
			ID    string `json:"id"`
			State string `json:"state"`
		}
		if err := json.Unmarshal([]byte(run(t, "get", "--topic", "backups", "--key", key, "--json")), &g); err != nil || g.ID != s.ArmedID || g.State != "pending" {
			t.Errorf("get --topic backups --key %s = %+v, %v; want %s pending", key, g, err, s.ArmedID)
		}
		if out := run(t, "cancel", "--topic", "backups", "--key", key); out != "backups/"+key+" cancelled\n" {
			t.Errorf("cancel of the armed occurrence by key printed %q", out)
		}
		run(t, "schedule", "delete", "nightly", "--yes")
	})

	t.Run("bad_input", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			args []string
			want string
		}{
			{"bad_spec", []string{"bad", "--topic", "t", "--spec", "61 * * * *"}, "want 5 fields, minute first, or 6 with seconds first"},
			{"short_every", []string{"bad", "--topic", "t", "--spec", "@every 10ms"}, "at least 1s"},
			{"unknown_zone", []string{"bad", "--topic", "t", "--spec", "@daily", "--tz", "Mars/Olympus_Mons"}, "want an IANA name such as Europe/Berlin"},
			{"bad_name", []string{"no spaces", "--topic", "t", "--spec", "@daily"}, "use letters, digits, '.', '_' and '-'"},
			{"bad_misfire", []string{"bad", "--topic", "t", "--spec", "@daily", "--misfire", "sometimes"}, "want fire-latest (the default), fire-all or skip"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if errOut := fails(t, append([]string{"schedule", "create"}, tc.args...)...); !strings.Contains(errOut, tc.want) {
					t.Errorf("stderr %q; want %q", errOut, tc.want)
				}
			})
		}
		if out := run(t, "schedule", "list", "--json"); out != "" {
			t.Errorf("schedule list --json after refused creates printed %q", out)
		}
	})
}
