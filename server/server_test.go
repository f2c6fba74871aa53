package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/internal/units"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
)

type testServer struct {
	srv    *Server
	eng    *engine.Engine
	http   *httptest.Server
	client hourglassv1connect.HourglassServiceClient
}

// newTestServer runs a server over a fresh engine and queue (fsync none)
// on an httptest listener. opts.Engine, Queue, Metrics and DataDir are
// filled in.
func newTestServer(t testing.TB, opts Options, clientOpts ...connect.ClientOption) *testServer {
	t.Helper()
	return newTestServerClock(t, opts, nil, clientOpts...)
}

// newTestServerClock is newTestServer with the engine's and the queue's
// clock now (nil: the real one).
func newTestServerClock(t testing.TB, opts Options, now func() time.Time, clientOpts ...connect.ClientOption) *testServer {
	t.Helper()
	eng := newBackend(t, &opts, now)
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		srv.BeginShutdown()
		hs.Close()
	})
	return &testServer{srv: srv, eng: eng, http: hs, client: hourglassv1connect.NewHourglassServiceClient(hs.Client(), hs.URL, clientOpts...)}
}

// newBackend opens a fresh engine and queue (fsync none, clock now or the
// real one when nil, at most 2 attempts) and fills opts.Engine, Queue,
// Metrics, DataDir and SegmentDuration. They are closed when the test
// ends, after whatever cleanup is registered later.
func newBackend(t testing.TB, opts *Options, now func() time.Time) *engine.Engine {
	t.Helper()
	dir := t.TempDir()
	q, err := queue.Open(queue.Options{Dir: QueueDir(dir), Fsync: commitlog.SyncNone, MaxAttempts: 2, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics()
	// Policy records set the queue's policies, as the node does.
	onControl := func(c message.Control) {
		if c.Kind == message.ControlPolicy {
			if p, err := queue.DecodePolicy(c.Value); err == nil {
				_ = q.SetPolicy(string(c.Name), p)
			}
		}
	}
	eng, err := engine.Open(engine.Options{Dir: dir, Fsync: commitlog.SyncNone, Sink: q, Observer: m,
		SegmentDuration: 2 * time.Second, MaxDelay: opts.MaxDelay, Now: now, CountPending: true, OnControl: onControl})
	if err != nil {
		t.Fatal(err)
	}
	q.SetReschedule(eng.Schedule)
	t.Cleanup(func() {
		if err := eng.Close(); err != nil && !errors.Is(err, engine.ErrClosed) {
			t.Error(err)
		}
		if err := q.Close(); err != nil {
			t.Error(err)
		}
	})
	opts.Engine, opts.Queue, opts.Metrics, opts.DataDir, opts.SegmentDuration = eng, q, m, dir, 2*time.Second
	return eng
}

func wantCode(t *testing.T, what string, err error, code connect.Code, msgs ...string) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Errorf("%s: got %v, want code %v", what, err, code)
		return
	}
	for _, m := range msgs {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("%s: error %q lacks %q", what, err, m)
		}
	}
}

