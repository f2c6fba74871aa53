package server

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/hourglassmq/hourglass/access"
	"github.com/hourglassmq/hourglass/audit"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// TestDeniedCallsAudited: a PermissionDenied of the access rules is in the
// audit trail (who, RPC, topic, denied), at most deniedBurst at once and
// deniedRate a second after; the next one recorded counts those left out.
func TestDeniedCallsAudited(t *testing.T) {
	creds := filepath.Join(t.TempDir(), "credentials.yaml")
	os.WriteFile(creds, []byte("credentials:\n  - {name: watcher, token_sha256: \""+access.Digest("v")+"\", role: viewer, topics: [\"*\"]}\n"), 0o600)
	al, err := audit.Open(audit.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer al.Close()
	ts := newTestServer(t, Options{CredentialsFile: creds, Audit: al})
	now := time.Unix(1_800_000_000, 0)
	ts.srv.denied.now = func() time.Time { return now }
	purge := func() error {
		r := connect.NewRequest(&hourglassv1.PurgeRequest{Topic: "orders"})
		r.Header().Set("Authorization", "Bearer v")
		_, err := ts.client.Purge(context.Background(), r)
		return err
	}
	for range deniedBurst + 50 {
		wantCode(t, "viewer Purge", purge(), connect.CodePermissionDenied)
	}
	entries, _, err := al.List(0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != deniedBurst {
		t.Fatalf("%d denied calls made %d entries; want %d (the burst)", deniedBurst+50, len(entries), deniedBurst)
	}
	e := entries[0]
	if e.Who != "watcher" || e.Action != "Purge" || e.Target != "orders" || e.Result != "PERMISSION_DENIED" ||
		!strings.Contains(e.Error, `may not manage on topic "orders"`) {
		t.Errorf("denied entry: %+v", e)
	}
	now = now.Add(time.Second)
	purge()
	entries, _, _ = al.List(0, 1)
	if len(entries) != 1 || !strings.Contains(entries[0].Error, "50 denied calls before this one were not recorded") {
		t.Errorf("the entry after the flood: %+v; want it to count the 50 left out", entries)
	}
}
