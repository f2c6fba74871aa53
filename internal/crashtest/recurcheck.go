package crashtest

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hourglassmq/hourglass/deliverycheck"
)

// Violation kinds of recurring schedules (issue 22).
const (
	// VOccurrenceTwice: one occurrence (a schedule's definition and time)
	// delivered under two message IDs: fired twice.
	VOccurrenceTwice = "occurrence-twice"
	// VOccurrenceSkipped: an occurrence owed (see checkSchedules) never
	// delivered.
	VOccurrenceSkipped = "occurrence-skipped"
	// VOccurrenceAfterDelete: an occurrence due after DeleteSchedule was
	// answered (plus the handoff lead and the skew) was delivered.
	VOccurrenceAfterDelete = "occurrence-after-delete"
	// VOccurrenceAfterUpdate: the same for an occurrence of the definition
	// an UpdateSchedule replaced.
	VOccurrenceAfterUpdate = "occurrence-after-update"
	// VOccurrenceUnexpected: an occurrence no definition explains: of a
	// schedule or definition the harness never made, on another topic,
	// with a malformed time, due before its definition was sent or before
	// the first occurrence its answer named, or off its spec's grid.
	VOccurrenceUnexpected = "occurrence-unexpected"
)

// HandoffLead is the server's --handoff-lead in the harness: the engine
// hands a due message to the queue up to this long before its time (the
// queue still holds it until then), so an occurrence may begin firing
// this long before it is due.
const HandoffLead = 20 * time.Millisecond

// schedEpoch is one definition of a recurring schedule: from the create
// or update that began it to the update or delete that ended it.
type schedEpoch struct {
	name, body string
	n          int
	op         string // "create" or "update"
	period     time.Duration
	begin      []*ScheduleOp // the attempts of the call that began it
	ok         *ScheduleOp   // its attempt answered OK (or as good), nil if none
	anchor     time.Time     // the first occurrence ok.Next named; zero if unknown
	lenientTo  time.Time     // attempts before ok may have armed other chains until then
	end        []*ScheduleOp // the attempts of the call that ended it
	endOK      *ScheduleOp
	occ        map[int64][]*Delivery // by occurrence time (ms)
	settles    []*Settle
}

func (e *schedEpoch) begun() bool {
	return slices.ContainsFunc(e.begin, func(x *ScheduleOp) bool { return x.Outcome != Rejected })
}

func (e *schedEpoch) ending() bool {
	return slices.ContainsFunc(e.end, func(x *ScheduleOp) bool { return x.Outcome != Rejected })
}

// epochsOf groups the schedule calls of ev into definitions, by body.
func epochsOf(ev Events, c *Counts) map[string]*schedEpoch {
	type call struct {
		name, op string
		n        int
	}
	var order []call
	atts := map[call][]*ScheduleOp{}
	names := map[string]bool{}
	for i := range ev.ScheduleOps {
		x := &ev.ScheduleOps[i]
		c.ScheduleCalls++
		if x.Outcome == InDoubt {
			c.ScheduleCallsInDoubt++
		}
		k := call{x.Name, x.Op, x.Epoch}
		if atts[k] == nil {
			order = append(order, k)
		}
		atts[k] = append(atts[k], x)
	}
	slices.SortStableFunc(order, func(a, b call) int { return atts[a][0].Sent.Compare(atts[b][0].Sent) })
	out := map[string]*schedEpoch{}
	last := map[string]*schedEpoch{} // by name: the definition in force
	for _, k := range order {
		xs := atts[k]
		var ok *ScheduleOp
		for _, x := range xs {
			if x.Outcome == OK {
				ok = x
			}
		}
		if e := last[k.name]; e != nil {
			e.end, e.endOK = xs, ok
		}
		if k.op == "delete" {
			last[k.name] = nil
			continue
		}
		e := &schedEpoch{name: k.name, body: EpochBody(k.name, k.n), n: k.n, op: k.op, period: xs[0].Period, begin: xs, ok: ok, occ: map[int64][]*Delivery{}}
		if ok != nil && !ok.Earlier && !ok.Next.IsZero() {
			e.anchor = ok.Next
		}
		if ok != nil && len(xs) > 1 && xs[0] != ok {
			e.lenientTo = ok.Answered.Add(HandoffLead)
		}
		if ok != nil && !names[k.name] {
			names[k.name] = true
			c.Schedules++
		}
		out[e.body] = e
		last[k.name] = e
	}
	return out
}

