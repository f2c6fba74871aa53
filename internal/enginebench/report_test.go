package enginebench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestReportJSONHasEveryKey(t *testing.T) {
	var buf bytes.Buffer
	if err := (&Report{Scenario: Uniform, Messages: 3}).WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "\n"); n != 1 || !strings.HasSuffix(buf.String(), "\n") {
		t.Fatalf("%d lines, want one: %q", n, buf.String())
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range Keys {
		if _, ok := m[k]; !ok {
			t.Errorf("key %q missing", k)
		}
	}
	if len(m) != len(Keys) {
		t.Errorf("%d keys, Keys lists %d: keep them in step", len(m), len(Keys))
	}
}

func TestReportTable(t *testing.T) {
	var buf bytes.Buffer
	r := &Report{Scenario: Recovery, Messages: 1_000_000, SchedulePerSec: 1234567.8, Note: "a note"}
	if err := r.WriteTable(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{"scenario                  recovery", "1,234,568", "delivered_before_restart", "note: a note"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasSuffix(line, " ") {
			t.Errorf("trailing space in %q", line)
		}
	}
}

func TestGroup(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := Group(n); got != want {
			t.Errorf("Group(%d) = %q, want %q", n, got, want)
		}
	}
}
