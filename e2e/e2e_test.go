package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// TestServer runs the checks that need no special server of their own
// against one server, in parallel, each on its own topics.
func TestServer(t *testing.T) {
	p := start(t, t.TempDir(), nil, "--max-attempts", "2", "--max-body", "1KiB", "--max-delay", "30d")
	t.Run("arrives_no_earlier_than_due", func(t *testing.T) { t.Parallel(); testOnTime(t, p) })
	t.Run("cancel_before_firing", func(t *testing.T) { t.Parallel(); testCancel(t, p) })
	t.Run("nack_backoff_and_dead_letter", func(t *testing.T) { t.Parallel(); testNack(t, p) })
	t.Run("bad_input", func(t *testing.T) { t.Parallel(); testBadInput(t, p) })
	t.Run("json_over_http1", func(t *testing.T) { t.Parallel(); testJSON(t, p) })
	t.Run("grpc_h2c_stream", func(t *testing.T) { t.Parallel(); testGRPC(t, p) })
	t.Run("health_ready_metrics", func(t *testing.T) { t.Parallel(); testHealth(t, p) })
}

func testOnTime(t *testing.T, p *proc) {
	c := p.client
	const topic = "ontime"
	due := map[string]time.Time{}

	t0 := time.Now()
	schedule(t, c, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("delay"), When: delayMs(1500)})
	due["delay"] = t0.Add(1500 * time.Millisecond)

	at := time.Now().Add(time.Second)
	schedule(t, c, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("at"),
		When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(at)}})
	due["at"] = at

	t1 := time.Now()
	schedule(t, c, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("level"),
		When: &hourglassv1.ScheduleRequest_DelayLevel{DelayLevel: 1}}) // 1s
	due["level"] = t1.Add(time.Second)

	got := receive(t, c, topic, 3, 15*time.Second)
	for _, r := range got {
		name := string(r.m.Body)
		if r.at.Before(due[name]) {
			t.Errorf("%s arrived %v early (client clock)", name, due[name].Sub(r.at))
		}
		if r.m.ReceivedAt.AsTime().Before(r.m.DeliverAt.AsTime()) {
			t.Errorf("%s handed out at %v, before its deliver_at %v (server clock)", name, r.m.ReceivedAt.AsTime(), r.m.DeliverAt.AsTime())
		}
		t.Logf("%s: %v after it was due", name, r.at.Sub(due[name]))
		ack(t, c, topic, r.m.Id)
	}
}

func testCancel(t *testing.T, p *proc) {
	c := p.client
	const topic = "cancel"
	a := schedule(t, c, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("a"), When: delayMs(1000)})
	b := schedule(t, c, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("b"), When: delayMs(1500)})
	if r := cancelID(t, c, a); r != hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Fatalf("Cancel(a) = %v, want CANCELLED", r)
	}
	if r := cancelID(t, c, a); r != hourglassv1.CancelResult_CANCEL_RESULT_ALREADY_CANCELLED {
		t.Errorf("second Cancel(a) = %v, want ALREADY_CANCELLED", r)
	}
	// b is due after a: once b is here, a would have been handed out first.
	got := receive(t, c, topic, 1, 15*time.Second)
	if got[0].m.Id != b {
		t.Fatalf("received %q (%s), want b (%s)", got[0].m.Body, got[0].m.Id, b)
	}
	ack(t, c, topic, b)
	receiveNone(t, c, topic, 300*time.Millisecond)
	// ALREADY_DELIVERED, or UNKNOWN once its (2 s) bucket is retired.
	if r := cancelID(t, c, b); r == hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Errorf("Cancel(b) after delivery = %v, want ALREADY_DELIVERED or UNKNOWN", r)
	}
	never := fmt.Sprintf("%016x%016x", time.Now().Add(24*time.Hour).UnixMilli(), uint64(1)<<62)
	if r := cancelID(t, c, never); r != hourglassv1.CancelResult_CANCEL_RESULT_UNKNOWN {
		t.Errorf("Cancel(never issued) = %v, want UNKNOWN", r)
	}
}

