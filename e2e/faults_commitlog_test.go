package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hourglassmq/hourglass/commitlog"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/reput"
)

// clServeRefuses runs `hourglass serve` on dataDir, which must refuse to
// start, and returns what it printed.
func clServeRefuses(t *testing.T, dataDir string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "serve", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--segment-duration", "2s").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ctx.Err() != nil {
		t.Fatalf("serve on a damaged directory: %v (want a non-zero exit)\n%s", err, out)
	}
	return string(out)
}

// clRepair runs `hourglass repair` with args and returns its output.
func clRepair(t *testing.T, dataDir string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, append([]string{"repair", "--data-dir", dataDir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("hourglass repair %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// clSeqOf returns the commitlog offset an ID carries.
func clSeqOf(t *testing.T, id string) int64 {
	t.Helper()
	m, err := message.ParseID(id)
	if err != nil {
		t.Fatalf("ParseID(%s): %v", id, err)
	}
	return int64(m.Seq)
}

// clScheduleAt schedules n messages on topic due at at, one call each, and
// returns their IDs.
func clScheduleAt(t *testing.T, p *proc, topic, prefix string, n int, at time.Time) []string {
	t.Helper()
	var ids []string
	for i := range n {
		ids = append(ids, schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte(fmt.Sprintf("%s-%d", prefix, i)),
			When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(at)}}))
	}
	return ids
}

// TestFaultCommitlogFlip: one flipped byte early in the newest commitlog
// segment of a stopped server (inside a record that was routed, with
// records after it, some perhaps not routed) is damage, not a torn tail:
// serve refuses naming the file and `hourglass repair`; repair keeps a
// copy in quarantine and skips the damaged record; the server then starts,
// delivers every message answered OK (the damaged one was routed, so its
// schedule segment still holds it), and new messages get offsets beyond
// every old one.
func TestFaultCommitlogFlip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const topic = "flip"
	due := time.Now().Add(8 * time.Second)
	p := start(t, dir, nil)
	routed := clScheduleAt(t, p, topic, "a", 40, due)
	p.stop(syscall.SIGTERM) // a clean stop: the checkpoint covers them all
	p = start(t, dir, nil)
	later := clScheduleAt(t, p, topic, "b", 40, due)
	p.stop(syscall.SIGKILL) // the checkpoint may lag behind these
	ckpt, _, err := reput.ReadCheckpoint(filepath.Join(dir, "schedule"))
	if err != nil {
		t.Fatal(err)
	}
	if first := clSeqOf(t, routed[1]); ckpt <= first {
		t.Fatalf("checkpoint %d does not cover the message to damage (offset %d)", ckpt, first)
	}
	t.Logf("checkpoint %d; the last message is at offset %d", ckpt, clSeqOf(t, later[len(later)-1]))
	// The newest segment: with 128 MiB segments, the only one.
	segs, _ := filepath.Glob(filepath.Join(dir, "commitlog", "*.log"))
	newest := segs[len(segs)-1]
	base, _ := clParseBase(newest)
	pos := commitlog.SegmentHeaderSize + clSeqOf(t, routed[1]) - base + 12
	clFlip(t, newest, pos)

	out := clServeRefuses(t, dir)
	for _, want := range []string{newest, "hourglass repair --data-dir " + dir, "valid records follow"} {
		if !strings.Contains(out, want) {
			t.Errorf("serve's refusal lacks %q:\n%s", want, out)
		}
	}
	dry := clRepair(t, dir, "--dry-run")
	if !strings.Contains(dry, "would be") {
		t.Errorf("repair --dry-run:\n%s", dry)
	}
	rep := clRepair(t, dir)
	if !strings.Contains(rep, "already routed") {
		t.Errorf("repair does not say the lost record was routed:\n%s", rep)
	}
	kept, _ := filepath.Glob(filepath.Join(dir, "quarantine", "*", "commitlog", filepath.Base(newest)))
	if len(kept) != 1 {
		t.Fatalf("no copy of %s in quarantine (%v):\n%s", newest, kept, rep)
	}

	p = start(t, dir, nil)
	oldMax := clSeqOf(t, later[len(later)-1])
	fresh := clScheduleAt(t, p, topic, "c", 5, due)
	for _, id := range fresh {
		if s := clSeqOf(t, id); s <= oldMax {
			t.Fatalf("a new message has offset %d, not beyond the old end %d: offsets reused", s, oldMax)
		}
	}
	want := map[string]bool{}
	for _, id := range append(append(append([]string{}, routed...), later...), fresh...) {
		want[id] = true
	}
	got := receive(t, p.client, topic, len(want), 30*time.Second)
	for _, r := range got {
		if !want[r.m.Id] {
			t.Errorf("unexpected or duplicate delivery %s (%q)", r.m.Id, r.m.Body)
		}
		delete(want, r.m.Id)
		ack(t, p.client, topic, r.m.Id)
	}
	if len(want) > 0 {
		t.Errorf("%d messages answered OK were not delivered", len(want))
	}
	p.stop(syscall.SIGTERM)
}

