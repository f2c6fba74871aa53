package crashtest

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Violations of the flow topics' policies (flowwork.go).
const (
	// VFlowConcurrency: more messages of one key of cf-conc leased at
	// once than its flow_concurrency, or two of one key of cf-ord.
	VFlowConcurrency = "flow-concurrency-exceeded"
	// VFlowOrder: a message of a key of cf-ord received before every
	// earlier message of the key answered OK had an ack sent.
	VFlowOrder = "flow-out-of-order"
	// VFlowRate: a second-long window (the server's received_at) held
	// more deliveries of one key of cf-rate than its rate plus burst.
	VFlowRate = "flow-rate-exceeded"
	// VFlowLost: a flow message answered OK never acked.
	VFlowLost = "flow-lost"
)

// FlowEvents is a copy of the flow history.
type FlowEvents struct {
	Schedules  []FlowSchedule
	Deliveries []FlowDelivery
	Settles    []FlowSettle
	Stops      []time.Time
}

// flowResult is what flowCheck found: violations, and the bodies owed.
type flowResult struct {
	violations []Violation
	lost       []string
}

// flowCheck judges the flow history. A lease is taken to hold, on the
// harness clock, from when its Receive returned to the earliest of the
// Ack or Nack sent for its receipt (one the server could have got), the
// Receive's send time plus the lease, and the next stop of the server:
// within what the server held it, so that an overlap found is one the
// server had. With lostOnly it only lists the messages owed.
func flowCheck(ev FlowEvents, lostOnly bool) flowResult {
	var res flowResult
	type tk struct {
		topic, key string
		seq        int
	}
	body := func(k tk) string { return fmt.Sprintf("%s/%s/%d", k.topic, k.key, k.seq) }
	okSched := map[tk]bool{}
	for _, s := range ev.Schedules {
		if s.Outcome == OK {
			okSched[tk{s.Topic, s.Key, s.Seq}] = true
		}
	}
	// The first Ack (or Nack) sent per receipt that the server could have
	// got, and which messages were acked.
	settled := map[string]FlowSettle{}
	for _, s := range ev.Settles {
		if s.Outcome == Rejected {
			continue
		}
		if o, ok := settled[s.Receipt]; !ok || s.Sent.Before(o.Sent) {
			settled[s.Receipt] = s
		}
	}
	firstAck := map[tk]time.Time{}
	for _, d := range ev.Deliveries {
		k := tk{d.Topic, d.Key, d.Seq}
		s, ok := settled[d.Receipt]
		if !ok || s.Nack {
			continue
		}
		if a, seen := firstAck[k]; !seen || s.Sent.Before(a) {
			firstAck[k] = s.Sent
		}
	}
	for k := range okSched {
		if _, ok := firstAck[k]; !ok {
			res.lost = append(res.lost, body(k))
		}
	}
	slices.Sort(res.lost)
	if lostOnly {
		return res
	}
	for _, b := range res.lost {
		res.violations = append(res.violations, Violation{Kind: VFlowLost, Key: b, Detail: "answered OK and never acked"})
	}
	stops := slices.Clone(ev.Stops)
	slices.SortFunc(stops, time.Time.Compare)
	end := func(d FlowDelivery) time.Time {
		e := d.Issued.Add(flowLease)
		if s, ok := settled[d.Receipt]; ok && s.Sent.Before(e) {
			e = s.Sent
		}
		if i, _ := slices.BinarySearchFunc(stops, d.Received, time.Time.Compare); i < len(stops) && stops[i].Before(e) {
			e = stops[i]
		}
		return e
	}
	byKey := map[[2]string][]FlowDelivery{}
	for _, d := range ev.Deliveries {
		byKey[[2]string{d.Topic, d.Key}] = append(byKey[[2]string{d.Topic, d.Key}], d)
	}
	for tkey, ds := range byKey {
		topic, key := tkey[0], tkey[1]
		switch topic {
		case FlowOrderedTopic, FlowConcTopic:
			limit := FlowConc
			if topic == FlowOrderedTopic {
				limit = 1
			}
			type edge struct {
				at time.Time
				d  int
			}
			var edges []edge
			for _, d := range ds {
				if e := end(d); e.After(d.Received) {
					edges = append(edges, edge{d.Received, +1}, edge{e, -1})
				}
			}
			slices.SortFunc(edges, func(a, b edge) int {
				if c := a.at.Compare(b.at); c != 0 {
					return c
				}
				return cmp.Compare(a.d, b.d) // an end before a start at the same instant
			})
			n := 0
			for _, e := range edges {
				if n += e.d; n > limit {
					res.violations = append(res.violations, Violation{Kind: VFlowConcurrency, Key: topic + "/" + key, At: e.at,
						Detail: fmt.Sprintf("%d messages of the key leased at once; the bound is %d", n, limit)})
					break
				}
			}
		}
		switch topic {
		case FlowOrderedTopic:
			// Every earlier message answered OK must have had an ack sent
			// before a later one is received.
			maxSeq := 0
			for _, d := range ds {
				maxSeq = max(maxSeq, d.Seq)
			}
			// need[j]: the latest first-ack of the messages before j
			// (never acked: the end of time).
			never := time.Unix(1<<40, 0)
			need := make([]time.Time, maxSeq+1)
			var latest time.Time
			for j := 0; j <= maxSeq; j++ {
				need[j] = latest
				k := tk{topic, key, j}
				if okSched[k] {
					a, ok := firstAck[k]
					if !ok {
						a = never
					}
					if a.After(latest) {
						latest = a
					}
				}
			}
			slices.SortFunc(ds, func(a, b FlowDelivery) int { return a.Received.Compare(b.Received) })
			for _, d := range ds {
				if n := need[d.Seq]; !n.Before(d.Received) {
					detail := fmt.Sprintf("%s/%s/%d received before every earlier message of the key had its ack sent", topic, key, d.Seq)
					res.violations = append(res.violations, Violation{Kind: VFlowOrder, Key: topic + "/" + key, At: d.Received, Detail: detail})
					break
				}
			}
		case FlowRateTopic:
			at := make([]time.Time, len(ds))
			for i, d := range ds {
				at[i] = d.ServerAt
			}
			slices.SortFunc(at, time.Time.Compare)
			for i, j := 0, 0; i < len(at); i++ {
				for at[i].Sub(at[j]) >= time.Second {
					j++
				}
				if n := i - j + 1; n > FlowRate+FlowBurst {
					res.violations = append(res.violations, Violation{Kind: VFlowRate, Key: topic + "/" + key, At: at[i],
						Detail: fmt.Sprintf("%d deliveries of the key within one second (server clock); the rate %d/s and burst %d allow %d", n, FlowRate, FlowBurst, FlowRate+FlowBurst)})
					break
				}
			}
		}
	}
	return res
}