func TestBadInput(t *testing.T) {
	ts := newTestServer(t, Options{MaxBody: 1024, MaxDelay: 30 * units.Day})
	ctx := context.Background()
	sched := func(m *hourglassv1.ScheduleRequest) error {
		_, err := ts.client.Schedule(ctx, connect.NewRequest(m))
		return err
	}
	far := timestamppb.New(time.Now().Add(31 * units.Day))
	for _, tc := range []struct {
		name string
		m    *hourglassv1.ScheduleRequest
		msgs []string
	}{
		{"empty_topic", &hourglassv1.ScheduleRequest{}, []string{"topic", "empty", "A-Z a-z 0-9 . _ -"}},
		{"bad_topic_byte", &hourglassv1.ScheduleRequest{Topic: "a/b"}, []string{"topic", `'/'`, "A-Z a-z 0-9"}},
		{"topic_starts_with_dot", &hourglassv1.ScheduleRequest{Topic: ".a"}, []string{"must start with"}},
		{"long_topic", &hourglassv1.ScheduleRequest{Topic: strings.Repeat("a", 201)}, []string{"at most 200"}},
		{"body_over_max", &hourglassv1.ScheduleRequest{Topic: "t", Body: make([]byte, 1025)}, []string{"1025 bytes", "at most 1024", "--max-body"}},
		{"negative_delay", &hourglassv1.ScheduleRequest{Topic: "t", When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: -1}}, []string{"delay_ms -1", "negative"}},
		{"delay_too_far", &hourglassv1.ScheduleRequest{Topic: "t", When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 31 * units.Day.Milliseconds()}}, []string{"maximum delay 30d", "--max-delay"}},
		{"time_too_far", &hourglassv1.ScheduleRequest{Topic: "t", When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: far}}, []string{"deliver_at", "31d ahead", "maximum delay is 30d"}},
		{"level_zero", &hourglassv1.ScheduleRequest{Topic: "t", When: &hourglassv1.ScheduleRequest_DelayLevel{DelayLevel: 0}}, []string{"delay_level 0 is unknown", "1 to 18", "18=2h"}},
		{"level_19", &hourglassv1.ScheduleRequest{Topic: "t", When: &hourglassv1.ScheduleRequest_DelayLevel{DelayLevel: 19}}, []string{"delay_level 19"}},
		{"empty_header_key", &hourglassv1.ScheduleRequest{Topic: "t", Headers: []*hourglassv1.Header{{Value: "v"}}}, []string{"headers[0]", "empty key"}},
	} {
		wantCode(t, tc.name, sched(tc.m), connect.CodeInvalidArgument, tc.msgs...)
	}

	// Batches: too many, empty, and one bad message stores nothing.
	big := make([]*hourglassv1.ScheduleRequest, MaxBatch+1)
	for i := range big {
		big[i] = &hourglassv1.ScheduleRequest{Topic: "t"}
	}
	_, err := ts.client.ScheduleBatch(ctx, connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: big}))
	wantCode(t, "batch_too_big", err, connect.CodeInvalidArgument, "1001 messages", "at most 1000")
	_, err = ts.client.ScheduleBatch(ctx, connect.NewRequest(&hourglassv1.ScheduleBatchRequest{}))
	wantCode(t, "batch_empty", err, connect.CodeInvalidArgument, "1 to 1000")
	mixed := []*hourglassv1.ScheduleRequest{{Topic: "t"}, {Topic: "t"}, {Topic: "t", Body: make([]byte, 2000)}}
	_, err = ts.client.ScheduleBatch(ctx, connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: mixed}))
	wantCode(t, "batch_one_bad", err, connect.CodeInvalidArgument, "messages[2]: body is 2000 bytes")
	if n := ts.eng.Stats().Scheduled; n != 0 {
		t.Errorf("rejected requests scheduled %d messages", n)
	}

	// IDs and consumer arguments.
	_, err = ts.client.Cancel(ctx, connect.NewRequest(&hourglassv1.CancelRequest{Id: "xyz"}))
	wantCode(t, "cancel_short_id", err, connect.CodeInvalidArgument, "32 hex digits")
	_, err = ts.client.Cancel(ctx, connect.NewRequest(&hourglassv1.CancelRequest{Id: strings.Repeat("g", 32)}))
	wantCode(t, "cancel_bad_hex", err, connect.CodeInvalidArgument, "0-9, a-f")
	_, err = ts.client.Cancel(ctx, connect.NewRequest(&hourglassv1.CancelRequest{}))
	wantCode(t, "cancel_empty_id", err, connect.CodeInvalidArgument, "name the message by id, or by topic and key")
	_, err = ts.client.Ack(ctx, connect.NewRequest(&hourglassv1.AckRequest{Topic: "t", Id: "12"}))
	wantCode(t, "ack_bad_id", err, connect.CodeInvalidArgument, "32 hex digits")
	_, err = ts.client.Ack(ctx, connect.NewRequest(&hourglassv1.AckRequest{Topic: "t", Receipt: "nope"}))
	wantCode(t, "ack_bad_receipt", err, connect.CodeInvalidArgument, "malformed receipt")
	_, err = ts.client.Ack(ctx, connect.NewRequest(&hourglassv1.AckRequest{Topic: "t", Id: strings.Repeat("0", 31) + "1"}))
	wantCode(t, "ack_not_leased", err, connect.CodeFailedPrecondition, "not leased")
	_, err = ts.client.Nack(ctx, connect.NewRequest(&hourglassv1.NackRequest{Topic: "t", Id: strings.Repeat("0", 32), DelayMs: -5}))
	wantCode(t, "nack_negative_delay", err, connect.CodeInvalidArgument, "delay_ms -5")
	_, err = ts.client.Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: "t", MaxMessages: 1001}))
	wantCode(t, "receive_too_many", err, connect.CodeInvalidArgument, "max_messages 1001", "1 to 1000")
	_, err = ts.client.Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: "t", WaitMs: 600_000}))
	wantCode(t, "receive_long_wait", err, connect.CodeInvalidArgument, "wait_ms 600000")
	_, err = ts.client.Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: "t", LeaseMs: -1}))
	wantCode(t, "receive_bad_lease", err, connect.CodeInvalidArgument, "lease_ms -1")
	_, err = ts.client.Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: ""}))
	wantCode(t, "receive_empty_topic", err, connect.CodeInvalidArgument, "topic")
}

