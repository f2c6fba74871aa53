package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// postJSON posts body to the Connect-JSON procedure and returns the status
// and the error's code and message (empty on success).
func postJSON(t *testing.T, p *proc, procedure, body string) (int, string, string) {
	t.Helper()
	resp, err := http.Post(p.url+procedure, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Code, Message string }
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out.Code, out.Message
}

// TestListForgedPageToken: a List page token for DUE messages that the
// server did not issue (the report's "1", which named the middle of a
// record, and "50", past the end) is INVALID_ARGUMENT saying so: not
// INTERNAL, not the server's paths, no damage logged, never a silent
// empty page. The tokens the server issued still page through.
func TestListForgedPageToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, dir, nil)
	for _, b := range []string{"a", "b", "c"} {
		schedule(t, p.client, &hourglassv1.ScheduleRequest{Topic: "qq", Body: []byte(b)})
	}
	var first *hourglassv1.ListResponse
	deadline := time.Now().Add(20 * time.Second)
	for first == nil || len(first.Messages) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the three due messages never reached the queue")
		}
		res, err := p.client.List(ctxT(t), connect.NewRequest(&hourglassv1.ListRequest{Topic: "qq", State: hourglassv1.MessageState_MESSAGE_STATE_DUE, PageSize: 1}))
		if err != nil {
			t.Fatal(err)
		}
		first = res.Msg
		time.Sleep(10 * time.Millisecond)
	}
	for _, tok := range []string{"1", "50", "0", "-1", "MQ", strings.Repeat("A", 51), first.NextPageToken + "A", first.NextPageToken[1:]} {
		code, errCode, msg := postJSON(t, p, hourglassv1connect.HourglassServiceListProcedure,
			`{"topic":"qq","state":"MESSAGE_STATE_DUE","pageToken":"`+tok+`"}`)
		if code != 400 || errCode != "invalid_argument" || !strings.Contains(msg, "page token") || strings.Contains(msg, dir) {
			t.Errorf("List with the forged token %q: %d %s %q; want 400 invalid_argument about the page token, without the data directory", tok, code, errCode, msg)
		}
	}
	// The token the server issued, for another topic or state, is refused too.
	for _, req := range []string{`{"topic":"other","state":"MESSAGE_STATE_DUE","pageToken":"` + first.NextPageToken + `"}`,
		`{"topic":"qq","state":"MESSAGE_STATE_LEASED","pageToken":"` + first.NextPageToken + `"}`} {
		if code, errCode, _ := postJSON(t, p, hourglassv1connect.HourglassServiceListProcedure, req); code != 400 || errCode != "invalid_argument" {
			t.Errorf("List %s: %d %s; want 400 invalid_argument", req, code, errCode)
		}
	}
	var got []string
	for _, m := range first.Messages {
		got = append(got, string(m.Body))
	}
	tok := first.NextPageToken
	for tok != "" {
		res, err := p.client.List(ctxT(t), connect.NewRequest(&hourglassv1.ListRequest{Topic: "qq", State: hourglassv1.MessageState_MESSAGE_STATE_DUE, PageSize: 1, PageToken: tok}))
		if err != nil {
			t.Fatalf("List with the token it issued: %v", err)
		}
		for _, m := range res.Msg.Messages {
			got = append(got, string(m.Body))
		}
		tok = res.Msg.NextPageToken
	}
	if strings.Join(got, "") != "abc" {
		t.Errorf("paged through %q, want a, b, c", got)
	}
	if log := p.log(); strings.Contains(log, "level=ERROR") || strings.Contains(log, "corrupt") {
		t.Errorf("the server logged damage or an error for forged tokens:\n%s", log)
	}
	p.stop(syscall.SIGTERM)
}
