package crashtest

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

// What the damages of a run allow (see the top of damagecheck.go), and
// the marking of the violations they allow.

// allowance is what the damages of a run allow, message by message.
type allowance struct {
	lose   map[string]string // key -> the damage that may lose it
	replay map[string]string // key -> the damage that may hand it out again after an ack or a cancel
	// topics may hand out again any message acked OK before at (a lost
	// checkpoint of the topic's ack log, reported by repair).
	topics []topicReplay
	// buckets may hand out again messages due in [from, to) (ms): a
	// dispatch log repair rewrote with entries left pending.
	buckets []bucketReplay
	// breaks: a recurring schedule's definition (by body) whose run of
	// occurrences may have been broken (recurAllowance).
	breaks map[string][]chainBreak
	// occLost: single occurrences ("<body>@<ms>") lost from the queue.
	occLost map[string]string
	// armedLost: commitlog spans repair reported lost. An occurrence
	// whose first ID's record lay in one was armed there: routed to its
	// schedule segment before the loss, it is delivered, while the
	// scheduler's record of having armed it (staged in the catalog only
	// with the next checkpoint) went with the span, so it is armed again
	// under a new ID (crashtest --damage --seed 2, a commitlog-delete).
	armedLost []armedSpan
}

type armedSpan struct {
	from, to int64
	label    string
}

// chainBreak allows the occurrence violations of a definition from the
// first one due in [from, until] (zero: no bound) on.
type chainBreak struct {
	from, until time.Time
	label       string
}

type bucketReplay struct {
	from, to int64
	label    string
	upTo     int64
	keys     map[string]bool
}

type topicReplay struct {
	topic string
	at    time.Time
	label string
	upTo  int64           // at most this many messages (-1: any number)
	keys  map[string]bool // the messages allowed so far
}

// logOf says which log a file named by repair belongs to: "commitlog", or
// "queue-log"/"queue-acks" with the topic ("" if none of them).
func logOf(file, dataDir string) (log, topic string) {
	rel := file
	if r, err := filepath.Rel(dataDir, file); err == nil && filepath.IsAbs(file) {
		rel = r
	}
	parts := strings.Split(filepath.ToSlash(rel), "/")
	for i := range parts {
		switch {
		case parts[i] == "commitlog" && i+1 < len(parts):
			return "commitlog", ""
		case parts[i] == "topics" && i+2 < len(parts) && parts[i+2] == "log":
			return "queue-log", parts[i+1]
		case parts[i] == "topics" && i+2 < len(parts) && parts[i+2] == "acks":
			return "queue-acks", parts[i+1]
		}
	}
	return "", ""
}

