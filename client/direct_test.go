package client

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/internal/wirecodec"
	"github.com/hourglassmq/hourglass/queue"
	"github.com/hourglassmq/hourglass/server"
)

// services returns the same service twice: through connect-go (a
// connect option given, as New keeps connect-go then) and through the
// direct path (New's default).
func services(t testing.TB, addr string, hc *http.Client, token string) (viaConnect, viaDirect hourglassv1connect.HourglassServiceClient) {
	t.Helper()
	viaConnect = New(addr, WithHTTPClient(hc), WithToken(token), WithMaxCalls(0),
		WithConnectOptions(connect.WithCodec(wirecodec.Codec{}))).Service()
	viaDirect = New(addr, WithHTTPClient(hc), WithToken(token), WithMaxCalls(0)).Service()
	if _, ok := viaDirect.(*direct); !ok {
		t.Fatalf("New without connect options gave %T, want the direct service", viaDirect)
	}
	if _, ok := viaConnect.(*direct); ok {
		t.Fatal("New with a connect option gave the direct service")
	}
	return viaConnect, viaDirect
}

// startServer runs a real server (fsync none) on 127.0.0.1.
func startServer(t testing.TB, opts server.Options) string {
	t.Helper()
	dir := t.TempDir()
	q, err := queue.Open(queue.Options{Dir: server.QueueDir(dir), Fsync: commitlog.SyncNone, MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	m := server.NewMetrics()
	eng, err := engine.Open(engine.Options{Dir: dir, Fsync: commitlog.SyncNone, Sink: q, Observer: m, SegmentDuration: 2 * time.Second, MaxDelay: opts.MaxDelay})
	if err != nil {
		t.Fatal(err)
	}
	q.SetReschedule(eng.Schedule)
	opts.Engine, opts.Queue, opts.Metrics, opts.DataDir, opts.SegmentDuration = eng, q, m, dir, 2*time.Second
	srv, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler()) // 127.0.0.1
	t.Cleanup(func() {
		srv.BeginShutdown()
		hs.Close()
		if err := eng.Close(); err != nil && !errors.Is(err, engine.ErrClosed) {
			t.Error(err)
		}
		if err := q.Close(); err != nil {
			t.Error(err)
		}
	})
	return hs.URL
}

// sameMeta compares headers but Date, which depends on the second.
func sameMeta(a, b http.Header) bool {
	a, b = a.Clone(), b.Clone()
	delete(a, "Date")
	delete(b, "Date")
	return maps.EqualFunc(a, b, slices.Equal)
}

// sameError fails unless both errors are *connect.Error with the same
// code, message, details and meta.
func sameError(t *testing.T, name string, viaConnect, viaDirect error) {
	t.Helper()
	var a, b *connect.Error
	if !errors.As(viaConnect, &a) || !errors.As(viaDirect, &b) {
		t.Errorf("%s: connect-go gave %v (%T), direct %v (%T); want two *connect.Error", name, viaConnect, viaConnect, viaDirect, viaDirect)
		return
	}
	if a.Code() != b.Code() || a.Message() != b.Message() {
		t.Errorf("%s: connect-go gave %v, direct %v", name, a, b)
	}
	da, db := a.Details(), b.Details()
	if len(da) != len(db) {
		t.Errorf("%s: %d details through connect-go, %d direct", name, len(da), len(db))
	} else {
		for i := range da {
			if (da[i] == nil) != (db[i] == nil) || da[i] != nil && (da[i].Type() != db[i].Type() || !bytes.Equal(da[i].Bytes(), db[i].Bytes())) {
				t.Errorf("%s: detail %d: connect-go %v, direct %v", name, i, da[i], db[i])
			}
		}
	}
	if !sameMeta(a.Meta(), b.Meta()) {
		t.Errorf("%s: meta through connect-go %v, direct %v", name, a.Meta(), b.Meta())
	}
}

// callBoth makes the same Schedule (or ScheduleBatch with batch set)
// through both services and compares the results: equal errors, or both
// answers well-formed with the same headers (the IDs differ: they are two
// messages).
func callBoth(t *testing.T, name string, ctx context.Context, viaConnect, viaDirect hourglassv1connect.HourglassServiceClient, m *hourglassv1.ScheduleRequest, batch []*hourglassv1.ScheduleRequest) {
	t.Helper()
	var errs [2]error
	var hdrs [2]http.Header
	for i, svc := range []hourglassv1connect.HourglassServiceClient{viaConnect, viaDirect} {
		if batch != nil {
			res, err := svc.ScheduleBatch(ctx, connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: batch}))
			errs[i] = err
			if err == nil {
				hdrs[i] = res.Header()
				if len(res.Msg.Results) != len(batch) {
					t.Errorf("%s: %d results for %d messages", name, len(res.Msg.Results), len(batch))
				}
			}
			continue
		}
		res, err := svc.Schedule(ctx, connect.NewRequest(m))
		errs[i] = err
		if err == nil {
			hdrs[i] = res.Header()
			if len(res.Msg.Id) != 32 || res.Msg.DeliverAt == nil {
				t.Errorf("%s: cannedAnswer %v", name, res.Msg)
			}
		}
	}
	if (errs[0] == nil) != (errs[1] == nil) {
		t.Errorf("%s: connect-go gave %v, direct %v", name, errs[0], errs[1])
		return
	}
	if errs[0] != nil {
		sameError(t, name, errs[0], errs[1])
		return
	}
	if !sameMeta(hdrs[0], hdrs[1]) {
		t.Errorf("%s: headers through connect-go %v, direct %v", name, hdrs[0], hdrs[1])
	}
}

