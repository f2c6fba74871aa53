package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/client"
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
	// Until a page of one has a next page: more than one is in the queue.
	for first == nil || first.NextPageToken == "" {
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

// grpcConn dials p with grpc-go (a connection of its own), sending token
// with every call when it is set.
func grpcConn(t *testing.T, p *proc, token string) *grpc.ClientConn {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearer(token)))
	}
	cc, err := grpc.NewClient(p.addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// bearer is a token sent as gRPC metadata over plaintext.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return false }

// watch opens a grpc.health.v1 Watch on cc and returns its first answer's
// error (nil once SERVING arrived; the stream stays open until ctx ends).
func watch(ctx context.Context, cc *grpc.ClientConn) error {
	w, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return err
	}
	res, err := w.Recv()
	if err == nil && res.Status != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("status %v", res.Status)
	}
	return err
}

// TestHealthWatchLimits: grpc.health.v1 Watch streams count against
// --max-streams-per-conn and --max-streams like the API's streams (the
// report opened 30,000 with none refused), and need the token; Check
// stays open for probes.
func TestHealthWatchLimits(t *testing.T) {
	t.Parallel()
	p := start(t, t.TempDir(), []string{"HOURGLASS_AUTH_TOKEN=sesame"}, "--max-streams", "5", "--max-streams-per-conn", "3")
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	anon := grpcConn(t, p, "")
	if res, err := healthpb.NewHealthClient(anon).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || res.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("Check without a token: %v %v; want SERVING (probes need no token)", res, err)
	}
	if err := watch(ctx, anon); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Watch without a token: %v; want Unauthenticated", err)
	}
	first := grpcConn(t, p, "sesame")
	for i := range 3 {
		if err := watch(ctx, first); err != nil {
			t.Fatalf("Watch %d on one connection: %v", i+1, err)
		}
	}
	err := watch(ctx, first)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-streams-per-conn 3") {
		t.Errorf("a 4th Watch on one connection: %v; want ResourceExhausted naming --max-streams-per-conn", err)
	}
	second := grpcConn(t, p, "sesame")
	if err := watch(ctx, second); err != nil {
		t.Fatalf("a Watch on a second connection: %v", err)
	}
	// The API's streams share the limit: 5 streams open now.
	rs, err := hourglassv1.NewHourglassServiceClient(second).ReceiveStream(ctx, &hourglassv1.ReceiveStreamRequest{Topic: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.Header(); err != nil { // sent once the stream holds its slot
		t.Fatal(err)
	}
	err = watch(ctx, grpcConn(t, p, "sesame"))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-streams 5") {
		t.Errorf("a 6th stream on the server: %v; want ResourceExhausted naming --max-streams", err)
	}
	// Streams that end give their slots back.
	cancel()
	ctx2 := ctxT(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := watch(ctx2, grpcConn(t, p, "sesame"))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a Watch once the others ended: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.stop(syscall.SIGTERM)
}

// TestCallersSeeNoPaths: what the server hands to callers (an error of
// an RPC; /readyz, which needs no token) names its files relative to the
// data directory, never by their absolute paths, which stay in its log.
func TestCallersSeeNoPaths(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := start(t, dir, []string{"HOURGLASS_AUTH_TOKEN=sesame"}, "--topic-idle-timeout", "200ms")
	c := newClient(t, p)
	ctx := ctxT(t)
	if _, err := c.Schedule(ctx, client.Message{Topic: "pth", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	ds, err := c.Receive(ctx, "pth", client.ReceiveOptions{MaxMessages: 1, Wait: 10 * time.Second})
	if err != nil || len(ds) != 1 {
		t.Fatalf("Receive: %v %v", ds, err)
	}
	if err := c.Ack(ctx, ds[0]); err != nil {
		t.Fatal(err)
	}
	// Once the idle topic closed its files, put a file where its ack log's
	// directory was: opening it again fails, naming the ack log.
	topicDir := filepath.Join(dir, "queue", "topics", "pth")
	deadline := time.Now().Add(20 * time.Second)
	for holdsFilesUnder(t, p.cmd.Process.Pid, topicDir) {
		if time.Now().After(deadline) {
			t.Fatal("the idle topic kept its files open")
		}
		time.Sleep(20 * time.Millisecond)
	}
	acks := filepath.Join(topicDir, "acks")
	if err := os.RemoveAll(acks); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(acks, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = c.Receive(ctx, "pth", client.ReceiveOptions{MaxMessages: 1})
	msg := status.Convert(err).Message()
	if err == nil || strings.Contains(msg, dir) || !strings.Contains(msg, filepath.Join("queue", "topics", "pth", "acks")) {
		t.Errorf("Receive of the damaged topic: %v; want an error naming queue/topics/pth/acks without the data directory %s", err, dir)
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(p.url + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 503 && strings.Contains(string(body), "pth") {
			if strings.Contains(string(body), dir) {
				t.Errorf("/readyz hands out the data directory's path: %s", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never said the topic is failing: %d %s", resp.StatusCode, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(p.log(), acks) {
		t.Errorf("the log lacks the full path %s for the operator", acks)
	}
}

// holdsFilesUnder reports whether process pid has a file under dir open.
func holdsFilesUnder(t *testing.T, pid int, dir string) bool {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Skipf("cannot list descriptors: %v", err)
	}
	for _, e := range ents {
		if target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())); err == nil && strings.HasPrefix(target, dir+"/") {
			return true
		}
	}
	return false
}
