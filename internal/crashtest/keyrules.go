package crashtest

import (
	"fmt"
	"slices"
	"time"

	"github.com/hourglassmq/hourglass/deliverycheck"
)

// The rules of Check that follow one message through its incarnations:
// the ID Schedule answered, the replacements Reschedules made (a new ID,
// the same origin and attempt), the retries of Nacks with a delay (a new
// ID, attempt raised), the copies Redrive moved back (a new ID, attempt 0,
// keyed "redrive:<dead letter's ID>"). A Cancel or Reschedule by (topic,
// key) names the latest incarnation the server routed with the key; a
// retry carries the key, a redriven copy does not.

// retried reports whether a Nack with a delay of the message (which makes
// a retry that carries its key) was sent before t and not refused. In a
// cluster it never is: a Nack with a delay keeps the message and its ID
// in the delivery stream, no new incarnation carries the key.
func (s *keyState) retried(t time.Time) bool {
	if s.cluster {
		return false
	}
	for _, x := range s.settles {
		if x.Kind == Nack && x.NackDelay > 0 && x.Outcome != Rejected && x.Sent.Before(t) {
			return true
		}
	}
	return false
}

// nackedBefore reports whether a Nack of the incarnation id, not refused,
// was sent before t: from then on a retry may carry the message (a Nack
// with a delay, or one under a backoff policy). Never in a cluster, where
// a Nack keeps the message and its ID in the delivery stream.
func (s *keyState) nackedBefore(id string, t time.Time) bool {
	if s.cluster {
		return false
	}
	for _, x := range s.settles {
		if x.ID == id && x.Kind == Nack && x.Outcome != Rejected && x.Sent.Before(t) {
			return true
		}
	}
	return false
}

// moves reports whether r may have moved an incarnation: answered
// RESCHEDULED, or in doubt.
func (r *Reschedule) moves() bool {
	return (r.Outcome == OK && r.Answer == RescheduleRescheduled) || r.Outcome == InDoubt
}

// mayMove reports whether a Reschedule sent before t, by key or naming
// id, may have moved id.
func (s *keyState) mayMove(t time.Time, id string) bool {
	for _, r := range s.rescheds {
		if r.moves() && r.Sent.Before(t) && (r.ByKey || r.ID == id) {
			return true
		}
	}
	return false
}

// replacement returns the Reschedule answered RESCHEDULED whose
// replacement is id, or nil.
func (s *keyState) replacement(id string) *Reschedule {
	for _, r := range s.rescheds {
		if r.Outcome == OK && r.Answer == RescheduleRescheduled && r.NewID == id {
			return r
		}
	}
	return nil
}

// keyTarget returns the incarnation a call by (topic, key), sent at sent
// and answered at answered, named, when the history tells: the ID
// Schedule answered, or the replacement of the last Reschedule answered
// RESCHEDULED before sent (those form a chain when none overlaps another).
// It cannot tell (ok false) when the Schedule's ID is unknown, a retry may
// carry the key (a Nack with a delay was sent before the answer), a
// Reschedule in doubt was sent before the answer, or one answered
// RESCHEDULED overlaps the call or another such. self, if not nil, is the
// call itself.
func (s *keyState) keyTarget(self *Reschedule, sent, answered time.Time) (string, bool) {
	if s.sched == nil || s.sched.ID == "" || s.retried(answered) {
		return "", false
	}
	var chain []*Reschedule
	for _, r := range s.rescheds {
		if r == self || !r.moves() || !r.Sent.Before(answered) {
			continue
		}
		if r.Outcome == InDoubt || !r.Answered.Before(sent) {
			return "", false
		}
		chain = append(chain, r)
	}
	slices.SortFunc(chain, func(a, b *Reschedule) int { return a.Sent.Compare(b.Sent) })
	id := s.sched.ID
	for i, r := range chain {
		if i > 0 && !chain[i-1].Answered.Before(r.Sent) {
			return "", false
		}
		id = r.NewID
	}
	return id, true
}