// TestFaultCommitlogDeletedActive: deleting the active commitlog segment
// of a stopped server leaves its end behind reput's checkpoint: serve
// refuses (it would reuse offsets); repair recreates the segment as a skip
// record, and new messages get offsets beyond every old one.
func TestFaultCommitlogDeletedActive(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, dir, nil)
	ids := clScheduleAt(t, p, "del", "a", 20, time.Now().Add(time.Hour))
	p.stop(syscall.SIGTERM)
	segs, _ := filepath.Glob(filepath.Join(dir, "commitlog", "*.log"))
	for _, s := range segs {
		os.Remove(s) // the only segment is the active one
	}
	out := clServeRefuses(t, dir)
	for _, want := range []string{filepath.Join(dir, "commitlog"), "missing segment", "hourglass repair --data-dir " + dir} {
		if !strings.Contains(out, want) {
			t.Errorf("serve's refusal lacks %q:\n%s", want, out)
		}
	}
	rep := clRepair(t, dir)
	if !strings.Contains(rep, "a missing segment file") {
		t.Errorf("repair:\n%s", rep)
	}
	p = start(t, dir, nil)
	fresh := clScheduleAt(t, p, "del", "b", 3, time.Now().Add(time.Hour))
	if s, old := clSeqOf(t, fresh[0]), clSeqOf(t, ids[len(ids)-1]); s <= old {
		t.Fatalf("a new message has offset %d, not beyond the old %d: offsets reused", s, old)
	}
	p.stop(syscall.SIGTERM)
}

// TestFaultCommitlogDiskFull: on a full disk (a small tmpfs), Schedule
// answers ResourceExhausted saying the disk is full and naming the file;
// once space is freed, Schedules work again without a restart, without a
// whole free commitlog segment.
func TestFaultCommitlogDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs to fill")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (%v: %s)", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", mnt, err, out)
		}
	})
	dir := filepath.Join(mnt, "data")
	p := start(t, dir, nil)
	defer p.stop(syscall.SIGTERM)
	clScheduleAt(t, p, "full", "a", 5, time.Now().Add(time.Hour))
	filler := filepath.Join(mnt, "filler")
	clFill(t, filler)

	body := make([]byte, 32<<10)
	var lastErr error
	for i := 0; i < 2000 && lastErr == nil; i++ {
		msgs := make([]*hourglassv1.ScheduleRequest, 50)
		for j := range msgs {
			msgs[j] = &hourglassv1.ScheduleRequest{Topic: "full", Body: body, When: delayMs(3_600_000)}
		}
		_, lastErr = p.client.ScheduleBatch(ctxT(t), connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: msgs}))
	}
	if lastErr == nil {
		t.Fatal("no Schedule failed on a full disk")
	}
	t.Logf("on a full disk: %v", lastErr)
	if code := connect.CodeOf(lastErr); code != connect.CodeResourceExhausted && code != connect.CodeUnavailable {
		t.Fatalf("Schedule on a full disk: %v; want ResourceExhausted (or Unavailable once a stage stalls)", lastErr)
	}
	// The file is named relative to the data directory: callers never see
	// the server's paths.
	if connect.CodeOf(lastErr) == connect.CodeResourceExhausted && (!strings.Contains(lastErr.Error(), "disk is full") ||
		!strings.Contains(lastErr.Error(), "commitlog/") || strings.Contains(lastErr.Error(), dir)) {
		t.Errorf("the error does not say the disk is full and name the file relative to the data directory: %v", lastErr)
	}
	if strings.Contains(lastErr.Error(), clTmpSuffix) {
		t.Errorf("the error names a temporary file: %v", lastErr)
	}
	// Free a few MiB: far less than a 128 MiB segment.
	if err := os.Truncate(filler, max(0, clFileSize(t, filler)-16<<20)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := p.client.Schedule(ctxT(t), connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "full", Body: []byte("after"), When: delayMs(3_600_000)}))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Schedule still fails 20s after space was freed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

const clTmpSuffix = ".log.tmp"

// clFill writes path until the filesystem is full.
func clFill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := 0; i < 1024; i++ {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
	}
	t.Fatal("the filesystem did not fill up with 1 GiB")
}

func clFileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// clParseBase returns the base offset in a commitlog segment's file name.
func clParseBase(path string) (int64, error) {
	var b int64
	_, err := fmt.Sscanf(filepath.Base(path), "%020d.log", &b)
	return b, err
}

// clFlip inverts some bits of the byte at pos of path.
func clFlip(t *testing.T, path string, pos int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, pos); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, pos); err != nil {
		t.Fatal(err)
	}
}
