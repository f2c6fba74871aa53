package inspect

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

// Output says how results are written: aligned text for people, or one
// JSON object per line for programs (jq).
type Output struct {
	W    io.Writer
	JSON bool
	Now  time.Time
}

func (out Output) json(v any) error {
	enc := json.NewEncoder(out.W)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func rfc(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func num(n int) string { return strconv.Itoa(n) }

// segmentJSON is a line of `inspect segments --json`.
type segmentJSON struct {
	Kind         string `json:"kind"` // "segment"
	Start        string `json:"start"`
	End          string `json:"end"`
	File         string `json:"file"`
	Size         int64  `json:"size"`
	DoneSize     int64  `json:"done_size"`
	Entries      int    `json:"entries"`
	Done         *int   `json:"done"` // null when the dispatch log is unreadable
	Delivered    int    `json:"delivered"`
	Cancelled    int    `json:"cancelled"`
	DeadLettered int    `json:"dead_lettered"`
	Pending      *int   `json:"pending"` // null when the dispatch log is unreadable
	State        State  `json:"state"`
	TornAt       int64  `json:"torn_at,omitempty"`
	Error        string `json:"error,omitempty"`
}

type totalJSON struct {
	Kind         string        `json:"kind"` // "total"
	Segments     int           `json:"segments"`
	Size         int64         `json:"size"`
	Entries      int           `json:"entries"`
	Done         int           `json:"done"`
	Delivered    int           `json:"delivered"`
	Cancelled    int           `json:"cancelled"`
	DeadLettered int           `json:"dead_lettered"`
	Pending      int           `json:"pending"`
	States       map[State]int `json:"states"`
}

// states lists the states in the order the rule decides them.
var states = []State{Damaged, Empty, Done, Overdue, Loaded, Future}

// WriteSegments writes the result of Segments.
func (out Output) WriteSegments(o Options, segs []Segment, tot Totals) error {
	if out.JSON {
		for _, s := range segs {
			j := segmentJSON{Kind: "segment", Start: rfc(s.Start), End: rfc(s.End()), File: s.Name, Size: s.Size, DoneSize: s.DoneSize,
				Entries: s.Entries, Delivered: s.Delivered, Cancelled: s.Cancelled, DeadLettered: s.DeadLettered,
				State: s.State, TornAt: s.TornAt}
			if !s.DoneUnknown {
				j.Done, j.Pending = &s.Done, &s.Pending
			}
			if s.Err != nil {
				j.Error = o.relErr(s.Err)
			}
			if err := out.json(j); err != nil {
				return err
			}
		}
		return out.json(totalJSON{Kind: "total", Segments: tot.Segments, Size: tot.Size, Entries: tot.Entries, Done: tot.Done,
			Delivered: tot.Delivered, Cancelled: tot.Cancelled, DeadLettered: tot.DeadLettered, Pending: tot.Pending,
			States: orEmpty(tot.ByState)})
	}
	if len(segs) == 0 {
		_, err := fmt.Fprintf(out.W, "no schedule segments in %s\n", ScheduleDir)
		return err
	}
	t := newTable("BUCKET START (UTC)", "LENGTH", "FILE", ">SIZE", ">ENTRIES", ">DONE", ">DELIVERED", ">CANCELLED", ">DEAD", ">PENDING", "STATE", "STARTS")
	var notes []string
	for _, s := range segs {
		done, pending := num(s.Done), num(s.Pending)
		if s.DoneUnknown {
			done, pending = "?", "?"
		}
		state := string(s.State)
		if s.TornAt > 0 {
			state += "*"
			notes = append(notes, fmt.Sprintf("* %s: incomplete record at offset %d (a write in progress, or a torn tail the server cuts when it opens the segment)", s.Name, s.TornAt))
		}
		if s.Err != nil {
			notes = append(notes, fmt.Sprintf("%s: %s", s.Name, o.relErr(s.Err)))
		}
		t.add(s.Start.Format("2006-01-02 15:04:05"), formatSpan(s.Duration), s.Name, FormatSize(s.Size+s.DoneSize), num(s.Entries), done,
			num(s.Delivered), num(s.Cancelled), num(s.DeadLettered), pending, state, FormatAgo(s.Start, out.Now))
	}
	t.add("total", "", fmt.Sprintf("%d segments", tot.Segments), FormatSize(tot.Size), num(tot.Entries), num(tot.Done),
		num(tot.Delivered), num(tot.Cancelled), num(tot.DeadLettered), num(tot.Pending), "", "")
	if err := t.write(out.W); err != nil {
		return err
	}
	var parts []string
	for _, st := range states {
		if n := tot.ByState[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, st))
		}
	}
	notes = append(notes, fmt.Sprintf("states at %s UTC: %s", out.Now.UTC().Format(timeLayout), strings.Join(parts, ", ")))
	for _, n := range notes {
		if _, err := fmt.Fprintln(out.W, n); err != nil {
			return err
		}
	}
	return nil
}

