package crashtest

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/hourglassmq/hourglass/deliverycheck"
)

// deliveryCounts is what Check counts with deliverycheck, the project's
// one definition of lost, duplicate and early (the benchmarks count
// against it too): msgs numbers the history's messages (message i is the
// i-th key in order; owed ones are marked Acked), copies numbers each
// copy a consumer can be handed again: an ID on a topic (in a cluster,
// with its delivery-stream sequence), a recurring schedule's occurrences'
// too. Check's rules then say which of
// what it counted break a promise and which a crash or an answer in
// doubt explains.
type deliveryCounts struct {
	msgs   *deliverycheck.Counter
	copies *copies
}

// copies counts the deliveries of each copy.
type copies struct {
	n  *deliverycheck.Counter
	of map[string]uint64 // copyKey -> number in n
}

// repeat records d, a delivery of the copy named by copyKey(d, cluster),
// and reports whether it repeats one (deliverycheck's duplicate).
func (cs *copies) repeat(d *Delivery, cluster bool) bool {
	return !cs.n.Delivered(cs.of[copyKey(d, cluster)], time.Time{}, d.Received)
}

// copyKey names the copy d is of.
func copyKey(d *Delivery, cluster bool) string {
	k := d.Topic + "\x00" + d.ID
	if cluster {
		k += "\x00" + strconv.FormatUint(d.StreamSeq, 10)
	}
	return k
}

// newDeliveryCounts numbers the messages of order and the copies their
// deliveries and the occurrences occ are of, after sorting each message's
// deliveries by the time they were received (the first one received is a
// copy's first).
func newDeliveryCounts(order []string, keys map[string]*keyState, occ []*Delivery, slack time.Duration, cluster bool) *deliveryCounts {
	of := map[string]uint64{}
	for _, key := range order {
		s := keys[key]
		slices.SortFunc(s.deliveries, func(a, b *Delivery) int { return a.Received.Compare(b.Received) })
		for _, d := range s.deliveries {
			if k := copyKey(d, cluster); !hasKey(of, k) {
				of[k] = uint64(len(of))
			}
		}
	}
	for _, d := range occ {
		if k := copyKey(d, false); !hasKey(of, k) {
			of[k] = uint64(len(of))
		}
	}
	return &deliveryCounts{msgs: deliverycheck.New(len(order), slack), copies: &copies{n: deliverycheck.New(len(of), 0), of: of}}
}

func hasKey(m map[string]uint64, k string) bool { _, ok := m[k]; return ok }

// total sets c's counts of deliveries from what was counted; occurrences
// are the deliveries of recurring schedules, which checkSchedules judges.
func (dc *deliveryCounts) total(c *Counts, occurrences int) {
	m, k := dc.msgs.Tally(), dc.copies.n.Tally()
	c.Delivered = int(m.Delivered)
	c.Deliveries = int(m.Deliveries) + occurrences
	c.Early += int(m.Early)
	c.Duplicates = int(k.Duplicates)
}

// judgeRepeats judges each delivery that repeats a copy already delivered
// (deliverycheck's duplicate): after a durable Ack (or delayed Nack) of it
// it is VAfterAck, unless a restart dead-lettered the message again;
// otherwise an allowed redelivery, counted by cause. In a cluster it also
// counts the first deliveries of a second copy of an ID in the stream.
func (s *keyState) judgeRepeats(key string, cutNamed bool, cutAcks map[string][]time.Time, dl *dlqJudge,
	dc *deliveryCounts, p CheckParams, c *Counts, add func(Violation)) {
	seqs := map[string]uint64{}
	for _, d := range s.deliveries {
		if p.Cluster {
			// Each copy of the ID in the stream is judged on its own.
			// One that a Redrive made, or the dead letter of one, is
			// no stream duplicate.
			tid := d.Topic + "\x00" + d.ID
			first, ok := seqs[tid]
			switch {
			case !ok:
				seqs[tid] = d.StreamSeq
			case first == d.StreamSeq:
			case s.redriven[streamKey{d.Topic, d.ID, d.StreamSeq}]:
			case d.Topic == dl.dlq && len(s.redriven) > 0:
			default:
				c.DupStream++ // another copy of the ID in the stream
			}
		}
		if !dc.copies.repeat(d, p.Cluster) {
			continue
		}
		var durable, doubt *Settle
		for _, x := range s.settles {
			if x.ID != d.ID || x.Topic != d.Topic || (x.Kind == Nack && (x.NackDelay <= 0 || p.Cluster)) ||
				(p.Cluster && x.StreamSeq != d.StreamSeq) {
				continue
			}
			switch {
			case x.Outcome == OK && x.Answered.Before(d.Issued):
				if durable == nil {
					durable = x
				}
			case x.Outcome == InDoubt && x.Sent.Before(d.Received):
				doubt = x
			}
		}
		switch {
		case durable != nil && d.Topic == dl.dlq && dl.deadLetteredAgain(d):
			c.DupDeadLetterAgain++
		case durable != nil:
			c.DupAfterAck++
			what := "Ack"
			if durable.Kind == Nack {
				what = "Nack (which acks it)"
			}
			cut := cutNamed || ackCutBetween(cutAcks[d.Topic], durable.Answered, d.Received)
			add(Violation{Kind: VAfterAck, Key: key, ID: d.ID, Cycle: d.Cycle, At: d.Received, Cut: cut,
				Detail: fmt.Sprintf("handed out on %s by a Receive sent %v after its %s (cycle %d) was answered OK", d.Topic, d.Issued.Sub(durable.Answered).Round(time.Millisecond), what, durable.Cycle)})
		case doubt != nil:
			c.DupAckInDoubt++
		default:
			c.DupUnacked++
		}
	}
}
