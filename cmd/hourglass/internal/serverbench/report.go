package serverbench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"

	"github.com/hourglassmq/hourglass/cmd/hourglass/internal/enginebench"
)

// Keys lists the JSON keys every report has: enginebench.Keys (the same
// as `bench engine`), then this package's own.
var Keys = append(append([]string(nil), enginebench.Keys...),
	"addr", "protocol", "topic", "clients", "consumers", "clock_skew_ms", "clock_rtt_ms", "errors",
	"max_calls", "calls", "merged")

// WriteJSON writes the report as one line of JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteTable writes the report as an aligned table, one JSON key a row.
func (r *Report) WriteTable(w io.Writer) error {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	row := func(key, value, unit string) { fmt.Fprintf(tw, "%s\t%s\t%s\n", key, value, unit) }
	f3 := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	row("scenario", r.Scenario, "")
	row("messages", enginebench.Group(int64(r.Messages)), "asked for")
	row("scheduled", enginebench.Group(int64(r.Scheduled)), fmt.Sprintf("in %.3f s", r.ScheduleSeconds))
	row("schedule_per_sec", enginebench.Group(int64(math.Round(r.SchedulePerSec))), "msg/s")
	if r.Scenario == Lateness {
		row("delivered", enginebench.Group(r.Delivered), "distinct messages received")
		row("fire_per_sec", enginebench.Group(int64(math.Round(r.FirePerSec))), "msg/s, first to last receive")
		row("lateness_p50_ms", f3(r.LatenessP50Ms), "ms, client receive (on the server's clock) - deliverAt")
		row("lateness_p99_ms", f3(r.LatenessP99Ms), "ms")
		row("lateness_max_ms", f3(r.LatenessMaxMs), "ms")
		row("lateness_mean_ms", f3(r.LatenessMeanMs), "ms")
		row("early", enginebench.Group(r.Early), "received before deliverAt (must be 0)")
		row("lost", enginebench.Group(r.Lost), "scheduled, not received (must be 0)")
		row("duplicates", enginebench.Group(r.Duplicates), "received more than once (must be 0)")
		row("due", fmt.Sprintf("%.3f to %.3f", r.DueFromSeconds, r.DueToSeconds), "s after the start")
		if r.Anomalies != 0 {
			row("anomalies", enginebench.Group(r.Anomalies), "deliveries of no message of this run (must be 0)")
		}
	}
	row("protocol", r.Protocol, "")
	if r.Calls > 0 {
		unit := "requests the messages went in"
		if r.MaxCalls > 0 {
			unit = fmt.Sprintf("calls the Go client sent (--max-calls %d), %s messages in merged ScheduleBatch calls", r.MaxCalls, enginebench.Group(r.Merged))
		}
		row("calls", enginebench.Group(r.Calls), unit)
	}
	row("clock_skew_ms", f3(r.ClockSkewMs), fmt.Sprintf("server - client (Time round trip %.3f ms)", r.ClockRTTMs))
	row("errors", enginebench.Group(r.Errors), "failed calls")
	row("end", r.End, "")
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(&buf, "server: %s, topic %s\n", r.Addr, r.Topic)
	fmt.Fprintf(&buf, "load: %s, GOMAXPROCS %d\n", r.load(), r.GOMAXPROCS)
	if r.Note != "" {
		fmt.Fprintf(&buf, "note: %s\n", r.Note)
	}
	for line := range bytes.Lines(buf.Bytes()) {
		if _, err := w.Write(append(bytes.TrimRight(line, " \n"), '\n')); err != nil {
			return err
		}
	}
	return nil
}

// load says how the run talked to the server, for the table's last lines.
func (r *Report) load() string {
	var how string
	switch {
	case r.Protocol == ProtocolConnect:
		how = "Connect over HTTP/1.1, a connection per call in flight"
	case r.Protocol == ProtocolStream:
		how = "one ScheduleStream per server, a request in flight per client"
	case r.MaxCalls > 0:
		how = fmt.Sprintf("the Go client with WithMaxCalls(%d), one HTTP/2 connection per server", r.MaxCalls)
	default:
		how = "unary gRPC calls on one HTTP/2 connection per server"
	}
	per := fmt.Sprintf("%d messages per request", r.Batch)
	if r.Batch == 1 {
		per = "1 message per request"
	}
	s := fmt.Sprintf("%d clients x %s (%s), %d-byte bodies", r.Clients, per, how, r.BodySize)
	if r.Scenario == Lateness {
		consume := "long-polling Receive, acking with AckBatch"
		if r.Protocol == ProtocolStream {
			consume = fmt.Sprintf("on Consume streams of %d credits", receiveBatch)
		}
		s += fmt.Sprintf("; %d consumers %s", r.Consumers, consume)
	}
	return s
}
