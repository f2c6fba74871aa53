package e2e

import (
	"encoding/json"
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// calendarOut is what `hourglass calendar get --json` prints.
type calendarOut struct {
	Name     string              `json:"name"`
	TimeZone string              `json:"time_zone"`
	Hours    map[string][]string `json:"hours"`
	Closed   []string            `json:"closed"`
}

// recurPolicyOut is the part of `schedule get --json` about jitter, overlap
// and calendar.
type recurPolicyOut struct {
	Next     []string `json:"next"`
	Jitter   string   `json:"jitter"`
	Overlap  string   `json:"overlap"`
	Calendar string   `json:"calendar"`
	Outside  string   `json:"outside"`
	Skipped  int64    `json:"skipped"`
}

// cliClient runs the client commands of the binary against p.
type cliClient struct {
	t   *testing.T
	url string
}

func (c cliClient) run(args ...string) string {
	c.t.Helper()
	return hgOK(c.t, "", append(args, "--addr", c.url)...)
}

// fails runs a command that must exit 1 and returns its stderr.
func (c cliClient) fails(args ...string) string {
	c.t.Helper()
	out, errOut, err := hg(c.t, "", append(args, "--addr", c.url)...)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		c.t.Fatalf("hourglass %q: %v (printed %q); want exit status 1", args, err, out)
	}
	return errOut
}

func jsonOf[T any](t *testing.T, out string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("printed %q: %v", out, err)
	}
	return v
}

