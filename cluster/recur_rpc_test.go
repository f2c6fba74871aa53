package cluster

import (
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/client"
	"github.com/hourglassmq/hourglass/recur"
)

// A schedule forwarded to its partition's owner and answered back keeps
// its jitter, overlap and calendar fields and its overlap counters.
func TestForwardedScheduleFields(t *testing.T) {
	d := &recur.Def{Name: "s", Topic: "t", Spec: "@daily", JitterMs: 1500, Overlap: recur.BufferOne, Calendar: "office",
		CalendarPolicy: recur.CalendarShift, Misfire: recur.FireAll}
	cs := clientSchedule(d)
	if cs.Jitter != 1500*time.Millisecond || cs.Overlap != client.OverlapBufferOne || cs.Calendar != "office" || cs.CalendarPolicy != client.CalendarShift {
		t.Fatalf("clientSchedule = %+v", cs)
	}
	held := time.UnixMilli(1_900_000_000_000)
	in, err := infoOf(client.ScheduleInfo{Schedule: cs, Skipped: 3, Buffered: held})
	if err != nil {
		t.Fatal(err)
	}
	got := in.Def
	if got.JitterMs != 1500 || got.Overlap != recur.BufferOne || got.Calendar != "office" || got.CalendarPolicy != recur.CalendarShift ||
		got.Skipped != 3 || got.BufferedMs != held.UnixMilli() {
		t.Fatalf("infoOf = %+v", got)
	}
}
