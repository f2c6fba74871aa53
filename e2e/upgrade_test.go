package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// upgradeFixture is what testdata/upgrade/make.sh recorded.
type upgradeFixture struct {
	Binary string            `json:"binary"`
	IDs    map[string]string `json:"ids"`
}

// extractFixture unpacks testdata/upgrade/NAME.tar.gz into a temporary
// directory and returns its data directory. Runs of zeros are left as
// holes: the commitlog segment is 128 MiB, almost all of it preallocated
// zeros.
func extractFixture(t *testing.T, name string) (string, upgradeFixture) {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "testdata", "upgrade", name+".tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(root, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(path, root+string(filepath.Separator)) {
			t.Fatalf("fixture entry %q leaves the directory", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg, tar.TypeGNUSparse:
			writeSparse(t, path, tr, h.Size)
		}
	}
	data := filepath.Join(root, "data")
	b, err := os.ReadFile(filepath.Join(data, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx upgradeFixture
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	return data, fx
}

// writeSparse copies size bytes of r to a new file at path, seeking over
// blocks of zeros.
func writeSparse(t *testing.T, path string, r io.Reader, size int64) {
	t.Helper()
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	buf, zero := make([]byte, 64<<10), make([]byte, 64<<10)
	var off int64
	for off < size {
		n, err := io.ReadFull(r, buf[:min(int64(len(buf)), size-off)])
		if n > 0 && !bytes.Equal(buf[:n], zero[:n]) {
			if _, err := out.WriteAt(buf[:n], off); err != nil {
				t.Fatal(err)
			}
		}
		off += int64(n)
		if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatal(err)
		}
	}
	if err := out.Truncate(size); err != nil {
		t.Fatal(err)
	}
}

