package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/hourglassmq/hourglass/internal/enginebench"
)

// runApp runs the command line with args (without the program name) and
// returns what it wrote to stdout and stderr.
func runApp(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	app := newApp()
	var out, errOut bytes.Buffer
	app.Writer, app.ErrWriter = &out, &errOut
	err = app.RunContext(context.Background(), append([]string{"hourglass-bench"}, args...))
	return out.String(), errOut.String(), err
}

func TestEngineHelp(t *testing.T) {
	out, _, err := runApp(t, "engine", "--help")
	if err != nil {
		t.Fatal(err)
	}
	want := append([]string{"hourglass-bench engine", "--scenario", "--messages", "--window", "--body-size", "--fsync", "--dir",
		"--segment-duration", "--json", "--producers", "--batch", "--timeout", "--grace",
		"targets are stated for --fsync interval"}, enginebench.Scenarios...)
	want = append(want, enginebench.Keys...)
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("engine --help lacks %q", w)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
}