func orEmpty(m map[State]int) map[State]int {
	if m == nil {
		return map[State]int{}
	}
	return m
}

type headerJSON struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// entryJSON is a line of `inspect dump --json`.
type entryJSON struct {
	ID         string       `json:"id"`
	Offset     int64        `json:"offset"`
	Topic      string       `json:"topic"`
	DeliverAt  string       `json:"deliver_at"`
	Attempt    uint32       `json:"attempt"`
	State      string       `json:"state"`
	Headers    []headerJSON `json:"headers,omitempty"`
	Origin     string       `json:"origin,omitempty"`
	Body       *string      `json:"body,omitempty"`
	BodyBase64 *string      `json:"body_base64,omitempty"`
	BodyBytes  int          `json:"body_bytes"`
	Truncated  bool         `json:"truncated,omitempty"`
}

// DumpWriter writes the entries of `inspect dump` as they come.
type DumpWriter struct {
	out  Output
	full bool
	t    *table
}

// NewDumpWriter starts a dump; full shows whole bodies.
func (out Output) NewDumpWriter(full bool) *DumpWriter {
	d := &DumpWriter{out: out, full: full}
	if !out.JSON {
		d.t = newTable("ID", ">OFFSET", "TOPIC", "DELIVER AT (UTC)", ">ATTEMPT", "STATE", "BODY")
	}
	return d
}

// Entry writes one entry.
func (d *DumpWriter) Entry(e *Entry) error {
	b := FormatBody(e.Body, d.full)
	if d.out.JSON {
		j := entryJSON{ID: e.ID.String(), Offset: e.Offset, Topic: e.Topic, DeliverAt: rfc(e.DeliverAt), Attempt: e.Attempt,
			State: e.State, BodyBytes: b.Size, Truncated: b.Truncated}
		for _, h := range e.Headers {
			j.Headers = append(j.Headers, headerJSON{Key: string(h.Key), Value: string(h.Value)})
		}
		if !e.Origin.IsZero() {
			j.Origin = e.Origin.String()
		}
		if b.Base64 != "" || b.Text == "" && b.Size > 0 {
			j.BodyBase64 = &b.Base64
		} else {
			j.Body = &b.Text
		}
		return d.out.json(j)
	}
	d.t.add(e.ID.String(), strconv.FormatInt(e.Offset, 10), e.Topic, fmtTime(e.DeliverAt), strconv.FormatUint(uint64(e.Attempt), 10), e.State, b.cell())
	return nil
}

// Close writes the table (text) with a summary of the segment.
func (d *DumpWriter) Close(o Options, seg Segment, shown int) error {
	if d.out.JSON {
		return nil
	}
	w := d.out.W
	fmt.Fprintf(w, "%s: bucket %s UTC + %s, %d entries, %s; %s\n", seg.Name, seg.Start.Format("2006-01-02 15:04:05"),
		formatSpan(seg.Duration), seg.Entries, doneSummary(seg), seg.State)
	if shown == 0 {
		fmt.Fprintln(w, "no entries match")
	} else if err := d.t.write(w); err != nil {
		return err
	}
	if seg.TornAt > 0 {
		fmt.Fprintf(w, "incomplete record at offset %d: a write in progress, or a torn tail the server cuts when it opens the segment\n", seg.TornAt)
	}
	if seg.Err != nil {
		_, err := fmt.Fprintf(w, "damaged: %s\n", o.relErr(seg.Err))
		return err
	}
	return nil
}

