package crashtest

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// dlqJudge holds one message's deliveries split by topic, for the
// dead-letter rules of Check.
type dlqJudge struct {
	p     CheckParams
	maxA  int
	sc    *Schedule
	dlq   string         // the message's dead-letter topic
	orig  []*Delivery    // on its topic, by Received
	dead  []*Delivery    // on its dead-letter topic, by Received
	doubt []*ReceiveFail // Receives of its topic that failed in doubt after its Schedule was sent
}

// judge applies the rules that need no walk of the message's life: the
// attempt counts, dead-lettered too early, handed out on its topic after
// the dead letter was acked. Key and Cut are left to the caller.
func (j *dlqJudge) judge(settles []*Settle, c *Counts) []Violation {
	var out []Violation
	for _, d := range j.orig {
		if int(d.Attempt) >= j.maxA {
			out = append(out, Violation{Kind: VNotDeadLettered, ID: d.ID, Cycle: d.Cycle, At: d.Received,
				Detail: fmt.Sprintf("handed out on %s with attempt %d; max-attempts %d dead-letters a message when a failure brings it there", d.Topic, d.Attempt, j.maxA)})
			break
		}
	}
	for _, d := range j.dead {
		n, u := j.leasesBefore(d.Received)
		var why string
		switch {
		case int(d.Attempt) < j.maxA:
			why = fmt.Sprintf("with attempt %d", d.Attempt)
		case n+u < j.maxA:
			why = fmt.Sprintf("after %d deliveries on %s and %d Receives of it that failed in doubt", n, j.sc.Topic, u)
		default:
			continue
		}
		out = append(out, Violation{Kind: VDeadLetterEarly, ID: d.ID, Cycle: d.Cycle, At: d.Received,
			Detail: fmt.Sprintf("handed out on %s %s; max-attempts %d dead-letters a message after its %dth failed delivery", d.Topic, why, j.maxA, j.maxA)})
		break
	}
	// Handed out on its topic after its dead letter was acked.
	for _, d := range j.orig {
		var ack *Settle
		for _, x := range settles {
			if x.Topic == j.dlq && x.ID == d.ID && x.Kind == Ack && x.Outcome == OK && x.Answered.Before(d.Issued) {
				ack = x
				break
			}
		}
		if ack == nil {
			continue
		}
		if first := j.firstLease(d.ID); d.Cycle > first {
			c.AfterDeadLetterRestart++
			continue
		}
		if j.p.Cluster && j.storedTwice(d) {
			// Two copies of the ID in the delivery stream (a republish
			// after a takeover; counted as stream duplicates): each has
			// its own deliveries and is dead-lettered on its own, and the
			// dead letter does not say which copy it came from.
			continue
		}
		out = append(out, Violation{Kind: VAfterDeadLetter, ID: d.ID, Cycle: d.Cycle, At: d.Received,
			Detail: fmt.Sprintf("handed out on %s by a Receive sent %v after the Ack of its dead letter on %s (cycle %d) was answered OK, with no restart since its first lease (cycle %d)",
				d.Topic, d.Issued.Sub(ack.Answered).Round(time.Millisecond), j.dlq, ack.Cycle, j.firstLease(d.ID))})
	}
	return out
}

// storedTwice reports whether the message was handed out on its topic
// from a copy in the delivery stream other than d's (--cluster: the
// deliveries' StreamSeq).
func (j *dlqJudge) storedTwice(d *Delivery) bool {
	for _, e := range j.orig {
		if e.ID == d.ID && e.StreamSeq != 0 && d.StreamSeq != 0 && e.StreamSeq != d.StreamSeq {
			return true
		}
	}
	return false
}

// leasesBefore counts the message's deliveries on its topic by Receives
// sent before t (n), and its topic's Receives that failed in doubt, sent
// before t (u): each of those may have leased it once, unseen.
func (j *dlqJudge) leasesBefore(t time.Time) (n, u int) {
	for _, d := range j.orig {
		if d.Issued.Before(t) {
			n++
		}
	}
	for _, f := range j.doubt {
		if f.Issued.Before(t) {
			u++
		}
	}
	return n, u
}

// firstLease is the earliest server life (cycle) in which id may have been
// leased on the message's topic: its first recorded delivery there, or a
// Receive of the topic that failed in doubt. Dead-lettering id needs such
// a lease, so it happened in that life or later.
func (j *dlqJudge) firstLease(id string) int {
	first := math.MaxInt
	for _, d := range j.orig {
		if d.ID == id {
			first = min(first, d.Cycle)
		}
	}
	for _, f := range j.doubt {
		first = min(first, f.Cycle)
	}
	return first
}

// deadLetteredAgain reports whether d, a delivery on the dead-letter topic
// after a durable ack of its ID there, may come from a second
// dead-lettering: the first one's ack on the topic was lost in a restart,
// so the topic handed the message out again in a later server life than
// its first lease, and before d.
func (j *dlqJudge) deadLetteredAgain(d *Delivery) bool {
	first := j.firstLease(d.ID)
	if d.Cycle <= first {
		return false
	}
	for _, e := range j.orig {
		if e.ID == d.ID && e.Cycle > first && e.Cycle <= d.Cycle && e.Issued.Before(d.Received) {
			return true
		}
	}
	for _, f := range j.doubt {
		if f.Cycle > first && f.Cycle <= d.Cycle && f.Issued.Before(d.Received) {
			return true
		}
	}
	return false
}

// ackedDead reports whether an Ack of the message on its dead-letter topic
// was answered OK or is in doubt.
func (j *dlqJudge) ackedDead(settles []*Settle) bool {
	for _, x := range settles {
		if x.Topic == j.dlq && x.Kind == Ack && x.Outcome != Rejected {
			return true
		}
	}
	return false
}

// notDeadDetail says what became of a poison message that did not end
// acked on its dead-letter topic.
func (j *dlqJudge) notDeadDetail(settles []*Settle) string {
	attempts := make([]string, len(j.orig))
	for i, d := range j.orig {
		attempts[i] = fmt.Sprint(d.Attempt)
	}
	s := fmt.Sprintf("poison message (every delivery failed on purpose): %d deliveries on %s (attempts %s), %d on %s, none acked there; max-attempts %d",
		len(j.orig), j.sc.Topic, strings.Join(attempts, ","), len(j.dead), j.dlq, j.maxA)
	for _, x := range settles {
		if x.Topic == j.sc.Topic && x.Kind == Ack && x.Outcome != Rejected {
			s += fmt.Sprintf("; acked on %s: a consumer got it without its %s header", j.sc.Topic, PoisonHeader)
			break
		}
	}
	return s
}
