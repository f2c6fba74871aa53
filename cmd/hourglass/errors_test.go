package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestErrorText(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"client_call", fmt.Errorf("cancel x: %w", fmt.Errorf("client: Cancel: %w", status.Error(codes.InvalidArgument, `id "x": not 32 hex digits`))),
			`cancel x: Cancel: id "x": not 32 hex digits (invalid argument)`},
		{"hint", fmt.Errorf("client: Topics: %w", status.Error(codes.Unauthenticated, "missing bearer token")),
			"Topics: missing bearer token (unauthenticated: give the server's --auth-token with --token or HOURGLASS_TOKEN)"},
		{"bare_status", status.Error(codes.NotFound, "no schedule daily"), "no schedule daily (not found)"},
		{"text_after", fmt.Errorf("redrive a.dlq: %w (after 3 redriven)", status.Error(codes.Unavailable, "gone")),
			"redrive a.dlq: gone (unavailable: retry later, or check that a server runs at --addr, HOURGLASS_ADDR) (after 3 redriven)"},
		{"no_status", errors.New("send: --topic is missing"), "send: --topic is missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := errorText(tc.err); got != tc.want {
				t.Errorf("errorText = %q\nwant        %q", got, tc.want)
			}
		})
	}
}

// TestSuggestions: a command or flag that does not exist gets the nearest
// that does, at every level.
func TestSuggestions(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"command", []string{"sned"}, `no command "sned"; did you mean send? ('hourglass --help' lists every command)`},
		{"subcommand", []string{"policy", "shwo", "orders"}, `no command "shwo"; did you mean show? ('hourglass policy --help'`},
		{"flag", []string{"send", "--dealy", "5s"}, "send: no flag --dealy; did you mean --delay? (see 'hourglass send --help')"},
		{"subcommand_flag", []string{"schedule", "create", "daily", "--spce", "@daily"}, "no flag --spce; did you mean --spec?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runApp(t, tc.args...)
			if err == nil || !strings.Contains(errorText(err), tc.want) {
				t.Errorf("hourglass %s: %v; want an error containing %q", strings.Join(tc.args, " "), err, tc.want)
			}
		})
	}
}