// damageAllowance computes what the damages of a run allow (see the top
// of this file): the one allowance of a start, and what each repair
// reported. Nothing else is allowed.
func damageAllowance(evs []DamageEvent, ev Events, dataDir string, seg time.Duration) allowance {
	al := allowance{lose: map[string]string{}, replay: map[string]string{}, breaks: map[string][]chainBreak{}, occLost: map[string]string{}}
	bySeq, byID := map[int64]string{}, map[string]string{}
	for _, s := range ev.Schedules {
		if s.Outcome == OK && s.ID != "" {
			bySeq[seqOf(s.ID)] = s.Key
			byID[s.ID] = s.Key
		}
	}
	// A replacement's ID names its reschedule record: lost, the message
	// both loses its replacement and keeps its old incarnation.
	moved := map[int64]string{}
	for _, x := range ev.Reschedules {
		if x.Outcome == OK && x.Answer == RescheduleRescheduled && seqOf(x.NewID) >= 0 {
			moved[seqOf(x.NewID)] = x.Key
			byID[x.NewID] = x.Key
		}
	}
	for _, d := range evs {
		label := fmt.Sprintf("%s (cycle %d)", d.Kind, d.Cycle)
		if d.Outcome == RestartStarted && d.Kind == DSchedFlip && !d.CommitlogHolds {
			for _, k := range d.Held.Keys {
				al.lose[k] = label + ": its commitlog record was already deleted"
			}
			al.occurrenceHeld(d.Held, true, label+": its commitlog record was already deleted")
		}
		rp := d.Repair
		if rp == nil || d.Undone {
			continue // a repair the harness undid allows nothing
		}
		label += ": reported lost by hourglass repair"
		recOff := d.Base + d.RecOff - commitlogHeader // the damaged record's offset in its log
		for _, sp := range rp.Lost {
			log, _ := logOf(sp.File, dataDir)
			hit := d.Offset >= 0 && recOff >= sp.From && recOff < sp.To && sameFile(sp.File, d.Path, dataDir)
			switch log {
			case "commitlog":
				for seq, k := range bySeq {
					if seq >= sp.From && seq < sp.To {
						al.lose[k] = label
					}
				}
				for seq, k := range moved {
					if seq >= sp.From && seq < sp.To {
						al.lose[k], al.replay[k] = label+" (a reschedule)", label+" (a reschedule)"
					}
				}
				// A Reschedule in doubt, or by key, is bounded like a
				// cancel (below).
				for _, x := range ev.Reschedules {
					if x.moves() && x.Sent.Before(d.At) {
						if lo, hi := opBounds(ev, x.Sent, x.Answered, x.Outcome == OK); lo < sp.To && hi > sp.From {
							al.lose[x.Key], al.replay[x.Key] = label+" (a reschedule the lost span may have held)", label+" (a reschedule the lost span may have held)"
						}
					}
				}
				// A Nack with a delay acks the queue's copy and schedules
				// the retry as a new commitlog record, bounded like a
				// reschedule: lost, the message is neither delivered again
				// nor dead-lettered.
				for _, x := range ev.Settles {
					if x.Kind != Nack || x.NackDelay <= 0 || x.Outcome == Rejected || !x.Sent.Before(d.At) {
						continue
					}
					if lo, hi := opBounds(ev, x.Sent, x.Answered, x.Outcome == OK); lo < sp.To && hi > sp.From {
						al.lose[x.Key] = label + " (a nack's retry the lost span may have held)"
					}
				}
				al.recurAllowance(ev, sp, label)
				al.armedLost = append(al.armedLost, armedSpan{sp.From, sp.To, label + " (the record that armed the occurrence; armed again after the repair)"})
				if hit {
					al.occurrenceHeld(d.Held, true, label)
				}
				if hit {
					for _, id := range d.Held.CancelIDs {
						if k, ok := byID[id]; ok {
							al.replay[k] = label + " (a cancel)"
						}
					}
				}
				// A cancel's record is not named by any answer, but its
				// place in the log is bounded by the schedules around it:
				// those answered before it was sent lie below it, those
				// sent after it was answered above. A cancel that may lie
				// in the lost span may be lost with it.
				for _, c := range ev.Cancels {
					if c.Outcome != OK || c.Answer != CancelCancelled || !c.Answered.Before(d.At) {
						continue
					}
					if lo, hi := cancelBounds(ev, c); lo < sp.To && hi > sp.From {
						al.replay[c.Key] = label + " (a cancel the lost span may have held)"
					}
				}
			case "queue-log":
				if hit {
					for _, k := range d.Held.Keys {
						al.lose[k] = label
					}
					al.occurrenceHeld(d.Held, false, label)
				}
			case "queue-acks":
				if hit && d.Held.What == "ack" {
					for _, k := range d.Held.Keys {
						al.replay[k] = label + " (its ack)"
					}
				}
			}
		}
		for _, b := range rp.BucketsAgain {
			start, err := time.Parse("20060102T150405Z", strings.TrimSuffix(filepath.Base(b.File), ".done"))
			if err != nil {
				continue
			}
			al.buckets = append(al.buckets, bucketReplay{from: start.UnixMilli(), to: start.Add(seg).UnixMilli(), upTo: b.UpTo,
				label: fmt.Sprintf("%s: %s left pending (up to %d messages again)", label, b.File, b.UpTo)})
		}
		for _, t := range rp.AcksLost {
			al.topics = append(al.topics, topicReplay{topic: t.Topic, at: d.At, upTo: t.UpTo,
				label: fmt.Sprintf("%s: acks of topic %s lost (up to %d messages again)", label, t.Topic, t.UpTo)})
		}
		for _, id := range rp.LostIDs {
			if k, ok := byID[id]; ok {
				al.lose[k] = label
			}
		}
		for _, id := range rp.AgainIDs {
			if k, ok := byID[id]; ok {
				al.replay[k] = label + " (may be handed out again)"
			}
		}
	}
	return al
}

// cancelBounds returns offsets [lo, hi) of the commitlog that must hold
// the record of cancel c: above every schedule answered OK before c was
// sent, below every schedule sent after c was answered (hi is the largest
// int64 when there is none).
func cancelBounds(ev Events, c Cancel) (lo, hi int64) {
	return opBounds(ev, c.Sent, c.Answered, true)
}