func testNack(t *testing.T, p *proc) {
	c := p.client
	const topic = "retry"
	id := schedule(t, c, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("r")})
	first := receive(t, c, topic, 1, 10*time.Second)[0].m
	if first.Id != id || first.Attempt != 0 {
		t.Fatalf("first delivery: id %s attempt %d, want %s attempt 0", first.Id, first.Attempt, id)
	}
	nackAt := time.Now()
	if _, err := c.Nack(ctxT(t), connect.NewRequest(&hourglassv1.NackRequest{Topic: topic, Id: id, DelayMs: 1000})); err != nil {
		t.Fatal(err)
	}
	r := receive(t, c, topic, 1, 15*time.Second)[0]
	if r.at.Before(nackAt.Add(time.Second)) {
		t.Errorf("retry arrived %v after the Nack; its backoff was 1s", r.at.Sub(nackAt))
	}
	second := r.m
	if second.Attempt != 1 || second.OriginId != id || second.Id == id || string(second.Body) != "r" {
		t.Errorf("retry: id %s attempt %d origin %s body %q; want a new id, attempt 1, origin %s", second.Id, second.Attempt, second.OriginId, second.Body, id)
	}
	// Attempt 2 of --max-attempts 2: the Nack dead-letters it.
	if _, err := c.Nack(ctxT(t), connect.NewRequest(&hourglassv1.NackRequest{Topic: topic, Receipt: second.Receipt, DelayMs: 1000})); err != nil {
		t.Fatal(err)
	}
	dl := receive(t, c, topic+".dlq", 1, 10*time.Second)[0].m
	if string(dl.Body) != "r" {
		t.Errorf("dead letter body %q, want r", dl.Body)
	}
	ack(t, c, topic+".dlq", dl.Id)
	receiveNone(t, c, topic, 200*time.Millisecond)

	st, err := c.Stats(ctxT(t), connect.NewRequest(&hourglassv1.StatsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(st.Msg.Topics, func(ts *hourglassv1.TopicStats) bool { return ts.Topic == topic })
	if i < 0 {
		t.Fatalf("Stats has no topic %s: %v", topic, st.Msg.Topics)
	}
	if ts := st.Msg.Topics[i]; ts.Nacked != 2 || ts.DeadLettered != 1 || ts.Scheduled != 1 {
		t.Errorf("Stats of %s: nacked %d dead-lettered %d scheduled %d; want 2, 1, 1", topic, ts.Nacked, ts.DeadLettered, ts.Scheduled)
	}
}

func testBadInput(t *testing.T, p *proc) {
	c := p.client
	ctx := ctxT(t)
	sched := func(m *hourglassv1.ScheduleRequest) error {
		_, err := c.Schedule(ctx, connect.NewRequest(m))
		return err
	}
	batch := func(ms ...*hourglassv1.ScheduleRequest) error {
		_, err := c.ScheduleBatch(ctx, connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: ms}))
		return err
	}
	big := make([]*hourglassv1.ScheduleRequest, 1001)
	for i := range big {
		big[i] = &hourglassv1.ScheduleRequest{Topic: "bad"}
	}
	cancel := func(id string) error {
		_, err := c.Cancel(ctx, connect.NewRequest(&hourglassv1.CancelRequest{Id: id}))
		return err
	}
	for _, tc := range []struct {
		name string
		err  error
		code connect.Code
		msgs []string
	}{
		{"empty_topic", sched(&hourglassv1.ScheduleRequest{}), connect.CodeInvalidArgument, []string{"topic", "empty", "A-Z a-z 0-9 . _ -"}},
		{"malformed_topic", sched(&hourglassv1.ScheduleRequest{Topic: "no spaces"}), connect.CodeInvalidArgument, []string{"topic", "' '", "may only hold"}},
		{"body_over_max_body", sched(&hourglassv1.ScheduleRequest{Topic: "bad", Body: make([]byte, 1025)}), connect.CodeInvalidArgument, []string{"1025 bytes", "at most 1024", "--max-body"}},
		{"delay_beyond_max_delay", sched(&hourglassv1.ScheduleRequest{Topic: "bad", When: delayMs(31 * 24 * 3600 * 1000)}), connect.CodeInvalidArgument, []string{"maximum delay 30d"}},
		{"time_beyond_max_delay", sched(&hourglassv1.ScheduleRequest{Topic: "bad", When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(time.Now().AddDate(1, 0, 0))}}), connect.CodeInvalidArgument, []string{"deliver_at", "maximum delay is 30d"}},
		{"unknown_delay_level", sched(&hourglassv1.ScheduleRequest{Topic: "bad", When: &hourglassv1.ScheduleRequest_DelayLevel{DelayLevel: 19}}), connect.CodeInvalidArgument, []string{"delay_level 19 is unknown", "1 to 18"}},
		{"oversized_batch", batch(big...), connect.CodeInvalidArgument, []string{"1001 messages", "at most 1000"}},
		{"empty_batch", batch(), connect.CodeInvalidArgument, []string{"1 to 1000"}},
		{"malformed_id_length", cancel("abc"), connect.CodeInvalidArgument, []string{"32 hex digits"}},
		{"malformed_id_digits", cancel(strings.Repeat("z", 32)), connect.CodeInvalidArgument, []string{"hex"}},
		{"malformed_ack_id", func() error {
			_, err := c.Ack(ctx, connect.NewRequest(&hourglassv1.AckRequest{Topic: "bad", Id: "x"}))
			return err
		}(), connect.CodeInvalidArgument, []string{"32 hex digits"}},
		{"ack_not_leased", func() error {
			_, err := c.Ack(ctx, connect.NewRequest(&hourglassv1.AckRequest{Topic: "bad", Id: strings.Repeat("0", 32)}))
			return err
		}(), connect.CodeFailedPrecondition, []string{"not leased"}},
		{"receive_too_many", func() error {
			_, err := c.Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: "bad", MaxMessages: 5000}))
			return err
		}(), connect.CodeInvalidArgument, []string{"max_messages 5000", "1 to 1000"}},
	} {
		if connect.CodeOf(tc.err) != tc.code {
			t.Errorf("%s: got %v, want %v", tc.name, tc.err, tc.code)
			continue
		}
		for _, m := range tc.msgs {
			if !strings.Contains(tc.err.Error(), m) {
				t.Errorf("%s: %q lacks %q", tc.name, tc.err, m)
			}
		}
	}

	// Nothing half-written: a batch with one bad message stores none.
	err := batch(&hourglassv1.ScheduleRequest{Topic: "atomic", Body: []byte("1")}, &hourglassv1.ScheduleRequest{Topic: "atomic", Body: []byte("2")},
		&hourglassv1.ScheduleRequest{Topic: "atomic", Body: make([]byte, 2000)})
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "messages[2]") {
		t.Errorf("batch with a bad third message: %v", err)
	}
	receiveNone(t, c, "atomic", time.Second) // the good two were due at once
}

