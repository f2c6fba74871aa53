package main

import (
	"encoding/json"
	"fmt"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hourglassmq/hourglass/client"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

func statsCommand() *cli.Command {
	return &cli.Command{
		Name:      "stats",
		Usage:     "print what a server holds: pending messages by hour ahead, totals, lateness",
		UsageText: "hourglass stats [--addr URL] [--json]",
		Description: `Prints the server's Stats: the messages pending in its delivery buckets, by the
time they are due, the engine's and each topic's totals since the server
started, and the lateness percentiles of recent deliveries. The pending
messages are counted per hour (UTC) for the next 24 hours, then per day for
30 days, then per month for two years, then per year: a row for each with
messages, named by its hour (2030-01-02 09:00), day (2030-01-02), month
(2030-01) or year (2030). "~" marks counts of buckets not in memory, which include cancelled
entries.

With --json it prints the same as one JSON object on one line instead. Its
field names are stable (new ones may be added); times are RFC 3339 UTC with
nanoseconds, counts whole numbers:

  server_time
  pending          {hours: [{from_hour, to_hour, messages, approximate}], total}
                   one row per hour ahead of server_time with messages
                   (not grouped as in the table); approximate is the "~" (a
                   bucket not in memory)
  engine           {scheduled, cancelled, fired, delivered, retries, inflight,
                   segments, reput_lag_bytes}
  topics           [{topic, scheduled, delivered, acked, nacked, redelivered,
                   expired, dead_lettered, ready, leased}]   (empty in cluster
                   mode, which has no built-in queue)
  lateness         {p50_ms, p90_ms, p99_ms, max_ms, count}   (count 0 before
                   the first delivery)
` + exitCodes,
		Flags:        clientFlags(&cli.BoolFlag{Name: "json", Usage: "print one JSON object (fields in --help) instead of the table"}),
		OnUsageError: usageError,
		Action:       runStats,
	}
}

// statsJSON is what `hourglass stats --json` prints; its field names are
// part of the command line's interface and must not change.
type statsJSON struct {
	ServerTime string        `json:"server_time"`
	Pending    pendingJSON   `json:"pending"`
	Engine     *engineJSON   `json:"engine,omitempty"`
	Topics     []topicJSON   `json:"topics"`
	Lateness   *latenessJSON `json:"lateness,omitempty"`
}

type pendingJSON struct {
	Hours []hourJSON `json:"hours"`
	Total int64      `json:"total"`
}

type hourJSON struct {
	FromHour    int64 `json:"from_hour"`
	ToHour      int64 `json:"to_hour"`
	Messages    int64 `json:"messages"`
	Approximate bool  `json:"approximate"`
}

type engineJSON struct {
	Scheduled     int64 `json:"scheduled"`
	Cancelled     int64 `json:"cancelled"`
	Fired         int64 `json:"fired"`
	Delivered     int64 `json:"delivered"`
	Retries       int64 `json:"retries"`
	Inflight      int64 `json:"inflight"`
	Segments      int32 `json:"segments"`
	ReputLagBytes int64 `json:"reput_lag_bytes"`
}

type topicJSON struct {
	Topic        string `json:"topic"`
	Scheduled    int64  `json:"scheduled"`
	Delivered    int64  `json:"delivered"`
	Acked        int64  `json:"acked"`
	Nacked       int64  `json:"nacked"`
	Redelivered  int64  `json:"redelivered"`
	Expired      int64  `json:"expired"`
	DeadLettered int64  `json:"dead_lettered"`
	Ready        int64  `json:"ready"`
	Leased       int64  `json:"leased"`
}

type latenessJSON struct {
	P50Ms float64 `json:"p50_ms"`
	P90Ms float64 `json:"p90_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
	Count int64   `json:"count"`
}

// newStatsJSON sums the server's buckets into whole hours ahead of its
// clock, the rows of the table and of --json alike.
func newStatsJSON(st *hourglassv1.StatsResponse) statsJSON {
	now := st.ServerTime.AsTime()
	out := statsJSON{ServerTime: now.UTC().Format(rfc3339Nano), Pending: pendingJSON{Hours: []hourJSON{}}, Topics: []topicJSON{}}
	hours := map[int64]*hourJSON{}
	for _, b := range st.Pending {
		h := int64(0)
		if d := b.Start.AsTime().Sub(now); d > 0 {
			h = int64(d / time.Hour)
		}
		if hours[h] == nil {
			hours[h] = &hourJSON{FromHour: h, ToHour: h + 1}
		}
		hours[h].Messages += b.Pending
		hours[h].Approximate = hours[h].Approximate || b.Approximate
		out.Pending.Total += b.Pending
	}
	for _, h := range hours {
		out.Pending.Hours = append(out.Pending.Hours, *h)
	}
	sort.Slice(out.Pending.Hours, func(i, j int) bool { return out.Pending.Hours[i].FromHour < out.Pending.Hours[j].FromHour })
	if e := st.Engine; e != nil {
		out.Engine = &engineJSON{Scheduled: e.Scheduled, Cancelled: e.Cancelled, Fired: e.Fired, Delivered: e.Delivered,
			Retries: e.Retries, Inflight: e.Inflight, Segments: e.Segments, ReputLagBytes: e.ReputLagBytes}
	}
	for _, t := range st.Topics {
		out.Topics = append(out.Topics, topicJSON{Topic: t.Topic, Scheduled: t.Scheduled, Delivered: t.Delivered, Acked: t.Acked,
			Nacked: t.Nacked, Redelivered: t.Redelivered, Expired: t.Expired, DeadLettered: t.DeadLettered, Ready: t.Ready, Leased: t.Leased})
	}
	if l := st.Lateness; l != nil {
		out.Lateness = &latenessJSON{P50Ms: l.P50Ms, P90Ms: l.P90Ms, P99Ms: l.P99Ms, MaxMs: l.MaxMs, Count: l.Count}
	}
	return out
}

func runStats(c *cli.Context) error {
	if c.NArg() > 0 {
		return commandError(c, "takes no arguments, got %q", c.Args().Slice())
	}
	st, err := call(c, "", (*client.Client).Stats)
	if err != nil {
		return err
	}
	v := newStatsJSON(st)
	if c.Bool("json") {
		return json.NewEncoder(c.App.Writer).Encode(v)
	}
	w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "server time\t%s\n\n", v.ServerTime)
	fmt.Fprintln(w, "pending\tdue in (UTC)\tmessages")
	for _, r := range pendingRows(st) {
		approx := ""
		if r.approximate {
			approx = "~"
		}
		fmt.Fprintf(w, "\t%s\t%s%d\n", r.label, approx, r.messages)
	}
	fmt.Fprintf(w, "\ttotal\t%d\n\n", v.Pending.Total)
	if e := v.Engine; e != nil {
		fmt.Fprintln(w, "engine\tscheduled\tcancelled\tfired\tdelivered\tretries\tinflight\tsegments\treput lag")
		fmt.Fprintf(w, "\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%dB\n\n", e.Scheduled, e.Cancelled, e.Fired, e.Delivered, e.Retries, e.Inflight, e.Segments, e.ReputLagBytes)
	}
	if len(v.Topics) > 0 {
		fmt.Fprintln(w, "topic\tscheduled\tdelivered\tacked\tnacked\tredelivered\texpired\tdead-lettered\tready\tleased")
		for _, t := range v.Topics {
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", t.Topic, t.Scheduled, t.Delivered, t.Acked, t.Nacked, t.Redelivered, t.Expired, t.DeadLettered, t.Ready, t.Leased)
		}
		fmt.Fprintln(w)
	}
	if l := v.Lateness; l != nil {
		fmt.Fprintf(w, "lateness\tp50 %.3fms\tp90 %.3fms\tp99 %.3fms\tmax %.3fms\t(last %d deliveries)\n", l.P50Ms, l.P90Ms, l.P99Ms, l.MaxMs, l.Count)
	}
	return w.Flush()
}

// pendingRow is a row of stats' pending table: the buckets due in one
// hour, day, month or year.
type pendingRow struct {
	label       string // the hour, day, month or year: "2030-01-02 09:00", "2030-01-02", "2030-01", "2030"
	messages    int64
	approximate bool
}

// pendingRows groups the server's buckets into the rows of the table: by
// the UTC hour their start falls in while that is less than 24 hours after
// the server's clock (the first row also holds the buckets already
// started), then by day until 30 days after the day of the clock, by month
// until 24 months after its month, and by year; a row per group with
// messages, in time order.
func pendingRows(st *hourglassv1.StatsResponse) []pendingRow {
	now := st.ServerTime.AsTime().UTC()
	today := now.Truncate(24 * time.Hour)
	thisMonth := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	type group struct {
		pendingRow
		first time.Time // of its buckets: rows sort by it (a day row's starts after the hour rows of that day)
	}
	groups := map[string]*group{}
	for _, b := range st.Pending {
		if b.Pending == 0 {
			continue
		}
		t := b.Start.AsTime().UTC()
		if t.Before(now) {
			t = now // started already: in the first row
		}
		var k string
		switch {
		case t.Before(now.Add(24 * time.Hour)):
			h := t.Truncate(time.Hour)
			k = h.Format("2006-01-02 15:04")
		case t.Before(today.AddDate(0, 0, 30)):
			d := t.Truncate(24 * time.Hour)
			k = d.Format("2006-01-02")
		case t.Before(thisMonth.AddDate(0, 24, 0)):
			m := time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
			k = m.Format("2006-01")
		default:
			y := time.Date(t.Year(), 1, 1, 0, 0, 0, 0, time.UTC)
			k = y.Format("2006")
		}
		g := groups[k]
		if g == nil {
			g = &group{pendingRow: pendingRow{label: k}, first: t}
			groups[k] = g
		}
		g.messages += b.Pending
		g.approximate = g.approximate || b.Approximate
		if t.Before(g.first) {
			g.first = t
		}
	}
	sorted := make([]*group, 0, len(groups))
	for _, g := range groups {
		sorted = append(sorted, g)
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].first.Before(sorted[j].first) })
	rows := make([]pendingRow, len(sorted))
	for i, g := range sorted {
		rows[i] = g.pendingRow
	}
	return rows
}
