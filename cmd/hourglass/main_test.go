package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// runApp runs the command line with args (without the program name) and
// returns what it wrote to stdout and stderr; like main, it moves flags
// ahead of arguments first.
func runApp(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	app := newApp()
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errOut
	err = app.RunContext(context.Background(), flagsFirst(app, append([]string{"hourglass"}, args...)))
	return out.String(), errOut.String(), err
}

func TestHelp(t *testing.T) {
	out, _, err := runApp(t, "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"hourglass", "a durable delayed-message server", "serve"} {
		if !strings.Contains(out, want) {
			t.Errorf("hourglass --help lacks %q:\n%s", want, out)
		}
	}
}

// TestNoBenchCommand: the benchmark drivers are a program of their own
// (cmd/hourglass-bench), not part of the server binary.
func TestNoBenchCommand(t *testing.T) {
	if _, _, err := runApp(t, "bench", "engine", "--help"); err == nil {
		t.Error("hourglass bench engine --help succeeded; the drivers belong to hourglass-bench")
	}
}
