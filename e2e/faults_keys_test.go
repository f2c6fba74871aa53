package e2e

import (
	"bytes"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/hourglassmq/hourglass/commitlog"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// TestFaultCommitlogSealedKeys: a flipped byte inside a sealed commitlog
// segment (136 keyed messages of 1 MB seal the first 128 MiB one, then 5
// keyed Schedules) stops the start like any commitlog damage: exit 1
// naming the file, the offsets and `hourglass repair`, never a server that
// is ready on it. Repair covers the damage with a skip record; the start
// after it says which offsets were given up, and every keyed Schedule sent
// again, the damaged record's too, is answered with its first ID (stored
// once).
func TestFaultCommitlogSealedKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 136 MB through the server (-short)")
	}
	t.Parallel()
	dir := t.TempDir()
	p := start(t, dir, nil)
	body := bytes.Repeat([]byte("m"), 1_000_000)
	big := func(i int) *hourglassv1.ScheduleRequest {
		return &hourglassv1.ScheduleRequest{Topic: "big", Body: body, IdempotencyKey: fmt.Sprint("big-", i), When: delayMs(3_600_000)}
	}
	var bigIDs []string
	for i := range 136 { // 136 MB: the first 128 MiB segment seals
		bigIDs = append(bigIDs, schedule(t, p.client, big(i)))
	}
	keyed := func(i int) *hourglassv1.ScheduleRequest {
		return &hourglassv1.ScheduleRequest{Topic: "keys", Body: []byte(fmt.Sprint("keyed ", i)), IdempotencyKey: fmt.Sprint("order-", i), When: delayMs(3_600_000)}
	}
	var ids []string
	for i := range 5 {
		ids = append(ids, schedule(t, p.client, keyed(i)))
	}
	sealedEnd := int64(commitlog.DefaultSegmentSize - commitlog.SegmentHeaderSize)
	if s := clSeqOf(t, ids[0]); s < sealedEnd {
		t.Fatalf("the first keyed message is at offset %d, inside the first segment (%d bytes): it did not seal", s, sealedEnd)
	}
	p.stop(syscall.SIGTERM)

	seg := filepath.Join(dir, "commitlog", "00000000000000000000.log")
	const flip = 64<<20 + 12_345
	clFlip(t, seg, flip)
	victim := 0 // the large message the flipped byte is in
	for i, id := range bigIDs {
		if clSeqOf(t, id) <= flip-commitlog.SegmentHeaderSize {
			victim = i
		}
	}
	out := clServeRefuses(t, dir)
	for _, want := range []string{seg, "hourglass repair --data-dir " + dir, fmt.Sprintf("offsets %d..", clSeqOf(t, bigIDs[victim]))} {
		if !strings.Contains(out, want) {
			t.Errorf("serve's refusal lacks %q:\n%s", want, out)
		}
	}
	m := regexp.MustCompile(`offsets (\d+)\.\.(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("serve's refusal names no offsets:\n%s", out)
	}

	rep := clRepair(t, dir)
	if !strings.Contains(rep, fmt.Sprintf("offsets %s..%s", m[1], m[2])) || !strings.Contains(rep, "already routed") {
		t.Errorf("repair does not name the span %s..%s as already routed:\n%s", m[1], m[2], rep)
	}
	p = start(t, dir, nil)
	if want := fmt.Sprintf("commitlog offsets %s..%s were given up by hourglass repair", m[1], m[2]); !strings.Contains(p.log(), want) {
		t.Errorf("the start after repair does not say %q:\n%s", want, p.log())
	}
	for i, want := range ids {
		if got := schedule(t, p.client, keyed(i)); got != want {
			t.Errorf("keyed Schedule %d sent again after repair: %s, want its first ID %s (stored twice)", i, got, want)
		}
	}
	if got := schedule(t, p.client, big(victim)); got != bigIDs[victim] {
		t.Errorf("the damaged record's keyed Schedule sent again after repair: %s, want its first ID %s (stored twice)", got, bigIDs[victim])
	}
	p.stop(syscall.SIGTERM)
}