// opBounds returns offsets [lo, hi) of the commitlog that must hold the
// record of a call sent at sent and answered at answered (answered false:
// in doubt, so unbounded above), as cancelBounds.
func opBounds(ev Events, sent, answered time.Time, ok bool) (lo, hi int64) {
	hi = math.MaxInt64
	for _, s := range ev.Schedules {
		if s.Outcome != OK || s.ID == "" {
			continue
		}
		seq := seqOf(s.ID)
		if s.Answered.Before(sent) && seq+1 > lo {
			lo = seq + 1
		}
		if ok && s.Sent.After(answered) && seq < hi {
			hi = seq
		}
	}
	return lo, hi
}

// appendWindow returns the harness-clock times between which the records
// of the commitlog span sp were appended: after the latest sending of a
// schedule answered below the span, before the earliest answer of one
// above it (zero: no bound).
func appendWindow(ev Events, sp LostSpan) (from, to time.Time) {
	for _, s := range ev.Schedules {
		if s.Outcome != OK || s.ID == "" {
			continue
		}
		switch seq := seqOf(s.ID); {
		case seq < sp.From && s.Sent.After(from):
			from = s.Sent
		case seq >= sp.To && (to.IsZero() || s.Answered.Before(to)):
			to = s.Answered
		}
	}
	return from, to
}

// recurAllowance allows the occurrence violations of every recurring
// schedule definition in force while the records of the lost commitlog
// span sp were appended: the span may have held the record that armed
// its next occurrence (with the definition that recorded the one before
// fired), after which no occurrence is armed until the server's repair
// pass, a minute later, arms one from then on; or a create, update or
// delete. The break comes no later than the last append it may have held
// plus HandoffLead and two of the definition's periods: the lost record
// may have armed an occurrence (due at most a period after that append)
// whose schedule entry survived, so it still fires after the restart,
// but the definition as restored does not name it as armed, so its firing
// arms nothing; the first occurrence missing is one period later again.
func (al *allowance) recurAllowance(ev Events, sp LostSpan, label string) {
	from, to := appendWindow(ev, sp)
	var cnt Counts
	for body, e := range epochsOf(ev, &cnt) {
		if !e.begun() || (!to.IsZero() && e.begin[0].Sent.After(to)) || (e.endOK != nil && e.endOK.Answered.Before(from)) {
			continue
		}
		b := chainBreak{label: label + " (a recurring schedule's record the lost span may have held)"}
		if !to.IsZero() {
			b.until = to.Add(HandoffLead + 2*e.period + time.Second)
		}
		al.breaks[body] = append(al.breaks[body], b)
	}
}

// occurrenceHeld allows what losing the damaged record h costs the
// occurrences it held (IDs and bodies in the same order): with chain
// (the armed occurrence's schedule entry or commitlog record) the run of
// occurrences breaks there; without (its queue message) that occurrence
// alone is lost.
func (al *allowance) occurrenceHeld(h Held, chain bool, label string) {
	for i, body := range h.Keys {
		if _, _, ok := epochOf(body); !ok || i >= len(h.IDs) {
			continue
		}
		id, err := message.ParseID(h.IDs[i])
		if err != nil {
			continue
		}
		t := time.UnixMilli(id.DeliverAt)
		if chain {
			al.breaks[body] = append(al.breaks[body], chainBreak{from: t, until: t, label: label + " (an armed occurrence)"})
		} else {
			al.occLost[fmt.Sprintf("%s@%d", body, id.DeliverAt)] = label + " (an occurrence in the queue)"
		}
	}
}

// sameFile reports whether a (as repair printed it) and b name one file.
func sameFile(a, b, dataDir string) bool {
	if !filepath.IsAbs(a) {
		a = filepath.Join(dataDir, a)
	}
	return filepath.Clean(a) == filepath.Clean(b)
}

// Loss and replay kinds a damage may be allowed to explain.
var (
	lossKinds   = []string{VLost, VLostRetry, VLostRedelivery, VNotDeadLettered, VRescheduledLost}
	replayKinds = []string{VAfterAck, VAfterCancel, VAfterDeadLetter, VAfterReschedule, VRescheduleBoth, VEditOld}
	// breakKinds are what a broken run of occurrences shows.
	breakKinds = []string{VOccurrenceSkipped, VOccurrenceUnexpected, VOccurrenceAfterDelete, VOccurrenceAfterUpdate}
)