func testJSON(t *testing.T, p *proc) {
	post := func(method, body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post(p.url+"/hourglass.v1.HourglassService/"+method, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.Proto != "HTTP/1.1" {
			t.Errorf("%s answered over %s, want HTTP/1.1", method, resp.Proto)
		}
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatalf("%s: decoding the JSON answer: %v", method, err)
		}
		return resp.StatusCode, out
	}
	code, out := post("Schedule", `{"topic":"json","delayMs":"200","body":"aGVsbG8=","headers":[{"key":"k","value":"v"}]}`)
	id, _ := out["id"].(string)
	if code != 200 || !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(id) {
		t.Fatalf("Schedule over JSON: %d %v", code, out)
	}
	at := time.Now().Add(300 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	if code, out := post("Schedule", `{"topic":"json","deliverAt":"`+at+`","body":"d29ybGQ="}`); code != 200 {
		t.Fatalf("Schedule with an RFC 3339 deliverAt: %d %v", code, out)
	}
	var got []any
	for deadline := time.Now().Add(10 * time.Second); len(got) < 2 && time.Now().Before(deadline); {
		code, out := post("Receive", `{"topic":"json","maxMessages":10,"waitMs":"5000"}`)
		if code != 200 {
			t.Fatalf("Receive over JSON: %d %v", code, out)
		}
		msgs, _ := out["messages"].([]any)
		got = append(got, msgs...)
	}
	if len(got) != 2 {
		t.Fatalf("received %d messages over JSON, want 2", len(got))
	}
	m := got[0].(map[string]any)
	if m["id"] != id || m["body"] != "aGVsbG8=" || m["topic"] != "json" {
		t.Errorf("first message over JSON: %v", m)
	}
	for _, g := range got {
		if code, out := post("Ack", `{"topic":"json","id":"`+g.(map[string]any)["id"].(string)+`"}`); code != 200 {
			t.Errorf("Ack over JSON: %d %v", code, out)
		}
	}
	code, out = post("Schedule", `{"topic":""}`)
	if code != 400 || out["code"] != "invalid_argument" || !strings.Contains(fmt.Sprint(out["message"]), "topic") {
		t.Errorf("bad Schedule over JSON: %d %v", code, out)
	}
}

func testGRPC(t *testing.T, p *proc) {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true) // h2c only: gRPC without TLS
	h2c := &http.Client{Transport: &http.Transport{Protocols: &protos}}
	c := hourglassv1connect.NewHourglassServiceClient(h2c, p.url, connect.WithGRPC())
	ctx := ctxT(t)
	tm, err := c.Time(ctx, connect.NewRequest(&hourglassv1.TimeRequest{}))
	if err != nil {
		t.Fatalf("Time over gRPC/h2c: %v", err)
	}
	if skew := time.Since(tm.Msg.Now.AsTime()).Abs(); skew > 5*time.Second {
		t.Errorf("server clock %v away from ours", skew)
	}
	web := hourglassv1connect.NewHourglassServiceClient(http.DefaultClient, p.url, connect.WithGRPCWeb())
	if _, err := web.Time(ctx, connect.NewRequest(&hourglassv1.TimeRequest{})); err != nil {
		t.Errorf("Time over gRPC-Web: %v", err)
	}

	const topic = "stream"
	var msgs []*hourglassv1.ScheduleRequest
	for i := range 3 {
		msgs = append(msgs, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte{byte('a' + i)}, When: delayMs(int64(100 * i))})
	}
	res, err := c.ScheduleBatch(ctx, connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: msgs}))
	if err != nil || len(res.Msg.Results) != 3 {
		t.Fatalf("ScheduleBatch over gRPC: %v %v", res, err)
	}
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	stream, err := c.ReceiveStream(sctx, connect.NewRequest(&hourglassv1.ReceiveStreamRequest{Topic: topic, LeaseMs: 60_000}))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 3 && stream.Receive() {
		for _, m := range stream.Msg().Messages {
			got = append(got, string(m.Body))
			if _, err := c.Ack(ctx, connect.NewRequest(&hourglassv1.AckRequest{Topic: topic, Receipt: m.Receipt})); err != nil {
				t.Errorf("Ack over gRPC: %v", err)
			}
		}
	}
	cancel()
	stream.Close()
	slices.Sort(got)
	if strings.Join(got, "") != "abc" {
		t.Errorf("streamed %q, want a, b and c (stream error: %v)", got, stream.Err())
	}
}