// TestDirectMatchesConnect drives the same calls through connect-go and
// the direct path against a real server on 127.0.0.1: good calls, every
// input the server refuses, one the client cannot encode, a wrong token,
// a dead server, and ctx deadlines.
func TestDirectMatchesConnect(t *testing.T) {
	const day = 24 * time.Hour
	addr := startServer(t, server.Options{MaxBody: 1024, MaxDelay: 30 * day, AuthToken: "secret"})
	hc := NewHTTPClient(8)
	defer hc.CloseIdleConnections()
	viaConnect, viaDirect := services(t, addr, hc, "secret")
	ctx := context.Background()
	far := timestamppb.New(time.Now().Add(31 * day))
	delay := func(ms int64) *hourglassv1.ScheduleRequest_DelayMs {
		return &hourglassv1.ScheduleRequest_DelayMs{DelayMs: ms}
	}
	for _, tc := range []struct {
		name string
		m    *hourglassv1.ScheduleRequest
	}{
		{"ok", &hourglassv1.ScheduleRequest{Topic: "t", Body: []byte("x"), When: delay(60_000)}},
		{"ok_headers_and_time", &hourglassv1.ScheduleRequest{Topic: "t", Headers: []*hourglassv1.Header{{Key: "k", Value: "v"}},
			When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(time.Now().Add(time.Hour))}}},
		{"ok_level_and_key", &hourglassv1.ScheduleRequest{Topic: "t", When: &hourglassv1.ScheduleRequest_DelayLevel{DelayLevel: 2}, IdempotencyKey: "k1"}},
		{"empty_topic", &hourglassv1.ScheduleRequest{}},
		{"bad_topic_byte", &hourglassv1.ScheduleRequest{Topic: "a/b"}},
		{"topic_starts_with_dot", &hourglassv1.ScheduleRequest{Topic: ".a"}},
		{"long_topic", &hourglassv1.ScheduleRequest{Topic: strings.Repeat("a", 201)}},
		{"body_over_max", &hourglassv1.ScheduleRequest{Topic: "t", Body: make([]byte, 1025)}},
		{"negative_delay", &hourglassv1.ScheduleRequest{Topic: "t", When: delay(-1)}},
		{"delay_too_far", &hourglassv1.ScheduleRequest{Topic: "t", When: delay(31 * day.Milliseconds())}},
		{"time_too_far", &hourglassv1.ScheduleRequest{Topic: "t", When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: far}}},
		{"level_zero", &hourglassv1.ScheduleRequest{Topic: "t", When: &hourglassv1.ScheduleRequest_DelayLevel{}}},
		{"level_19", &hourglassv1.ScheduleRequest{Topic: "t", When: &hourglassv1.ScheduleRequest_DelayLevel{DelayLevel: 19}}},
		{"empty_header_key", &hourglassv1.ScheduleRequest{Topic: "t", Headers: []*hourglassv1.Header{{Value: "v"}}}},
		{"key_too_long", &hourglassv1.ScheduleRequest{Topic: "t", IdempotencyKey: strings.Repeat("k", 201)}},
		{"bad_utf8_topic", &hourglassv1.ScheduleRequest{Topic: "\xff"}}, // refused by the encoder
	} {
		callBoth(t, tc.name, ctx, viaConnect, viaDirect, tc.m, nil)
		callBoth(t, "batch_of_"+tc.name, ctx, viaConnect, viaDirect, nil, []*hourglassv1.ScheduleRequest{{Topic: "t"}, tc.m})
	}
	big := make([]*hourglassv1.ScheduleRequest, server.MaxBatch+1)
	for i := range big {
		big[i] = &hourglassv1.ScheduleRequest{Topic: "t"}
	}
	callBoth(t, "batch_too_big", ctx, viaConnect, viaDirect, nil, big)
	callBoth(t, "batch_empty", ctx, viaConnect, viaDirect, nil, []*hourglassv1.ScheduleRequest{})
	callBoth(t, "batch_max", ctx, viaConnect, viaDirect, nil, big[:server.MaxBatch])

	wrongConnect, wrongDirect := services(t, addr, hc, "wrong")
	callBoth(t, "wrong_token", ctx, wrongConnect, wrongDirect, &hourglassv1.ScheduleRequest{Topic: "t"}, nil)
	noConnect, noDirect := services(t, addr, hc, "")
	callBoth(t, "no_token", ctx, noConnect, noDirect, nil, []*hourglassv1.ScheduleRequest{{Topic: "t"}})

	expired, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	callBoth(t, "deadline_passed", expired, viaConnect, viaDirect, &hourglassv1.ScheduleRequest{Topic: "t"}, nil)
	cancelled, cancel2 := context.WithCancel(ctx)
	cancel2()
	callBoth(t, "cancelled", cancelled, viaConnect, viaDirect, nil, []*hourglassv1.ScheduleRequest{{Topic: "t"}})

	// A dead server: a port that was just closed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	deadConnect, deadDirect := services(t, dead, hc, "secret")
	callBoth(t, "dead_server", ctx, deadConnect, deadDirect, &hourglassv1.ScheduleRequest{Topic: "t"}, nil)
	callBoth(t, "dead_server_batch", ctx, deadConnect, deadDirect, nil, []*hourglassv1.ScheduleRequest{{Topic: "t"}})
	if _, err := deadDirect.Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "t"})); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("dead server: %v, want Unavailable", err)
	}
}

