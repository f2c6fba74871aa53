package report

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/hourglassmq/hourglass/bench/internal/measure"
	"github.com/hourglassmq/hourglass/bench/internal/peers"
	"github.com/hourglassmq/hourglass/bench/internal/workload"
)

// ShortName labels a system in a plot.
func ShortName(s peers.System) string {
	v := s.Variant
	for _, cut := range []string{"appendfsync ", "--fsync ", "sync_interval ", "synchronous_commit "} {
		v = strings.TrimPrefix(v, cut)
	}
	v = strings.TrimSuffix(strings.TrimSuffix(v, " (default)"), " (2 min)")
	name := s.Name
	if n, ok := map[string]string{"postgresql": "pg"}[s.Name]; ok {
		name = n
	}
	return name + " " + v
}

// LatenessCDF plots each system's W1 lateness (every first delivery of
// every repetition) as a CDF with a log time axis, into file. Runs read
// back from their JSON have only their quantiles; those are pooled instead,
// which weighs the repetitions alike.
func LatenessCDF(file string, systems []peers.System, results []workload.Result) error {
	p := plot.New()
	p.Title.Text = "W1 lateness, CDF per system (all repetitions; solid: fsync per write, dashed: periodic fsync)"
	p.X.Label.Text = "lateness (ms, log scale; values below 0.1 ms drawn at 0.1)"
	p.Y.Label.Text = "fraction delivered"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	drawn := 0
	for _, g := range Groups(systems, results)["W1"] {
		var all []time.Duration
		for _, r := range g.Runs {
			if r.Sorted != nil {
				all = append(all, r.Sorted...)
			} else { // read back from JSON: the run's quantiles stand for it
				all = append(all, r.Quantiles...)
			}
		}
		if len(all) == 0 {
			continue
		}
		slices.Sort(all)
		const points = 400
		xys := make(plotter.XYs, 0, points+1)
		for k := 0; k <= points; k++ {
			q := float64(k) / points
			v := ms(measure.Percentile(all, math.Max(q*100, 1e-9)))
			xys = append(xys, plotter.XY{X: math.Max(v, 0.1), Y: q})
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Color = systemColor(g.System.Name)
		if !PerWrite(g.System) {
			l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(ShortName(g.System), l)
		drawn++
	}
	if drawn == 0 {
		return fmt.Errorf("report: no W1 lateness to plot")
	}
	return p.Save(9*vg.Inch, 5.5*vg.Inch, file)
}

// systemColor gives each system one color in every plot.
func systemColor(name string) color.Color {
	switch name {
	case "hourglass":
		return color.RGBA{R: 200, G: 30, B: 30, A: 255}
	// Hourglass over its other protocols: other reds.
	case "hourglass-unary":
		return color.RGBA{R: 240, G: 110, B: 110, A: 255}
	case "hourglass-stream":
		return color.RGBA{R: 120, G: 10, B: 10, A: 255}
	case "hourglass-connect":
		return color.RGBA{R: 220, G: 40, B: 140, A: 255}
	case "redis":
		return color.RGBA{R: 40, G: 90, B: 200, A: 255}
	case "postgresql":
		return color.RGBA{R: 40, G: 150, B: 60, A: 255}
	case "beanstalkd":
		return color.RGBA{R: 150, G: 80, B: 170, A: 255}
	case "pebble":
		return color.RGBA{R: 20, G: 150, B: 160, A: 255}
	default: // nats
		return color.RGBA{R: 230, G: 140, B: 20, A: 255}
	}
}

// Throughput draws bars of the median W1 produce rate (delays of seconds)
// and W3 produce rate (1 to 30 days ahead) per system, into file.
func Throughput(file string, systems []peers.System, results []workload.Result) error {
	gs := Groups(systems, results)
	var names []string
	var w1, w2 plotter.Values
	for _, s := range systems {
		var g1, g2 *Group
		for i := range gs["W1"] {
			if gs["W1"][i].System.Label() == s.Label() {
				g1 = &gs["W1"][i]
			}
		}
		for i := range gs["W3"] {
			if gs["W3"][i].System.Label() == s.Label() {
				g2 = &gs["W3"][i]
			}
		}
		if g1 == nil && g2 == nil {
			continue
		}
		names = append(names, ShortName(s))
		v1, v2 := 0.0, 0.0
		if g1 != nil {
			v1 = g1.median(producePerSec)
		}
		if g2 != nil {
			v2 = g2.median(producePerSec)
		}
		w1, w2 = append(w1, v1), append(w2, v2)
	}
	if len(names) == 0 {
		return fmt.Errorf("report: no W1 or W3 results to plot")
	}
	p := plot.New()
	p.Title.Text = "Produce rate per system, acknowledged messages per second (median of the repetitions)"
	p.Y.Label.Text = "messages per second"
	p.Add(plotter.NewGrid())
	width := vg.Points(14)
	b1, err := plotter.NewBarChart(w1, width)
	if err != nil {
		return err
	}
	b1.Color = color.RGBA{R: 60, G: 110, B: 200, A: 255}
	b1.Offset = -width / 2
	b2, err := plotter.NewBarChart(w2, width)
	if err != nil {
		return err
	}
	b2.Color = color.RGBA{R: 230, G: 140, B: 40, A: 255}
	b2.Offset = width / 2
	p.Add(b1, b2)
	p.Legend.Add("W1: due in seconds", b1)
	p.Legend.Add("W3: due in 1 to 30 days", b2)
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(10)
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = math.Pi / 6
	p.X.Tick.Label.XAlign = -0.9
	p.X.Tick.Label.YAlign = -0.5
	return p.Save(10*vg.Inch, 5.5*vg.Inch, file)
}