// checkSchedules judges the occurrences of the harness's recurring
// schedules (deliveries with the hourglass-schedule header; occ) against
// their definitions (ev.ScheduleOps), with the acks of them (settles), and
// returns the violations and the definitions still owed an occurrence (for
// the drain). Each definition (its occurrences' body, EpochBody) is an
// @every spec with FIRE_ALL misfires, so its occurrences are a grid from
// the first one its create or update answered; the server arms each
// occurrence when the one before fires, in the same append that records
// it fired, so the occurrences that fire are an unbroken run of that grid:
//
//   - Each occurrence is delivered under one message ID (VOccurrenceTwice
//     for a second one); the same ID again is a redelivery, judged like a
//     message's (VAfterAck after a durable Ack), and the last of an ID's
//     deliveries must be followed by an Ack answered OK or in doubt
//     (VLostRedelivery). Never before its time (VEarly, with the skew).
//   - Every grid time from the first occurrence to the latest one
//     delivered is delivered (VOccurrenceSkipped): one delivered means the
//     one before it fired, and an occurrence that fired is delivered even
//     across a crash (handed over again, it arms nothing); but for the
//     run FIRE_ALL skips after it delivered recur.MaxMissed missed
//     occurrences in a row (missedRun; counted, allowed). A definition in
//     force when the drain began (Events.DrainFrom) owes its first grid
//     time at or after that moment too, so a chain that stopped is found.
//     Past the latest delivered nothing is owed of a definition that was
//     replaced or deleted: its armed occurrence was cancelled, or dropped.
//   - Nothing after its end: an occurrence of a deleted (or replaced)
//     definition is delivered after the DeleteSchedule (UpdateSchedule)
//     answer only if it had begun firing before the call took the
//     schedule's lock, that is, was handed over, up to HandoffLead before
//     its time; so one due after the answer plus HandoffLead (and the
//     skew) is VOccurrenceAfterDelete (VOccurrenceAfterUpdate). One due
//     before and delivered after the answer is allowed and counted. The
//     bound is the answer of the attempt answered OK: an earlier attempt
//     in doubt may have ended it sooner, never later.
//   - Every occurrence is explained by a definition (VOccurrenceUnexpected):
//     its body names one, its topic is SchedTopic (or its dead-letter
//     topic), it is due no earlier than its definition was sent and on its
//     grid from the first occurrence answered. A call tried again after
//     an attempt in doubt may have armed other runs of the definition
//     until its answer (plus HandoffLead): before then any time is allowed
//     and nothing is owed.
//
// A definition whose create or update was never answered (it took effect
// in an attempt in doubt: ALREADY_EXISTS) has its grid from its first
// occurrence delivered.
func checkSchedules(ev Events, occ []*Delivery, settles []*Settle, p CheckParams, cut bool, cs *copies, c *Counts) (out []Violation, pending []string) {
	eps := epochsOf(ev, c)
	slack := p.SkewBound + p.Precision
	add := func(v Violation) {
		v.Cut = cut
		out = append(out, v)
	}
	c.OccurrenceDeliveries = len(occ)
	for _, d := range occ {
		e, t, why := routeOccurrence(eps, d)
		if why != "" {
			c.OccurrenceUnexpected++
			add(Violation{Kind: VOccurrenceUnexpected, Key: d.Key, ID: d.ID, Cycle: d.Cycle, At: d.Received, Occ: t,
				Detail: fmt.Sprintf("occurrence %q of schedule %q handed out on %s: %s", d.Occurrence, d.Schedule, d.Topic, why)})
			continue
		}
		e.occ[t.UnixMilli()] = append(e.occ[t.UnixMilli()], d)
	}
	for _, x := range settles {
		if e := eps[x.Key]; e != nil {
			e.settles = append(e.settles, x)
		}
	}
	for _, b := range slices.Sorted(maps.Keys(eps)) {
		e := eps[b]
		vs, owed := e.judge(ev.DrainFrom, ev.DrainEnd, ev.Starts, slack, cs, c)
		for _, v := range vs {
			add(v)
		}
		if owed {
			pending = append(pending, e.body)
		}
	}
	return out, pending
}

// routeOccurrence finds the definition of d, an occurrence, and its time;
// why says what is wrong when it cannot.
func routeOccurrence(eps map[string]*schedEpoch, d *Delivery) (*schedEpoch, time.Time, string) {
	t, err := time.Parse(time.RFC3339Nano, d.Occurrence)
	e := eps[d.Key]
	switch {
	case err != nil:
		return nil, time.Time{}, "its occurrence header is not a time"
	case e == nil || e.name != d.Schedule:
		return nil, t, fmt.Sprintf("its body %q names no definition the harness made of it", d.Key)
	case !e.begun():
		return nil, t, "every call that would define it was refused"
	case d.Topic != SchedTopic && d.Topic != dlqTopic(SchedTopic):
		return nil, t, fmt.Sprintf("it was defined for %s", SchedTopic)
	}
	return e, t, ""
}

