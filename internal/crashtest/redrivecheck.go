package crashtest

import (
	"fmt"
	"slices"
	"time"
)

// Violation kinds of Redrive (issue 21).
const (
	// VRedrivenTwice: one dead letter (the ID in its copies' key
	// "redrive:<ID>") came back as two first attempts (attempt 0) under
	// two IDs: it was moved twice.
	VRedrivenTwice = "redriven-twice"
	// VRedriveUnfounded: a redriven copy (or a retry of one, which keeps
	// its key) handed out before any Redrive of its dead-letter topic was
	// sent, or before its message could have failed MaxAttempts times.
	VRedriveUnfounded = "redriven-unfounded"
)

// redriveKeyWindow is the server's default --idempotency-window, within
// which a dead letter redriven again (one dead-lettered twice across a
// crash) finds its first copy's key: two copies of one dead letter further
// apart are not judged.
const redriveKeyWindow = 10 * time.Minute

// countRedrives counts the Redrive calls.
func countRedrives(ev Events, c *Counts) map[string][]*Redrive {
	by := map[string][]*Redrive{}
	for i := range ev.Redrives {
		x := &ev.Redrives[i]
		switch x.Outcome {
		case OK:
			c.RedriveCalls++
			c.Redriven += int(x.Redriven)
		case InDoubt:
			c.RedriveInDoubt++
		}
		if x.Outcome != Rejected {
			by[x.DLQ] = append(by[x.DLQ], x)
		}
	}
	return by
}

// judgeRedriven applies the redrive rules of Check to one message's
// redriven copies (deliveries with RedriveOf set), given its deliveries
// split by topic (dl) and the Redrive calls by dead-letter topic. A copy's
// retries (a Nack with a delay) keep its key, so the deliveries that name
// one dead letter are a lineage: the copy, a first attempt, and retries
// with attempts of 1 or more. owed is true when a poison lineage has not
// ended yet.
func (s *keyState) judgeRedriven(key string, dl *dlqJudge, redrives map[string][]*Redrive, c *Counts) (out []Violation, owed bool) {
	lineages := map[string][]*Delivery{} // dead letter -> the first delivery of each ID naming it
	var deads []string
	seen := map[string]bool{}
	for _, d := range s.deliveries {
		if d.RedriveOf == "" || seen[d.ID] {
			continue
		}
		seen[d.ID] = true
		if lineages[d.RedriveOf] == nil {
			deads = append(deads, d.RedriveOf)
		}
		lineages[d.RedriveOf] = append(lineages[d.RedriveOf], d)
	}
	c.RedrivenCopies += len(deads)
	for _, dead := range deads {
		ds := lineages[dead]
		d := ds[0] // the earliest: a retry needs a delivery before it
		n, u := 0, 0
		for _, e := range dl.orig {
			if e.RedriveOf != dead && e.Issued.Before(d.Received) {
				n++
			}
		}
		for _, f := range dl.doubt {
			if f.Issued.Before(d.Received) {
				u++
			}
		}
		why := ""
		switch sent := slices.ContainsFunc(redrives[dlqTopic(d.Topic)], func(x *Redrive) bool { return x.Sent.Before(d.Received) }); {
		case !sent:
			why = fmt.Sprintf("before any Redrive of %s was sent", dlqTopic(d.Topic))
		case n+u < dl.maxA:
			why = fmt.Sprintf("after %d deliveries of its message on %s and %d Receives of it that failed in doubt; a dead letter needs %d", n, d.Topic, u, dl.maxA)
		}
		if why != "" {
			out = append(out, Violation{Kind: VRedriveUnfounded, Key: key, ID: d.ID, Cycle: d.Cycle, At: d.Received,
				Detail: fmt.Sprintf("a copy redriven from dead letter %s handed out on %s %s", dead, d.Topic, why)})
		}
		var first *Delivery
		for _, e := range ds {
			if e.Attempt != 0 {
				continue // a retry (or a copy whose first lease was not seen)
			}
			if first != nil && e.Received.Sub(first.Received).Abs() < redriveKeyWindow {
				out = append(out, Violation{Kind: VRedrivenTwice, Key: key, ID: e.ID, Cycle: e.Cycle, At: e.Received,
					Detail: fmt.Sprintf("dead letter %s came back on %s as %s (cycle %d) and as %s (cycle %d), both first attempts", dead, e.Topic, first.ID, first.Cycle, e.ID, e.Cycle)})
			}
			if first == nil {
				first = e
			}
		}
		for _, x := range s.settles {
			if x.Topic == dl.dlq && x.ID == dead && x.Kind == Ack && x.Outcome == OK {
				c.RedriveConsumed++ // acked on the .dlq by a consumer and moved back too
				break
			}
		}
		// A poison lineage fails again: one of its IDs must end acked on
		// the .dlq, or be redriven again (a later lineage names it).
		if !s.sched.Poison {
			continue
		}
		ended := slices.ContainsFunc(ds, func(e *Delivery) bool {
			return lineages[e.ID] != nil || slices.ContainsFunc(s.settles, func(x *Settle) bool {
				return x.Topic == dl.dlq && x.ID == e.ID && x.Kind == Ack && x.Outcome != Rejected
			})
		})
		if !ended {
			c.NotDeadLettered++
			owed = true
			out = append(out, Violation{Kind: VNotDeadLettered, Key: key, ID: d.ID, Cycle: d.Cycle, At: d.Received,
				Detail: fmt.Sprintf("poison message redriven from dead letter %s as %s: none of its %d IDs was dead-lettered again and acked on %s, nor redriven again", dead, d.ID, len(ds), dl.dlq)})
		}
	}
	return out, owed
}