func TestScheduleReceiveAck(t *testing.T) {
	ts := newTestServer(t, Options{})
	ctx := context.Background()
	start := time.Now()
	res, err := ts.client.Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{
		Topic: "orders", Body: []byte("hello"), Headers: []*hourglassv1.Header{{Key: "k", Value: "v"}},
		When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 200},
	}))
	if err != nil {
		t.Fatal(err)
	}
	got, err := ts.client.Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: "orders", MaxMessages: 10, WaitMs: 10_000}))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Msg.Messages) != 1 {
		t.Fatalf("received %d messages, want 1", len(got.Msg.Messages))
	}
	m := got.Msg.Messages[0]
	if m.Id != res.Msg.Id || string(m.Body) != "hello" || len(m.Headers) != 1 || m.Headers[0].Key != "k" || m.OriginId != m.Id {
		t.Errorf("received %v, scheduled %s", m, res.Msg.Id)
	}
	if time.Since(start) < 200*time.Millisecond || m.ReceivedAt.AsTime().Before(m.DeliverAt.AsTime()) {
		t.Errorf("delivered early: after %v, received %v, due %v", time.Since(start), m.ReceivedAt.AsTime(), m.DeliverAt.AsTime())
	}
	if _, err := ts.client.Ack(ctx, connect.NewRequest(&hourglassv1.AckRequest{Topic: "orders", Receipt: m.Receipt})); err != nil {
		t.Fatal(err)
	}
	_, err = ts.client.Ack(ctx, connect.NewRequest(&hourglassv1.AckRequest{Topic: "orders", Id: m.Id}))
	wantCode(t, "second ack", err, connect.CodeFailedPrecondition)

	st, err := ts.client.Stats(ctx, connect.NewRequest(&hourglassv1.StatsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Msg.Topics) != 1 || st.Msg.Topics[0].Acked != 1 || st.Msg.Topics[0].Scheduled != 1 || st.Msg.Lateness.Count != 1 {
		t.Errorf("stats = %v", st.Msg)
	}
	tm, err := ts.client.Time(ctx, connect.NewRequest(&hourglassv1.TimeRequest{}))
	if err != nil || tm.Msg.Now.AsTime().Sub(time.Now()).Abs() > time.Minute {
		t.Errorf("Time = %v, %v", tm, err)
	}
}

func TestAuth(t *testing.T) {
	ts := newTestServer(t, Options{AuthToken: "s3cret"})
	ctx := context.Background()
	_, err := ts.client.Time(ctx, connect.NewRequest(&hourglassv1.TimeRequest{}))
	wantCode(t, "no token", err, connect.CodeUnauthenticated, "Authorization: Bearer")
	req := connect.NewRequest(&hourglassv1.TimeRequest{})
	req.Header().Set("Authorization", "Bearer wrong")
	_, err = ts.client.Time(ctx, req)
	wantCode(t, "wrong token", err, connect.CodeUnauthenticated, "wrong bearer token")
	req = connect.NewRequest(&hourglassv1.TimeRequest{})
	req.Header().Set("Authorization", "Bearer s3cret")
	if _, err = ts.client.Time(ctx, req); err != nil {
		t.Errorf("right token: %v", err)
	}
	// Streams are gated too.
	stream, err := ts.client.ReceiveStream(ctx, connect.NewRequest(&hourglassv1.ReceiveStreamRequest{Topic: "t"}))
	if err == nil {
		stream.Receive()
		err = stream.Err()
		stream.Close()
	}
	wantCode(t, "stream without token", err, connect.CodeUnauthenticated)

	get := func(path, token string) int {
		r, _ := http.NewRequest("GET", ts.http.URL+path, nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := ts.http.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get("/healthz", ""); c != 200 {
		t.Errorf("/healthz without token: %d", c)
	}
	if c := get("/metrics", ""); c != 401 {
		t.Errorf("/metrics without token: %d", c)
	}
	if c := get("/metrics", "s3cret"); c != 200 {
		t.Errorf("/metrics with token: %d", c)
	}
}

func TestShutdownEndsPolls(t *testing.T) {
	ts := newTestServer(t, Options{})
	done := make(chan error, 2)
	go func() {
		res, err := ts.client.Receive(context.Background(), connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: "idle", WaitMs: 120_000}))
		if err == nil && len(res.Msg.Messages) != 0 {
			err = errors.New("messages from an idle topic")
		}
		done <- err
	}()
	go func() {
		stream, err := ts.client.ReceiveStream(context.Background(), connect.NewRequest(&hourglassv1.ReceiveStreamRequest{Topic: "idle"}))
		if err != nil {
			done <- err
			return
		}
		for stream.Receive() {
		}
		done <- stream.Err()
	}()
	// Wait (with a deadline) until both calls are inside the server.
	deadline := time.Now().Add(5 * time.Second)
	for ts.srv.life.pollsActive.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	ts.srv.BeginShutdown()
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("poll ended with %v, want a clean end", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("BeginShutdown did not end the long polls")
		}
	}
	resp, err := ts.http.Client().Get(ts.http.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz after BeginShutdown: %d", resp.StatusCode)
	}
}

