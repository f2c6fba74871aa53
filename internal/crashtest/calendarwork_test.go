package crashtest

import (
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/message"
)

// TestWorkCalendar: every day of CalendarName has sixteen spans of 89
// minutes, each followed by a minute off, the last ending 23:59.
func TestWorkCalendar(t *testing.T) {
	c := workCalendar()
	if c.Name != CalendarName || c.TimeZone != "" || len(c.Hours) != 7*16 {
		t.Fatalf("calendar %s in %q with %d spans; want %s, UTC, 112", c.Name, c.TimeZone, len(c.Hours), CalendarName)
	}
	parse := func(s string) time.Duration {
		v, err := time.Parse("15:04", s)
		if err != nil {
			t.Fatal(err)
		}
		return time.Duration(v.Hour())*time.Hour + time.Duration(v.Minute())*time.Minute
	}
	for i, h := range c.Hours {
		start, end := parse(h.Start), parse(h.End)
		if end-start != 89*time.Minute || start != time.Duration(i%16)*90*time.Minute || int(h.Day) != 1+i/16 {
			t.Errorf("span %d: %v %s-%s", i, h.Day, h.Start, h.End)
		}
	}
	if last := c.Hours[15]; last.End != "23:59" {
		t.Errorf("the day's last span ends %s; want 23:59", last.End)
	}
}

// TestAnsweredTime: a message in working time answered OK is due at the
// time its ID carries (the server's answer), never before; an earlier ID
// time does not lower the bound (working time never ends before real
// time); other kinds, and one not answered, keep theirs.
func TestAnsweredTime(t *testing.T) {
	id := func(at time.Time) string { return message.ID{DeliverAt: at.UnixMilli(), Seq: 7}.String() }
	later, earlier := at(5000), at(50)
	for _, tc := range []struct {
		name string
		s    Schedule
		want time.Time
	}{
		{"working_raised", Schedule{Kind: KindWorking, Outcome: OK, ID: id(later), NotBefore: at(100)}, later},
		{"working_not_lowered", Schedule{Kind: KindWorking, Outcome: OK, ID: id(earlier), NotBefore: at(100)}, at(100)},
		{"working_in_doubt", Schedule{Kind: KindWorking, Outcome: InDoubt, NotBefore: at(100)}, at(100)},
		{"delay_kept", Schedule{Kind: "delay", Outcome: OK, ID: id(later), NotBefore: at(100)}, at(100)},
	} {
		answeredTime(&tc.s)
		if !tc.s.NotBefore.Equal(tc.want) {
			t.Errorf("%s: NotBefore %v, want %v", tc.name, tc.s.NotBefore, tc.want)
		}
	}
	// Check holds a message in working time to the answered time.
	b := &hb{}
	s := Schedule{Key: "w", Topic: "t", Cycle: 1, Sent: at(0), Answered: at(1), Outcome: OK, ID: id(later), NotBefore: at(100), Kind: KindWorking}
	answeredTime(&s)
	b.ev.Schedules = append(b.ev.Schedules, s)
	b.deliver("w", id(later), id(later), 1000, 1001).settle("w", id(later), Ack, 0, OK, 1002, 1003)
	res := Check(b.ev, CheckParams{Fsync: "always", SkewBound: time.Millisecond})
	if len(res.Violations) != 1 || res.Violations[0].Kind != VEarly || res.Counts.ScheduledWorking != 1 {
		t.Errorf("a message in working time delivered 4 s before its answered time: %+v, %+v", res.Violations, res.Counts.ScheduledWorking)
	}
}