func doneSummary(s Segment) string {
	if s.DoneUnknown {
		return "done and pending unknown (dispatch log damaged)"
	}
	return fmt.Sprintf("%d done (%d delivered, %d cancelled, %d dead-lettered), %d pending", s.Done, s.Delivered, s.Cancelled, s.DeadLettered, s.Pending)
}

type clSegmentJSON struct {
	Kind     string `json:"kind"` // "segment"
	File     string `json:"file"`
	Base     int64  `json:"base"`
	Size     int64  `json:"size"`
	Capacity int64  `json:"capacity"`
	Records  int    `json:"records"`
	Used     int64  `json:"used"`
	Role     string `json:"role"`
}

type clSummaryJSON struct {
	Kind          string `json:"kind"` // "summary"
	First         int64  `json:"first"`
	End           int64  `json:"end"`
	Records       int    `json:"records"`
	Checkpoint    *int64 `json:"reput_checkpoint"` // null when there is none
	Unrouted      int64  `json:"unrouted_bytes"`
	CheckpointErr string `json:"checkpoint_error,omitempty"`
	Error         string `json:"error,omitempty"`
}

// WriteCommitlog writes the result of ReadCommitlog.
func (out Output) WriteCommitlog(o Options, c Commitlog) error {
	unrouted := c.End - c.First
	if c.HasCheckpoint {
		unrouted = max(0, c.End-c.Checkpoint)
	}
	if out.JSON {
		for _, s := range c.Segments {
			if err := out.json(clSegmentJSON{Kind: "segment", File: s.Name, Base: s.Base, Size: s.Size, Capacity: s.Capacity(),
				Records: s.Records, Used: s.Used, Role: s.Role}); err != nil {
				return err
			}
		}
		j := clSummaryJSON{Kind: "summary", First: c.First, End: c.End, Records: c.Records, Unrouted: unrouted}
		if c.HasCheckpoint {
			j.Checkpoint = &c.Checkpoint
		}
		if c.CheckpointErr != nil {
			j.CheckpointErr = o.relErr(c.CheckpointErr)
		}
		if c.Err != nil {
			j.Error = o.relErr(c.Err)
		}
		return out.json(j)
	}
	w := out.W
	if len(c.Segments) == 0 {
		_, err := fmt.Fprintf(w, "no commitlog segments in %s\n", CommitlogDir)
		return err
	}
	t := newTable("FILE", ">BASE OFFSET", ">SIZE", ">RECORDS", ">USED", "ROLE")
	for _, s := range c.Segments {
		t.add(s.Name, strconv.FormatInt(s.Base, 10), FormatSize(s.Size), num(s.Records), FormatSize(s.Used), s.Role)
	}
	if err := t.write(w); err != nil {
		return err
	}
	fmt.Fprintf(w, "records: %d, offsets [%d, %d)\n", c.Records, c.First, c.End)
	switch {
	case c.CheckpointErr != nil:
		fmt.Fprintf(w, "reput checkpoint: damaged (%s); the next start routes from offset %d\n", o.relErr(c.CheckpointErr), c.First)
	case c.HasCheckpoint:
		fmt.Fprintf(w, "reput checkpoint: offset %d; %s after it not yet routed durably (routing replays it after a restart)\n", c.Checkpoint, FormatSize(unrouted))
	default:
		fmt.Fprintf(w, "reput checkpoint: none; the next start routes from offset %d\n", c.First)
	}
	if c.Err != nil {
		_, err := fmt.Fprintf(w, "stopped reading: %s\n", o.relErr(c.Err))
		return err
	}
	return nil
}

