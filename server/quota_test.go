package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"

	"github.com/hourglassmq/hourglass/access"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// TestQuotas: a credential's quota and a topic pattern's refuse Schedule,
// ScheduleBatch and ScheduleStream with ResourceExhausted naming the
// quota, its limit and the count; a Cancel frees room.
func TestQuotas(t *testing.T) {
	creds := filepath.Join(t.TempDir(), "credentials.yaml")
	os.WriteFile(creds, []byte(`credentials:
  - {name: app, token_sha256: "`+access.Digest("a")+`", role: producer, topics: ["q.*"], quota: {max_pending_messages: 3}}
  - {name: ops, token_sha256: "`+access.Digest("o")+`", role: admin, topics: ["*"]}
quotas:
  - {topics: "big", max_pending_bytes: 200}
`), 0o600)
	ts := newTestServer(t, Options{CredentialsFile: creds})
	ctx := context.Background()
	as := func(token string, m *hourglassv1.ScheduleRequest) error {
		r := connect.NewRequest(m)
		r.Header().Set("Authorization", "Bearer "+token)
		_, err := ts.client.Schedule(ctx, r)
		return err
	}
	later := &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 3_600_000}
	var ids []string
	for _, topic := range []string{"q.a", "q.b"} {
		r := connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: topic, When: later})
		r.Header().Set("Authorization", "Bearer a")
		res, err := ts.client.Schedule(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Msg.Id)
	}
	br := connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{{Topic: "q.a", When: later}, {Topic: "q.c", When: later}}})
	br.Header().Set("Authorization", "Bearer a")
	_, err := ts.client.ScheduleBatch(ctx, br)
	wantCode(t, "a batch past the credential's quota", err, connect.CodeResourceExhausted,
		`quota of credential "app" exceeded: max_pending_messages is 3; its topics hold 2 messages pending and this call adds 2 (to q.a, q.c)`)
	// Another credential is not held by app's quota.
	if err := as("o", &hourglassv1.ScheduleRequest{Topic: "q.z", When: later}); err != nil {
		t.Errorf("ops on q.z: %v", err)
	}
	// The ops message counts against app's topics.
	wantCode(t, "app's fourth", as("a", &hourglassv1.ScheduleRequest{Topic: "q.a", When: later}), connect.CodeResourceExhausted, "hold 3 messages pending")
	// Streams need HTTP/2: the same server over h2c.
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	h2 := httptest.NewUnstartedServer(ts.srv.Handler())
	h2.Config.Protocols = &p
	h2.Start()
	defer h2.Close()
	var cp http.Protocols
	cp.SetUnencryptedHTTP2(true)
	st := hourglassv1connect.NewHourglassServiceClient(&http.Client{Transport: &http.Transport{Protocols: &cp}}, h2.URL).ScheduleStream(ctx)
	st.RequestHeader().Set("Authorization", "Bearer a")
	st.Send(&hourglassv1.ScheduleStreamRequest{Kind: &hourglassv1.ScheduleStreamRequest_Message{Message: &hourglassv1.ScheduleRequest{Topic: "q.a", When: later}}})
	res, err := st.Receive()
	if err != nil || res.GetError().GetCode() != int32(connect.CodeResourceExhausted) {
		t.Errorf("ScheduleStream past the quota: %v, %v", res, err)
	}
	st.CloseRequest()
	st.CloseResponse()

	cr := connect.NewRequest(&hourglassv1.CancelRequest{Id: ids[0]})
	cr.Header().Set("Authorization", "Bearer o")
	if _, err := ts.client.Cancel(ctx, cr); err != nil {
		t.Fatal(err)
	}
	if err := as("a", &hourglassv1.ScheduleRequest{Topic: "q.a", When: later}); err != nil {
		t.Errorf("after a cancel: %v", err)
	}

	// The pattern's byte quota holds every caller, the admin too.
	body := make([]byte, 120)
	if err := as("o", &hourglassv1.ScheduleRequest{Topic: "big", Body: body, When: later}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "past the pattern's bytes", as("o", &hourglassv1.ScheduleRequest{Topic: "big", Body: body, When: later}), connect.CodeResourceExhausted,
		`quota of topics "big" exceeded: max_pending_bytes is 200; its topics hold 1`)
}