// judgeCancels holds each Cancel answered cancelled to I7: the
// incarnation it named is never delivered. By ID that is the ID named,
// and when it is the ID Schedule answered and no Reschedule may have
// moved it before the answer, every delivery of the message (all of them
// would descend from it), but one returned before the answer of an
// incarnation a Nack had given back before it: a Cancel by the first ID
// acts on the retry that carries the message now. By key it is keyTarget's incarnation, and then
// every delivery (none of the chain was delivered: each link was
// rescheduled truthfully, and the last cancelled); when keyTarget cannot
// tell, the Cancel is not judged (counted). A delivery returned after the
// answer is VAfterCancel, one returned before it VCancelUntruthful.
func (s *keyState) judgeCancels(key string, c *Counts) []Violation {
	var out []Violation
	for _, x := range s.cancels {
		if x.ByKey {
			c.CancelByKey++
		}
		if x.Outcome != OK || x.Answer != CancelCancelled {
			continue
		}
		target, all := x.ID, false
		if x.ByKey {
			t, ok := s.keyTarget(nil, x.Sent, x.Answered)
			if !ok {
				c.CancelByKeyUnjudged++
				continue
			}
			target, all = t, true
		} else {
			all = s.sched != nil && target == s.sched.ID && !s.mayMove(x.Answered, target)
		}
		how := "Cancel"
		if x.ByKey {
			how = "Cancel by key"
		}
		for _, d := range s.deliveries {
			if !all && d.ID != target {
				continue
			}
			v := Violation{Key: key, ID: d.ID, Cycle: d.Cycle, At: d.Received}
			if !d.Received.After(x.Answered) && s.nackedBefore(d.ID, x.Answered) {
				// A Cancel by the first ID acts on the message where it is
				// now: the retry a Nack of this incarnation made.
				continue
			}
			if d.Received.After(x.Answered) {
				v.Kind = VAfterCancel
				v.Detail = fmt.Sprintf("received %v after %s (cycle %d) answered cancelled", d.Received.Sub(x.Answered).Round(time.Millisecond), how, x.Cycle)
			} else {
				v.Kind = VCancelUntruthful
				v.At = x.Answered
				v.Detail = fmt.Sprintf("%s (cycle %d) answered cancelled %v after a Receive had returned it", how, x.Cycle, x.Answered.Sub(d.Received).Round(time.Millisecond))
			}
			out = append(out, v)
		}
	}
	return out
}

// ended reports whether a Cancel answered cancelled ended the message's
// life: one by key (it names the latest incarnation), or one by ID that no
// Reschedule may have moved before its answer. maybe: one by ID that a
// Reschedule may have moved (its "cancelled" may be the reschedule's
// doing): never delivered is then allowed too.
func (s *keyState) ended() (ended, maybe bool) {
	for _, x := range s.cancels {
		if x.Outcome != OK || x.Answer != CancelCancelled {
			continue
		}
		if x.ByKey || !s.mayMove(x.Answered, x.ID) {
			return true, true
		}
		maybe = true
	}
	return false, maybe
}