// TestCLICalendar runs the calendar commands and sends in working time
// through the binary: create, get, list, update and delete a calendar;
// send --working-days and --working-hours print the delivery time the
// server computed, which a later change of the calendar does not move;
// recurring schedules keep to a calendar (skip and shift), and a
// calendar in use is not deleted; bad input exits 1 saying what is
// allowed.
func TestCLICalendar(t *testing.T) {
	t.Parallel()
	p := start(t, t.TempDir(), nil)
	c := cliClient{t, p.url}

	// Working time: 09:00-17:00 UTC every day, except tomorrow (D+1).
	day := time.Now().UTC().Truncate(24 * time.Hour)
	date := func(n int) string { return day.AddDate(0, 0, n).Format(time.DateOnly) }
	at := func(n, hour int) time.Time { return day.AddDate(0, 0, n).Add(time.Duration(hour) * time.Hour) }

	out := c.run("calendar", "create", "ops", "--hours", "mon-sun 09:00-17:00", "--closed", date(1))
	for _, w := range []string{"calendar  ops\n", "zone      UTC\n", "mon       09:00-17:00\n", "sun       09:00-17:00\n", "closed    " + date(1) + "\n"} {
		if !strings.Contains(out, w) {
			t.Errorf("calendar create printed:\n%s\nwant a line %q", out, w)
		}
	}
	c.run("calendar", "create", "berlin", "--tz", "Europe/Berlin", "--hours", "mon-fri 09:00-12:00,13:00-17:00", "--hours", "sat 10:00-14:00")
	if e := c.fails("calendar", "create", "ops", "--hours", "mon 09:00-10:00"); !strings.Contains(e, "it exists") || !strings.Contains(e, "calendar update ops") {
		t.Errorf("calendar create of a name taken: %q", e)
	}
	g := jsonOf[calendarOut](t, c.run("calendar", "get", "berlin", "--json"))
	if g.TimeZone != "Europe/Berlin" || strings.Join(g.Hours["wed"], " ") != "09:00-12:00 13:00-17:00" || strings.Join(g.Hours["sat"], " ") != "10:00-14:00" ||
		len(g.Hours["sun"]) != 0 || len(g.Closed) != 0 {
		t.Errorf("calendar get --json = %+v", g)
	}
	out = c.run("calendar", "list")
	if !regexp.MustCompile(`(?m)^berlin +Europe/Berlin +mon-fri 09:00-12:00,13:00-17:00; sat 10:00-14:00 +0 +-$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^ops +UTC +mon-sun 09:00-17:00 +1 +`+date(1)+`$`).MatchString(out) {
		t.Errorf("calendar list printed:\n%s", out)
	}
	if ls := jsonLines[calendarOut](t, c.run("calendar", "list", "--json")); len(ls) != 2 || ls[0].Name != "berlin" || ls[1].Name != "ops" {
		t.Errorf("calendar list --json = %+v", ls)
	}
	// --closed-file reads standard input; comments and blank lines go.
	hgOK(t, "# holidays\n"+date(1)+"\n\n"+date(9)+" # a day off\n", "calendar", "update", "berlin", "--closed-file", "-", "--addr", p.url)
	if g := jsonOf[calendarOut](t, c.run("calendar", "get", "berlin", "--json")); strings.Join(g.Closed, " ") != date(1)+" "+date(9) || g.TimeZone != "Europe/Berlin" {
		t.Errorf("after update --closed-file: %+v; want the two dates, the zone kept", g)
	}

	after := at(0, 12).Format(time.RFC3339)
	// sent sends in working time and returns the ID and the time send
	// printed on standard error.
	sent := func(t *testing.T, args ...string) (string, time.Time) {
		t.Helper()
		out, errOut, err := hg(t, "", append(append([]string{"send", "--topic", "w", "--calendar", "ops", "--after", after}, args...), "--addr", p.url)...)
		if err != nil {
			t.Fatalf("send %q: %v: %s", args, err, errOut)
		}
		when, ok := strings.CutPrefix(strings.TrimSpace(errOut), "delivers at ")
		deliverAt, perr := time.Parse(time.RFC3339Nano, when)
		if !ok || perr != nil {
			t.Fatalf("send %q printed %q on standard error; want \"delivers at TIME\"", args, errOut)
		}
		return strings.TrimSpace(out), deliverAt
	}
	getAt := func(t *testing.T, id string) time.Time {
		t.Helper()
		g := jsonOf[struct {
			Message struct {
				DeliverAt string `json:"deliver_at"`
			} `json:"message"`
		}](t, c.run("get", id, "--json"))
		v, err := time.Parse(time.RFC3339Nano, g.Message.DeliverAt)
		if err != nil {
			t.Fatalf("get %s: deliver_at %q", id, g.Message.DeliverAt)
		}
		return v
	}
	stored := map[string]time.Time{}
	for _, tc := range []struct {
		name string
		args []string
		want time.Time
	}{
		// From D 12:00, D+1 closed: the first working day is D+2.
		{"days_at_time", []string{"--working-days", "2", "--at-time", "10:30"}, at(3, 10).Add(30 * time.Minute)},
		{"days_same_time", []string{"--working-days", "1"}, at(2, 12)},
		// 5 h left on D, none on D+1: 10 h end D+2 14:00.
		{"hours", []string{"--working-hours", "10"}, at(2, 14)},
		{"duration", []string{"--working-hours", "5h30m"}, at(2, 9).Add(30 * time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, got := sent(t, tc.args...)
			if !got.Equal(tc.want) {
				t.Fatalf("send %q delivers at %s; want %s", tc.args, got, tc.want)
			}
			if stored := getAt(t, id); !stored.Equal(tc.want) {
				t.Fatalf("get %s: deliver_at %s; want %s", id, stored, tc.want)
			}
			stored[id] = got
		})
	}
	// D+2 closed too: what is stored keeps its time; a new send moves on.
	c.run("calendar", "update", "ops", "--closed", date(1)+","+date(2))
	for id, want := range stored {
		if got := getAt(t, id); !got.Equal(want) {
			t.Errorf("message %s after the calendar changed: deliver_at %s; want its time kept, %s", id, got, want)
		}
	}
	if len(stored) != 4 {
		t.Errorf("%d messages sent in working time; want 4", len(stored))
	}
	if _, got := sent(t, "--working-days", "1"); !got.Equal(at(3, 12)) {
		t.Errorf("send after the calendar changed delivers at %s; want %s", got, at(3, 12))
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"send", "--topic", "w", "--calendar", "ops", "--delay", "1s"}, "--calendar goes with --working-days or --working-hours"},
		{[]string{"send", "--topic", "w", "--working-days", "1"}, "--calendar is missing"},
		{[]string{"send", "--topic", "w", "--calendar", "ops", "--working-hours", "2", "--at-time", "09:00"}, "--at-time goes with --working-days"},
		{[]string{"send", "--topic", "w", "--calendar", "ops", "--working-hours", "soon"}, "want hours (4, 1.5) or a duration"},
		{[]string{"send", "--topic", "w", "--calendar", "ops", "--working-days", "1", "--delay", "1s"}, "--delay and --working-days: give one of them"},
		{[]string{"send", "--topic", "w", "--calendar", "nope", "--working-days", "1"}, `"nope": no such calendar`},
		{[]string{"send", "--topic", "w", "--calendar", "ops", "--working-days", "1", "--at-time", "9am"}, "at_time"},
		{[]string{"calendar", "create", "x"}, "--hours is missing"},
		{[]string{"calendar", "create", "x", "--hours", "someday 09:00-17:00"}, "want mon, tue, wed, thu, fri, sat or sun"},
		{[]string{"calendar", "create", "x", "--hours", "mon 17:00-09:00"}, "17:00-09:00"},
		{[]string{"calendar", "create", "x", "--hours", "mon 09:00-17:00", "--tz", "Mars/Olympus"}, "Mars/Olympus"},
		{[]string{"calendar", "create", "x", "--hours", "mon 09:00-17:00", "--closed", "2030-02-30"}, "2030-02-30"},
		{[]string{"calendar", "get", "nope"}, "no such calendar"},
		{[]string{"calendar", "update", "ops"}, "nothing to change"},
	} {
		if e := c.fails(tc.args...); !strings.Contains(e, tc.want) {
			t.Errorf("hourglass %q printed %q; want %q", tc.args, e, tc.want)
		}
	}

	t.Run("schedules", func(t *testing.T) {
		// At 10:00 every day, skipped outside working time: never on D+1
		// or D+2; at 08:00 shifted to 09:00.
		c.run("schedule", "create", "ten", "--topic", "r", "--spec", "0 10 * * *", "--calendar", "ops")
		c.run("schedule", "create", "eight", "--topic", "r", "--spec", "0 8 * * *", "--calendar", "ops", "--outside", "shift", "--jitter", "90s", "--overlap", "buffer-one")
		for _, tc := range []struct {
			name, outside string
			hour          int
		}{{"ten", "skip", 10}, {"eight", "shift", 9}} {
			s := jsonOf[recurPolicyOut](t, c.run("schedule", "get", tc.name, "--json", "--next", "6"))
			if s.Calendar != "ops" || s.Outside != tc.outside || len(s.Next) != 6 {
				t.Fatalf("schedule get %s --json = %+v", tc.name, s)
			}
			for _, n := range s.Next {
				v, err := time.Parse(time.RFC3339Nano, n)
				if err != nil || v.Hour() != tc.hour || v.Minute() != 0 || !v.After(at(2, 23)) && v.After(at(0, 23)) {
					t.Errorf("schedule %s: next %s; want %02d:00, not on %s or %s", tc.name, n, tc.hour, date(1), date(2))
				}
			}
		}
		s := jsonOf[recurPolicyOut](t, c.run("schedule", "get", "eight", "--json"))
		if s.Jitter != "1m30s" || s.Overlap != "buffer-one" {
			t.Errorf("schedule get eight --json = %+v; want jitter 1m30s, overlap buffer-one", s)
		}
		text := c.run("schedule", "get", "eight")
		for _, w := range []string{"jitter:      1m30s\n", "overlap:     buffer-one\n", "calendar:    ops (outside its working time: shift)\n"} {
			if !strings.Contains(text, w) {
				t.Errorf("schedule get printed:\n%s\nwant a line %q", text, w)
			}
		}
		if e := c.fails("calendar", "delete", "ops", "--yes"); !strings.Contains(e, `is used by the recurring schedule "eight"`) && !strings.Contains(e, `is used by the recurring schedule "ten"`) {
			t.Errorf("calendar delete of a calendar in use: %q", e)
		}
		if e := c.fails("schedule", "update", "ten", "--calendar", "", "--outside", "shift"); !strings.Contains(e, "--outside goes with --calendar") {
			t.Errorf("schedule update --calendar '' --outside shift: %q", e)
		}
		c.run("schedule", "update", "ten", "--calendar", "")
		c.run("schedule", "update", "eight", "--calendar", "", "--jitter", "0", "--overlap", "allow")
		if s := jsonOf[recurPolicyOut](t, c.run("schedule", "get", "eight", "--json")); s.Calendar != "" || s.Outside != "" || s.Jitter != "" || s.Overlap != "allow" {
			t.Errorf("after update --calendar '' --jitter 0 --overlap allow: %+v", s)
		}
		if out := c.run("calendar", "delete", "ops", "--yes"); out != "ops deleted\n" {
			t.Errorf("calendar delete printed %q", out)
		}
		c.fails("calendar", "get", "ops")
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--jitter", "8d"}, "from 0 to 7d"},
			{[]string{"--overlap", "queue"}, "want allow (the default), skip or buffer-one"},
			{[]string{"--calendar", "berlin", "--outside", "later"}, "want skip (the default) or shift"},
			{[]string{"--outside", "shift"}, "--outside goes with --calendar"},
			{[]string{"--calendar", "ops"}, `"ops": no such calendar`},
		} {
			args := append([]string{"schedule", "create", "bad", "--topic", "r", "--spec", "@daily"}, tc.args...)
			if e := c.fails(args...); !strings.Contains(e, tc.want) {
				t.Errorf("hourglass %q printed %q; want %q", args, e, tc.want)
			}
		}
	})
}