// judge applies the rules of checkSchedules to one definition; owed is
// true while an occurrence is owed.
func (e *schedEpoch) judge(drainFrom, drainEnd time.Time, starts []ServerStart, slack time.Duration, cs *copies, c *Counts) (out []Violation, owed bool) {
	times := slices.Sorted(maps.Keys(e.occ))
	strict := func(t time.Time) bool { return e.lenientTo.IsZero() || t.After(e.lenientTo) }
	anchor := e.anchor
	if anchor.IsZero() {
		for _, ms := range times {
			if t := time.UnixMilli(ms); strict(t) {
				anchor = t
				break
			}
		}
	}
	onGrid := func(t time.Time) bool { return !anchor.IsZero() && !t.Before(anchor) && t.Sub(anchor)%e.period == 0 }
	what := "CreateSchedule"
	if e.op == "update" {
		what = "UpdateSchedule"
	}
	var latest time.Time
	for _, ms := range times {
		t, ds := time.UnixMilli(ms), e.occ[ms]
		c.Occurrences++
		v := Violation{Key: e.body, ID: ds[0].ID, Cycle: ds[0].Cycle, At: ds[0].Received, Occ: t}
		unexpected := func(why string) {
			c.OccurrenceUnexpected++
			v.Kind, v.Detail = VOccurrenceUnexpected, fmt.Sprintf("occurrence %s of %s %s", t.UTC().Format("15:04:05.000"), e.body, why)
			out = append(out, v)
		}
		switch {
		case t.Before(e.begin[0].Sent.Add(-slack)):
			unexpected(fmt.Sprintf("is due %v before its %s was sent", e.begin[0].Sent.Sub(t).Round(time.Millisecond), what))
		case !strict(t):
		case !e.anchor.IsZero() && t.Before(e.anchor):
			unexpected(fmt.Sprintf("is due before %s, the first occurrence its %s answered", e.anchor.UTC().Format("15:04:05.000"), what))
		case !onGrid(t):
			unexpected(fmt.Sprintf("is not on the grid of @every %v from %s", e.period, anchor.UTC().Format("15:04:05.000")))
		default:
			latest = t
		}
		ids := map[string]bool{}
		for _, d := range ds {
			ids[d.ID] = true
			if deliverycheck.Early(t, d.Received, slack) {
				c.Early++
				out = append(out, Violation{Kind: VEarly, Key: e.body, ID: d.ID, Cycle: d.Cycle, At: d.Received, Occ: t,
					Detail: fmt.Sprintf("occurrence %s received %v before it was due", t.UTC().Format("15:04:05.000"), t.Sub(d.Received).Round(time.Microsecond))})
			}
		}
		if len(ids) > 1 {
			c.OccurrenceTwice++
			keys := slices.Sorted(maps.Keys(ids))
			// The first armed (the lowest seq: the IDs share the time) names it.
			v.ID = keys[0]
			v.Kind, v.Detail = VOccurrenceTwice, fmt.Sprintf("occurrence %s of %s delivered under %d IDs: %s", t.UTC().Format("15:04:05.000"), e.body, len(ids), strings.Join(keys, ", "))
			out = append(out, v)
		}
		if e.endOK != nil {
			bound := e.endOK.Answered.Add(HandoffLead + slack)
			kind, call := VOccurrenceAfterDelete, "DeleteSchedule"
			if e.endOK.Op == "update" {
				kind, call = VOccurrenceAfterUpdate, "UpdateSchedule"
			}
			switch {
			case t.After(bound):
				if kind == VOccurrenceAfterDelete {
					c.OccurrenceAfterDelete++
				} else {
					c.OccurrenceAfterUpdate++
				}
				v.Kind, v.Detail = kind, fmt.Sprintf("occurrence %s of %s is due %v after %s (cycle %d) answered", t.UTC().Format("15:04:05.000"), e.body, t.Sub(e.endOK.Answered).Round(time.Millisecond), call, e.endOK.Cycle)
				out = append(out, v)
			case slices.ContainsFunc(ds, func(d *Delivery) bool { return d.Received.After(e.endOK.Answered) }):
				c.OccurrenceAfterEnd++
			}
		}
		vs, lost := occurrenceAcks(e.body, t, ds, e.settles, drainEnd, cs, c)
		out = append(out, vs...)
		owed = owed || lost
	}
	// Owed: the grid from the first occurrence to the latest delivered, and
	// in a definition in force at the drain the first one after it began.
	live := !drainFrom.IsZero() && e.ok != nil && !e.ending()
	if live && anchor.IsZero() {
		owed = true
		c.OccurrenceSkipped++
		out = append(out, Violation{Kind: VOccurrenceSkipped, Key: e.body, At: drainFrom, Occ: drainFrom, Run: 1,
			Detail: fmt.Sprintf("%s was in force when the drain began and no occurrence of it was delivered", e.body)})
		return out, owed
	}
	if live {
		g := anchor
		if drainFrom.After(g) {
			g = anchor.Add((drainFrom.Sub(anchor) + e.period - 1) / e.period * e.period)
		}
		if g.After(latest) {
			latest = g
		}
	}
	if anchor.IsZero() || latest.IsZero() {
		return out, owed
	}
	var run []time.Time
	m := missedRun{starts: starts, slack: slack}
	flush := func(resumed bool) {
		if len(run) == 0 {
			return
		}
		if resumed && m.capped(run) {
			c.OccurrenceMissedCap += len(run)
			run = nil
			return
		}
		owed = true
		c.OccurrenceSkipped += len(run)
		first, last := run[0], run[len(run)-1]
		span := first.UTC().Format("15:04:05.000")
		if len(run) > 1 {
			span = fmt.Sprintf("%s to %s (%d occurrences)", span, last.UTC().Format("15:04:05.000"), len(run))
		}
		out = append(out, Violation{Kind: VOccurrenceSkipped, Key: e.body, At: first, Occ: first, Run: len(run),
			Detail: fmt.Sprintf("%s: %s never delivered (grid of @every %v from %s, owed up to %s)", e.body, span, e.period,
				anchor.UTC().Format("15:04:05.000"), latest.UTC().Format("15:04:05.000"))})
		run = nil
	}
	for t := anchor; !t.After(latest); t = t.Add(e.period) {
		ds := e.occ[t.UnixMilli()]
		if len(ds) == 0 {
			run = append(run, t)
			continue
		}
		flush(true)
		m.delivered(t, firstReceived(ds))
	}
	flush(false)
	return out, owed
}

