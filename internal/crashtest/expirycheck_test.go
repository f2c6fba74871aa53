package crashtest

import (
	"slices"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/queue"
)

// TestExpiryCheck judges a forged expiry history: a Receive sent after
// the expiry that handed the message out, an Ack on the expiry_unacked
// topic sent after the expiry answered OK, a dead letter as expired
// received before the expiry, an expired message of the drop topic
// dead-lettered, and a message neither acked nor dead-lettered are each
// found; the same history within the bounds is not, and without whole
// (damage, a cut, a relaxed fsync) only the first and third are judged.
func TestExpiryCheck(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	sched := func(body, topic string, expire int) ExpirySchedule {
		return ExpirySchedule{Body: body, Topic: topic, Due: at(0), ExpireAt: at(expire), Outcome: OK}
	}
	del := func(body, topic, receipt string, issued int) ExpiryDelivery {
		return ExpiryDelivery{Body: body, Topic: topic, Receipt: receipt, Issued: at(issued), Received: at(issued + 2)}
	}
	dead := func(body, topic string, received int) ExpiryDelivery {
		return ExpiryDelivery{Body: body, Topic: topic + queue.DLQSuffix, Receipt: body + "-dl", Reason: queue.ReasonExpired, Issued: at(received - 2), Received: at(received)}
	}
	ack := func(receipt string, sent int) ExpirySettle {
		return ExpirySettle{Receipt: receipt, Topic: ExpiryAckTopic, Sent: at(sent), Answered: at(sent + 1), Outcome: OK}
	}
	ev := ExpiryEvents{Policies: true,
		Schedules: []ExpirySchedule{sched("late", ExpiryDropTopic, 100), sched("ackedlate", ExpiryAckTopic, 100), sched("early", ExpiryAckTopic, 100),
			sched("notdropped", ExpiryDropTopic, 100), sched("lost", ExpiryAckTopic, 100), sched("fine", ExpiryAckTopic, 100), sched("expired", ExpiryAckTopic, 100)},
		Deliveries: []ExpiryDelivery{
			del("late", ExpiryDropTopic, "r1", 150),
			del("ackedlate", ExpiryAckTopic, "r2", 50),
			dead("early", ExpiryAckTopic, 60),
			dead("notdropped", ExpiryDropTopic, 200),
			del("fine", ExpiryAckTopic, "r3", 99),
			dead("expired", ExpiryAckTopic, 101),
		},
		Settles: []ExpirySettle{ack("r2", 150), ack("r3", 100)},
	}
	kinds := func(vs []Violation) []string {
		var out []string
		for _, v := range vs {
			out = append(out, v.Kind+":"+v.Key)
		}
		slices.Sort(out)
		return out
	}
	res := expiryCheck(ev, 5*time.Millisecond, true, true)
	want := []string{VExpiredAcked + ":ackedlate", VExpiredDelivered + ":late", VExpiredEarly + ":early", VExpiredNotDropped + ":notdropped", VExpiryLost + ":lost"}
	slices.Sort(want)
	if got := kinds(res.violations); !slices.Equal(got, want) {
		t.Errorf("whole: %v; want %v", got, want)
	}
	if !slices.Equal(res.lost, []string{"lost"}) {
		t.Errorf("owed %v; want [lost]", res.lost)
	}
	if got, want := kinds(expiryCheck(ev, 5*time.Millisecond, false, true).violations), []string{VExpiredDelivered + ":late", VExpiredEarly + ":early"}; !slices.Equal(got, want) {
		t.Errorf("not whole: %v; want %v", got, want)
	}
	if got := expiryCheck(ev, 5*time.Millisecond, true, false).violations; slices.ContainsFunc(got, func(v Violation) bool { return v.Kind == VExpiryLost }) {
		t.Errorf("not final: %v; want no expiring-lost before the end", kinds(got))
	}
	// Within the skew bound: nothing.
	if got := kinds(expiryCheck(ev, 100*time.Millisecond, false, true).violations); len(got) != 0 {
		t.Errorf("with a 100 ms bound: %v; want nothing", got)
	}
}
