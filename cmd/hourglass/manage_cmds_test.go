package main

import (
	"strings"
	"testing"
)

func TestManageCommandsHelp(t *testing.T) {
	for cmd, wants := range map[string][]string{
		"get":  {"pending", "leased", "acked", "cancelled", "dead-lettered", "not-found", "--json", "recv --no-ack", "Exit status"},
		"list": {"--topic", "--from", "--to", "--limit", "--page-size", "RFC 3339", "1 to 1000", "dead-lettered", "lease-until", "Exit status"},
	} {
		out, _, err := runApp(t, cmd, "--help")
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

func TestManageCommandErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"get_no_id", []string{"get"}, "give one message ID"},
		{"get_two_ids", []string{"get", "a", "b"}, "got 2 arguments"},
		{"list_no_topic", []string{"list"}, "the topic is missing"},
		{"list_bad_from", []string{"list", "--topic", "t", "--from", "yesterday"}, "RFC 3339 time"},
		{"list_negative_limit", []string{"list", "--topic", "t", "--limit", "-1"}, "--limit -1"},
		{"list_args", []string{"list", "--topic", "t", "x"}, "takes one topic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runApp(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