// TestDirectDeadlineInFlight ends a call's deadline while the server
// holds it: both paths cannedAnswer DeadlineExceeded with the same words, and
// both sent the same Connect-Timeout-Ms (give or take the time between).
func TestDirectDeadlineInFlight(t *testing.T) {
	var mu sync.Mutex
	var timeouts []int
	release := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // then the server notices a close
		ms, _ := strconv.Atoi(r.Header.Get("Connect-Timeout-Ms"))
		mu.Lock()
		timeouts = append(timeouts, ms)
		mu.Unlock()
		select {
		case <-r.Context().Done(): // the client closed the connection
		case <-release:
		}
	}))
	defer hs.Close()
	defer close(release)
	hc := NewHTTPClient(4)
	defer hc.CloseIdleConnections()
	viaConnect, viaDirect := services(t, hs.URL, hc, "")
	call := func(svc hourglassv1connect.HourglassServiceClient) error {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := svc.Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "t"}))
		return err
	}
	errConnect, errDirect := call(viaConnect), call(viaDirect)
	sameError(t, "deadline_in_flight", errConnect, errDirect)
	if connect.CodeOf(errDirect) != connect.CodeDeadlineExceeded {
		t.Errorf("direct: %v, want DeadlineExceeded", errDirect)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(timeouts) != 2 || timeouts[0] < 250 || timeouts[0] > 300 || timeouts[1] < 250 || timeouts[1] > 300 {
		t.Errorf("Connect-Timeout-Ms sent: %v, want two in (250, 300]", timeouts)
	}
}

