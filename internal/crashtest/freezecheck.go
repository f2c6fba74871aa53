package crashtest

import (
	"fmt"
	"slices"
	"time"
)

// VFrozenEarly: a message of a topic handed out before its time plus a
// frozen pause of the topic that began after it was scheduled and before
// it was due (a frozen pause makes it due as much later as it lasted).
const VFrozenEarly = "delivered-before-frozen-due"

// frozenSpan is a frozen pause as the history bounds it: it began by
// began (its answer) and lasted at least min (to the next resume's
// sending), and shifts the messages answered before sent.
type frozenSpan struct {
	sent, began time.Time
	min         time.Duration
	cycle       int
}

// checkFreezes finds deliveries made before a frozen pause allowed. Only
// a message whose Schedule was answered OK before the freeze was sent,
// due after the freeze was answered, never rescheduled by the workload,
// not a retry and not a redriven copy is judged: it must not be handed
// out before its not-before time plus the freeze's least length, less the
// skew and precision bounds. The Receive that returned it returned by
// then, so only a Receive that returned before that bound is a violation.
func checkFreezes(ev Events, p CheckParams, c *Counts) []Violation {
	byTopic := map[string][]*PolicyChange{}
	for i := range ev.Policies {
		x := &ev.Policies[i]
		if x.Paused && x.Freeze && x.Outcome == OK {
			c.Frozen++
		}
		byTopic[x.Topic] = append(byTopic[x.Topic], x)
	}
	spans := map[string][]frozenSpan{}
	for topic, xs := range byTopic {
		slices.SortFunc(xs, func(a, b *PolicyChange) int { return a.Sent.Compare(b.Sent) })
		for i, x := range xs {
			if !x.Paused || !x.Freeze || x.Outcome != OK {
				continue
			}
			for _, y := range xs[i+1:] {
				if !y.Paused && y.Outcome != Rejected {
					spans[topic] = append(spans[topic], frozenSpan{sent: x.Sent, began: x.Answered, min: y.Sent.Sub(x.Answered), cycle: x.Cycle})
					break
				}
			}
		}
	}
	if len(spans) == 0 {
		return nil
	}
	scheds := map[string]*Schedule{}
	for i := range ev.Schedules {
		if s := &ev.Schedules[i]; s.Outcome == OK {
			scheds[s.Key] = s
		}
	}
	moved := map[string]bool{}
	for _, r := range ev.Reschedules {
		moved[r.Key] = true
	}
	slack := p.SkewBound + p.Precision
	var out []Violation
	for i := range ev.Deliveries {
		d := &ev.Deliveries[i]
		s := scheds[d.Key]
		if s == nil || moved[d.Key] || d.Attempt != 0 || d.RedriveOf != "" || d.Schedule != "" || s.Topic != d.Topic {
			continue
		}
		for _, sp := range spans[d.Topic] {
			if !s.Answered.Before(sp.sent) || !s.NotBefore.After(sp.began) {
				continue
			}
			due := s.NotBefore.Add(sp.min)
			if !d.Received.Before(due.Add(-slack)) {
				continue
			}
			c.FrozenEarly++
			out = append(out, Violation{Kind: VFrozenEarly, Key: d.Key, ID: d.ID, Cycle: d.Cycle, At: d.Received,
				Detail: fmt.Sprintf("handed out on %s %v before its time plus a frozen pause of at least %v (cycle %d) that began after it was scheduled and before it was due",
					d.Topic, due.Sub(d.Received).Round(time.Millisecond), sp.min.Round(time.Millisecond), sp.cycle)})
			break
		}
	}
	return out
}