func testHealth(t *testing.T, p *proc) {
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready", "/metrics": "hourglass_lateness_seconds_bucket"} {
		resp, err := http.Get(p.url + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(body, []byte(want)) {
			t.Errorf("GET %s: %d, body lacks %q", path, resp.StatusCode, want)
		}
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	p := start(t, t.TempDir(), []string{"HOURGLASS_AUTH_TOKEN=tok3n"})
	ctx := ctxT(t)
	_, err := p.client.Time(ctx, connect.NewRequest(&hourglassv1.TimeRequest{}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated || !strings.Contains(err.Error(), "Bearer") {
		t.Errorf("no token: %v, want Unauthenticated saying what to send", err)
	}
	_, err = p.client.Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "auth"}))
	if connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("Schedule without token: %v", err)
	}
	withToken := hourglassv1connect.NewHourglassServiceClient(http.DefaultClient, p.url,
		connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				req.Header().Set("Authorization", "Bearer tok3n")
				return next(ctx, req)
			}
		})))
	if _, err := withToken.Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "auth"})); err != nil {
		t.Errorf("Schedule with the token: %v", err)
	}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 401} {
		resp, err := http.Get(p.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without token: %d, want %d", path, resp.StatusCode, want)
		}
	}
}

func TestRestartSIGTERM(t *testing.T) { t.Parallel(); testRestart(t, syscall.SIGTERM) }

