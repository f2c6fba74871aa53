package report

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/bench/internal/peers"
	"github.com/hourglassmq/hourglass/bench/internal/workload"
)

// fixture: Hourglass (always) and Redis (always) with three W1 runs each.
func fixture() ([]peers.System, []workload.Result) {
	all := peers.Systems(peers.Config{})
	systems := []peers.System{all[0], all[2]} // hourglass --fsync always, redis appendfsync always
	var rs []workload.Result
	for rep, v := range []struct{ hgRate, redisRate float64 }{{1000, 3000}, {2000, 8000}, {9000, 1000}} {
		for i, rate := range []float64{v.hgRate, v.redisRate} {
			r := workload.Result{Workload: "W1", System: systems[i].Label(), Rep: rep + 1, End: "complete", ProducePerSec: rate}
			r.LatenessP99 = msd(10 * (i + 1))
			r.Lost = rep * i // redis: 0, 1, 2
			r.Sorted = []time.Duration{msd(1), msd(2), msd(10 * (i + 1))}
			rs = append(rs, r)
		}
	}
	return systems, rs
}

func TestWriteMediansAndRatios(t *testing.T) {
	systems, rs := fixture()
	var b bytes.Buffer
	Write(&b, Meta{Reps: 3, Scale: 0.5, Options: workload.Options{Scale: 0.5, W3Scale: 0.5, MinDelay: 5 * time.Second, MaxDelay: 35 * time.Second}}, systems, rs)
	doc := b.String()
	// Medians: hourglass rates 1000, 2000, 9000 -> 2,000; redis 3000, 8000, 1000 -> 3,000;
	// ratio 1.50x; p99 10 ms against 20 ms -> 2.00x; lost listed per repetition.
	for _, want := range []string{
		"| hourglass (--fsync always) | fsync per write | 2,000 | 1.00× | ",
		"| redis (appendfsync always) | fsync per write | 3,000 | 1.50× | ",
		"| 20 ms | 2.00× |",
		"| 0, 1, 2 |",
		"3/3",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("document lacks %q", want)
		}
	}
	if strings.Contains(doc, "## W2") || strings.Contains(doc, "## W3") {
		t.Error("document has a section for a workload that did not run")
	}
	if strings.Contains(doc, "not the issue's 5 to 35 s") {
		t.Error("document says the delays differ from the issue's though they do not")
	}
}

func TestRatioUsesSameDurabilityClass(t *testing.T) {
	all := peers.Systems(peers.Config{})
	hgAlways, hgInterval, redisEverysec := all[0], all[1], all[3]
	gs := []Group{
		{System: hgAlways, Runs: []workload.Result{{ProducePerSec: 100}}},
		{System: hgInterval, Runs: []workload.Result{{ProducePerSec: 400}}},
		{System: redisEverysec, Runs: []workload.Result{{ProducePerSec: 800}}},
	}
	got := ratio(gs, gs[2], func(r workload.Result) float64 { return r.ProducePerSec })
	if got != "2.00×" {
		t.Fatalf("redis everysec ratio %s, want 2.00× (against hourglass interval, not always)", got)
	}
}

func TestPlotsWritePNGs(t *testing.T) {
	systems, rs := fixture()
	dir := t.TempDir()
	for name, f := range map[string]func(string, []peers.System, []workload.Result) error{
		"cdf.png": LatenessCDF, "bars.png": Throughput,
	} {
		path := filepath.Join(dir, name)
		if err := f(path, systems, rs); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, err := os.ReadFile(path)
		if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) < 5000 {
			t.Fatalf("%s: %d bytes, err %v; want a PNG image", name, len(b), err)
		}
	}
	if err := Throughput(filepath.Join(dir, "none.png"), systems, nil); err == nil {
		t.Fatal("Throughput with no results: no error")
	}
}