// TestCLIRecurringPolicies runs jitter, overlap and backfill through the
// binary: a jittered occurrence is delivered at or after its time and
// within the jitter; overlap skip skips occurrences while one is not
// acked; backfill stores the occurrences of a past span once.
func TestCLIRecurringPolicies(t *testing.T) {
	t.Parallel()
	p := start(t, t.TempDir(), nil)
	c := cliClient{t, p.url}

	t.Run("jitter", func(t *testing.T) {
		c.run("schedule", "create", "jit", "--topic", "jit", "--spec", "* * * * * *", "--jitter", "900ms")
		type line struct {
			cliLine
			DeliverAt string `json:"deliver_at"`
		}
		ls := jsonLines[line](t, c.run("recv", "--topic", "jit", "--count", "4", "--timeout", "20s"))
		c.run("schedule", "delete", "jit", "--yes")
		if len(ls) != 4 {
			t.Fatalf("received %d occurrences; want 4", len(ls))
		}
		var offsets []time.Duration
		for _, l := range ls {
			occ := occurrenceAt(t, l.cliLine)
			d, err := time.Parse(time.RFC3339Nano, l.DeliverAt)
			if err != nil {
				t.Fatal(err)
			}
			off := d.Sub(occ)
			if off < 0 || off >= 900*time.Millisecond {
				t.Errorf("occurrence %s delivered at %s: %v after it; want 0 to 900ms", occ, d, off)
			}
			if key := l.Headers["hourglass-idempotency-key"]; key != "jit@"+occ.UTC().Format("2006-01-02T15:04:05.000Z") {
				t.Errorf("occurrence %s has the key %q; want jit@<its time without jitter>", occ, key)
			}
			offsets = append(offsets, off)
		}
		if offsets[0] == 0 && offsets[1] == 0 && offsets[2] == 0 && offsets[3] == 0 {
			t.Errorf("offsets %v: all 0, want jitter", offsets)
		}
	})

	t.Run("overlap_skip", func(t *testing.T) {
		c.run("schedule", "create", "ov", "--topic", "ov", "--spec", "@every 1s", "--overlap", "skip")
		// Received and not acked: the following occurrences are skipped.
		first := jsonLines[cliLine](t, c.run("recv", "--topic", "ov", "--count", "1", "--timeout", "20s", "--no-ack"))
		if len(first) != 1 {
			t.Fatalf("received %+v; want one occurrence", first)
		}
		deadline := time.Now().Add(20 * time.Second)
		var s recurPolicyOut
		for s.Skipped < 2 && time.Now().Before(deadline) {
			s = jsonOf[recurPolicyOut](t, c.run("schedule", "get", "ov", "--json"))
		}
		if s.Skipped < 2 || s.Overlap != "skip" {
			t.Fatalf("schedule get ov --json = %+v; want 2 or more skipped within 20s", s)
		}
		c.run("schedule", "delete", "ov", "--yes")
		// What was skipped was never stored: the unacked one is all there is.
		if ls := jsonLines[cliLine](t, c.run("list", "--topic", "ov", "--json")); len(ls) > 1 {
			t.Errorf("topic ov holds %d messages; want the one not acked", len(ls))
		}
	})

	t.Run("backfill", func(t *testing.T) {
		c.run("schedule", "create", "bf", "--topic", "bf", "--spec", "* * * * * *", "--paused")
		now := time.Now().UTC().Truncate(time.Second)
		from, to := now.Add(-10*time.Second).Format(time.RFC3339), now.Add(-5*time.Second).Format(time.RFC3339)
		if out := c.run("schedule", "backfill", "bf", "--from", from, "--to", to); out != "bf backfilled 5 occurrences (0 existed already)\n" {
			t.Errorf("schedule backfill printed %q", out)
		}
		// Again, and one second more: only that one is new.
		b := jsonOf[struct{ Stored, Existing int }](t, c.run("schedule", "backfill", "bf", "--from", from, "--to", now.Add(-4*time.Second).Format(time.RFC3339), "--json"))
		if b.Stored != 1 || b.Existing != 5 {
			t.Errorf("second backfill = %+v; want 1 stored, 5 existing", b)
		}
		ls := jsonLines[cliLine](t, c.run("recv", "--topic", "bf", "--count", "6", "--timeout", "20s"))
		if len(ls) != 6 {
			t.Fatalf("received %d backfilled occurrences; want 6", len(ls))
		}
		seen := map[string]bool{}
		for _, l := range ls {
			occ := occurrenceAt(t, l)
			if _, ok := l.Headers["hourglass-backfill"]; !ok || occ.Before(now.Add(-10*time.Second)) || !occ.Before(now.Add(-4*time.Second)) || seen[occ.String()] {
				t.Errorf("backfilled %+v: want the header hourglass-backfill and a time in the span, once", l)
			}
			seen[occ.String()] = true
		}
		if e := c.fails("schedule", "backfill", "bf", "--from", to, "--to", from); !strings.Contains(e, "is not before --to") {
			t.Errorf("backfill of an empty span: %q", e)
		}
		if e := c.fails("schedule", "backfill", "bf"); !strings.Contains(e, "--from is missing") {
			t.Errorf("backfill without --from: %q", e)
		}
		if e := c.fails("schedule", "backfill", "nope", "--from", "1h"); !strings.Contains(e, "not found") && !strings.Contains(e, "no such") {
			t.Errorf("backfill of an unknown schedule: %q", e)
		}
	})
}
