package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass/client"
)

// The operate commands against a server run in e2e/cli_operate_test.go,
// through the binary; here, what they refuse before asking one, and
// their help.

func TestOperateCommandsHelp(t *testing.T) {
	for cmd, wants := range map[string][]string{
		"reschedule":   {"--topic", "--key", "--delay", "--at", "--now", "already-delivered", "already-cancelled", "unknown", "new_id", "Exit status"},
		"cancel":       {"--topic", "--key", "orders/order-42 cancelled"},
		"get":          {"--topic", "--key", "rescheduled_to"},
		"nack":         {"--reason", "--dead-letter", "dead-lettered", "<topic>.dlq"},
		"extend":       {"--lease", "receipt", "1ms to 12h", "Exit status"},
		"list":         {"--state", "pending", "due", "leased", "dead-lettered", "reason=R", "Exit status"},
		"recv":         {"receipt", "lease_expires_at"},
		"redrive":      {"--to", "--reason", "--id", "--rate", "--max", "max-attempts", "nacked", "sink", "running it again", "more remain", "Exit status"},
		"purge":        {"--state", "--yes", "pending", "due", "dead-lettered", "confirmation", "Exit status"},
		"delete-topic": {"--yes", "TOPIC.dlq", "confirmation", "Exit status"},
		"topics":       {"due", "leased", "dead letters", "oldest due", "policy", "--json", "Exit status"},
		"policy":       {"show", "set", "max-attempts", "backoff", "paused", "rate", "lease"},
		"policy show":  {"effective", "--json", "max_dispatch_rate", "Exit status"},
		"policy set":   {"--max-attempts", "--backoff", "INITIAL[:MAX[:MULTIPLIER[:JITTER]]]", "--rate", "--lease", "--default", "Exit status"},
		"pause":        {"resume", "durably", "Exit status"},
		"resume":       {"Exit status"},
		"freeze":       {"--topic", "--key", "frozen NEW_ID REMAINING", "already-frozen", "remaining_ms", "thaw", "Exit status"},
		"thaw":         {"--topic", "--key", "thawed NEW_ID DELIVER_AT", "not-frozen", "Exit status"},
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

func TestOperateCommandErrors(t *testing.T) {
	id := strings.Repeat("0", 32)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"reschedule_nothing", []string{"reschedule", "--now"}, "give one or more message IDs (32 hex digits each, as send printed them), or --topic and --key"},
		{"reschedule_no_time", []string{"reschedule", id}, "the new time is missing: give --delay D (such as 30s or 2h), --at TIME (RFC 3339, such as 2030-01-02T09:00:00Z) or --now"},
		{"reschedule_two_times", []string{"reschedule", id, "--now", "--delay", "1h"}, "--delay and --now: give one of them"},
		{"reschedule_bad_delay", []string{"reschedule", id, "--delay", "soon"}, "with a unit"},
		{"reschedule_bad_at", []string{"reschedule", id, "--at", "tomorrow"}, "RFC 3339"},
		{"reschedule_key_without_topic", []string{"reschedule", "--key", "k", "--now"}, "give both to name a message by the key"},
		{"reschedule_id_and_key", []string{"reschedule", id, "--topic", "t", "--key", "k", "--now"}, "not both"},
		{"cancel_topic_only", []string{"cancel", "--topic", "t"}, "give both"},
		{"freeze_nothing", []string{"freeze"}, "give one or more message IDs"},
		{"thaw_id_and_key", []string{"thaw", id, "--topic", "t", "--key", "k"}, "not both"},
		{"get_two", []string{"get", id, id}, "got 2 arguments"},
		{"nack_dead_letter_delay", []string{"nack", id, "--topic", "t", "--dead-letter", "--delay", "1s"}, "give one of them"},
		{"nack_long_reason", []string{"nack", id, "--topic", "t", "--reason", strings.Repeat("x", 1001)}, "at most 1000"},
		{"extend_no_lease", []string{"extend", id, "--topic", "t"}, "--lease is missing"},
		{"extend_long_lease", []string{"extend", id, "--topic", "t", "--lease", "13h"}, "from 1ms to 12h"},
		{"extend_no_topic", []string{"extend", id, "--lease", "1m"}, "the topic is missing"},
		{"list_bad_state", []string{"list", "--topic", "t", "--state", "acked"}, "want pending, due, leased or dead-lettered"},
		{"list_from_with_due", []string{"list", "--topic", "t", "--state", "due", "--from", "1h"}, "bound the delivery time of pending messages"},
		{"redrive_no_topic", []string{"redrive"}, "the topic is missing"},
		{"redrive_not_dlq", []string{"redrive", "orders"}, "the dead letters of orders are in orders.dlq"},
		{"redrive_bad_reason", []string{"redrive", "o.dlq", "--reason", "timeout"}, "want one of max-attempts, nacked, sink"},
		{"redrive_bad_rate", []string{"redrive", "o.dlq", "--rate", "200000"}, "from 1 to 100000"},
		{"redrive_bad_max", []string{"redrive", "o.dlq", "--max", "-1"}, "from 0 (all that wait now)"},
		{"redrive_bad_id", []string{"redrive", "o.dlq", "--id", "xyz"}, "--id \"xyz\""},
		{"purge_no_state", []string{"purge", "t"}, "--state \"\": want pending, due or dead-lettered"},
		{"purge_leased", []string{"purge", "t", "--state", "leased"}, "want pending, due or dead-lettered"},
		{"purge_no_topic", []string{"purge", "--state", "due"}, "the topic is missing"},
		// runApp's standard input is empty: no answer purges nothing,
		// before any server is asked (none listens at port 1).
		{"purge_no_answer", []string{"purge", "t", "--state", "due", "--addr", "http://127.0.0.1:1"}, "no answer on standard input: nothing was changed"},
		{"delete_no_answer", []string{"delete-topic", "t", "--addr", "http://127.0.0.1:1"}, "no answer on standard input"},
		{"topics_args", []string{"topics", "x"}, "takes no arguments"},
		{"policy_set_nothing", []string{"policy", "set", "t"}, "policy set: nothing to change"},
		{"policy_set_no_topic", []string{"policy", "set", "--max-attempts", "3"}, "the topic is missing"},
		{"policy_set_attempts", []string{"policy", "set", "t", "--max-attempts", "0"}, "from 1 to 1000"},
		{"policy_set_rate", []string{"policy", "set", "t", "--rate", "-1"}, "0 (no limit) or more"},
		{"policy_set_rate_word", []string{"policy", "set", "t", "--rate", "fast"}, "takes a number"},
		{"policy_set_lease", []string{"policy", "set", "t", "--lease", "0s"}, "from 1ms to 12h"},
		{"policy_set_flow_concurrency", []string{"policy", "set", "t", "--flow-concurrency", "-1"}, "from 1 to 10000, or 0 for no bound"},
		{"policy_set_flow_rate", []string{"policy", "set", "t", "--flow-rate", "-2"}, "0 (no bound) or more messages per second"},
		{"policy_set_default", []string{"policy", "set", "t", "--default", "colour"}, "give max-attempts, backoff, paused, rate, lease, flow-concurrency, flow-rate, flow-burst, flow-ordered, flow-fair, expiry-drop or expiry-unacked"},
		{"policy_set_both_expiry", []string{"policy", "set", "t", "--expiry-drop", "--default", "expiry_drop"}, "not both"},
		{"policy_set_both", []string{"policy", "set", "t", "--lease", "1m", "--default", "lease_ms"}, "not both"},
		{"policy_set_backoff", []string{"policy", "set", "t", "--backoff", "1s:2s:20"}, "MULTIPLIER is a number from 1"},
		{"pause_no_topic", []string{"pause"}, "the topic is missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runApp(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestParseBackoff(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     client.Backoff
		err      string
	}{
		{"fixed", "1s", client.Backoff{Initial: time.Second, Multiplier: 1}, ""},
		{"capped", "1s:5m", client.Backoff{Initial: time.Second, Max: 5 * time.Minute, Multiplier: 1}, ""},
		{"exponential", "500ms:1h:2", client.Backoff{Initial: 500 * time.Millisecond, Max: time.Hour, Multiplier: 2}, ""},
		{"jitter", "1s:0:3:0.25", client.Backoff{Initial: time.Second, Multiplier: 3, Jitter: 0.25}, ""},
		{"days", "1d:7d:2", client.Backoff{Initial: 24 * time.Hour, Max: 7 * 24 * time.Hour, Multiplier: 2}, ""},
		{"zero_initial", "0s", client.Backoff{}, "INITIAL is a duration of 1ms or more"},
		{"no_unit", "5", client.Backoff{}, "INITIAL"},
		{"max_below_initial", "1m:1s", client.Backoff{}, "MAX is a duration not below INITIAL"},
		{"multiplier_below_1", "1s:1m:0.5", client.Backoff{}, "MULTIPLIER"},
		{"jitter_above_1", "1s:1m:2:1.5", client.Backoff{}, "JITTER"},
		{"five_parts", "1s:1m:2:0:9", client.Backoff{}, "5 parts"},
		{"empty", "", client.Backoff{}, "INITIAL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseBackoff(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("parseBackoff(%q) = %+v, %v; want an error containing %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("parseBackoff(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
			// What policy show prints, --backoff reads back.
			if again, err := parseBackoff(formatBackoff(got)); err != nil || again != got {
				t.Errorf("parseBackoff(formatBackoff(%+v) = %q) = %+v, %v", got, formatBackoff(got), again, err)
			}
		})
	}
}

func TestPolicySummary(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    client.Policy
		want string
	}{
		{"nothing_set", client.Policy{}, "defaults"},
		{"paused", client.Policy{Paused: new(true)}, "paused yes"},
		{"all", client.Policy{MaxAttempts: new(5), Backoff: &client.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.1},
			Paused: new(false), MaxDispatchRate: new(0.5), Lease: new(2 * time.Minute)},
			"max-attempts 5, backoff 1s:1m:2:0.1, paused no, rate 0.5/s, lease 2m"},
		{"unlimited", client.Policy{MaxDispatchRate: new(0.0), Backoff: &client.Backoff{Multiplier: 1}}, "backoff none, rate unlimited"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := summary(tc.p); got != tc.want {
				t.Errorf("summary = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCLIDoc checks that docs/CLI.md names every client command and
// every flag of each.
func TestCLIDoc(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "CLI.md"))
	if err != nil {
		t.Fatal(err)
	}
	notClient := map[string]bool{"serve": true, "inspect": true, "repair": true}
	var walk func(prefix string, cmds []*cli.Command)
	walk = func(prefix string, cmds []*cli.Command) {
		for _, c := range cmds {
			name := strings.TrimSpace(prefix + " " + c.Name)
			if notClient[name] {
				continue
			}
			if len(c.Subcommands) > 0 {
				walk(name, c.Subcommands)
				continue
			}
			if !strings.Contains(string(doc), "`"+name+" ") {
				t.Errorf("docs/CLI.md does not name the command %q", name)
			}
			for _, f := range c.Flags {
				flag := "--" + f.Names()[0]
				if !regexp.MustCompile(regexp.QuoteMeta(flag) + `([^a-z0-9-]|$)`).Match(doc) {
					t.Errorf("docs/CLI.md does not name %s of %s", flag, name)
				}
			}
		}
	}
	walk("", newApp().Commands)
}