type clRecordJSON struct {
	Offset     int64   `json:"offset"`
	Type       string  `json:"type"`
	Size       int     `json:"size"`
	Routed     bool    `json:"routed"`
	ID         string  `json:"id,omitempty"`
	Topic      string  `json:"topic,omitempty"`
	DeliverAt  string  `json:"deliver_at,omitempty"`
	Attempt    uint32  `json:"attempt,omitempty"`
	Body       *string `json:"body,omitempty"`
	BodyBase64 *string `json:"body_base64,omitempty"`
	BodyBytes  *int    `json:"body_bytes,omitempty"`
	Truncated  bool    `json:"truncated,omitempty"`
	Target     string  `json:"target,omitempty"`
	Error      string  `json:"error,omitempty"`
}

// RecordWriter writes commitlog records for `inspect commitlog --dump`.
type RecordWriter struct {
	out  Output
	full bool
	t    *table
	n    int
}

// NewRecordWriter starts a commitlog dump; full shows whole bodies.
func (out Output) NewRecordWriter(full bool) *RecordWriter {
	r := &RecordWriter{out: out, full: full}
	if !out.JSON {
		r.t = newTable(">OFFSET", "TYPE", ">SIZE", "ROUTED", "ID", "TOPIC", "DELIVER AT (UTC)", ">ATTEMPT", "BODY")
	}
	return r
}

// Record writes one record.
func (r *RecordWriter) Record(c *ClRecord) error {
	r.n++
	if r.out.JSON {
		j := clRecordJSON{Offset: c.Offset, Type: TypeName(c.Type), Size: c.Size, Routed: c.Routed}
		switch {
		case c.Err != nil:
			j.Error = c.Err.Error()
		case c.Type == message.TypeSchedule:
			b := FormatBody(c.Body, r.full)
			j.ID, j.Topic, j.DeliverAt, j.Attempt = c.ID.String(), c.Topic, rfc(c.DeliverAt), c.Attempt
			j.BodyBytes, j.Truncated = &b.Size, b.Truncated
			if b.Base64 != "" || b.Text == "" && b.Size > 0 {
				j.BodyBase64 = &b.Base64
			} else {
				j.Body = &b.Text
			}
		case c.Type == message.TypeCancel:
			j.Target = c.Target.String()
		}
		return r.out.json(j)
	}
	routed := "no"
	if c.Routed {
		routed = "yes"
	}
	switch {
	case c.Err != nil:
		r.t.add(strconv.FormatInt(c.Offset, 10), TypeName(c.Type), num(c.Size), routed, "", "", "", "", "undecodable: "+c.Err.Error())
	case c.Type == message.TypeSchedule:
		r.t.add(strconv.FormatInt(c.Offset, 10), "schedule", num(c.Size), routed, c.ID.String(), c.Topic, fmtTime(c.DeliverAt),
			strconv.FormatUint(uint64(c.Attempt), 10), FormatBody(c.Body, r.full).cell())
	case c.Type == message.TypeCancel:
		r.t.add(strconv.FormatInt(c.Offset, 10), "cancel", num(c.Size), routed, c.Target.String(), "", fmtTime(c.Target.Time()), "", "")
	default:
		r.t.add(strconv.FormatInt(c.Offset, 10), TypeName(c.Type), num(c.Size), routed, "", "", "", "", "")
	}
	return nil
}

// Close writes the table (text).
func (r *RecordWriter) Close() error {
	if r.out.JSON {
		return nil
	}
	if r.n == 0 {
		_, err := fmt.Fprintln(r.out.W, "no records from there")
		return err
	}
	return r.t.write(r.out.W)
}

type problemJSON struct {
	Kind    string `json:"kind"` // "problem" or "note"
	File    string `json:"file"`
	Offset  *int64 `json:"offset,omitempty"`
	Problem Kind   `json:"problem,omitempty"`
	Detail  string `json:"detail"`
}

type verifySummaryJSON struct {
	Kind     string `json:"kind"` // "summary"
	Files    int    `json:"files"`
	Bytes    int64  `json:"bytes"`
	Problems int    `json:"problems"`
	Notes    int    `json:"notes"`
	Clean    bool   `json:"clean"`
}

