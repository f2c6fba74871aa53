package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"connectrpc.com/connect"

	"github.com/hourglassmq/hourglass/access"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// TestAuditTrail: every operator change is in the audit trail with who
// made it, what it was and its result; refused changes too; reads are
// not. It survives kill -9 of the server, and the RPC, the CLI and
// roles read it.
func TestAuditTrail(t *testing.T) {
	dir := t.TempDir()
	creds := filepath.Join(t.TempDir(), "credentials.yaml")
	writeCredentials(t, creds, "")
	p := start(t, dir, nil, "--credentials", creds)
	ctx := ctxT(t)
	adm := protocolClients(p, "admin-token")
	g, c := adm["grpc"], adm["connect"]
	id := schedule(t, c, &hourglassv1.ScheduleRequest{Topic: "au", When: delayMs(3_600_000), IdempotencyKey: "k1"})
	schedule(t, c, &hourglassv1.ScheduleRequest{Topic: "au", When: delayMs(3_600_000), IdempotencyKey: "k2"})
	steps := []struct {
		action, target, result string
		call                   func() error
	}{
		{"Cancel", id, "OK", func() error {
			_, err := g.Cancel(ctx, req(&hourglassv1.CancelRequest{Id: id}))
			return err
		}},
		{"Reschedule", "au", "OK", func() error {
			_, err := c.Reschedule(ctx, req(&hourglassv1.RescheduleRequest{Topic: "au", Key: "k2", When: &hourglassv1.RescheduleRequest_DelayMs{DelayMs: 7_200_000}}))
			return err
		}},
		{"SetPolicy", "au", "OK", func() error {
			n := int32(4)
			_, err := g.SetPolicy(ctx, req(&hourglassv1.SetPolicyRequest{Topic: "au", Policy: &hourglassv1.Policy{MaxAttempts: &n}}))
			return err
		}},
		{"Purge", "au", "OK", func() error {
			_, err := c.Purge(ctx, req(&hourglassv1.PurgeRequest{Topic: "au", State: hourglassv1.MessageState_MESSAGE_STATE_PENDING}))
			return err
		}},
		{"Purge", "bad/topic", "INVALID_ARGUMENT", func() error {
			_, err := c.Purge(ctx, req(&hourglassv1.PurgeRequest{Topic: "bad/topic"}))
			return err
		}},
		{"Redrive", "au.dlq", "OK", func() error {
			_, err := g.Redrive(ctx, req(&hourglassv1.RedriveRequest{DeadLetterTopic: "au.dlq"}))
			return err
		}},
		{"CreateSchedule", "au", "OK", func() error {
			_, err := g.CreateSchedule(ctx, req(&hourglassv1.CreateScheduleRequest{Schedule: &hourglassv1.RecurringSchedule{Name: "nightly", Topic: "au", Spec: "@every 1h", Body: []byte("secret body")}}))
			return err
		}},
		{"UpdateSchedule", "nightly", "OK", func() error {
			_, err := c.UpdateSchedule(ctx, req(&hourglassv1.UpdateScheduleRequest{Schedule: &hourglassv1.RecurringSchedule{Name: "nightly", Topic: "au", Spec: "@every 2h"}}))
			return err
		}},
		{"PauseSchedule", "nightly", "OK", func() error {
			_, err := g.PauseSchedule(ctx, req(&hourglassv1.PauseScheduleRequest{Name: "nightly"}))
			return err
		}},
		{"ResumeSchedule", "nightly", "OK", func() error {
			_, err := c.ResumeSchedule(ctx, req(&hourglassv1.ResumeScheduleRequest{Name: "nightly"}))
			return err
		}},
		{"DeleteSchedule", "nightly", "OK", func() error {
			_, err := g.DeleteSchedule(ctx, req(&hourglassv1.DeleteScheduleRequest{Name: "nightly"}))
			return err
		}},
		{"DeleteSchedule", "nightly", "NOT_FOUND", func() error {
			_, err := c.DeleteSchedule(ctx, req(&hourglassv1.DeleteScheduleRequest{Name: "nightly"}))
			return err
		}},
		{"DeleteTopic", "au", "OK", func() error {
			_, err := g.DeleteTopic(ctx, req(&hourglassv1.DeleteTopicRequest{Topic: "au"}))
			return err
		}},
	}
	for _, s := range steps {
		err := s.call()
		if (s.result == "OK") != (err == nil) {
			t.Fatalf("%s %s: %v", s.action, s.target, err)
		}
	}
	// Reads change nothing: not audited. A refusal of the access rules is.
	if _, err := c.Stats(ctx, req(&hourglassv1.StatsRequest{})); err != nil {
		t.Fatal(err)
	}
	if _, err := protocolClients(p, "viewer-token")["grpc"].Purge(ctx, req(&hourglassv1.PurgeRequest{Topic: "au"})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("viewer Purge: %v", err)
	}
	writeCredentials(t, creds, "  - {name: extra, token_sha256: \""+access.Digest("x")+"\", role: viewer, topics: [\"*\"]}\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	waitLog(t, p, "credentials reloaded")

	p.stop(syscall.SIGKILL)
	p = start(t, dir, nil, "--credentials", creds)

	// The CLI, as a viewer (the role that may read the trail).
	out := runCLI(t, "audit", "--addr", p.url, "--token", "viewer-token", "--json", "--limit", "100")
	var got []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var e map[string]any
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit --json line %q: %v", sc.Text(), err)
		}
		got = append(got, e)
	}
	want := len(steps) + 2
	if len(got) != want {
		t.Fatalf("audit has %d entries after kill -9, want %d:\n%s", len(got), want, out)
	}
	slices.Reverse(got) // oldest first, as the steps
	for i, s := range steps {
		e := got[i]
		if e["action"] != s.action || e["target"] != s.target || e["result"] != s.result || e["who"] != "admin-cred" {
			t.Errorf("entry %d: %v; want %s of %s by admin-cred, %s", i, e, s.action, s.target, s.result)
		}
	}
	if e := got[len(steps)]; e["action"] != "Purge" || e["who"] != "viewer-cred" || e["target"] != "au" || e["result"] != "PERMISSION_DENIED" {
		t.Errorf("the denied Purge's entry: %v", e)
	}
	if e := got[len(steps)+1]; e["action"] != "ReloadCredentials" || e["who"] != "SIGHUP" || e["result"] != "OK" {
		t.Errorf("the reload's entry: %v", e)
	}
	if !strings.Contains(string(out), "CANCEL_RESULT_CANCELLED") {
		t.Errorf("the Cancel's entry does not hold its answer:\n%s", out)
	}
	if strings.Contains(string(out), "c2VjcmV0IGJvZHk") || strings.Contains(string(out), "secret body") {
		t.Errorf("a message body is in the audit trail:\n%s", out)
	}
	// The RPC pages through it; a producer may not read it.
	res, err := protocolClients(p, "viewer-token")["grpc_web"].ListAudit(ctx, req(&hourglassv1.ListAuditRequest{Limit: 5}))
	if err != nil || len(res.Msg.Entries) != 5 || res.Msg.NextBeforeSeq != res.Msg.Entries[4].Seq {
		t.Fatalf("ListAudit limit 5: %v %v", res, err)
	}
	res2, err := protocolClients(p, "viewer-token")["grpc"].ListAudit(ctx, req(&hourglassv1.ListAuditRequest{Limit: 100, BeforeSeq: res.Msg.NextBeforeSeq}))
	if err != nil || len(res2.Msg.Entries) != want-5 || res2.Msg.NextBeforeSeq != 0 {
		t.Fatalf("ListAudit's second page: %d entries, next %d, %v", len(res2.Msg.Entries), res2.Msg.NextBeforeSeq, err)
	}
	if _, err := protocolClients(p, "producer-token")["connect"].ListAudit(ctx, req(&hourglassv1.ListAuditRequest{})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("producer ListAudit: %v; want PermissionDenied", err)
	}
	p.stop(syscall.SIGTERM)
}
