package main

import (
	"strings"
	"testing"
)

// TestTopicSpellings: every command about a topic takes it as its first
// argument or as --topic, and says what is wrong when it has neither or
// both.
func TestTopicSpellings(t *testing.T) {
	addr, stop, _ := startServe(t, "--data-dir", t.TempDir())
	defer stop()
	url := "http://" + addr
	run := func(t *testing.T, args ...string) string {
		t.Helper()
		out, _, err := runApp(t, append(args, "--addr", url)...)
		if err != nil {
			t.Fatalf("hourglass %s: %v", strings.Join(args, " "), err)
		}
		return out
	}
	var ids []string
	for _, args := range [][]string{{"send", "t1", "--now"}, {"send", "--topic", "t1", "--now"}, {"send", "--now", "t1", "--body", "x"}} {
		ids = append(ids, strings.TrimSpace(run(t, args...)))
	}
	later := strings.TrimSpace(run(t, "send", "t3", "--delay", "1h"))
	// Both spellings of each command, and the same answer.
	for _, tc := range []struct {
		name      string
		arg, flag []string
		want      string
	}{
		{"list", []string{"list", "t3", "--state", "pending"}, []string{"list", "--topic", "t3"}, later},
		{"policy_show", []string{"policy", "show", "t1"}, []string{"policy", "show", "--topic", "t1"}, "max-attempts"},
		{"pause", []string{"pause", "t1"}, []string{"pause", "--topic", "t1"}, "t1 paused"},
		{"resume", []string{"resume", "t1"}, []string{"resume", "--topic", "t1"}, "t1 resumed"},
		{"policy_set", []string{"policy", "set", "t1", "--max-attempts", "4"}, []string{"policy", "set", "--max-attempts", "4", "--topic", "t1"}, "max-attempts       4"},
		{"redrive", []string{"redrive", "t1.dlq"}, []string{"redrive", "--topic", "t1.dlq"}, "t1.dlq: 0 redriven, 0 skipped"},
		{"purge", []string{"purge", "t2", "--state", "due", "--yes"}, []string{"purge", "--yes", "--topic", "t2", "--state", "due"}, "purged 0 due messages of t2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, f := run(t, tc.arg...), run(t, tc.flag...)
			if a != f || !strings.Contains(a, tc.want) {
				t.Errorf("as an argument: %q; as --topic: %q; want the same, with %q", a, f, tc.want)
			}
		})
	}
	t.Run("recv_ack_nack", func(t *testing.T) {
		got := run(t, "recv", "t1", "--count", "2", "--no-ack", "--timeout", "20s")
		got += run(t, "recv", "--topic", "t1", "--count", "1", "--no-ack", "--timeout", "20s")
		for _, id := range ids {
			if !strings.Contains(got, id) {
				t.Fatalf("recv printed %q, without %s", got, id)
			}
		}
		if out := run(t, "ack", "t1", ids[0]); out != ids[0]+" acked\n" {
			t.Errorf("ack t1 ID: %q", out)
		}
		if out := run(t, "nack", ids[1], "--topic", "t1", "--dead-letter"); out != ids[1]+" dead-lettered\n" {
			t.Errorf("nack --topic t1 ID: %q", out)
		}
		if out := run(t, "extend", "t1", ids[2], "--lease", "1m"); !strings.HasPrefix(out, ids[2]+" lease-until ") {
			t.Errorf("extend t1 ID: %q", out)
		}
	})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing", []string{"list"}, "list: the topic is missing: give it as the first argument or as --topic T"},
		{"missing_before_ids", []string{"ack", ids[0]}, "ack: the topic is missing"},
		{"two", []string{"pause", "--topic", "t1", "t2"}, `pause: takes one topic, got ["t2"] after "t1"`},
		{"empty_flag", []string{"recv", "--topic", ""}, "recv: --topic is empty"},
		{"send_body_as_argument", []string{"send", "t1", "hello", "--now"}, `takes one topic, got ["hello"] after "t1"; the body goes in --body`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := runApp(t, append(tc.args, "--addr", url)...); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("hourglass %s: %v; want an error containing %q", strings.Join(tc.args, " "), err, tc.want)
			}
		})
	}
}

// TestUnknownTopic: recv and list of a topic the server does not know say
// so on stderr, with the nearest topic it knows; a known topic, and the
// dead-letter topic of one, get no such note.
func TestUnknownTopic(t *testing.T) {
	addr, stop, _ := startServe(t, "--data-dir", t.TempDir())
	defer stop()
	url := "http://" + addr
	if _, _, err := runApp(t, "send", "orders", "--delay", "1h", "--addr", url); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string // "": no note
	}{
		{"list_typo", []string{"list", "ordrs"}, "hourglass list: topic ordrs has no messages and no policy on this server (none due, leased or sent to it since the server started): did you mean orders?\n"},
		{"list_typo_dlq", []string{"list", "ordres.dlq", "--state", "dead-lettered"}, "did you mean orders.dlq?\n"},
		{"list_unlike", []string{"list", "zzz"}, "topic zzz has no messages and no policy on this server (none due, leased or sent to it since the server started)\n"},
		{"recv_typo", []string{"recv", "--topic", "ordrs", "--timeout", "200ms"}, "hourglass recv: topic ordrs has no messages and no policy on this server (none due, leased or sent to it since the server started): did you mean orders?; waiting for messages sent to it (Ctrl-C stops)\n"},
		{"list_known_empty", []string{"list", "orders", "--state", "due"}, ""},
		{"recv_known", []string{"recv", "orders", "--timeout", "200ms"}, ""},
		{"list_known_dlq", []string{"list", "orders.dlq", "--state", "due"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, err := runApp(t, append(tc.args, "--addr", url)...)
			if err != nil || out != "" {
				t.Fatalf("printed %q, %v; want nothing, and no error", out, err)
			}
			if tc.want == "" && errOut != "" || !strings.HasSuffix(errOut, tc.want) || strings.Count(errOut, "\n") > 1 {
				t.Errorf("stderr %q; want %q", errOut, tc.want)
			}
		})
	}
}