// WriteVerify writes the result of Verify.
func (out Output) WriteVerify(r Report) error {
	if out.JSON {
		for _, p := range r.Problems {
			j := problemJSON{Kind: "problem", File: p.File, Problem: p.Kind, Detail: p.Detail}
			if p.Offset >= 0 {
				j.Offset = &p.Offset
			}
			if err := out.json(j); err != nil {
				return err
			}
		}
		for _, n := range r.Notes {
			if err := out.json(problemJSON{Kind: "note", File: n.File, Detail: n.Detail}); err != nil {
				return err
			}
		}
		return out.json(verifySummaryJSON{Kind: "summary", Files: r.Files, Bytes: r.Bytes, Problems: len(r.Problems), Notes: len(r.Notes), Clean: r.Clean()})
	}
	w := out.W
	for _, p := range r.Problems {
		fmt.Fprintln(w, p.String())
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s: %s\n", n.File, n.Detail)
	}
	verdict := "clean"
	if !r.Clean() {
		verdict = fmt.Sprintf("DAMAGED: %d problem", len(r.Problems))
		if len(r.Problems) > 1 {
			verdict += "s"
		}
	}
	_, err := fmt.Fprintf(w, "checked %d files, %s: %s\n", r.Files, FormatSize(r.Bytes), verdict)
	return err
}

type timelineJSON struct {
	Row     string  `json:"row"` // "overdue", "hour" or "later"
	Hour    *int    `json:"hour,omitempty"`
	From    *string `json:"from"`
	To      *string `json:"to"`
	Pending int64   `json:"pending"`
}

// barWidth is the longest bar of a timeline.
const barWidth = 40

// WriteTimeline writes the result of ReadTimeline as a bar chart, or as
// counts in JSON.
func (out Output) WriteTimeline(t Timeline) error {
	now := t.Now
	end := now.Add(time.Duration(len(t.Hours)) * time.Hour)
	if out.JSON {
		ns, es := rfc(now), rfc(end)
		if err := out.json(timelineJSON{Row: "overdue", To: &ns, Pending: t.Overdue}); err != nil {
			return err
		}
		for i, n := range t.Hours {
			from, to := rfc(now.Add(time.Duration(i)*time.Hour)), rfc(now.Add(time.Duration(i+1)*time.Hour))
			if err := out.json(timelineJSON{Row: "hour", Hour: &i, From: &from, To: &to, Pending: n}); err != nil {
				return err
			}
		}
		return out.json(timelineJSON{Row: "later", From: &es, Pending: t.Later})
	}
	w := out.W
	peak := max(t.Overdue, t.Later)
	for _, n := range t.Hours {
		peak = max(peak, n)
	}
	fmt.Fprintf(w, "pending messages by hour ahead of %s UTC\n", now.UTC().Format(timeLayout))
	tb := newTable("HOURS", "FROM (UTC)", ">PENDING", "")
	tb.add("overdue", "before", strconv.FormatInt(t.Overdue, 10), bar(t.Overdue, peak))
	for i, n := range t.Hours {
		tb.add(fmt.Sprintf("+%d", i), now.Add(time.Duration(i)*time.Hour).UTC().Format("01-02 15:04"), strconv.FormatInt(n, 10), bar(n, peak))
	}
	tb.add("later", end.UTC().Format("01-02 15:04"), strconv.FormatInt(t.Later, 10), bar(t.Later, peak))
	if err := tb.write(w); err != nil {
		return err
	}
	fmt.Fprintf(w, "total pending: %d\n", t.Total())
	for _, d := range t.Damaged {
		fmt.Fprintf(w, "%s is damaged: what follows the damage is not counted (see 'inspect verify')\n", d)
	}
	return nil
}

// bar draws n against peak as up to barWidth cells, in eighths.
func bar(n, peak int64) string {
	if n <= 0 || peak <= 0 {
		return ""
	}
	eighths := max(1, n*barWidth*8/peak)
	s := strings.Repeat("█", int(eighths/8))
	if r := eighths % 8; r > 0 {
		s += string([]rune("▏▎▍▌▋▊▉")[r-1])
	}
	return s
}
