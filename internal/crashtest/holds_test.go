package crashtest

import (
	"slices"
	"testing"
	"time"
)

func TestHoldRequests(t *testing.T) {
	const held = `time=2026-12-02T04:37:03.667Z level=ERROR msg="engine: bucket 2026-12-02T04:37:04Z: the dispatch log /d/schedule/20261202T043704Z.done is damaged (1 regions, up to 1 done-records unknown, the first at offset 104): 99 of its messages are held back, neither delivered nor dropped; stop the server and run ` + "`hourglass repair --data-dir /d`" + ` to choose (--assume-delivered or --assume-pending)" bucket=2026-12-02T04:37:04Z held=99`
	const refusal = `time=2026-12-02T04:36:50.746Z level=ERROR msg="refusing to serve: recovery found what an operator must decide" err="bucket 2026-12-02T04:36:50Z: ... 131 of its messages are held back, neither delivered nor dropped; stop the server and run ` + "`hourglass repair --data-dir /d`" + ` to choose"`
	const info = `time=2026-12-02T04:37:03.667Z level=INFO msg="bucket preloaded" held back=0`
	log := refusal + "\n" + info + "\n" + held + "\n" + held + "\n"
	got := holdRequests(log)
	if want := []string{held}; !slices.Equal(got, want) {
		t.Fatalf("holdRequests = %q, want only the running server's request, once", got)
	}
	if got := holdRequests(refusal + "\n"); len(got) != 0 {
		t.Fatalf("a refusal to start is judged by the start, not answered as a hold: %q", got)
	}
}

func TestMergeRepair(t *testing.T) {
	a := &RepairResult{Lost: []LostSpan{{File: "a", From: 1, To: 2}}}
	b := &RepairResult{ExitCode: 3, Decision: "assume-pending", BucketsAgain: []BucketAgain{{File: "x.done", UpTo: 9}}}
	if got := mergeRepair(nil, b); got != b {
		t.Fatalf("mergeRepair(nil, b) = %v, want b", got)
	}
	m := mergeRepair(a, b)
	if len(m.Lost) != 1 || len(m.BucketsAgain) != 1 || m.ExitCode != 3 || m.Decision != "assume-pending" {
		t.Fatalf("merged = %+v", m)
	}
	if len(a.BucketsAgain) != 0 {
		t.Fatal("mergeRepair changed its first argument")
	}
}

// A Nack with a delay acks the queue's copy: a lost ack log may hand it
// out again like an acked one; a Nack without a delay acks nothing.
func TestAckedBeforeCountsNackWithDelay(t *testing.T) {
	at := time.Unix(100, 0)
	settle := func(kind SettleKind, delay time.Duration) Events {
		return Events{Settles: []Settle{{Key: "k", Topic: "t", Kind: kind, NackDelay: delay, Outcome: OK, Answered: at.Add(-time.Second)}}}
	}
	for _, tc := range []struct {
		name string
		ev   Events
		want bool
	}{
		{"ack", settle(Ack, 0), true},
		{"nack_with_delay", settle(Nack, time.Second), true},
		{"nack_at_once", settle(Nack, 0), false},
	} {
		if got := ackedBefore(tc.ev, "k", "t", at); got != tc.want {
			t.Errorf("%s: ackedBefore = %v, want %v", tc.name, got, tc.want)
		}
		if ackedBefore(tc.ev, "k", "t", at.Add(-2*time.Second)) {
			t.Errorf("%s: a settle answered after at counts", tc.name)
		}
	}
}
