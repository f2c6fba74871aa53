package e2e

import (
	"syscall"
	"testing"
	"time"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// TestCancelTruth: through the binary, a second Cancel of a cancelled
// message answers ALREADY_CANCELLED, in a loaded bucket and in one not in
// memory, in the same run, after kill -9 and after a clean restart; a
// delivered message answers ALREADY_DELIVERED throughout. Buckets are a
// day long so that none retires while the test runs.
func TestCancelTruth(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--segment-duration", "24h"}
	p := start(t, dir, nil, args...)
	c := p.client
	const topic = "truth"
	near := schedule(t, c, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("near"), When: delayMs(60_000)})
	far := schedule(t, c, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("far"), When: delayMs(72 * 3600_000)})
	now := schedule(t, c, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("now"), When: delayMs(0)})
	got := receive(t, c, topic, 1, 15*time.Second)
	if got[0].m.Id != now {
		t.Fatalf("received %q (%s), want now (%s)", got[0].m.Body, got[0].m.Id, now)
	}
	ack(t, c, topic, now)
	type want struct {
		name string
		id   string
		want hourglassv1.CancelResult
	}
	check := func(when string, p *proc, cases []want) {
		t.Helper()
		for _, tc := range cases {
			if r := cancelID(t, p.client, tc.id); r != tc.want {
				t.Errorf("%s: %s: Cancel = %v, want %v", when, tc.name, r, tc.want)
			}
		}
	}
	check("first", p, []want{
		{"loaded", near, hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED},
		{"unloaded", far, hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED},
		{"delivered", now, hourglassv1.CancelResult_CANCEL_RESULT_ALREADY_DELIVERED},
	})
	again := []want{
		{"loaded_again", near, hourglassv1.CancelResult_CANCEL_RESULT_ALREADY_CANCELLED},
		{"unloaded_again", far, hourglassv1.CancelResult_CANCEL_RESULT_ALREADY_CANCELLED},
		{"delivered_again", now, hourglassv1.CancelResult_CANCEL_RESULT_ALREADY_DELIVERED},
	}
	check("same run", p, again)
	p.stop(syscall.SIGKILL)
	p = start(t, dir, nil, args...)
	check("after kill -9", p, again)
	p.stop(syscall.SIGTERM)
	p = start(t, dir, nil, args...)
	check("after a clean restart", p, again)
	receiveNone(t, p.client, topic, 300*time.Millisecond)
	p.stop(syscall.SIGTERM)
}
