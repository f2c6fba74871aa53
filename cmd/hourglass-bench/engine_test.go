package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hourglassmq/hourglass/internal/enginebench"
)

func TestBenchEngineFlagErrors(t *testing.T) {
	full := t.TempDir()
	os.WriteFile(filepath.Join(full, "keep"), nil, 0o644)
	for _, tc := range []struct {
		name string
		args []string
		want string // in the error
	}{
		{"unknown_scenario", []string{"--scenario", "steady"}, `--scenario "steady" is unknown; use one of uniform, hot-second, far-future, recovery`},
		{"no_messages", []string{"--messages", "0"}, "--messages 0 is out of range; it must be from 1 to 100000000"},
		{"messages_not_a_number", []string{"--messages", "lots"}, `invalid value "lots" for flag -messages: parse error; --messages takes a whole number (see 'hourglass-bench engine --help')`},
		{"zero_window", []string{"--window", "0s"}, "--window 0s is out of range; it must be from 1ms to 24h0m0s"},
		{"window_without_unit", []string{"--window", "10"}, `invalid value "10" for flag -window: parse error; --window takes a duration with a unit, such as 500ms, 10s, 2m or 1h`},
		{"small_body", []string{"--body-size", "4"}, "--body-size 4 is out of range; it must be from 8"},
		{"bad_fsync", []string{"--fsync", "sometimes"}, `--fsync "sometimes" is unknown; use always, interval or none`},
		{"fractional_segment", []string{"--segment-duration", "1500ms"}, "--segment-duration 1.5s is not allowed; it must be a whole number of seconds from 1s to 24h0m0s"},
		{"no_producers", []string{"--producers", "0"}, "--producers 0 is out of range; it must be from 1 to 1024"},
		{"huge_batch", []string{"--batch", "1000000"}, "--batch 1000000 is out of range; it must be from 1 to 100000"},
		{"batch_bytes", []string{"--batch", "100000", "--body-size", "4096"}, "bytes per call; at most 67108864 (64 MiB)"},
		{"zero_timeout", []string{"--timeout", "0s"}, "--timeout 0s must be positive"},
		{"timeout_before_due", []string{"--timeout", "3s"}, "--timeout 3s ends before the last message of --scenario uniform is due (13s after scheduling starts)"},
		{"zero_grace", []string{"--grace", "0s"}, "--grace 0s must be positive"},
		{"dir_not_empty", []string{"--dir", full, "--messages", "1"}, `is not empty (it holds "keep" and 0 more); give an empty or absent directory`},
		{"unknown_flag", []string{"--producer", "2"}, "engine: no flag --producer (see 'hourglass-bench engine --help')"},
		{"argument", []string{"now"}, `engine takes no arguments, got ["now"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runApp(t, append([]string{"engine"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing on an error", out)
			}
		})
	}
}

func TestBenchEngineJSON(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	out, stderr, err := runApp(t, "engine", "--scenario", "uniform", "--messages", "2000", "--window", "1s",
		"--batch", "100", "--timeout", "1m", "--dir", dir, "--json")
	if err != nil {
		t.Fatalf("%v\nstderr: %s", err, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	last := lines[len(lines)-1]
	var m map[string]any
	if err := json.Unmarshal([]byte(last), &m); err != nil {
		t.Fatalf("last line of stdout is not a JSON object: %v\n%s", err, out)
	}
	for _, k := range enginebench.Keys {
		if _, ok := m[k]; !ok {
			t.Errorf("key %q missing from %s", k, last)
		}
	}
	for _, l := range lines[:len(lines)-1] {
		if strings.HasPrefix(strings.TrimSpace(l), "{") {
			t.Errorf("more than one JSON line: %q", l)
		}
	}
	if m["scenario"] != "uniform" || m["messages"] != 2000.0 || m["lost"] != 0.0 || m["duplicates"] != 0.0 || m["early"] != 0.0 {
		t.Errorf("report %s: want uniform, 2000 messages, none lost, duplicated or early", last)
	}
	if !strings.Contains(out, "schedule_per_sec") || len(lines) < 10 {
		t.Errorf("no table before the JSON line:\n%s", out)
	}
}
