package crashtest

import (
	"fmt"
	"slices"
	"time"
)

// VDeliveredWhilePaused: a message of a topic handed out by a Receive
// sent after a pause of the topic was answered OK, and returned before
// the next resume was sent (the server keeps a paused topic paused across
// kill -9).
const VDeliveredWhilePaused = "delivered-while-paused"

// pauseSpan is a time a topic was certainly paused: from a pause's OK
// answer to the sending of the next resume not refused (or for ever).
type pauseSpan struct {
	from, to time.Time // to zero: never resumed
	cycle    int
}

// checkPauses counts the pauses and resumes and finds deliveries made
// while a topic was certainly paused. A delivery happened somewhere
// between its Receive's sending and return, so only one sent after the
// pause answered and returned before the resume was sent is judged (a
// Consume stream's message counts as sent when the credit for it was).
// A pause in doubt may or may not have held its topic: nothing is judged
// from it.
func checkPauses(ev Events, c *Counts) []Violation {
	byTopic := map[string][]*PolicyChange{}
	for i := range ev.Policies {
		x := &ev.Policies[i]
		switch {
		case x.Paused && x.Outcome == OK:
			c.Paused++
		case !x.Paused && x.Outcome == OK:
			c.Resumed++
		case x.Outcome == InDoubt:
			c.PolicyInDoubt++
		}
		byTopic[x.Topic] = append(byTopic[x.Topic], x)
	}
	spans := map[string][]pauseSpan{}
	for topic, xs := range byTopic {
		slices.SortFunc(xs, func(a, b *PolicyChange) int { return a.Sent.Compare(b.Sent) })
		for i, x := range xs {
			if !x.Paused || x.Outcome != OK {
				continue
			}
			sp := pauseSpan{from: x.Answered, cycle: x.Cycle}
			for _, y := range xs[i+1:] {
				if !y.Paused && y.Outcome != Rejected {
					sp.to = y.Sent
					break
				}
			}
			spans[topic] = append(spans[topic], sp)
		}
	}
	var out []Violation
	for i := range ev.Deliveries {
		d := &ev.Deliveries[i]
		for _, sp := range spans[d.Topic] {
			if d.Issued.Before(sp.from) || (!sp.to.IsZero() && d.Received.After(sp.to)) {
				continue
			}
			c.DeliveredWhilePaused++
			until := "never resumed"
			if !sp.to.IsZero() {
				until = fmt.Sprintf("resumed %v after it was received", sp.to.Sub(d.Received).Round(time.Millisecond))
			}
			out = append(out, Violation{Kind: VDeliveredWhilePaused, Key: d.Key, ID: d.ID, Cycle: d.Cycle, At: d.Received,
				Detail: fmt.Sprintf("handed out on %s by a Receive sent %v after a pause of it (cycle %d) was answered OK; %s",
					d.Topic, d.Issued.Sub(sp.from).Round(time.Millisecond), sp.cycle, until)})
			break
		}
	}
	return out
}