func TestMetricsNames(t *testing.T) {
	ts := newTestServer(t, Options{})
	ctx := context.Background()
	if _, err := ts.client.Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "m"})); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.client.Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: "m", WaitMs: 10_000})); err != nil {
		t.Fatal(err)
	}
	scrape := func() string {
		resp, err := ts.http.Client().Get(ts.http.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(body)
	}
	// The delivery is counted once its done-record is durable, a moment
	// after the queue has it.
	body := scrape()
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(body, `hourglass_delivered_total{topic="m"} 1`) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		body = scrape()
	}
	for _, want := range []string{
		`hourglass_scheduled_total{topic="m"} 1`, `hourglass_delivered_total{topic="m"} 1`, `hourglass_acked_total{topic="m"} 0`,
		"hourglass_nacked_total", "hourglass_redelivered_total", "hourglass_cancelled_total", "hourglass_dead_lettered_total",
		`hourglass_pending{horizon="1m"}`, `hourglass_pending{horizon="beyond"}`, "hourglass_lateness_seconds_bucket",
		"hourglass_schedule_duration_seconds", "hourglass_schedule_segments", `hourglass_disk_bytes{log="commitlog"}`,
		"hourglass_reput_lag_bytes", `hourglass_queue_leased{topic="m"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestAckBatch(t *testing.T) {
	ts := newTestServer(t, Options{})
	ctx := context.Background()
	var batch []*hourglassv1.ScheduleRequest
	for i := range 3 {
		batch = append(batch, &hourglassv1.ScheduleRequest{Topic: "orders", Body: []byte{byte(i)}})
	}
	if _, err := ts.client.ScheduleBatch(ctx, connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: batch})); err != nil {
		t.Fatal(err)
	}
	var msgs []*hourglassv1.Message
	for len(msgs) < 3 {
		got, err := ts.client.Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: "orders", MaxMessages: 10, WaitMs: 10_000}))
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, got.Msg.Messages...)
	}
	res, err := ts.client.AckBatch(ctx, connect.NewRequest(&hourglassv1.AckBatchRequest{Topic: "orders",
		Receipts: []string{msgs[0].Receipt, msgs[1].Receipt, msgs[0].Receipt, "bogus"}}))
	if err != nil {
		t.Fatal(err)
	}
	r := res.Msg.Results
	if len(r) != 4 || !r[0].Acked || !r[1].Acked || r[2].Acked || r[2].Error == "" || r[3].Acked || r[3].Error == "" {
		t.Fatalf("results %v: want acked, acked, then two failures with reasons", r)
	}
	_, err = ts.client.AckBatch(ctx, connect.NewRequest(&hourglassv1.AckBatchRequest{Topic: "orders"}))
	wantCode(t, "empty batch", err, connect.CodeInvalidArgument)
	_, err = ts.client.AckBatch(ctx, connect.NewRequest(&hourglassv1.AckBatchRequest{Topic: "", Receipts: []string{msgs[2].Receipt}}))
	wantCode(t, "empty topic", err, connect.CodeInvalidArgument)
	st, err := ts.client.Stats(ctx, connect.NewRequest(&hourglassv1.StatsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if st.Msg.Topics[0].Acked != 2 {
		t.Errorf("acked %d, want 2", st.Msg.Topics[0].Acked)
	}
}
