package crashtest

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// clusterDupWindow is the delivery stream's duplicate window in a cluster
// (docs/CLUSTER.md "Managing the queue", Redrive): within it a dead letter
// published again by a Redrive run again (one a kill cut between its
// publish and its ack) is dropped; after it the topic gets it twice.
const clusterDupWindow = 2 * time.Minute

// streamCopy is one copy of a message ID in a cluster's delivery stream on
// one topic: its deliveries, the first (by Received) first.
type streamCopy struct {
	id  string
	seq uint64
	ds  []*Delivery
}

func (k *streamCopy) first() *Delivery { return k.ds[0] }

// copiesOn groups the deliveries of s on topic by stream copy (ID and
// StreamSeq), each ID's copies in stream order.
func (s *keyState) copiesOn(topic string) map[string][]*streamCopy {
	out := map[string][]*streamCopy{}
	for _, d := range s.deliveries { // by Received
		if d.Topic != topic {
			continue
		}
		cs := out[d.ID]
		i := slices.IndexFunc(cs, func(k *streamCopy) bool { return k.seq == d.StreamSeq })
		if i < 0 {
			cs = append(cs, &streamCopy{id: d.ID, seq: d.StreamSeq})
			i = len(cs) - 1
		}
		cs[i].ds = append(cs[i].ds, d)
		out[d.ID] = cs
	}
	for _, cs := range out {
		slices.SortFunc(cs, func(a, b *streamCopy) int { return compareSeq(a.seq, b.seq) })
	}
	return out
}

func compareSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// streamKey names one stream copy: topic, ID and StreamSeq.
type streamKey struct {
	topic, id string
	seq       uint64
}

// judgeRedrivenCluster is judgeRedriven for --cluster, where a Redrive
// publishes the dead letter to its topic again under the same ID, as
// attempt 0 (docs/CLUSTER.md "Managing the queue" and the Receiving
// table's Redrive row): no key names the dead letter, so a redriven copy
// is known by its stream sequence. The first copy of an ID on its topic
// (the lowest StreamSeq) is the message; a later copy whose first
// delivery was received after a Redrive of its dead-letter topic was sent
// (not refused) is a redriven copy, one that no Redrive explains a stream
// duplicate (judged by the caller). It records the redriven copies in
// s.redriven.
//
// The copies of an ID form a chain: each copy is dead-lettered at most
// once (the dead letter's Nats-Msg-Id names the copy's sequence) and each
// dead letter comes back at most once (the redriven copy's Nats-Msg-Id
// names the dead letter's sequence), both within clusterDupWindow. So the
// k-th redriven copy needs every copy before it dead-lettered before it
// was received: each with MaxAttempts leases (its recorded deliveries on
// the topic, plus the topic's Receives that failed in doubt, each of
// which may have leased it unseen). The first copy short of that is
// VRedriveUnfounded when it is the message itself (no dead letter could
// exist), VRedrivenTwice when it is a redriven copy received less than
// clusterDupWindow before (its dead letter was not there yet: one dead
// letter came back twice). A poison copy must end acked on the .dlq (an
// Ack of the ID there sent after it was first received) or redriven again
// (a later copy); else VNotDeadLettered, owed.
func (s *keyState) judgeRedrivenCluster(key string, dl *dlqJudge, redrives map[string][]*Redrive, c *Counts) (out []Violation, owed bool) {
	s.redriven = map[streamKey]bool{}
	byID := s.copiesOn(dl.sc.Topic)
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		cs := byID[id]
		var chain []*streamCopy // the message, then its redriven copies
		for i, k := range cs {
			if i > 0 && !slices.ContainsFunc(redrives[dl.dlq], func(x *Redrive) bool { return x.Sent.Before(k.first().Received) }) {
				continue // a stream duplicate
			}
			chain = append(chain, k)
			if i > 0 {
				s.redriven[streamKey{dl.sc.Topic, id, k.seq}] = true
			}
		}
		c.RedrivenCopies += len(chain) - 1
		for n, k := range chain[1:] {
			d := k.first()
			for j, e := range chain[:n+1] {
				leases := 0
				for _, x := range e.ds {
					if x.Issued.Before(d.Received) {
						leases++
					}
				}
				for _, f := range dl.doubt {
					if f.Issued.Before(d.Received) {
						leases++
					}
				}
				if leases >= dl.maxA {
					continue
				}
				why := fmt.Sprintf("stream copy %d of %s on %s had %d deliveries and Receives of it in doubt before it; a dead letter needs %d", e.seq, id, d.Topic, leases, dl.maxA)
				switch {
				case j == 0:
					out = append(out, Violation{Kind: VRedriveUnfounded, Key: key, ID: d.ID, Cycle: d.Cycle, At: d.Received,
						Detail: fmt.Sprintf("a copy redriven from a dead letter (stream copy %d) handed out on %s: %s", k.seq, d.Topic, why)})
				case d.Received.Sub(e.first().Received) < clusterDupWindow:
					out = append(out, Violation{Kind: VRedrivenTwice, Key: key, ID: d.ID, Cycle: d.Cycle, At: d.Received,
						Detail: fmt.Sprintf("dead letter of %s came back on %s as stream copies %d (cycle %d) and %d (cycle %d), both first attempts: %s", id, d.Topic, e.seq, e.first().Cycle, k.seq, d.Cycle, why)})
				}
				break
			}
		}
		if !s.sched.Poison {
			continue
		}
		for n, k := range chain[1:] {
			if n+2 < len(chain) || slices.ContainsFunc(s.settles, func(x *Settle) bool {
				return x.Topic == dl.dlq && x.ID == id && x.Kind == Ack && x.Outcome != Rejected && x.Sent.After(k.first().Received)
			}) {
				continue
			}
			c.NotDeadLettered++
			owed = true
			d := k.first()
			out = append(out, Violation{Kind: VNotDeadLettered, Key: key, ID: d.ID, Cycle: d.Cycle, At: d.Received,
				Detail: fmt.Sprintf("poison message redriven back to %s as stream copy %d: not dead-lettered again and acked on %s after it, nor redriven again", d.Topic, k.seq, dl.dlq)})
		}
	}
	return out, owed
}