// cannedAnswer is a canned HTTP cannedAnswer, or a transport error.
type cannedAnswer struct {
	name    string
	status  int
	header  map[string]string
	body    []byte
	doErr   error
	batch   bool
	timeout time.Duration // ctx deadline of the call; 0: none
	wire    string        // how a wire answerer deviates from a plain answer (wire*)
}

// canned is an http.RoundTripper that records each request and gives
// the cannedAnswer a's.
type canned struct {
	mu   sync.Mutex
	a    cannedAnswer
	sent []sentRequest
}

type sentRequest struct {
	url, host string
	header    http.Header
	body      []byte
	length    int64
}

func (c *canned) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body.Close()
	}
	c.mu.Lock()
	a := c.a
	c.sent = append(c.sent, sentRequest{url: r.URL.String(), host: r.Host, header: r.Header.Clone(), body: body, length: r.ContentLength})
	c.mu.Unlock()
	if a.doErr != nil {
		return nil, a.doErr
	}
	h := make(http.Header)
	for k, v := range a.header {
		h.Set(k, v)
	}
	return &http.Response{Status: fmt.Sprintf("%d %s", a.status, http.StatusText(a.status)), StatusCode: a.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h, Body: io.NopCloser(bytes.NewReader(a.body)),
		ContentLength: int64(len(a.body)), Request: r}, nil
}

// answerer gives every request the answer set last, and records the
// requests: canned in place of a transport (http.Client.Do's path), or
// wire behind a listener (h1.Transport.Post's path).
type answerer interface {
	set(a cannedAnswer)
	requests() []sentRequest
}

func (c *canned) set(a cannedAnswer) {
	c.mu.Lock()
	c.a, c.sent = a, nil
	c.mu.Unlock()
}

func (c *canned) requests() []sentRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent
}

// sameOutcome makes one call through each path over c with cannedAnswer a and
// compares what the caller gets, and what was sent.
func sameOutcome(t *testing.T, c answerer, viaConnect, viaDirect hourglassv1connect.HourglassServiceClient, a cannedAnswer) {
	t.Helper()
	c.set(a)
	type result struct {
		msg            proto.Message
		header, traile http.Header
		err            error
	}
	var rs [2]result
	for i, svc := range []hourglassv1connect.HourglassServiceClient{viaConnect, viaDirect} {
		ctx := context.Background()
		if a.timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, a.timeout)
			defer cancel()
		}
		if a.batch {
			res, err := svc.ScheduleBatch(ctx, connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{
				{Topic: "t", Body: []byte("b"), When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 5}}, {Topic: "u"}}}))
			rs[i].err = err
			if err == nil {
				rs[i] = result{msg: res.Msg, header: res.Header(), traile: res.Trailer()}
			}
			continue
		}
		req := connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "t", Body: []byte("b"), When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 5}})
		req.Header().Set("X-Custom", "1")
		res, err := svc.Schedule(ctx, req)
		rs[i].err = err
		if err == nil {
			rs[i] = result{msg: res.Msg, header: res.Header(), traile: res.Trailer()}
		}
	}
	if (rs[0].err == nil) != (rs[1].err == nil) {
		t.Errorf("%s: connect-go gave %v, direct %v", a.name, rs[0].err, rs[1].err)
	} else if rs[0].err != nil {
		sameError(t, a.name, rs[0].err, rs[1].err)
	} else if !proto.Equal(rs[0].msg, rs[1].msg) || !sameMeta(rs[0].header, rs[1].header) || !sameMeta(rs[0].traile, rs[1].traile) {
		t.Errorf("%s: connect-go gave %v %v %v, direct %v %v %v", a.name, rs[0].msg, rs[0].header, rs[0].traile, rs[1].msg, rs[1].header, rs[1].traile)
	}
	sent := c.requests()
	if len(sent) != 2 {
		t.Fatalf("%s: %d requests sent, want 2", a.name, len(sent))
	}
	s0, s1 := sent[0], sent[1]
	h0, h1 := s0.header.Clone(), s1.header.Clone()
	t0, t1 := h0.Get("Connect-Timeout-Ms"), h1.Get("Connect-Timeout-Ms")
	delete(h0, "Connect-Timeout-Ms")
	delete(h1, "Connect-Timeout-Ms")
	if s0.url != s1.url || s0.host != s1.host || s0.length != s1.length || !bytes.Equal(s0.body, s1.body) || !maps.EqualFunc(h0, h1, slices.Equal) || (t0 == "") != (t1 == "") {
		t.Errorf("%s: connect-go sent %+v, direct %+v", a.name, s0, s1)
	}
}

