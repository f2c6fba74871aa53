package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hourglassmq/hourglass/dispatchlog"
)

// TestFaultDoneFlipRefusesStart: a flipped byte in the done log of a bucket
// due at start-up leaves unknown which of its messages were delivered. The
// server refuses to start, naming the file and `hourglass repair`; repair
// refuses to guess and names the flags that decide; with
// --assume-delivered nothing of the bucket is handed over again, and the
// messages the queue already holds (delivered, not acked) are still
// received, each once.
func TestFaultDoneFlipRefusesStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const seg = 30 * time.Second
	args := []string{"--segment-duration", seg.String()}
	// Due in a second, well before its bucket ends (a bucket whose
	// entries are all done is retired after it ends).
	at := time.Now().Add(time.Second)
	if end := at.Truncate(seg).Add(seg); end.Sub(at) < 10*time.Second {
		at = end.Add(time.Second)
	}
	bucket := at.Truncate(seg).UnixMilli()
	p := start(t, dir, nil, args...)
	const topic, n = "doneflip", 20
	clScheduleAt(t, p, topic, "m", n, at)
	got := receive(t, p.client, topic, n, 30*time.Second)
	acked := map[string]bool{}
	for i, r := range got {
		if i%2 == 0 {
			ack(t, p.client, topic, r.m.Id)
			acked[r.m.Id] = true
		}
	}
	p.stop(syscall.SIGTERM)

	done := filepath.Join(dir, "schedule", dispatchlog.Name(bucket))
	st, err := os.Stat(done)
	if err != nil {
		t.Fatalf("the bucket's done log: %v (retired before the stop?)", err)
	}
	// Done-records are 25 bytes after a 104-byte header: flip the seq of
	// the sixth, with valid records after it (damage, not a torn tail).
	const header, recSize = 104, 25
	pos := int64(header + 5*recSize + 10)
	if st.Size() < header+10*recSize {
		t.Fatalf("%s is %d bytes: want at least 10 done-records", done, st.Size())
	}
	clFlip(t, done, pos)

	out := clServeRefuses(t, dir)
	if !strings.Contains(out, dispatchlog.Name(bucket)) || !strings.Contains(out, "hourglass repair") {
		t.Fatalf("serve's refusal does not name %s and `hourglass repair`:\n%s", dispatchlog.Name(bucket), out)
	}

	// Without a decision repair stops and says which flags decide.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rout, err := exec.CommandContext(ctx, binary, "repair", "--data-dir", dir).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(string(rout), "--assume-delivered") {
		t.Fatalf("repair without a decision: %v (want a non-zero exit naming --assume-delivered)\n%s", err, rout)
	}
	if rep := clRepair(t, dir, "--assume-delivered"); !strings.Contains(rep, "kept a copy") {
		t.Fatalf("repair --assume-delivered kept no copy:\n%s", rep)
	}

	p2 := start(t, dir, nil, args...)
	again := receive(t, p2.client, topic, n-len(acked), 30*time.Second)
	seen := map[string]bool{}
	for _, r := range again {
		if acked[r.m.Id] {
			t.Errorf("%s was acked before the damage and is handed out again", r.m.Id)
		}
		if seen[r.m.Id] {
			t.Errorf("%s handed out twice", r.m.Id)
		}
		seen[r.m.Id] = true
	}
	receiveNone(t, p2.client, topic, 500*time.Millisecond)
	p2.stop(syscall.SIGTERM)
}
