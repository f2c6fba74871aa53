package crashtest

import (
	"fmt"
	"slices"
	"time"

	"github.com/hourglassmq/hourglass/queue"
)

// Violations of expiry (expirywork.go).
const (
	// VExpiredDelivered: handed out on its expiry topic by a Receive sent
	// after its expiry (plus the skew and precision bounds).
	VExpiredDelivered = "delivered-after-expiry"
	// VExpiredAcked: an Ack on ExpiryAckTopic (expiry_unacked) sent after
	// the message's expiry was answered OK.
	VExpiredAcked = "acked-after-expiry"
	// VExpiredEarly: a dead letter with reason expired received before its
	// message's expiry.
	VExpiredEarly = "expired-early"
	// VExpiredNotDropped: a message of ExpiryDropTopic (expiry_drop)
	// dead-lettered with reason expired.
	VExpiredNotDropped = "expired-not-dropped"
	// VExpiryLost: a message of ExpiryAckTopic answered OK neither acked
	// there nor dead-lettered.
	VExpiryLost = "expiring-lost"
)

// ExpiryEvents is a copy of the expiry history.
type ExpiryEvents struct {
	Policies   bool // the topics' policies were set (answered OK)
	Schedules  []ExpirySchedule
	Deliveries []ExpiryDelivery
	Settles    []ExpirySettle
}

// expiryResult is what expiryCheck found: violations, and the bodies
// owed an end.
type expiryResult struct {
	violations []Violation
	lost       []string
}

// expiryCheck judges the expiry history; slack bounds the clocks' skew
// and precision. Always: nothing handed out on an expiry topic by a
// Receive sent after its expiry (VExpiredDelivered), no dead letter with
// reason expired received before it (VExpiredEarly). With the topics'
// policies set and whole (whole: no damage or cut may have lost a policy
// record, an ack or a message): no Ack on ExpiryAckTopic sent after the
// expiry answered OK (VExpiredAcked), nothing of ExpiryDropTopic
// dead-lettered as expired (VExpiredNotDropped), and every message of
// ExpiryAckTopic answered OK ends acked there or dead-lettered
// (VExpiryLost, listed in lost; reported only with final).
func expiryCheck(ev ExpiryEvents, slack time.Duration, whole, final bool) expiryResult {
	var res expiryResult
	sched := map[string]*ExpirySchedule{}
	for i := range ev.Schedules {
		s := &ev.Schedules[i]
		if s.Outcome != Rejected {
			sched[s.Body] = s
		}
	}
	acked := map[string]bool{} // receipts an Ack may have acked (answered OK or in doubt)
	for _, x := range ev.Settles {
		if x.Outcome != Rejected {
			acked[x.Receipt] = true
		}
	}
	judged := whole && ev.Policies
	ended := map[string]bool{}
	byReceipt := map[string]*ExpiryDelivery{}
	for i := range ev.Deliveries {
		d := &ev.Deliveries[i]
		s := sched[d.Body]
		if s == nil {
			continue
		}
		byReceipt[d.Receipt] = d
		switch {
		case d.Topic == s.Topic:
			if acked[d.Receipt] {
				ended[d.Body] = true
			}
			if d.Issued.After(s.ExpireAt.Add(slack)) {
				res.violations = append(res.violations, Violation{Kind: VExpiredDelivered, Key: d.Body, At: d.Received,
					Detail: fmt.Sprintf("handed out on %s by a Receive sent %v after its expiry", d.Topic, d.Issued.Sub(s.ExpireAt).Round(time.Millisecond))})
			}
		case d.Topic == s.Topic+queue.DLQSuffix:
			ended[d.Body] = true
			if d.Reason != queue.ReasonExpired {
				continue
			}
			if d.Received.Add(slack).Before(s.ExpireAt) {
				res.violations = append(res.violations, Violation{Kind: VExpiredEarly, Key: d.Body, At: d.Received,
					Detail: fmt.Sprintf("dead-lettered as expired, received %v before its expiry", s.ExpireAt.Sub(d.Received).Round(time.Millisecond))})
			}
			if judged && s.Topic == ExpiryDropTopic {
				res.violations = append(res.violations, Violation{Kind: VExpiredNotDropped, Key: d.Body, At: d.Received,
					Detail: "dead-lettered with reason expired on a topic whose policy drops expired messages"})
			}
		}
	}
	if !judged {
		return res
	}
	for _, x := range ev.Settles {
		d := byReceipt[x.Receipt]
		if x.Outcome != OK || d == nil || x.Topic != ExpiryAckTopic {
			continue
		}
		if s := sched[d.Body]; x.Sent.After(s.ExpireAt.Add(slack)) {
			res.violations = append(res.violations, Violation{Kind: VExpiredAcked, Key: d.Body, At: x.Answered,
				Detail: fmt.Sprintf("an Ack sent %v after its expiry answered OK; the topic expires messages not acked by then", x.Sent.Sub(s.ExpireAt).Round(time.Millisecond))})
		}
	}
	for _, s := range ev.Schedules {
		if s.Outcome == OK && s.Topic == ExpiryAckTopic && !ended[s.Body] {
			res.lost = append(res.lost, s.Body)
		}
	}
	slices.Sort(res.lost)
	if final {
		for _, b := range res.lost {
			res.violations = append(res.violations, Violation{Kind: VExpiryLost, Key: b, Detail: "answered OK, never acked on its topic nor dead-lettered"})
		}
	}
	return res
}
