package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/hourglassmq/hourglass/cmd/hourglass/internal/enginebench"
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
	for _, want := range []string{"hourglass", "a durable delayed-message server", "bench"} {
		if !strings.Contains(out, want) {
			t.Errorf("hourglass --help lacks %q:\n%s", want, out)
		}
	}
}

func TestBenchEngineHelp(t *testing.T) {
	out, _, err := runApp(t, "bench", "engine", "--help")
	if err != nil {
		t.Fatal(err)
	}
	want := append([]string{"--scenario", "--messages", "--window", "--body-size", "--fsync", "--dir",
		"--segment-duration", "--json", "--producers", "--batch", "--timeout", "--grace",
		"targets are stated for --fsync interval"}, enginebench.Scenarios...)
	want = append(want, enginebench.Keys...)
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("bench engine --help lacks %q", w)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
}
