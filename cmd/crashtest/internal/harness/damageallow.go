package harness

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
	al := allowance{lose: map[string]string{}, replay: map[string]string{}}
	bySeq, byID := map[int64]string{}, map[string]string{}
	for _, s := range ev.Schedules {
		if s.Outcome == OK && s.ID != "" {
			bySeq[seqOf(s.ID)] = s.Key
			byID[s.ID] = s.Key
		}
	}
	for _, d := range evs {
		label := fmt.Sprintf("%s (cycle %d)", d.Kind, d.Cycle)
		if d.Outcome == RestartStarted && d.Kind == DSchedFlip && !d.CommitlogHolds {
			for _, k := range d.Held.Keys {
				al.lose[k] = label + ": its commitlog record was already deleted"
			}
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
	hi = math.MaxInt64
	for _, s := range ev.Schedules {
		if s.Outcome != OK || s.ID == "" {
			continue
		}
		seq := seqOf(s.ID)
		if s.Answered.Before(c.Sent) && seq+1 > lo {
			lo = seq + 1
		}
		if s.Sent.After(c.Answered) && seq < hi {
			hi = seq
		}
	}
	return lo, hi
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
	lossKinds   = []string{VLost, VLostRetry, VLostRedelivery, VNotDeadLettered}
	replayKinds = []string{VAfterAck, VAfterCancel, VAfterDeadLetter}
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
	for i := range vs {
		v := &vs[i]
		if slices.Contains(replayKinds, v.Kind) && v.Damage == "" {
			if d, ok := due[v.Key]; ok {
				for j := range al.buckets {
					b := &al.buckets[j]
					if d < b.from || d >= b.to || (!b.keys[v.Key] && int64(len(b.keys)) >= b.upTo) {
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

// ackedBefore reports whether key had an Ack answered OK on topic before at.
func ackedBefore(ev Events, key, topic string, at time.Time) bool {
	for _, x := range ev.Settles {
		if x.Key == key && x.Topic == topic && x.Kind == Ack && x.Outcome == OK && x.Answered.Before(at) {
			return true
		}
	}
	return false
}