// occurrenceAcks judges the deliveries ds of one occurrence (due at t)
// and the acks of their IDs: a redelivery of an ID (a duplicate cs
// counts) after its Ack was
// answered OK is VAfterAck (others are counted as allowed), and the last
// delivery of each ID must be followed by an Ack answered OK or in doubt
// (VLostRedelivery; lost is then true: it is owed), unless it was first
// handed out after drainEnd (the run ended with it in hand; counted).
func occurrenceAcks(body string, t time.Time, ds []*Delivery, settles []*Settle, drainEnd time.Time, cs *copies, c *Counts) (out []Violation, lost bool) {
	for _, d := range ds {
		if !cs.repeat(d, false) {
			continue
		}
		var durable, doubt *Settle
		for _, x := range settles {
			if x.ID != d.ID || x.Topic != d.Topic || x.Kind != Ack {
				continue
			}
			switch {
			case x.Outcome == OK && x.Answered.Before(d.Issued) && durable == nil:
				durable = x
			case x.Outcome == InDoubt && x.Sent.Before(d.Received):
				doubt = x
			}
		}
		switch {
		case durable != nil:
			c.DupAfterAck++
			out = append(out, Violation{Kind: VAfterAck, Key: body, ID: d.ID, Cycle: d.Cycle, At: d.Received, Occ: t,
				Detail: fmt.Sprintf("occurrence %s handed out on %s by a Receive sent %v after its Ack (cycle %d) was answered OK",
					t.UTC().Format("15:04:05.000"), d.Topic, d.Issued.Sub(durable.Answered).Round(time.Millisecond), durable.Cycle)})
		case doubt != nil:
			c.DupAckInDoubt++
		default:
			c.DupUnacked++
		}
	}
	byID := map[string]time.Time{}  // ID -> its last delivery's Issued
	first := map[string]time.Time{} // ID -> its first delivery's Received
	for _, d := range ds {
		if d.Issued.After(byID[d.ID]) {
			byID[d.ID] = d.Issued
		}
		if f, ok := first[d.ID]; !ok || d.Received.Before(f) {
			first[d.ID] = d.Received
		}
	}
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		if slices.ContainsFunc(settles, func(x *Settle) bool {
			return x.ID == id && x.Kind == Ack && x.Outcome != Rejected && x.Answered.After(byID[id])
		}) {
			continue
		}
		if !drainEnd.IsZero() && first[id].After(drainEnd) {
			c.OccurrenceUnackedAtEnd++
			continue
		}
		lost = true
		c.Lost++
		out = append(out, Violation{Kind: VLostRedelivery, Key: body, ID: id, At: byID[id], Occ: t,
			Detail: fmt.Sprintf("occurrence %s delivered, never durably acked, and never handed out again", t.UTC().Format("15:04:05.000"))})
	}
	return out, lost
}

// epochOf parses a definition's body (EpochBody); ok is false for any
// other body.
func epochOf(body string) (name string, n int, ok bool) {
	i := strings.LastIndexByte(body, '#')
	if i < 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(body[i+1:])
	return body[:i], n, err == nil
}