// TestUpgradeFrom20261205 opens a data directory written by the build of
// main on 2026-12-05 (testdata/upgrade/make.sh) and checks that every
// message, key, policy and schedule it held is there as it was.
func TestUpgradeFrom20261205(t *testing.T) {
	dir, fx := extractFixture(t, "2026-12-05")
	// The window covers the fixture's keys whatever today's date.
	p := start(t, dir, nil, "--segment-duration", "1h", "--idempotency-window", "100000h")
	ctx := ctxT(t)
	c := p.client
	id := func(name string) string {
		t.Helper()
		v, ok := fx.IDs[name]
		if !ok {
			t.Fatalf("fixture has no %q", name)
		}
		return v
	}
	get := func(req *hourglassv1.GetRequest) *hourglassv1.GetResponse {
		t.Helper()
		res, err := c.Get(ctx, connect.NewRequest(req))
		if err != nil {
			t.Fatalf("Get(%v): %v", req, err)
		}
		return res.Msg
	}
	for _, tc := range []struct {
		name string
		want hourglassv1.MessageState
	}{
		{"pending-keyed", hourglassv1.MessageState_MESSAGE_STATE_PENDING},
		{"pending-keyed-2", hourglassv1.MessageState_MESSAGE_STATE_PENDING},
		{"pending-plain", hourglassv1.MessageState_MESSAGE_STATE_PENDING},
		{"cancelled", hourglassv1.MessageState_MESSAGE_STATE_CANCELLED},
		{"cancelled-by-key", hourglassv1.MessageState_MESSAGE_STATE_CANCELLED},
		{"rescheduled", hourglassv1.MessageState_MESSAGE_STATE_PENDING}, // as its replacement
		{"rescheduled-to", hourglassv1.MessageState_MESSAGE_STATE_PENDING},
		{"due", hourglassv1.MessageState_MESSAGE_STATE_DUE},
		{"dead", hourglassv1.MessageState_MESSAGE_STATE_DEAD_LETTERED},
	} {
		got := get(&hourglassv1.GetRequest{Id: id(tc.name)})
		if got.State != tc.want {
			t.Errorf("%s (%s): state %v, want %v", tc.name, id(tc.name), got.State, tc.want)
		}
	}
	// Acked, in a bucket of the fixture's day: ACKED while the bucket is
	// there, not found once it retired (which this start does soon).
	if got := get(&hourglassv1.GetRequest{Id: id("acked")}); got.State != hourglassv1.MessageState_MESSAGE_STATE_ACKED &&
		got.State != hourglassv1.MessageState_MESSAGE_STATE_NOT_FOUND {
		t.Errorf("acked: %v, want acked or not found", got.State)
	}
	if got := get(&hourglassv1.GetRequest{Id: id("rescheduled")}); got.RescheduledTo != id("rescheduled-to") {
		t.Errorf("rescheduled names %q, want %q", got.RescheduledTo, id("rescheduled-to"))
	}
	// A retry made by a Nack with a delay: the first ID names it (the
	// upgrade mapped its origin).
	if got := get(&hourglassv1.GetRequest{Id: id("retried")}); got.State != hourglassv1.MessageState_MESSAGE_STATE_PENDING ||
		got.Message.GetAttempt() != 1 || got.RescheduledTo == "" || got.RescheduledTo == id("retried") || got.Message.GetOriginId() != id("retried") {
		t.Errorf("retried: %v; want pending as its retry, attempt 1", got)
	}
	if got := get(&hourglassv1.GetRequest{Id: id("dead")}); got.Message.GetDeadLetter().GetReason() != "nacked" || got.DeadLetterTopic != "work.dlq" {
		t.Errorf("dead: %v; want dead-lettered in work.dlq, reason nacked", got)
	}
	if got := get(&hourglassv1.GetRequest{Id: id("pending-keyed-2")}); got.Message == nil || string(got.Message.Body) != "two" {
		t.Errorf("pending-keyed-2: message %v, want body two", got.Message)
	}
	// Keys: Get by key, and a resend of a keyed Schedule stores nothing.
	if got := get(&hourglassv1.GetRequest{Topic: "orders", Key: "order-1"}); got.Message == nil || got.Message.Id != id("pending-keyed") {
		t.Errorf("Get orders/order-1: %v, want %s", got.Message, id("pending-keyed"))
	}
	if got := get(&hourglassv1.GetRequest{Topic: "orders", Key: "order-5"}); got.Message == nil || got.Message.Id != id("rescheduled-to") {
		t.Errorf("Get orders/order-5 (rescheduled): %v, want %s", got.Message, id("rescheduled-to"))
	}
	again := schedule(t, c, &hourglassv1.ScheduleRequest{Topic: "orders", IdempotencyKey: "order-2",
		When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))}})
	if again != id("pending-keyed-2") {
		t.Errorf("resend of orders/order-2: ID %s, want the stored %s", again, id("pending-keyed-2"))
	}
	// The policy and the pause held; the recurring schedule is there.
	pol, err := c.GetPolicy(ctx, connect.NewRequest(&hourglassv1.GetPolicyRequest{Topic: "work"}))
	if err != nil {
		t.Fatal(err)
	}
	if pol.Msg.GetPolicy().GetMaxAttempts() != 5 {
		t.Errorf("work's policy: %v, want max attempts 5", pol.Msg)
	}
	receiveNone(t, c, "paused", 200*time.Millisecond)
	sch, err := c.GetSchedule(ctx, connect.NewRequest(&hourglassv1.GetScheduleRequest{Name: "daily"}))
	if err != nil {
		t.Fatalf("GetSchedule(daily): %v", err)
	}
	if sch.Msg.GetSchedule().GetTopic() != "reports" {
		t.Errorf("daily: %v, want topic reports", sch.Msg.GetSchedule())
	}
	// The due message is still there to receive.
	got := receive(t, c, "jobs", 1, 10*time.Second)
	if got[0].m.Id != id("due") {
		t.Errorf("jobs delivered %s, want %s", got[0].m.Id, id("due"))
	}
}
