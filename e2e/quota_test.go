package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/hourglassmq/hourglass/access"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// TestQuotaReachedAndFreed: through the binary, a credential's quota of
// pending messages refuses a Schedule with ResourceExhausted naming it;
// messages delivered and acked, and a Cancel, free room; the count holds
// across kill -9 (counted from the segments) and a clean restart (the
// counts file); a SIGHUP that raises the quota lets more in.
func TestQuotaReachedAndFreed(t *testing.T) {
	dir := t.TempDir()
	creds := filepath.Join(t.TempDir(), "credentials.yaml")
	writeQuota := func(max int) {
		t.Helper()
		writeCredentials(t, creds, "  - {name: app, token_sha256: \""+access.Digest("app-token")+"\", role: producer, topics: [\"qt.*\"], quota: {max_pending_messages: "+
			strconv.Itoa(max)+"}}\n")
	}
	writeQuota(3)
	p := start(t, dir, nil, "--credentials", creds)
	ctx := ctxT(t)
	app := protocolClients(p, "app-token")["grpc"]
	admin := protocolClients(p, "admin-token")["connect"]
	send := func(delay int64) (string, error) {
		res, err := app.Schedule(ctx, req(&hourglassv1.ScheduleRequest{Topic: "qt.a", When: delayMs(delay)}))
		if err != nil {
			return "", err
		}
		return res.Msg.Id, nil
	}
	refused := func(when string) {
		t.Helper()
		_, err := send(3_600_000)
		want := `quota of credential "app" exceeded: max_pending_messages is 3; its topics hold 3 messages pending`
		if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: Schedule = %v; want ResourceExhausted with %q", when, err, want)
		}
	}
	for _, d := range []int64{500, 500} {
		if _, err := send(d); err != nil {
			t.Fatal(err)
		}
	}
	far, err := send(3_600_000)
	if err != nil {
		t.Fatal(err)
	}
	refused("three pending")

	// Delivered and acked: room for two more.
	for _, r := range receive(t, admin, "qt.a", 2, 20*time.Second) {
		ack(t, admin, "qt.a", r.m.Id)
	}
	for range 2 {
		if _, err := send(3_600_000); err != nil {
			t.Fatalf("after two were delivered and acked: %v", err)
		}
	}
	refused("full again")

	p.stop(syscall.SIGKILL)
	p = start(t, dir, nil, "--credentials", creds)
	app, admin = protocolClients(p, "app-token")["grpc"], protocolClients(p, "admin-token")["connect"]
	refused("after kill -9")
	if got := cancelID(t, admin, far); got != hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Fatalf("Cancel: %v", got)
	}
	if _, err := send(3_600_000); err != nil {
		t.Fatalf("after a cancel: %v", err)
	}
	refused("full after the cancel's room is taken")

	p.stop(syscall.SIGTERM)
	p = start(t, dir, nil, "--credentials", creds)
	app = protocolClients(p, "app-token")["connect"]
	refused("after a clean restart")
	if strings.Contains(p.log(), "counting again") {
		t.Errorf("a clean restart did not use the counts file:\n%s", p.log())
	}

	writeQuota(4)
	p.cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, p, "credentials reloaded")
	if _, err := send(3_600_000); err != nil {
		t.Errorf("after the quota was raised: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "schedule", "pending.counts")); !os.IsNotExist(err) {
		t.Errorf("the counts file is there while the server runs: %v", err)
	}
	p.stop(syscall.SIGTERM)
	if _, err := os.Stat(filepath.Join(dir, "schedule", "pending.counts")); err != nil {
		t.Errorf("a clean stop left no counts file: %v", err)
	}
	ctx2, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx2, binary, "inspect", "verify", "--data-dir", dir).CombinedOutput(); err != nil {
		t.Errorf("inspect verify after a clean stop: %v\n%s", err, out)
	}
}

// TestQuotaAddedByReloadNeedsRestart: a server started without quotas
// does not count what is pending (a start after a crash would read every
// schedule segment), so a SIGHUP that brings the first quota is refused,
// saying to restart, and the credentials in use stay.
func TestQuotaAddedByReloadNeedsRestart(t *testing.T) {
	creds := filepath.Join(t.TempDir(), "credentials.yaml")
	writeCredentials(t, creds, "")
	p := start(t, t.TempDir(), nil, "--credentials", creds)
	writeCredentials(t, creds, "quotas:\n  - {topics: \"*\", max_pending_messages: 1}\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, p, "credentials not reloaded")
	if !strings.Contains(p.log(), "restart the server to use them") {
		t.Errorf("the refused reload does not say to restart:\n%s", p.log())
	}
	c := protocolClients(p, "admin-token")["connect"]
	for range 2 {
		schedule(t, c, &hourglassv1.ScheduleRequest{Topic: "any", When: delayMs(3_600_000)})
	}
	p.stop(syscall.SIGTERM)
}
