package e2e

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/hourglassmq/hourglass/engine"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/schedulelog"
)

// TestFrozenBucketRetires: messages frozen on their own, then thawed,
// delivered and acked, leave nothing in the FrozenAt bucket: its segment
// and dispatch log are deleted. A freeze after that makes the bucket anew
// and survives kill -9, and `hourglass backup`, `inspect verify` and
// `repair --dry-run` take the retired and re-made bucket as it is.
func TestFrozenBucketRetires(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, dir, nil)
	sched := filepath.Join(dir, "schedule", schedulelog.Name(engine.FrozenAt))
	done := filepath.Join(dir, "schedule", schedulelog.DoneName(engine.FrozenAt))
	const n = 5
	var frozen []string
	for i := range n {
		// 8 s ahead: the freezes below must come before it is due.
		id := schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "fr", Body: []byte(fmt.Sprint("m", i)), When: delayMs(8000)})
		frozen = append(frozen, freezeMsg(t, p.client, id))
	}
	waitFiles(t, 30*time.Second, true, sched, done) // routed after the answer
	for _, fid := range frozen {
		res, err := p.client.ThawMessage(ctxT(t), connect.NewRequest(&hourglassv1.ThawMessageRequest{Id: fid}))
		if err != nil || res.Msg.Result != hourglassv1.FreezeResult_FREEZE_RESULT_THAWED {
			t.Fatalf("ThawMessage(%s) = %v, %v", fid, res, err)
		}
	}
	for _, r := range receive(t, p.client, "fr", n, time.Minute) {
		ack(t, p.client, "fr", r.m.Id)
	}
	waitFiles(t, 30*time.Second, false, sched, done)
	if st := getState(t, p, frozen[0]).State; st != hourglassv1.MessageState_MESSAGE_STATE_NOT_FOUND {
		t.Fatalf("Get of a thawed message's frozen ID once its bucket retired = %v; want not found", st)
	}
	copyDir := filepath.Join(t.TempDir(), "copy")
	if out, err := runBin(t, nil, "backup", "--to", copyDir, "--addr", p.url); err != nil {
		t.Fatalf("hourglass backup with the FrozenAt bucket retired: %v\n%s", err, out)
	}

	// A freeze after the retirement: a new segment, kept across kill -9.
	late := schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "fr", Body: []byte("late"), When: delayMs(8000)})
	lateFrozen := freezeMsg(t, p.client, late)
	waitFiles(t, 30*time.Second, true, sched, done)
	p.stop(syscall.SIGKILL)
	p = start(t, dir, nil)
	if st := getState(t, p, lateFrozen).State; st != hourglassv1.MessageState_MESSAGE_STATE_PENDING {
		t.Fatalf("after kill -9, Get of the message frozen again = %v; want pending", st)
	}
	receiveNone(t, p.client, "fr", 2*time.Second)
	if res, err := p.client.ThawMessage(ctxT(t), connect.NewRequest(&hourglassv1.ThawMessageRequest{Id: late})); err != nil || res.Msg.Result != hourglassv1.FreezeResult_FREEZE_RESULT_THAWED {
		t.Fatalf("ThawMessage after kill -9 = %v, %v", res, err)
	}
	rs := receive(t, p.client, "fr", 1, time.Minute)
	if string(rs[0].m.Body) != "late" {
		t.Fatalf("received %q; want the message frozen after the retirement", rs[0].m.Body)
	}
	ack(t, p.client, "fr", rs[0].m.Id)
	waitFiles(t, 30*time.Second, false, sched, done)
	p.stop(syscall.SIGTERM)

	for _, d := range []string{dir, copyDir} {
		if out, err := runBin(t, nil, "inspect", "verify", "--data-dir", d); err != nil {
			t.Errorf("inspect verify of %s: %v\n%s", d, err, out)
		}
	}
	out, err := runBin(t, nil, "repair", "--data-dir", dir, "--dry-run")
	if err != nil || strings.Contains(out, filepath.Base(sched)) {
		t.Errorf("repair --dry-run: %v\n%s", err, out)
	}
	// The backup starts, and delivers none of the acked messages again.
	c := start(t, copyDir, nil)
	receiveNone(t, c.client, "fr", 2*time.Second)
	c.stop(syscall.SIGTERM)
}

// freezeMsg freezes id and returns the frozen message's ID.
func freezeMsg(t *testing.T, c hourglassv1connect.HourglassServiceClient, id string) string {
	t.Helper()
	res, err := c.FreezeMessage(ctxT(t), connect.NewRequest(&hourglassv1.FreezeMessageRequest{Id: id}))
	if err != nil || res.Msg.Result != hourglassv1.FreezeResult_FREEZE_RESULT_FROZEN {
		t.Fatalf("FreezeMessage(%s) = %v, %v", id, res, err)
	}
	return res.Msg.Id
}

func fileExists(t *testing.T, path string) bool {
	t.Helper()
	_, err := os.Stat(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// waitFiles polls until every one of paths exists (want) or none does,
// for at most within.
func waitFiles(t *testing.T, within time.Duration, want bool, paths ...string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		wrong := ""
		for _, p := range paths {
			if fileExists(t, p) != want {
				wrong = p
			}
		}
		if wrong == "" {
			return
		}
		if time.Now().After(deadline) {
			if want {
				t.Fatalf("%s not there %v after a freeze into its bucket", wrong, within)
			}
			t.Fatalf("%s still there %v after every message frozen in its bucket was thawed", wrong, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