func gz(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestDirectAnswers gives both paths the same crafted answers and
// transport errors, including what the server never sends.
func TestDirectAnswers(t *testing.T) {
	c := &canned{}
	hc := &http.Client{Transport: c}
	viaConnect, viaDirect := services(t, "http://127.0.0.1:9/base/", hc, "tok")
	for _, a := range directAnswerCases(t) {
		sameOutcome(t, c, viaConnect, viaDirect, a)
		a.batch, a.name = !a.batch, a.name+"/other_rpc"
		sameOutcome(t, c, viaConnect, viaDirect, a)
	}
}

// directAnswerCases are the answers TestDirectAnswers gives both paths;
// those without doErr are also sent over the wire (TestDirectPostAnswers).
func directAnswerCases(t testing.TB) []cannedAnswer {
	single, err := proto.Marshal(&hourglassv1.ScheduleResponse{Id: "0000019a1b2c3d4e0000000000000100", DeliverAt: &timestamppb.Timestamp{Seconds: 9, Nanos: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := proto.Marshal(&hourglassv1.ScheduleBatchResponse{Results: []*hourglassv1.ScheduleResponse{{Id: "a"}, {Id: "b", DeliverAt: &timestamppb.Timestamp{Seconds: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	proto := map[string]string{"Content-Type": "application/proto", "Accept-Encoding": "gzip", "Trailer-X-Done": "yes"}
	jsonCT := map[string]string{"Content-Type": "application/json"}
	withGzip := func(h map[string]string) map[string]string {
		h = maps.Clone(h)
		h["Content-Encoding"] = "gzip"
		return h
	}
	details := `{"code":"invalid_argument","message":"bad topic","details":[{"type":"google.protobuf.Duration","value":"CAE"},{"type":"type.example.com/x.Y","value":"AAEC","debug":{}}]}`
	cases := []cannedAnswer{
		{name: "ok", status: 200, header: proto, body: single},
		{name: "ok_batch", status: 200, header: proto, body: batch, batch: true},
		{name: "ok_gzip", status: 200, header: withGzip(proto), body: gz(t, single)},
		{name: "ok_gzip_batch", status: 200, header: withGzip(proto), body: gz(t, batch), batch: true},
		{name: "ok_empty", status: 200, header: proto},
		{name: "ok_with_deadline", status: 200, header: proto, body: single, timeout: time.Hour},
		{name: "ok_identity", status: 200, header: map[string]string{"Content-Type": "application/proto", "Content-Encoding": "identity"}, body: single},
		{name: "bad_gzip", status: 200, header: withGzip(proto), body: []byte("not gzip at all")},
		{name: "short_gzip", status: 200, header: withGzip(proto), body: []byte{0x1f}},
		{name: "truncated_gzip", status: 200, header: withGzip(proto), body: gz(t, single)[:20]},
		{name: "unknown_encoding", status: 200, header: map[string]string{"Content-Type": "application/proto", "Content-Encoding": "br"}, body: single},
		{name: "bad_proto", status: 200, header: proto, body: []byte{0x0a, 0x05, 'a'}},
		{name: "bad_proto_batch", status: 200, header: proto, body: []byte{0xff}, batch: true},
		{name: "json_answer", status: 200, header: jsonCT, body: []byte(`{}`)},
		{name: "no_content_type", status: 200, body: single},
		{name: "text_answer", status: 200, header: map[string]string{"Content-Type": "text/plain"}, body: single},
		{name: "error_json", status: 400, header: map[string]string{"Content-Type": "application/json", "X-Extra": "1", "Trailer-Why": "because"}, body: []byte(`{"code":"invalid_argument","message":"topic is empty"}`)},
		{name: "error_details", status: 400, header: jsonCT, body: []byte(details)},
		{name: "error_null_detail", status: 400, header: jsonCT, body: []byte(`{"code":"internal","details":[null]}`)},
		{name: "error_bad_detail", status: 400, header: jsonCT, body: []byte(`{"code":"internal","details":[{"type":"x","value":"!!"}]}`)},
		{name: "error_charset", status: 401, header: map[string]string{"Content-Type": "application/json; charset=utf-8"}, body: []byte(`{"code":"unauthenticated","message":"no"}`)},
		{name: "error_gzip", status: 503, header: withGzip(jsonCT), body: gz(t, []byte(`{"code":"unavailable","message":"later"}`))},
		{name: "error_bad_gzip", status: 503, header: withGzip(jsonCT), body: []byte("zz")},
		{name: "error_unknown_encoding", status: 503, header: map[string]string{"Content-Type": "application/json", "Content-Encoding": "br"}, body: []byte(`{}`)},
		{name: "error_no_code", status: 429, header: jsonCT, body: []byte(`{"message":"slow down"}`)},
		{name: "error_odd_code", status: 404, header: jsonCT, body: []byte(`{"code":"code_99","message":"odd"}`)},
		{name: "error_unknown_code", status: 500, header: jsonCT, body: []byte(`{"code":"nope","message":"m"}`)},
		{name: "error_number_code", status: 500, header: jsonCT, body: []byte(`{"code":3,"message":"m"}`)},
		{name: "error_null", status: 502, header: jsonCT, body: []byte(`null`)},
		{name: "error_not_json", status: 500, header: jsonCT, body: []byte(`<html>`)},
		{name: "error_empty", status: 504, header: jsonCT},
		{name: "error_text", status: 503, header: map[string]string{"Content-Type": "text/plain"}, body: []byte("down")},
		{name: "error_403_text", status: 403, body: []byte("no")},
		{name: "error_ok_code", status: 400, header: jsonCT, body: []byte(`{"code":"ok"}`)},
		{name: "do_refused", doErr: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}},
		{name: "do_eof", doErr: io.EOF},
		{name: "do_reset", doErr: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}},
		{name: "do_timeout", doErr: &net.OpError{Op: "dial", Net: "tcp", Err: errTimeout{}}},
		{name: "do_malformed", doErr: errors.New("net/http: HTTP/1.x transport connection broken: malformed HTTP response \"\\x00\"")},
		{name: "do_rst_cancel", doErr: errors.New("stream error: stream ID 3; CANCEL; received from peer")},
		{name: "do_rst_refused", doErr: errors.New("stream error: stream ID 3; REFUSED_STREAM; received from peer")},
		{name: "do_rst_calm", doErr: errors.New("stream error: stream ID 3; ENHANCE_YOUR_CALM; received from peer")},
		{name: "do_grpc_hint", doErr: errors.New("http2: Transport: cannot retry err [x] after Request.Body was written; define Request.GetBody to avoid this error")},
	}
	return cases
}

type errTimeout struct{}

func (errTimeout) Error() string   { return "i/o timeout" }
func (errTimeout) Timeout() bool   { return true }
func (errTimeout) Temporary() bool { return true }
func (errTimeout) Is(err error) bool {
	return err == context.DeadlineExceeded //nolint:errorlint // as net's timeouts
}

// FuzzDirectAnswer holds the direct path to connect-go for any cannedAnswer:
// status, Content-Type, Content-Encoding and body; given by a transport
// to both (the direct path's http.Client.Do), and written on a connection
// that connect-go reads through h1.Transport.RoundTrip and the direct
// path through h1.Transport.Post.
func FuzzDirectAnswer(f *testing.F) {
	f.Add(200, "application/proto", "", []byte{0x0a, 0x01, 'a'}, false)
	f.Add(200, "application/proto", "gzip", gz(f, []byte{0x0a, 0x01, 'a'}), true)
	f.Add(400, "application/json", "", []byte(`{"code":"invalid_argument","message":"m","details":[{"type":"a/b","value":"AAE="}]}`), false)
	f.Add(503, "application/json", "gzip", gz(f, []byte(`{"code":"unavailable"}`)), true)
	f.Add(500, "text/plain", "", []byte("x"), false)
	c := &canned{}
	hc := &http.Client{Transport: c}
	viaConnect, viaDirect := services(f, "http://127.0.0.1:9", hc, "")
	w := newWire(f)
	whc := NewHTTPClient(4)
	defer whc.CloseIdleConnections()
	wireConnect, wireDirect := services(f, w.url, whc, "")
	f.Fuzz(func(t *testing.T, status int, ct, enc string, body []byte, batch bool) {
		if status < 100 || status > 999 {
			return
		}
		h := map[string]string{}
		if ct != "" {
			h["Content-Type"] = ct
		}
		if enc != "" {
			h["Content-Encoding"] = enc
		}
		for _, v := range h {
			if !httpHeaderValueOK(v) {
				return
			}
		}
		a := cannedAnswer{name: "fuzz", status: status, header: h, body: body, batch: batch}
		sameOutcome(t, c, viaConnect, viaDirect, a)
		if status >= 200 { // an informational answer alone leaves both waiting for the final one
			a.name = "fuzz_wire"
			sameOutcome(t, w, wireConnect, wireDirect, a)
		}
	})
}

// httpHeaderValueOK keeps header values a real transport could deliver.
func httpHeaderValueOK(v string) bool {
	return !strings.ContainsAny(v, "\r\n\x00") && strings.TrimSpace(v) == v
}

// TestDirectRetryBody: a transport that sends the request again gets the
// same body from GetBody; once the call returned, the body reads nothing.
func TestDirectRetryBody(t *testing.T) {
	var got [][]byte
	var kept *http.Request
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		b1, _ := io.ReadAll(r.Body)
		again, err := r.GetBody()
		if err != nil {
			return nil, err
		}
		b2, _ := io.ReadAll(again)
		got = append(got, b1, b2)
		kept = r
		return nil, errors.New("refused")
	})}
	_, viaDirect := services(t, "http://127.0.0.1:9", hc, "")
	_, err := viaDirect.Schedule(context.Background(), connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "t", Body: []byte("body")}))
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("got %v, want Unavailable", err)
	}
	want, _ := proto.Marshal(&hourglassv1.ScheduleRequest{Topic: "t", Body: []byte("body")})
	if len(got) != 2 || !bytes.Equal(got[0], want) || !bytes.Equal(got[1], want) {
		t.Fatalf("bodies read %x, want twice %x", got, want)
	}
	if _, err := kept.GetBody(); err == nil {
		t.Error("GetBody after the call returned gave a body")
	}
	if n, err := kept.Body.Read(make([]byte, 10)); n != 0 || err == nil {
		t.Errorf("body read after the call returned: %d, %v", n, err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestDirectOnlyWhenEquivalent: any connect option keeps connect-go for
// everything, and an address connect-go refuses keeps its error.
func TestDirectOnlyWhenEquivalent(t *testing.T) {
	if _, ok := New("http://127.0.0.1:1", WithConnectOptions(connect.WithGRPC())).Service().(*direct); ok {
		t.Error("WithGRPC gave the direct service")
	}
	if _, ok := New("http://127.0.0.1:1").Service().(*direct); !ok {
		t.Error("the default client does not use the direct service")
	}
	svc := New("127.0.0.1:1").Service() // no scheme
	if _, ok := svc.(*direct); ok {
		t.Error("an address without a scheme gave the direct service")
	}
	_, err := svc.Schedule(context.Background(), connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "t"}))
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "missing scheme") {
		t.Errorf("no scheme: %v", err)
	}
}
