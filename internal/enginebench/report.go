package enginebench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
)

// Report is the outcome of a run. Its JSON keys are part of the command's
// interface (scripts compare runs by them): add keys, never rename one. A
// key that does not apply to the scenario is 0.
type Report struct {
	// The headline keys.
	Scenario            string  `json:"scenario"`
	Messages            int     `json:"messages"`               // messages asked for (--messages)
	SchedulePerSec      float64 `json:"schedule_per_sec"`       // scheduled / seconds to schedule them
	FirePerSec          float64 `json:"fire_per_sec"`           // deliveries / seconds from the first to the last
	LatenessP50Ms       float64 `json:"lateness_p50_ms"`        // sink arrival - deliverAt, median
	LatenessP99Ms       float64 `json:"lateness_p99_ms"`        //
	LatenessMaxMs       float64 `json:"lateness_max_ms"`        //
	Early               int64   `json:"early"`                  // deliveries before their deliverAt
	Lost                int64   `json:"lost"`                   // scheduled, not delivered by the end
	Duplicates          int64   `json:"duplicates"`             // deliveries beyond a message's first
	HeapBytesPerPending float64 `json:"heap_bytes_per_pending"` // far-future, recovery: live heap growth / pending messages
	ReadySeconds        float64 `json:"ready_seconds"`          // recovery: Open to Ready after the restart

	// What lies behind them.
	Scheduled              int     `json:"scheduled"`                // messages accepted (fewer than messages after a timeout)
	Delivered              int64   `json:"delivered"`                // messages delivered at least once
	ScheduleSeconds        float64 `json:"schedule_seconds"`         //
	LatenessMeanMs         float64 `json:"lateness_mean_ms"`         //
	RouteSeconds           float64 `json:"route_seconds"`            // far-future, recovery: from the end of scheduling until all was routed
	DeliveredBeforeRestart int64   `json:"delivered_before_restart"` // recovery: delivered by the first engine
	PendingAtReady         int64   `json:"pending_at_ready"`         // recovery: in the wheel when the restarted engine was ready
	Segments               int     `json:"segments"`                 // schedule segments on disk at the end
	EngineFired            int64   `json:"engine_fired"`             // Stats.Fired: hand-overs to the sink lanes, a re-queued message again (and far-future's routing marker)
	EngineRetries          int64   `json:"engine_retries"`           // Stats.Retries: failed sink calls retried (the bench sink never fails)
	HeapGrowthBytes        int64   `json:"heap_growth_bytes"`        // far-future, recovery: live heap growth
	DueFromSeconds         float64 `json:"due_from_s"`               // first possible due time, after scheduling started
	DueToSeconds           float64 `json:"due_to_s"`                 // last possible due time, after scheduling started
	End                    string  `json:"end"`                      // complete, timeout, interrupted or no-progress
	SinkSeconds            float64 `json:"sink_seconds"`             // time spent inside the sink: if small, the sink is not what limits fire_per_sec
	Anomalies              int64   `json:"anomalies"`                // deliveries of no scheduled message of the run, corrupt entries, unrecorded deliveries

	// The settings.
	BodySize           int     `json:"body_size"`
	Fsync              string  `json:"fsync"`
	SegmentSeconds     float64 `json:"segment_duration_s"`
	PreloadLeadSeconds float64 `json:"preload_lead_s"`
	Producers          int     `json:"producers"`
	Batch              int     `json:"batch"`
	GOMAXPROCS         int     `json:"gomaxprocs"`
	Note               string  `json:"note,omitempty"` // why the run ended early, or what does not apply
}

// Keys lists the JSON keys every report has (note only when there is
// one), the headline ones first.
var Keys = []string{
	"scenario", "messages", "schedule_per_sec", "fire_per_sec",
	"lateness_p50_ms", "lateness_p99_ms", "lateness_max_ms",
	"early", "lost", "duplicates", "heap_bytes_per_pending", "ready_seconds",
	"scheduled", "delivered", "schedule_seconds", "lateness_mean_ms",
	"route_seconds", "delivered_before_restart", "pending_at_ready", "segments", "engine_fired", "engine_retries",
	"heap_growth_bytes", "due_from_s", "due_to_s", "end", "sink_seconds", "anomalies",
	"body_size", "fsync", "segment_duration_s", "preload_lead_s", "producers", "batch", "gomaxprocs",
}

// WriteJSON writes the report as one line of JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	return json.NewEncoder(w).Encode(r)
}

// SetLateness fills the lateness keys from the lateness of every delivery,
// in milliseconds, sorted.
func (r *Report) SetLateness(sorted []float64) {
	if len(sorted) == 0 {
		return
	}
	var sum float64
	for _, v := range sorted {
		sum += v
	}
	r.LatenessP50Ms = round3(percentile(sorted, 0.50))
	r.LatenessP99Ms = round3(percentile(sorted, 0.99))
	r.LatenessMaxMs = round3(sorted[len(sorted)-1])
	r.LatenessMeanMs = round3(sum / float64(len(sorted)))
}