func TestRestartKill9(t *testing.T) { t.Parallel(); testRestart(t, syscall.SIGKILL) }

// testRestart sets up every state a message can be in, stops the server
// with sig, restarts it on the same data directory, and checks each.
func testRestart(t *testing.T, sig syscall.Signal) {
	dir := t.TempDir()
	p := start(t, dir, nil)
	c := p.client
	const topic = "state"
	acked := schedule(t, c, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("acked")})
	unacked := schedule(t, c, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("unacked")})
	got := receive(t, c, topic, 2, 10*time.Second)
	if b := bodies(got); !slices.Contains(b, "acked") || !slices.Contains(b, "unacked") {
		t.Fatalf("before restart: received %q", b)
	}
	ack(t, c, topic, acked)
	cancelled := schedule(t, c, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("cancelled"), When: delayMs(2000)})
	if r := cancelID(t, c, cancelled); r != hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Fatalf("Cancel = %v", r)
	}
	tPending := time.Now()
	pending := schedule(t, c, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("pending"), When: delayMs(3000)})
	far := schedule(t, c, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("far"), When: delayMs(3_600_000)})

	p.stop(sig)
	p2 := start(t, dir, nil)
	c = p2.client

	got = receive(t, c, topic, 2, 20*time.Second)
	if b := bodies(got); !slices.Equal(b, []string{"unacked", "pending"}) {
		t.Fatalf("after restart: received %q, want the unacked one again, then the pending one", b)
	}
	if got[0].m.Id != unacked {
		t.Errorf("unacked came back as %s, want %s", got[0].m.Id, unacked)
	}
	if got[1].m.Id != pending || got[1].at.Before(tPending.Add(3*time.Second)) {
		t.Errorf("pending: id %s (want %s), arrived %v after scheduling (due after 3s)", got[1].m.Id, pending, got[1].at.Sub(tPending))
	}
	for _, r := range got {
		ack(t, c, topic, r.m.Id)
	}
	// Neither the acked nor the cancelled message comes (the cancelled
	// one was due before the pending one, so it would have come first).
	receiveNone(t, c, topic, 300*time.Millisecond)
	if r := cancelID(t, c, cancelled); r == hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Errorf("cancelling the cancelled message again after restart answered CANCELLED")
	}
	if r := cancelID(t, c, far); r != hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED {
		t.Errorf("the far-future message after restart: Cancel = %v, want CANCELLED (still pending)", r)
	}
	p2.stop(syscall.SIGTERM)
}
