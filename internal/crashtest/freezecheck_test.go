package crashtest

import (
	"testing"
	"time"
)

// TestCheckFreezes judges deliveries against a frozen pause of 2 s: a
// message scheduled before it and due after it began is early before its
// time plus 2 s; one scheduled during it, one due before it, and one
// after a plain pause are not judged by it.
func TestCheckFreezes(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	sched := func(key string, answered, notBefore int) Schedule {
		return Schedule{Key: key, Topic: "ct0", Sent: at(answered - 1), Answered: at(answered), Outcome: OK, ID: key, NotBefore: at(notBefore)}
	}
	deliver := func(key string, received int) Delivery {
		return Delivery{Key: key, ID: key, OriginID: key, Topic: "ct0", Issued: at(received - 10), Received: at(received)}
	}
	ev := Events{
		Schedules: []Schedule{
			sched("early", 0, 1500), sched("ontime", 0, 1500), sched("during", 1200, 1500), sched("duebefore", 0, 900),
		},
		Policies: []PolicyChange{
			{Topic: "ct0", Paused: true, Freeze: true, Sent: at(999), Answered: at(1000), Outcome: OK},
			{Topic: "ct0", Paused: false, Sent: at(3000), Answered: at(3001), Outcome: OK},
		},
		Deliveries: []Delivery{
			deliver("early", 3100),  // due 1500 + 2000 = 3500
			deliver("ontime", 3600), // after 3500
			deliver("during", 3100), // scheduled while frozen: keeps its time
			deliver("duebefore", 3100),
		},
	}
	var c Counts
	vs := checkFreezes(ev, CheckParams{SkewBound: time.Millisecond}, &c)
	if len(vs) != 1 || vs[0].Key != "early" || vs[0].Kind != VFrozenEarly || c.Frozen != 1 || c.FrozenEarly != 1 {
		t.Fatalf("violations %+v, counts frozen %d early %d; want only early, 1 frozen pause", vs, c.Frozen, c.FrozenEarly)
	}
	ev.Policies[0].Freeze = false
	if vs := checkFreezes(ev, CheckParams{SkewBound: time.Millisecond}, &Counts{}); len(vs) != 0 {
		t.Errorf("a plain pause: %+v; want nothing judged", vs)
	}
}
