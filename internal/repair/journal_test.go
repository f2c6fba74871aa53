package repair

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// FuzzDecodeJournal: DecodeJournal never panics, and a journal it accepts
// has a format it checked and encodes back to one it accepts again.
func FuzzDecodeJournal(f *testing.F) {
	good := Journal{Format: journalFormat, Version: journalVersion, Runs: []JournalRun{{
		ID: "20261205T180000Z", Started: time.Date(2026, 12, 5, 18, 0, 0, 0, time.UTC), Quarantine: "quarantine/20261205T180000Z",
		State: RunRunning, Steps: []JournalStep{{Name: "commitlog", State: StepPlanned, Plan: []string{"  offsets 1..2 LOST"}}},
	}}}
	b, _ := json.Marshal(good)
	f.Add(b)
	f.Add([]byte(`{"format":"hourglass-repair-journal","version":2,"runs":[]}`))
	f.Add([]byte(`{"format":"hourglass-repair-journal","version":1,"runs":[{"id":"x","state":"odd"}]}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, b []byte) {
		j, err := DecodeJournal(b)
		if err != nil {
			if !errors.Is(err, ErrBadJournal) {
				t.Fatalf("error %v does not wrap ErrBadJournal", err)
			}
			return
		}
		if j.Format != journalFormat || j.Version != journalVersion {
			t.Fatalf("accepted format %q version %d", j.Format, j.Version)
		}
		for _, r := range j.Runs {
			r.Report() // every accepted run can be reported
			r.Loses()
		}
		again, err := json.Marshal(j)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeJournal(again); err != nil {
			t.Fatalf("re-encoded journal refused: %v", err)
		}
	})
}

// TestReportNamesState: a run's report says whether it was interrupted,
// finished by a later run, failed or complete, and gives the plan of a
// step that may have been cut short and the output of one that ran.
func TestReportNamesState(t *testing.T) {
	run := JournalRun{ID: "a", State: RunRunning, Quarantine: "quarantine/a", Steps: []JournalStep{
		{Name: "reput", State: StepDone, Plan: []string{"would"}, Done: []string{"did"}},
		{Name: "commitlog", State: StepPlanned, Plan: []string{"offsets 1..2 LOST"}},
	}}
	for _, tc := range []struct {
		name  string
		state string
		by    string
		want  string
	}{
		{"interrupted", RunRunning, "", "INTERRUPTED"},
		{"finished_by_later", RunRunning, "b", "run b finished the repair"},
		{"failed", RunFailed, "", ": failed"},
		{"complete", RunComplete, "", ": complete"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run
			r.State, r.FinishedBy = tc.state, tc.by
			rep := strings.Join(r.Report(), "\n")
			for _, want := range []string{tc.want, "did", "offsets 1..2 LOST", "step commitlog was cut short"} {
				if !strings.Contains(rep, want) {
					t.Errorf("report lacks %q:\n%s", want, rep)
				}
			}
			if strings.Contains(rep, "would") {
				t.Errorf("report gives the plan of a step that ran:\n%s", rep)
			}
			if !r.Loses() || r.Interrupted() != (tc.name == "interrupted") {
				t.Errorf("Loses %v, Interrupted %v", r.Loses(), r.Interrupted())
			}
		})
	}
}
