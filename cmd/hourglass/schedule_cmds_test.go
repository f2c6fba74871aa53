package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/client"
)

// The schedule commands against a server run in e2e/cli_schedule_test.go,
// through the binary; here, their help, what they refuse before asking a
// server, and what they print.

func TestScheduleCommandsHelp(t *testing.T) {
	teaches := []string{"0 9 * * MON-FRI", "*/30 * * * * *", "@every 90s", "@daily", "IANA", "Europe/Berlin",
		"a local time they skip", "they repeat", "fire-latest", "(the default)", "fire-all", "skip", "NAME@TIME", "--key daily-report@", "Exit status"}
	for cmd, wants := range map[string][]string{
		"schedule":        {"create", "update", "list", "get", "pause", "resume", "delete", "--yes"},
		"schedule create": append([]string{"--topic", "--spec", "--tz", "--body", "--body-file", "--header", "--start", "--end", "--misfire", "--paused", "NAME created, next TIME"}, teaches...),
		"schedule update": append([]string{"the others keep", "--paused=false", "--end ''", "replaces all the headers"}, teaches...),
		"schedule list":   {"--topic", "next", "paused", "fired", "--json", "Exit status"},
		"schedule get":    {"--next", "1 to 100", "armed", "fired", "\"next\":[", "Exit status"},
		"schedule pause":  {"durably", "schedule resume", "Exit status"},
		"schedule resume": {"from now on", "not delivered", "Exit status"},
		"schedule delete": {"--yes", "confirmation", "no further occurrence", "Exit status"},
	} {
		out, _, err := runApp(t, append(strings.Fields(cmd), "--help")...)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range wants {
			if !strings.Contains(out, w) {
				t.Errorf("%s --help lacks %q", cmd, w)
			}
		}
	}
}

func TestScheduleCommandErrors(t *testing.T) {
	create := []string{"schedule", "create", "s", "--topic", "t", "--spec", "@daily"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"create_no_name", []string{"schedule", "create", "--topic", "t", "--spec", "@daily"}, "give one schedule name, got 0"},
		{"create_two_names", []string{"schedule", "create", "a", "b", "--topic", "t", "--spec", "@daily"}, "got 2 arguments"},
		{"create_no_topic", []string{"schedule", "create", "s", "--spec", "@daily"}, "--topic is missing"},
		{"create_no_spec", []string{"schedule", "create", "s", "--topic", "t"}, "--spec is missing: give a cron spec"},
		{"create_body_twice", append(create, "--body", "x", "--body-file", "-"), "--body and --body-file: give one of them"},
		{"create_body_file_missing", append(create, "--body-file", "/nonexistent/b"), "schedule create: --body-file: open /nonexistent/b"},
		{"create_bad_misfire", append(create, "--misfire", "fire-once"), "want fire-latest (the default), fire-all or skip"},
		{"create_bad_start", append(create, "--start", "tomorrow"), "--start \"tomorrow\": want an RFC 3339 time"},
		{"create_bad_header", append(create, "--header", "novalue"), "want KEY=VALUE"},
		{"update_nothing", []string{"schedule", "update", "s"}, "nothing to change"},
		{"get_no_name", []string{"schedule", "get"}, "give one schedule name"},
		{"get_next_zero", []string{"schedule", "get", "s", "--next", "0"}, "--next 0: from 1 to 100"},
		{"get_next_word", []string{"schedule", "get", "s", "--next", "all"}, "takes a whole number"},
		{"list_args", []string{"schedule", "list", "x"}, "takes no arguments"},
		{"pause_no_name", []string{"schedule", "pause"}, "give one schedule name"},
		// runApp's standard input is empty: no answer deletes nothing,
		// before any server is asked (none listens at port 1).
		{"delete_no_answer", []string{"schedule", "delete", "s", "--addr", "http://127.0.0.1:1"}, "schedule delete: no answer on standard input: nothing was changed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runApp(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestScheduleJSON(t *testing.T) {
	at := time.Date(2030, 3, 31, 1, 0, 0, 0, time.UTC)
	id, err := client.ParseID("0000019bd6a1f2c00000000000001f40")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		in   client.ScheduleInfo
		want scheduleJSON
	}{
		{"defaults", client.ScheduleInfo{Schedule: client.RecurringSchedule{Name: "n", Topic: "t", Spec: "@daily", Body: []byte("b")}},
			scheduleJSON{Name: "n", Topic: "t", Spec: "@daily", TimeZone: "UTC", Misfire: "fire-latest", bodyJSON: bodyJSON{Body: new("b")}, Next: []string{}, Overlap: "allow"}},
		{"all", client.ScheduleInfo{
			Schedule: client.RecurringSchedule{Name: "n", Topic: "t", Spec: "30 2 * * *", TimeZone: "Europe/Berlin", Body: []byte{0xff},
				Start: at, End: at.Add(time.Hour), Misfire: client.MisfireSkip, Paused: true,
				Jitter: 90 * time.Second, Overlap: client.OverlapBufferOne, Calendar: "berlin", CalendarPolicy: client.CalendarShift},
			Next: []time.Time{at}, Armed: id, Fired: 3, Skipped: 2, Buffered: at.Add(time.Minute)},
			scheduleJSON{Name: "n", Topic: "t", Spec: "30 2 * * *", TimeZone: "Europe/Berlin", Misfire: "skip", Paused: true,
				Start: "2030-03-31T01:00:00.000000000Z", End: "2030-03-31T02:00:00.000000000Z", bodyJSON: bodyJSON{BodyBase64: "/w=="},
				Next: []string{"2030-03-31T01:00:00.000000000Z"}, ArmedID: id.String(), Fired: 3,
				Jitter: "1m30s", Overlap: "buffer-one", Calendar: "berlin", Outside: "shift", Skipped: 2, Buffered: "2030-03-31T01:01:00.000000000Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// DeepEqual follows Body's pointer, and tells an empty Next
			// ("next":[]) from a nil one ("next":null).
			if got := newScheduleJSON(tc.in); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("newScheduleJSON = %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
