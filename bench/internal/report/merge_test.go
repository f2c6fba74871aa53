package report

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/bench/internal/peers"
	"github.com/hourglassmq/hourglass/bench/internal/workload"
)

// splitFiles: the fixture's W1 runs in one invocation's file, a W3 run of
// the same systems in another, both written as JSON and read back.
func splitFiles(t *testing.T) []string {
	t.Helper()
	_, w1 := fixture()
	var w3 []workload.Result
	for _, r := range w1 {
		r.Workload, r.Sorted = "W3", nil
		r.RSSBefore, r.RSSAfter, r.Acked = 1<<20, 3<<20, 1000
		w3 = append(w3, r)
	}
	base := time.Date(2026, 12, 2, 14, 0, 0, 0, time.UTC)
	o := workload.Options{Scale: 1, W3Scale: 0.1, BodySize: 256, Producers: 4, Consumers: 4, Batch: 100,
		MinDelay: 5 * time.Second, MaxDelay: 35 * time.Second, RunTimeout: 3 * time.Minute}
	dir := t.TempDir()
	var paths []string
	for i, part := range []struct {
		cmd     string
		results []workload.Result
	}{{"--workloads W1 --no-doc", w1}, {"--workloads W3 --w3-scale 0.1 --no-doc", w3}} {
		m := Meta{Command: "cd bench && go run ./cmd/peerbench " + part.cmd, Start: base.Add(time.Duration(i) * time.Hour),
			End: base.Add(time.Duration(i)*time.Hour + 40*time.Minute), Reps: 3, Scale: 1, Options: o,
			Versions: []string{"hourglass abc123" + string(rune('0'+i)), "Redis server v=7"}, Machine: "2 cores", Shared: "idle."}
		b, err := json.Marshal(File{Meta: m, Results: part.results})
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, filepath.Join(dir, "part"+string(rune('a'+i))+".json"))
		if err := os.WriteFile(paths[i], b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return paths
}

func readAll(t *testing.T, paths []string) []File {
	t.Helper()
	var fs []File
	for _, p := range paths {
		f, err := ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	return fs
}

func TestMergeWritesOneDocument(t *testing.T) {
	systems, _ := fixture()
	m, results, err := Merge(readAll(t, splitFiles(t)))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Parts) != 2 || len(results) != 12 {
		t.Fatalf("merged %d parts, %d results; want 2 and 12", len(m.Parts), len(results))
	}
	if m.Options.W3Scale != 0.1 || m.Scale != 1 {
		t.Errorf("merged scales W3 %v, others %v; want each from the file that ran it (0.1, 1)", m.Options.W3Scale, m.Scale)
	}
	if d := m.End.Sub(m.Start); d != time.Hour+40*time.Minute {
		t.Errorf("merged span %v, want 1h40m", d)
	}
	var b bytes.Buffer
	Write(&b, m, systems, results)
	doc := b.String()
	for _, want := range []string{
		"Run in 2 invocations", "peerbench report results/parta.json results/partb.json`",
		"  - W1: 2026-12-02 14:00 to 14:40 UTC (40m0s), hourglass abc1230.",
		"`cd bench && go run ./cmd/peerbench --workloads W3 --w3-scale 0.1 --no-doc`",
		"## W1 order timeouts", "## W3 backlog",
		"| hourglass (--fsync always) | fsync per write | 2,000 | 1.00× | ",
		"- Versions: Redis server v=7.",
		"W3 200,000",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("document lacks %q", want)
		}
	}
}

func TestMergeRefuses(t *testing.T) {
	paths := splitFiles(t)
	fs := readAll(t, paths)
	if _, _, err := Merge([]File{fs[0], fs[0]}); err == nil || !strings.Contains(err.Error(), "both ran W1") {
		t.Errorf("the same workload twice: err = %v", err)
	}
	fs[1].Meta.Options.BodySize = 64
	if _, _, err := Merge(fs); err == nil || !strings.Contains(err.Error(), "--body 64") {
		t.Errorf("another body size: err = %v", err)
	}
	fs[1].Meta.Options.BodySize = fs[0].Meta.Options.BodySize
	fs[1].Meta.Options.RandomBody = true
	if _, _, err := Merge(fs); err == nil || !strings.Contains(err.Error(), "--random-body true") {
		t.Errorf("random padding beside zeros: err = %v", err)
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("ReadFile of a missing file: no error")
	}
}

func TestCDFFromReadBackQuantiles(t *testing.T) {
	systems, rs := fixture()
	empty := make([]workload.Result, len(rs))
	for i := range rs { // as read back from JSON: quantiles only
		rs[i].Quantiles, rs[i].Sorted = rs[i].Sorted, nil
		empty[i] = rs[i]
		empty[i].Quantiles = nil
	}
	file := filepath.Join(t.TempDir(), "cdf.png")
	if err := LatenessCDF(file, systems, rs); err != nil {
		t.Fatalf("CDF from quantiles: %v", err)
	}
	if st, err := os.Stat(file); err != nil || st.Size() == 0 {
		t.Fatalf("CDF from quantiles: %v, %v", st, err)
	}
	// Runs with no lateness at all draw nothing: an error, not an empty plot.
	if err := LatenessCDF(filepath.Join(t.TempDir(), "empty.png"), systems, empty); err == nil {
		t.Fatal("CDF of runs without lateness: no error")
	}
}

func TestSystemColorsDiffer(t *testing.T) {
	seen := map[any]string{}
	for _, s := range peers.Systems(peers.Config{}) {
		c := systemColor(s.Name)
		if other, ok := seen[c]; ok && other != s.Name {
			t.Errorf("%s and %s share a color in the plots", s.Name, other)
		}
		seen[c] = s.Name
	}
}

// A run cut short by its bound: its rate is what was acknowledged, not
// what was planned (older JSON divided the planned count).
func TestProduceRateFromAcked(t *testing.T) {
	r := workload.Result{ProduceSeconds: 180, ProducePerSec: 2_000_000.0 / 180}
	r.Acked = 900_000
	if got := producePerSec(r); got != 5000 {
		t.Fatalf("producePerSec = %v, want 900,000 / 180 s = 5000", got)
	}
}