func msd(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// TestProtocolRows: Hourglass over another protocol is a row of its own,
// named by the protocol, with its ratio to hourglass at the same
// durability class.
func TestProtocolRows(t *testing.T) {
	var systems []peers.System
	for _, s := range peers.Systems(peers.Config{}) {
		if (s.Name == "hourglass" || s.Name == "hourglass-connect") && PerWrite(s) {
			systems = append(systems, s)
		}
	}
	if len(systems) != 2 {
		t.Fatalf("systems %d, want hourglass and hourglass-connect at --fsync always", len(systems))
	}
	var rs []workload.Result
	for i, rate := range []float64{1000, 400} {
		r := workload.Result{Workload: "W1", System: systems[i].Label(), Rep: 1, End: "complete", ProducePerSec: rate}
		r.Sorted = []time.Duration{msd(1)}
		rs = append(rs, r)
	}
	var b bytes.Buffer
	Write(&b, Meta{Reps: 1, Scale: 0.5, Options: workload.Options{Scale: 0.5, W3Scale: 0.5, MinDelay: 5 * time.Second, MaxDelay: 35 * time.Second}}, systems, rs)
	doc := b.String()
	for _, want := range []string{
		"| hourglass-connect (--fsync always) | fsync per write | 400 | 0.40× | ",
		"| hourglass-connect | --fsync always | ",
		"protocol: Connect (binary protobuf, connect-go's default codec) over HTTP/1.1",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("document lacks %q", want)
		}
	}
	if got := ShortName(systems[1]); got != "hourglass-connect always" {
		t.Errorf("ShortName = %q", got)
	}
}

// TestW5TablePerRate: W5 gets a table per rate, each peer's CPU per
// 100,000 messages against Hourglass's at the same rate and durability
// class.
func TestW5TablePerRate(t *testing.T) {
	all := peers.Systems(peers.Config{})
	systems := []peers.System{all[0], all[2]} // hourglass --fsync always, redis appendfsync always
	var rs []workload.Result
	for i, cpu := range [][2]float64{{30, 4}, {6, 3}} { // hourglass, redis; each at 2,000 and 20,000
		for j, rate := range []int{2000, 20000} {
			rs = append(rs, workload.Result{Workload: "W5", System: systems[i].Label(), Rep: 1, End: "complete",
				Rate: rate, CPUSecondsPer100k: cpu[j], FlushesPerSec: float64(100 * (i + 1))})
		}
	}
	// A run cut short has no cost: its CPU is divided by messages it
	// never carried.
	for _, s := range all {
		if s.Name == "beanstalkd" && PerWrite(s) {
			systems = append(systems, s)
			rs = append(rs, workload.Result{Workload: "W5", System: s.Label(), Rep: 1, End: "producing: context deadline exceeded",
				Rate: 20000, CPUSecondsPer100k: 1})
		}
	}
	var b bytes.Buffer
	Write(&b, Meta{Reps: 1, Scale: 1, Options: workload.Options{Scale: 1, W3Scale: 1, MinDelay: 5 * time.Second, MaxDelay: 35 * time.Second, W5Duration: time.Minute}}, systems, rs)
	doc := b.String()
	two, twenty := strings.Index(doc, "**2,000 messages a second**"), strings.Index(doc, "**20,000 messages a second**")
	if two < 0 || twenty < two {
		t.Fatalf("document lacks the 2,000 then 20,000 tables:\n%s", doc)
	}
	for _, want := range []string{
		"## W5 steady load: messages produced at a steady rate for 1m0s",
		"| hourglass (--fsync always) | fsync per write | 30.00 | 1.00× | 100 |",
		"| redis (appendfsync always) | fsync per write | 6.00 | 0.20× | 200 |",
		"| redis (appendfsync always) | fsync per write | 3.00 | 0.75× | 200 |",
		"| beanstalkd (-f 0) | fsync per write | – | – | 0 |",
		"0/1 (producing: context deadline exceeded)",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("document lacks %q", want)
		}
	}
	if strings.Index(doc, "| 6.00 | 0.20×") > twenty || strings.Index(doc, "| 3.00 | 0.75×") < twenty {
		t.Error("a rate's row is in the other rate's table")
	}
}
