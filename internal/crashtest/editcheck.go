package crashtest

import (
	"fmt"
	"strconv"
	"time"
)

// Violation kinds of Edit (issue 44).
const (
	// VEditOld: handed out by a Receive sent after an Edit of the message
	// was answered EDITED, with content no Edit that could have taken
	// effect since gave it (the old content, or an older Edit's).
	VEditOld = "delivered-old-content"
	// VEditTorn: a delivery whose body and header EditHeader name
	// different versions of its content: half an edit.
	VEditTorn = "edit-torn"
)

// checkEdits judges what Edits promise beyond the rules of a Reschedule
// (an Edit is recorded as a Reschedule of Mode "edit", and Check judges
// its incarnations as any). A delivery of a message by a Receive sent
// after an Edit of it was answered EDITED must carry that Edit's version,
// or that of another Edit of the message that may have taken effect after
// it: answered EDITED or in doubt after the first was sent, and sent
// before the Receive returned (VEditOld). Every delivery's body and
// header must name one version (VEditTorn). A violation of a message
// named by a cut (cutKeys, or any commitlog cut: anyCut) is marked Cut.
func checkEdits(ev Events, cutKeys map[string]bool, anyCut bool, c *Counts) []Violation {
	byKey := map[string][]*Reschedule{}
	for i := range ev.Reschedules {
		x := &ev.Reschedules[i]
		if x.Mode != "edit" {
			continue
		}
		byKey[x.Key] = append(byKey[x.Key], x)
		if x.Outcome == OK && x.Answer == RescheduleRescheduled {
			c.Edited++
		}
	}
	var out []Violation
	for i := range ev.Deliveries {
		d := &ev.Deliveries[i]
		if d.Schedule != "" {
			continue // a recurring occurrence: not the workload's body
		}
		cut := cutKeys[d.Key] || anyCut
		if (d.Edit != 0 || d.EditHeader != "") && d.EditHeader != strconv.Itoa(d.Edit) {
			c.EditOld++
			out = append(out, Violation{Kind: VEditTorn, Key: d.Key, ID: d.ID, Cycle: d.Cycle, At: d.Received, Cut: cut,
				Detail: fmt.Sprintf("handed out with the body of version %d and the header %s %q", d.Edit, EditHeader, d.EditHeader)})
			continue
		}
		for _, e := range byKey[d.Key] {
			if e.Outcome != OK || e.Answer != RescheduleRescheduled || !d.Issued.After(e.Answered) ||
				d.Edit == e.Edit || mayFollow(byKey[d.Key], e, d) {
				continue
			}
			c.EditOld++
			out = append(out, Violation{Kind: VEditOld, Key: d.Key, ID: d.ID, Cycle: d.Cycle, At: d.Received, Cut: cut,
				Detail: fmt.Sprintf("handed out with content version %d by a Receive sent %v after Edit (cycle %d) to version %d was answered EDITED (new id %s)",
					d.Edit, d.Issued.Sub(e.Answered).Round(time.Millisecond), e.Cycle, e.Edit, e.NewID)})
			break
		}
	}
	return out
}

// mayFollow reports whether d's content may come from an Edit of its
// message that took effect after e: one answered EDITED or in doubt after
// e was sent, sent before d's Receive returned.
func mayFollow(edits []*Reschedule, e *Reschedule, d *Delivery) bool {
	for _, o := range edits {
		if o != e && o.Edit == d.Edit && (o.Outcome == InDoubt || o.Outcome == OK && o.Answer == RescheduleRescheduled) &&
			o.Answered.After(e.Sent) && o.Sent.Before(d.Received) {
			return true
		}
	}
	return false
}