// floor returns the earliest harness-clock time d may be handed out
// (before the skew allowance), and what it comes from:
//
//   - the ID Schedule answered (or, for a Schedule in doubt, a first
//     attempt): the Schedule's NotBefore;
//   - a replacement a Reschedule answered: that Reschedule's NotBefore;
//   - a redriven copy: none (redrive rules);
//   - anything else, a retry or the replacement of a Reschedule in doubt:
//     for a retry (if a Nack with a delay was sent before it was
//     received) the earliest time any incarnation was due (Schedule's,
//     and the Reschedules' sent before it was received), raised to the
//     earliest such Nack's sending plus its delay (a Nack of another ID
//     on d's topic: one of d's own ID made no retry of d, and a dead
//     letter on the .dlq topic is made at once, whatever the delay); for
//     a replacement of a
//     Reschedule in doubt its NotBefore; the earlier of what may explain
//     it (if nothing does, the earliest time any incarnation was due).
//
// In a cluster (d.StreamSeq set) the server's own deliver_at is a floor
// too, and so is, for a redelivery of the same stream copy, each Nack with
// a delay of that copy answered OK before the Receive was sent: its sending
// plus the delay (JetStream holds the message back, under the same ID).
func (s *keyState) floor(d *Delivery) (time.Time, string) {
	sc := s.sched
	nb, what := time.Time{}, ""
	switch r := s.replacement(d.ID); {
	case d.RedriveOf != "":
		return time.Time{}, "redriven"
	case (sc.ID != "" && d.ID == sc.ID) || (sc.ID == "" && d.ID == d.OriginID):
		nb, what = sc.NotBefore, sc.Kind
	case r != nil && r.Mode == "edit":
		nb, what = s.editFloor(r), "rescheduled edit"
	case r != nil:
		nb, what = r.NotBefore, "rescheduled "+r.Mode
	default:
		base := sc.NotBefore
		var doubt time.Time
		for _, r := range s.rescheds {
			if !r.moves() || !r.Sent.Before(d.Received) {
				continue
			}
			base = minTime(base, r.NotBefore)
			if r.Outcome == InDoubt {
				doubt = minTime(doubt, r.NotBefore)
			}
		}
		var retry time.Time
		for _, x := range s.settles {
			if x.Kind == Nack && x.NackDelay > 0 && x.Outcome != Rejected && x.Sent.Before(d.Received) &&
				x.ID != d.ID && x.Topic == d.Topic {
				retry = minTime(retry, x.Sent.Add(x.NackDelay))
			}
		}
		switch {
		case !retry.IsZero():
			nb, what = base, sc.Kind
			if retry.After(nb) {
				nb = retry
			}
			if !doubt.IsZero() && doubt.Before(nb) {
				nb, what = doubt, "rescheduled in doubt"
			}
		case !doubt.IsZero():
			nb, what = doubt, "rescheduled in doubt"
		default: // nothing explains it (VIDMismatch says so): the earliest time
			nb, what = base, sc.Kind
		}
	}
	if d.StreamSeq != 0 && d.DeliverAt.After(nb) {
		// The server's own delivery time (its clock at arrival plus the
		// delay) is a promise too.
		nb = d.DeliverAt
	}
	if d.StreamSeq != 0 {
		for _, x := range s.settles {
			if x.Kind == Nack && x.NackDelay > 0 && x.Outcome == OK && x.StreamSeq == d.StreamSeq && x.Topic == d.Topic &&
				x.Answered.Before(d.Issued) && x.Sent.Add(x.NackDelay).After(nb) {
				nb, what = x.Sent.Add(x.NackDelay), "nacked with delay"
			}
		}
	}
	return nb, what
}

// editFloor is the earliest time the replacement of Edit r may be due.
// An Edit keeps the time of the incarnation it replaces, which is not
// always the one the workload saw when it chose the message: a Reschedule
// of the key sent before the Edit was answered may have moved it first
// (a by-key "earlier" and an Edit racing, applied in that order, leave the
// edited content at the earlier time). So: the earliest of the time the
// workload recorded and every such Reschedule's NotBefore.
func (s *keyState) editFloor(r *Reschedule) time.Time {
	nb := r.NotBefore
	for _, o := range s.rescheds {
		if o != r && o.moves() && o.Sent.Before(r.Answered) {
			nb = minTime(nb, o.NotBefore)
		}
	}
	return nb
}

// minTime is the earlier of a and b, a zero time counting as none.
func minTime(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}

// judgeIDs checks each delivery's ID and origin against the Schedule's
// answer (VIDMismatch), and records it as a delivery of message n in
// msgs, due at its floor: one msgs counts early is VEarly.
func (s *keyState) judgeIDs(key string, n uint64, msgs *deliverycheck.Counter, p CheckParams) []Violation {
	var out []Violation
	sc := s.sched
	for _, d := range s.deliveries {
		first := d.ID == d.OriginID
		if sc.Outcome == OK && ((first && d.ID != sc.ID) || (!first && d.OriginID != sc.ID)) {
			out = append(out, Violation{Kind: VIDMismatch, Key: key, ID: d.ID, Cycle: d.Cycle, At: d.Received,
				Detail: fmt.Sprintf("delivered as id %s origin %s; Schedule answered %s", d.ID, d.OriginID, sc.ID)})
		}
		nb, what := s.floor(d)
		if _, early := msgs.Record(n, nb, d.Received); early {
			out = append(out, Violation{Kind: VEarly, Key: key, ID: d.ID, Cycle: d.Cycle, At: d.Received,
				Detail: fmt.Sprintf("received %v before it was due (skew bound %v, %s %s)", nb.Sub(d.Received).Round(time.Microsecond), p.SkewBound, what, attemptWord(d.Attempt))})
		}
	}
	return out
}
