package serverbench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/hourglassmq/hourglass/internal/enginebench"
)

// Keys lists the JSON keys every report has: enginebench.Keys (the same
// as `bench engine`), then this package's own.
var Keys = append(append([]string(nil), enginebench.Keys...),
	"addr", "protocol", "topic", "clients", "consumers", "clock_skew_ms", "clock_rtt_ms", "errors",
	"max_calls", "calls", "merged", "due_from", "spread", "expected", "keys")

// WriteJSON writes the report as one line of JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	return json.NewEncoder(w).Encode(r)
}

// WriteTable writes the report as an aligned table, one JSON key a row.
func (r *Report) WriteTable(w io.Writer) error {
	t := enginebench.NewTable()
	row := t.Row
	f3 := func(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
	row("scenario", r.Scenario, "")
	if r.Scenario == Drain {
		row("messages", enginebench.Group(int64(r.Messages)), "in the backlog")
		row("expected", enginebench.Group(r.Expected), "of them due within the window")
	} else {
		row("messages", enginebench.Group(int64(r.Messages)), "asked for")
		row("scheduled", enginebench.Group(int64(r.Scheduled)), fmt.Sprintf("in %.3f s", r.ScheduleSeconds))
		row("schedule_per_sec", enginebench.Group(int64(math.Round(r.SchedulePerSec))), "msg/s")
	}
	if r.Scenario == Get {
		row("rate", enginebench.Group(int64(r.Rate)), "msg/s asked for")
		row("gets", enginebench.Group(r.Gets), "Gets of pending messages, one at a time from 2 goroutines")
		row("get_p50_ms", f3(r.GetP50Ms), "ms, call to answer")
		row("get_p99_ms", f3(r.GetP99Ms), "ms")
		row("get_max_ms", f3(r.GetMaxMs), "ms")
	}
	if r.Scenario == Backlog || r.Scenario == Drain {
		row("due_from", r.DueFrom, fmt.Sprintf("server clock, %.3f s after the start", r.DueFromSeconds))
		row("spread", r.Spread, "the backlog's due times are spread evenly over this")
	}
	if r.Scenario == Lateness || r.Scenario == Drain {
		row("delivered", enginebench.Group(r.Delivered), "distinct messages received")
		row("fire_per_sec", enginebench.Group(int64(math.Round(r.FirePerSec))), "msg/s, first to last receive")
		row("lateness_p50_ms", f3(r.LatenessP50Ms), "ms, client receive (on the server's clock) - deliverAt")
		row("lateness_p99_ms", f3(r.LatenessP99Ms), "ms")
		row("lateness_max_ms", f3(r.LatenessMaxMs), "ms")
		row("lateness_mean_ms", f3(r.LatenessMeanMs), "ms")
		row("early", enginebench.Group(r.Early), "received before deliverAt by more than half the Time round trip (must be 0)")
		lost := "scheduled, not received (must be 0)"
		if r.Scenario == Drain {
			lost = "due within the window, not received (must be 0)"
		}
		row("lost", enginebench.Group(r.Lost), lost)
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
	t.Line("server: %s, topic %s", r.Addr, r.Topic)
	t.Line("load: %s, GOMAXPROCS %d", r.load(), r.GOMAXPROCS)
	if r.Note != "" {
		t.Line("note: %s", r.Note)
	}
	return t.Print(w)
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
	if r.Scenario == Backlog && r.Keys {
		s += ", the index as idempotency key"
	}
	if r.Scenario == Drain {
		s = ""
	}
	if r.Scenario == Lateness || r.Scenario == Drain {
		consume := fmt.Sprintf("long-polling Receive of up to %d, acking with AckBatch", r.Credits)
		if r.Protocol == ProtocolStream {
			consume = fmt.Sprintf("on Consume streams of %d credits", r.Credits)
		}
		s += fmt.Sprintf("; %d consumers %s", r.Consumers, consume)
	}
	return strings.TrimPrefix(s, "; ")
}
