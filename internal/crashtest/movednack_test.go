package crashtest

import (
	"testing"
	"time"
)

// TestCheckMovedIncarnationNacks: a message a frozen pause moved (a new ID,
// the Schedule's as its origin, attempt kept) owes the delay of a Nack of
// its own ID nothing when the same attempt comes again (the Nack was in
// doubt across a kill), nor when its last attempt's Nack dead-letters it
// to <topic>.dlq at once; a retry made by a Nack (another ID) still waits
// out its delay.
func TestCheckMovedIncarnationNacks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		add   func(b *hb)
		early bool
	}{
		{"same_attempt_after_a_nack_in_doubt", func(b *hb) {
			b.sched("x", "X", OK, 0, 100).on("t", "x", "M", "X", 0, 2, 150, 151).settle("x", "M", Nack, 1000, InDoubt, 152, 160).
				on("t", "x", "M", "X", 0, 3, 290, 300).settle("x", "M", Ack, 0, OK, 301, 302)
		}, false},
		{"dead_lettered_at_the_last_attempt", func(b *hb) {
			b.sched("x", "X", OK, 0, 100)
			for i := range 3 {
				ms := 150 + 100*i
				b.on("t", "x", "M", "X", uint32(i), 2, ms, ms+1).settle("x", "M", Nack, 0, OK, ms+2, ms+3)
			}
			b.on("t", "x", "M", "X", 3, 2, 450, 451).settle("x", "M", Nack, 1000, OK, 452, 453).
				on("t.dlq", "x", "M", "X", 4, 2, 460, 461).settleOn("t.dlq", "x", "M", Ack, OK, 2, 462, 463)
		}, false},
		{"retry_of_a_moved_message_before_its_delay", func(b *hb) {
			b.sched("x", "X", OK, 0, 100).on("t", "x", "M", "X", 0, 2, 150, 151).settle("x", "M", Nack, 1000, OK, 152, 153).
				on("t", "x", "R", "X", 1, 2, 290, 300).settle("x", "R", Ack, 0, OK, 301, 302)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := clean()
			tc.add(b)
			res := Check(b.ev, CheckParams{Fsync: "always", SkewBound: time.Millisecond})
			var early int
			for _, v := range res.Violations {
				if v.Kind == VEarly && v.Key == "x" {
					early++
				} else {
					t.Errorf("unexpected violation %v", v)
				}
			}
			if (early > 0) != tc.early {
				t.Errorf("early violations %d, want early %v", early, tc.early)
			}
		})
	}
}
