package crashtest

import (
	"fmt"
	"strconv"
	"time"
)

// Violation kinds of Reschedule (issue 21).
const (
	// VAfterReschedule: the incarnation a Reschedule answered RESCHEDULED
	// moved was handed out by a Receive that returned after the answer.
	VAfterReschedule = "delivered-after-reschedule"
	// VRescheduleUntruthful: a Reschedule answered RESCHEDULED for an
	// incarnation a Receive had already returned (or was returning).
	VRescheduleUntruthful = "reschedule-untruthful"
	// VRescheduleBoth: a Reschedule in doubt whose old incarnation was
	// delivered and whose replacement was delivered too.
	VRescheduleBoth = "reschedule-in-doubt-both"
	// VRescheduledLost: the replacement a Reschedule answered (its new ID)
	// was never delivered, and nothing sent after it could have removed it.
	VRescheduledLost = "rescheduled-lost"
)

// judgeReschedules applies the Reschedule rules of Check to one message
// (key) and counts its Reschedules.
func (s *keyState) judgeReschedules(key string, c *Counts) []Violation {
	var out []Violation
	for _, r := range s.rescheds {
		switch {
		case r.Outcome == InDoubt:
			c.RescheduleInDoubt++
		case r.Outcome != OK:
			c.RescheduleRejected++
		case r.Answer == RescheduleRescheduled:
			c.Rescheduled++
		default:
			c.RescheduleOther++
		}
		if r.ByKey {
			c.RescheduleByKey++
		}
		if !r.moves() {
			continue
		}
		old := r.ID
		if r.ByKey {
			t, ok := s.keyTarget(r, r.Sent, r.Answered)
			if !ok {
				c.RescheduleUnjudged++
				if r.Outcome == OK {
					out = append(out, s.rescheduledLost(key, r)...)
				}
				continue
			}
			old = t
		}
		if r.Outcome == InDoubt {
			out = append(out, s.inDoubtBoth(key, r, old)...)
			continue
		}
		for _, d := range s.deliveries {
			if d.ID != old {
				continue
			}
			v := Violation{Key: key, ID: d.ID, Cycle: d.Cycle, At: d.Received}
			if d.Received.After(r.Answered) {
				v.Kind = VAfterReschedule
				v.Detail = fmt.Sprintf("received %v after Reschedule (cycle %d, %s) answered RESCHEDULED to %s", d.Received.Sub(r.Answered).Round(time.Millisecond), r.Cycle, r.Mode, r.NewID)
			} else {
				v.Kind = VRescheduleUntruthful
				v.At = r.Answered
				v.Detail = fmt.Sprintf("Reschedule (cycle %d, %s) answered RESCHEDULED to %s %v after a Receive had returned it", r.Cycle, r.Mode, r.NewID, r.Answered.Sub(d.Received).Round(time.Millisecond))
			}
			out = append(out, v)
		}
		out = append(out, s.rescheduledLost(key, r)...)
	}
	return out
}

// rescheduledLost reports r's replacement (answered RESCHEDULED) if it
// was never delivered and no Cancel or Reschedule that could have removed
// it (answered cancelled or RESCHEDULED, or in doubt; naming it or by key;
// answered after r was sent) was made.
func (s *keyState) rescheduledLost(key string, r *Reschedule) []Violation {
	for _, d := range s.deliveries {
		if d.ID == r.NewID || movedOn(d, r) {
			return nil
		}
	}
	for _, x := range s.cancels {
		if (x.Outcome == InDoubt || (x.Outcome == OK && x.Answer == CancelCancelled)) && (x.ByKey || x.ID == r.NewID) && x.Answered.After(r.Sent) {
			return nil
		}
	}
	for _, o := range s.rescheds {
		if o != r && o.moves() && (o.ByKey || o.ID == r.NewID) && o.Answered.After(r.Sent) {
			return nil
		}
	}
	return []Violation{{Kind: VRescheduledLost, Key: key, ID: r.NewID, Cycle: r.Cycle, At: r.Answered,
		Detail: fmt.Sprintf("Reschedule (cycle %d, %s, due %s) answered RESCHEDULED to %s, which was never delivered", r.Cycle, r.Mode, r.NotBefore.UTC().Format("15:04:05.000"), r.NewID)}}
}

// inDoubtBoth judges r, a Reschedule in doubt of the incarnation old
// (attempt 0: keyTarget rules out retries): either old is delivered (it
// did not take effect) or its replacement (it did), never both. The
// replacement is a delivery of a first attempt under an ID no answer
// named and not a redriven copy; judged only when r is the message's only
// Reschedule in doubt, so that the replacement can only be r's.
func (s *keyState) inDoubtBoth(key string, r *Reschedule, old string) []Violation {
	for _, o := range s.rescheds {
		if o != r && o.Outcome == InDoubt {
			return nil
		}
	}
	var sawOld, sawNew *Delivery
	for _, d := range s.deliveries {
		switch {
		case d.ID == old:
			sawOld = d
		case d.Attempt == 0 && d.RedriveOf == "" && d.ID != s.sched.ID && s.replacement(d.ID) == nil:
			sawNew = d
		}
	}
	if sawOld == nil || sawNew == nil {
		return nil
	}
	return []Violation{{Kind: VRescheduleBoth, Key: key, ID: sawNew.ID, Cycle: r.Cycle, At: laterOf(sawOld.Received, sawNew.Received),
		Detail: fmt.Sprintf("Reschedule in doubt (cycle %d, %s) of %s: both %s (received cycle %d) and its replacement %s (received cycle %d) were delivered",
			r.Cycle, r.Mode, old, old, sawOld.Cycle, sawNew.ID, sawNew.Cycle)}}
}

// laterOf is the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// movedOn reports whether d is r's replacement moved on by a frozen pause
// of its topic: a Receive reaching it before its time with the freeze
// counted schedules it again at that time under a new, later ID (attempt
// kept, not a redriven copy), handed out after r was answered.
func movedOn(d *Delivery, r *Reschedule) bool {
	if d.Attempt != 0 || d.RedriveOf != "" || !d.Received.After(r.Answered) || len(d.ID) != 32 || len(r.NewID) != 32 {
		return false
	}
	at, err1 := strconv.ParseUint(d.ID[:16], 16, 64)
	was, err2 := strconv.ParseUint(r.NewID[:16], 16, 64)
	return err1 == nil && err2 == nil && at > was
}
