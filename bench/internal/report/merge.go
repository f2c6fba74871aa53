package report

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hourglassmq/hourglass/bench/internal/workload"
)

// File is the raw JSON one peerbench invocation writes to --results.
type File struct {
	Meta    Meta
	Results []workload.Result
	Path    string `json:"-"` // where ReadFile read it
}

// Part is one invocation of a run split across several (one group of
// workloads each), as the document lists it.
type Part struct {
	Workloads          []string
	Command            string
	Start, End         time.Time
	LoadStart, LoadEnd string
	Shared             string
	Hourglass          string // the "hourglass <commit>" it measured
	File               string // its raw JSON's file name
}

// ReadFile reads one invocation's raw JSON.
func ReadFile(path string) (File, error) {
	f := File{Path: path}
	b, err := os.ReadFile(path)
	if err != nil {
		return f, err
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("%s: %w", path, err)
	}
	if len(f.Results) == 0 {
		return f, fmt.Errorf("%s: no runs in it", path)
	}
	return f, nil
}

// Merge joins invocations that each ran other workloads on the same
// systems with the same client settings into one Meta and one list of
// results, for one document. It refuses files whose settings differ where
// the tables would compare them, or that ran the same workload twice.
func Merge(files []File) (Meta, []workload.Result, error) {
	if len(files) == 0 {
		return Meta{}, nil, fmt.Errorf("no results files")
	}
	m := files[0].Meta
	m.Parts = nil
	var results []workload.Result
	seen := map[string]int{}
	for i, f := range files {
		fm := f.Meta
		ws := workloadsOf(f.Results)
		for _, w := range ws {
			if j, ok := seen[w]; ok {
				return Meta{}, nil, fmt.Errorf("file %d and file %d both ran %s; give each workload once", j+1, i+1, w)
			}
			seen[w] = i
		}
		a, b := m.Options, fm.Options
		type setting struct {
			name string
			x, y any
		}
		for _, s := range []setting{
			{"--reps", m.Reps, fm.Reps}, {"--body", a.BodySize, b.BodySize}, {"--producers", a.Producers, b.Producers},
			{"--consumers", a.Consumers, b.Consumers}, {"--batch", a.Batch, b.Batch}, {"--min-delay", a.MinDelay, b.MinDelay},
			{"--max-delay", a.MaxDelay, b.MaxDelay}, {"--redeliver", m.Redeliver, fm.Redeliver}, {"--poll", m.PollInterval, fm.PollInterval},
			{"--consume-batch", m.ConsumeBatch, fm.ConsumeBatch}, {"--run-timeout", a.RunTimeout, b.RunTimeout},
			{"--random-body", a.RandomBody, b.RandomBody},
		} {
			if s.x != s.y {
				return Meta{}, nil, fmt.Errorf("file %d ran with %s %v, file 1 with %v: one document compares runs of the same settings", i+1, s.name, s.y, s.x)
			}
		}
		if slices.ContainsFunc(ws, func(w string) bool { return w != "W3" }) {
			if m.Scale != fm.Scale && slices.ContainsFunc(workloadsOf(results), func(w string) bool { return w != "W3" }) {
				return Meta{}, nil, fmt.Errorf("file %d ran with --scale %v, an earlier file with %v", i+1, fm.Scale, m.Scale)
			}
			m.Scale, m.Options.Scale = fm.Scale, fm.Options.Scale
			m.Options.Grace, m.Options.CrashGrace = fm.Options.Grace, fm.Options.CrashGrace
		}
		if slices.Contains(ws, "W2") {
			m.Options.W2Scale = fm.Options.W2Scale
		}
		if slices.Contains(ws, "W3") {
			m.Options.W3Scale, m.Options.Settle = fm.Options.W3Scale, fm.Options.Settle
		}
		if fm.Start.Before(m.Start) {
			m.Start = fm.Start
		}
		if fm.End.After(m.End) {
			m.End = fm.End
		}
		hg := ""
		if len(fm.Versions) > 0 {
			hg = fm.Versions[0]
		}
		m.Parts = append(m.Parts, Part{Workloads: ws, Command: fm.Command, Start: fm.Start, End: fm.End,
			LoadStart: fm.LoadStart, LoadEnd: fm.LoadEnd, Shared: fm.Shared, Hourglass: hg, File: filepath.Base(f.Path)})
		results = append(results, f.Results...)
	}
	if len(m.Parts) == 1 {
		m.Parts = nil
	}
	return m, results, nil
}

// workloadsOf lists the workloads results hold, in order.
func workloadsOf(results []workload.Result) []string {
	var ws []string
	for _, r := range results {
		ws = append(ws, r.Workload)
	}
	slices.Sort(ws)
	return slices.Compact(ws)
}

// writeParts writes the document's lines on when and how a split run ran.
func writeParts(p func(string, ...any), m Meta) {
	var files []string
	for _, pt := range m.Parts {
		files = append(files, "results/"+pt.File)
	}
	p("- Run in %d invocations, each with every system, %d repetitions of its workloads, and the same client settings; "+
		"the document was made from their raw JSON with `cd bench && go run ./cmd/peerbench report %s`. "+
		"Machine: %s.\n", len(m.Parts), m.Reps, strings.Join(files, " "), m.Machine)
	for _, pt := range m.Parts {
		p("  - %s: %s to %s UTC (%s), %s. Load average at the start %s, at the end %s. %s `%s`\n",
			strings.Join(pt.Workloads, ", "), pt.Start.UTC().Format("2006-01-02 15:04"), pt.End.UTC().Format("15:04"),
			pt.End.Sub(pt.Start).Round(time.Second), pt.Hourglass, pt.LoadStart, pt.LoadEnd, pt.Shared, pt.Command)
	}
}