// markDamage sets Damage on the violations al allows. Early deliveries,
// phantoms, ID mismatches, reused seqs and the process-level kinds are
// never allowed.
func markDamage(vs []Violation, al allowance, ev Events) {
	due := map[string]int64{} // key -> the first attempt's delivery time, from its ID
	for _, s := range ev.Schedules {
		if id, err := message.ParseID(s.ID); err == nil && s.Outcome == OK {
			due[s.Key] = id.DeliverAt
		}
	}
	al.markBreaks(vs)
	for i := range vs {
		v := &vs[i]
		if slices.Contains(replayKinds, v.Kind) && v.Damage == "" {
			// The entry handed out again is in the bucket of the first
			// attempt's time, or of the violation's own ID (a retry, a
			// replacement, an occurrence).
			dues := []int64{}
			if d, ok := due[v.Key]; ok {
				dues = append(dues, d)
			}
			if id, err := message.ParseID(v.ID); err == nil {
				dues = append(dues, id.DeliverAt)
			}
			for _, d := range dues {
				for j := range al.buckets {
					b := &al.buckets[j]
					if v.Damage != "" || d < b.from || d >= b.to || (!b.keys[v.Key] && int64(len(b.keys)) >= b.upTo) {
						continue
					}
					if b.keys == nil {
						b.keys = map[string]bool{}
					}
					b.keys[v.Key] = true
					v.Damage = b.label
					break
				}
			}
			if v.Damage != "" {
				continue
			}
		}
		switch {
		case v.Kind == VOccurrenceTwice && v.Damage == "":
			// v.ID is the occurrence's first ID (the lowest seq).
			seq := seqOf(v.ID)
			for _, a := range al.armedLost {
				if seq >= a.from && seq < a.to {
					v.Damage = a.label
					break
				}
			}
		case slices.Contains(lossKinds, v.Kind) && al.lose[v.Key] != "":
			v.Damage = al.lose[v.Key]
		case slices.Contains(replayKinds, v.Kind) && al.replay[v.Key] != "":
			v.Damage = al.replay[v.Key]
		case v.Kind == VAfterAck:
			for j := range al.topics {
				t := &al.topics[j]
				if !v.At.After(t.at) || !ackedBefore(ev, v.Key, t.topic, t.at) {
					continue
				}
				if !t.keys[v.Key] && t.upTo >= 0 && int64(len(t.keys)) >= t.upTo {
					continue // more messages than repair said
				}
				if t.keys == nil {
					t.keys = map[string]bool{}
				}
				t.keys[v.Key] = true
				v.Damage = t.label
				break
			}
		}
	}
}

// markBreaks marks the occurrence violations (breakKinds) the breaks
// and lost occurrences of al allow: of a definition, from the first one a
// break allows on (a broken run stays broken until the server's repair
// pass arms a new one from then on, off the old grid perhaps).
func (al *allowance) markBreaks(vs []Violation) {
	idx := []int{}
	for i := range vs {
		if slices.Contains(breakKinds, vs[i].Kind) && vs[i].Damage == "" {
			idx = append(idx, i)
		}
	}
	slices.SortStableFunc(idx, func(a, b int) int { return vs[a].Occ.Compare(vs[b].Occ) })
	broken := map[string]string{}
	for _, i := range idx {
		v := &vs[i]
		if l := broken[v.Key]; l != "" {
			v.Damage = l
			continue
		}
		if l := al.occLost[fmt.Sprintf("%s@%d", v.Key, v.Occ.UnixMilli())]; l != "" && v.Kind == VOccurrenceSkipped && v.Run == 1 {
			v.Damage = l
			continue
		}
		for _, b := range al.breaks[v.Key] {
			if (b.from.IsZero() || !v.Occ.Before(b.from)) && (b.until.IsZero() || !v.Occ.After(b.until)) {
				v.Damage, broken[v.Key] = b.label, b.label
				break
			}
		}
	}
}

// owes reports whether a pending key (a message's, or a recurring
// schedule definition's body) is owed in spite of the damages.
func (al *allowance) owes(key string) bool {
	return al.lose[key] == "" && len(al.breaks[key]) == 0
}

// ackedBefore reports whether key had an Ack, or a Nack with a delay
// (which acks the queue's copy; the retry is scheduled anew), answered OK
// on topic before at.
func ackedBefore(ev Events, key, topic string, at time.Time) bool {
	for _, x := range ev.Settles {
		acks := x.Kind == Ack || x.Kind == Nack && x.NackDelay > 0
		if x.Key == key && x.Topic == topic && acks && x.Outcome == OK && x.Answered.Before(at) {
			return true
		}
	}
	return false
}