// Table is a report as text: aligned rows of key, value and unit, then
// lines. The server benchmark's report is one too.
type Table struct {
	buf  bytes.Buffer
	rows *tabwriter.Writer
}

// NewTable returns an empty table.
func NewTable() *Table {
	t := &Table{}
	t.rows = tabwriter.NewWriter(&t.buf, 0, 0, 2, ' ', 0)
	return t
}

// Row adds a row; rows come before the lines.
func (t *Table) Row(key, value, unit string) { fmt.Fprintf(t.rows, "%s\t%s\t%s\n", key, value, unit) }

// Line adds a line below the rows.
func (t *Table) Line(format string, args ...any) {
	t.rows.Flush()
	fmt.Fprintf(&t.buf, format+"\n", args...)
}

// Print writes the table to w.
func (t *Table) Print(w io.Writer) error {
	t.rows.Flush()
	// tabwriter pads the last column too: trim it.
	for line := range bytes.Lines(t.buf.Bytes()) {
		if _, err := w.Write(append(bytes.TrimRight(line, " \n"), '\n')); err != nil {
			return err
		}
	}
	return nil
}

// WriteTable writes the report as an aligned table, one JSON key a row,
// then the settings.
func (r *Report) WriteTable(w io.Writer) error {
	t := NewTable()
	row := t.Row
	row("scenario", r.Scenario, "")
	row("messages", Group(int64(r.Messages)), "asked for")
	row("scheduled", Group(int64(r.Scheduled)), fmt.Sprintf("in %.3f s", r.ScheduleSeconds))
	row("delivered", Group(r.Delivered), "distinct messages")
	row("schedule_per_sec", Group(int64(math.Round(r.SchedulePerSec))), "msg/s")
	row("fire_per_sec", Group(int64(math.Round(r.FirePerSec))), "msg/s, first to last delivery")
	row("lateness_p50_ms", ms(r.LatenessP50Ms), "ms after deliverAt")
	row("lateness_p99_ms", ms(r.LatenessP99Ms), "ms")
	row("lateness_max_ms", ms(r.LatenessMaxMs), "ms")
	row("lateness_mean_ms", ms(r.LatenessMeanMs), "ms")
	row("early", Group(r.Early), "deliveries before deliverAt (must be 0)")
	row("lost", Group(r.Lost), "scheduled, not delivered (must be 0)")
	row("duplicates", Group(r.Duplicates), "deliveries beyond a message's first (must be 0)")
	row("heap_bytes_per_pending", strconv.FormatFloat(r.HeapBytesPerPending, 'f', 1, 64), fmt.Sprintf("bytes (growth %s bytes)", Group(r.HeapGrowthBytes)))
	row("ready_seconds", strconv.FormatFloat(r.ReadySeconds, 'f', 3, 64), "s from Open to Ready")
	if r.Scenario == FarFuture || r.Scenario == Recovery {
		row("route_seconds", strconv.FormatFloat(r.RouteSeconds, 'f', 3, 64), "s from the end of scheduling until all was routed")
	}
	if r.Scenario == Recovery {
		row("delivered_before_restart", Group(r.DeliveredBeforeRestart), "delivered by the first engine (0 expected)")
		row("pending_at_ready", Group(r.PendingAtReady), "in the wheel when the restarted engine was ready")
	}
	row("due", fmt.Sprintf("%.3f to %.3f", r.DueFromSeconds, r.DueToSeconds), "s after scheduling started")
	row("segments", Group(int64(r.Segments)), "schedule segments on disk at the end")
	row("engine_fired", Group(r.EngineFired), "hand-overs to the sink lanes (above delivered when a full lane sent messages back to the wheel)")
	row("sink_seconds", strconv.FormatFloat(r.SinkSeconds, 'f', 3, 64), "s spent inside the counting sink")
	row("end", r.End, "")
	if r.Anomalies != 0 {
		row("anomalies", Group(r.Anomalies), "foreign or corrupt deliveries, unrecorded done-records (must be 0)")
	}
	t.Line("engine: fsync %s, segments %gs, preload lead %gs", r.Fsync, r.SegmentSeconds, r.PreloadLeadSeconds)
	t.Line("load: %d producers x %d messages per call, %d-byte bodies, GOMAXPROCS %d", r.Producers, r.Batch, r.BodySize, r.GOMAXPROCS)
	if r.Note != "" {
		t.Line("note: %s", r.Note)
	}
	return t.Print(w)
}

func ms(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }

// Group writes n with thousands separators: 1,000,000. The server
// benchmark's table uses it too.
func Group(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

// round1 rounds to one decimal, enough for rates and bytes.
func round1(v float64) float64 { return math.Round(v*10) / 10 }

// round3 rounds to 3 decimals, enough for milliseconds and seconds.
func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
