package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// rawCall is one HTTP request of TestFastPathMatchesConnect.
type rawCall struct {
	name      string
	method    string
	procedure string
	header    map[string]string
	body      []byte
	fast      bool // the fast path must answer it
}

// rawAnswer is what a client sees of an answer, but for the headers that
// depend on the moment (Date) or on how the body was framed.
type rawAnswer struct {
	status int
	header http.Header
	body   []byte
}

func sendRaw(t *testing.T, url string, c rawCall) rawAnswer {
	t.Helper()
	return sendRawWith(t, http.DefaultClient, url, c)
}

func sendRawWith(t *testing.T, hc *http.Client, url string, c rawCall) rawAnswer {
	t.Helper()
	req, err := http.NewRequest(c.method, url+c.procedure, bytes.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ContentLength >= 0 && resp.ContentLength != int64(len(body)) {
		t.Fatalf("%s: Content-Length %d, body %d bytes", c.name, resp.ContentLength, len(body))
	}
	h := resp.Header.Clone()
	for _, k := range []string{"Date", "Content-Length", "Transfer-Encoding"} {
		delete(h, k)
	}
	return rawAnswer{status: resp.StatusCode, header: h, body: body}
}

func marshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestFastPathMatchesConnect sends the same requests to two servers with
// the same clock, one through Handler and one through connect-go's
// handler alone, and wants the same answers byte for byte: status, headers
// (but Date and the body's framing), body. The IDs match too, since both
// engines number their records alike. The requests cover what the fast
// path takes and what it must leave to connect-go, errors included.
func TestFastPathMatchesConnect(t *testing.T) {
	clock := time.Date(2026, 11, 30, 5, 0, 0, 123_456_789, time.UTC)
	now := func() time.Time { return clock }
	const token = "s3cret"
	fast := newTestServerClock(t, Options{AuthToken: token, MaxBody: 1024, MaxDelay: 30 * Day}, now)
	ref := newTestServerClock(t, Options{AuthToken: token, MaxBody: 1024, MaxDelay: 30 * Day}, now)
	refHTTP := httptest.NewServer(ref.srv.Handler().(*front).connect)
	defer refHTTP.Close()

	calls := fastPathCalls(t, clock, token)
	for _, c := range calls {
		before := fast.srv.fastServed.Load()
		got := sendRaw(t, fast.http.URL, c)
		took := fast.srv.fastServed.Load() > before
		want := sendRaw(t, refHTTP.URL, c)
		if took != c.fast {
			t.Errorf("%s: the fast path took it: %v, want %v", c.name, took, c.fast)
		}
		if got.status != want.status || !bytes.Equal(got.body, want.body) || !equalHeaders(got.header, want.header) {
			t.Errorf("%s: answers differ\nfast path: %d %v\n%q\nconnect-go: %d %v\n%q", c.name, got.status, got.header, got.body, want.status, want.header, want.body)
		}
		if c.fast && got.status == http.StatusOK && len(got.body) == 0 {
			t.Errorf("%s: empty answer", c.name)
		}
	}

	// An engine that fails: both answer Unavailable alike.
	for _, ts := range []*testServer{fast, ref} {
		if err := ts.eng.Close(); err != nil {
			t.Fatal(err)
		}
	}
	c := calls[0]
	c.name = "closed_engine"
	before := fast.srv.fastServed.Load()
	got, want := sendRaw(t, fast.http.URL, c), sendRaw(t, refHTTP.URL, c)
	if fast.srv.fastServed.Load() == before {
		t.Error("closed_engine: the fast path did not take it")
	}
	if got.status != http.StatusServiceUnavailable || got.status != want.status || !bytes.Equal(got.body, want.body) || !equalHeaders(got.header, want.header) {
		t.Errorf("closed_engine: answers differ\nfast path: %d %v %q\nconnect-go: %d %v %q", got.status, got.header, got.body, want.status, want.header, want.body)
	}
}

// fastPathCalls are the requests TestFastPathMatchesConnect and
// TestLoopMatchesConnect send, for servers with MaxBody 1024, MaxDelay 30
// days and the auth token, whose clock reads clock.
func fastPathCalls(t *testing.T, clock time.Time, token string) []rawCall {
	delay := func(ms int64) *hourglassv1.ScheduleRequest_DelayMs {
		return &hourglassv1.ScheduleRequest_DelayMs{DelayMs: ms}
	}
	one := &hourglassv1.ScheduleRequest{Topic: "orders", Body: []byte("hello"), When: delay(3_600_000)}
	proto1 := map[string]string{"Content-Type": "application/proto", "Authorization": "Bearer " + token,
		"Connect-Protocol-Version": "1", "Connect-Timeout-Ms": "30000", "Accept-Encoding": "gzip"}
	with := func(extra map[string]string, drop ...string) map[string]string {
		h := maps.Clone(proto1)
		maps.Copy(h, extra)
		for _, k := range drop {
			delete(h, k)
		}
		return h
	}
	sched := hourglassv1connect.HourglassServiceScheduleProcedure
	batch := hourglassv1connect.HourglassServiceScheduleBatchProcedure
	big := make([]*hourglassv1.ScheduleRequest, 1000)
	for i := range big {
		big[i] = &hourglassv1.ScheduleRequest{Topic: "t" + string(rune('a'+i%3)), Body: []byte{byte(i)}, When: delay(int64(i) * 1000)}
	}
	return []rawCall{
		{name: "schedule", method: "POST", procedure: sched, header: proto1, body: marshal(t, one), fast: true},
		{name: "schedule_no_timeout_no_version", method: "POST", procedure: sched, header: with(nil, "Connect-Timeout-Ms", "Connect-Protocol-Version"), body: marshal(t, one), fast: true},
		{name: "schedule_level_key", method: "POST", procedure: sched, header: proto1, fast: true, body: marshal(t,
			&hourglassv1.ScheduleRequest{Topic: "pay", Body: []byte("x"), When: &hourglassv1.ScheduleRequest_DelayLevel{DelayLevel: 2}, IdempotencyKey: "k1"})},
		{name: "schedule_same_key", method: "POST", procedure: sched, header: proto1, fast: true, body: marshal(t,
			&hourglassv1.ScheduleRequest{Topic: "pay", Body: []byte("y"), When: delay(5), IdempotencyKey: "k1"})},
		{name: "schedule_due_now", method: "POST", procedure: sched, header: proto1, fast: true, body: marshal(t, &hourglassv1.ScheduleRequest{Topic: "now"})},
		{name: "schedule_headers", method: "POST", procedure: sched, header: proto1, body: marshal(t,
			&hourglassv1.ScheduleRequest{Topic: "orders", Headers: []*hourglassv1.Header{{Key: "k", Value: "v"}}, When: delay(1)})},
		{name: "schedule_deliver_at", method: "POST", procedure: sched, header: proto1, fast: true, body: marshal(t,
			&hourglassv1.ScheduleRequest{Topic: "orders", When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(clock.Add(time.Hour))}})},
		{name: "schedule_bad_topic", method: "POST", procedure: sched, header: proto1, body: marshal(t, &hourglassv1.ScheduleRequest{Topic: "no spaces"})},
		{name: "schedule_no_topic", method: "POST", procedure: sched, header: proto1},
		{name: "schedule_body_too_big", method: "POST", procedure: sched, header: proto1, body: marshal(t, &hourglassv1.ScheduleRequest{Topic: "t", Body: make([]byte, 1025)})},
		{name: "schedule_too_far", method: "POST", procedure: sched, header: proto1, body: marshal(t, &hourglassv1.ScheduleRequest{Topic: "t", When: delay(31 * Day.Milliseconds())})},
		{name: "schedule_bad_level", method: "POST", procedure: sched, header: proto1, body: marshal(t, &hourglassv1.ScheduleRequest{Topic: "t", When: &hourglassv1.ScheduleRequest_DelayLevel{DelayLevel: 99}})},
		{name: "schedule_malformed", method: "POST", procedure: sched, header: proto1, body: []byte{0x0a, 0x09, 'a'}},
		{name: "schedule_expired", method: "POST", procedure: sched, header: with(map[string]string{"Connect-Timeout-Ms": "0"}), body: marshal(t, one), fast: true},
		{name: "schedule_bad_timeout", method: "POST", procedure: sched, header: with(map[string]string{"Connect-Timeout-Ms": "soon"}), body: marshal(t, one)},
		{name: "schedule_long_timeout", method: "POST", procedure: sched, header: with(map[string]string{"Connect-Timeout-Ms": "12345678901"}), body: marshal(t, one)},
		{name: "schedule_version_2", method: "POST", procedure: sched, header: with(map[string]string{"Connect-Protocol-Version": "2"}), body: marshal(t, one)},
		{name: "schedule_gzip", method: "POST", procedure: sched, header: with(map[string]string{"Content-Encoding": "gzip"}), body: gzipped(t, marshal(t, one))},
		{name: "schedule_identity", method: "POST", procedure: sched, header: with(map[string]string{"Content-Encoding": "identity"}), body: marshal(t, one), fast: true},
		{name: "schedule_unknown_encoding", method: "POST", procedure: sched, header: with(map[string]string{"Content-Encoding": "br"}), body: marshal(t, one)},
		{name: "schedule_json", method: "POST", procedure: sched, header: with(map[string]string{"Content-Type": "application/json"}), body: []byte(`{"topic":"orders","delayMs":"5"}`)},
		{name: "schedule_proto_charset", method: "POST", procedure: sched, header: with(map[string]string{"Content-Type": "application/proto; charset=utf-8"}), body: marshal(t, one)},
		{name: "schedule_no_token", method: "POST", procedure: sched, header: with(nil, "Authorization"), body: marshal(t, one)},
		{name: "schedule_wrong_token", method: "POST", procedure: sched, header: with(map[string]string{"Authorization": "Bearer nope"}), body: marshal(t, one)},
		{name: "schedule_get", method: "GET", procedure: sched, header: proto1},
		{name: "batch", method: "POST", procedure: batch, header: proto1, fast: true, body: marshal(t, &hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{
			one, {Topic: "orders", Body: []byte("2"), When: delay(7)}, {Topic: "pay", When: &hourglassv1.ScheduleRequest_DelayLevel{DelayLevel: 1}}}})},
		{name: "batch_1000", method: "POST", procedure: batch, header: proto1, fast: true, body: marshal(t, &hourglassv1.ScheduleBatchRequest{Messages: big})},
		{name: "batch_1001", method: "POST", procedure: batch, header: proto1, body: marshal(t, &hourglassv1.ScheduleBatchRequest{Messages: append(big, one)})},
		{name: "batch_empty", method: "POST", procedure: batch, header: proto1},
		{name: "batch_second_bad", method: "POST", procedure: batch, header: proto1, body: marshal(t, &hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{
			one, {Topic: "bad topic"}}})},
		{name: "batch_keys", method: "POST", procedure: batch, header: proto1, fast: true, body: marshal(t, &hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{
			{Topic: "pay", IdempotencyKey: "k1"}, {Topic: "pay", IdempotencyKey: "k2"}, {Topic: "pay", IdempotencyKey: "k2"}}})},
		{name: "batch_deliver_at_keys", method: "POST", procedure: batch, header: proto1, fast: true, body: marshal(t, &hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{
			{Topic: "at", IdempotencyKey: "a1", When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(clock.Add(time.Hour + 7*time.Millisecond))}},
			{Topic: "at", IdempotencyKey: "a2", When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(clock.Add(-time.Hour))}},
			{Topic: "at", When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: &timestamppb.Timestamp{Seconds: clock.Unix() + 60, Nanos: 1}}}}})},
		{name: "batch_deliver_at_too_far", method: "POST", procedure: batch, header: proto1, body: marshal(t, &hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{
			{Topic: "at", When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(clock.Add(31 * Day))}}}})},
		{name: "batch_gzip", method: "POST", procedure: batch, header: with(map[string]string{"Content-Encoding": "gzip"}), body: gzipped(t, marshal(t, &hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{one}}))},
		{name: "cancel", method: "POST", procedure: hourglassv1connect.HourglassServiceCancelProcedure, header: proto1, body: marshal(t, &hourglassv1.CancelRequest{Id: strings.Repeat("0", 32)})},
	}
}

func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// TestMaxBatchAnswerNotCompressed checks what the fast path relies on to
// skip compression: the answer to the largest batch is below the size
// from which the server compresses, whatever the IDs.
func TestMaxBatchAnswerNotCompressed(t *testing.T) {
	res := &hourglassv1.ScheduleBatchResponse{}
	for range MaxBatch {
		// The longest encoding: a negative time (a ten-byte varint of
		// seconds) and non-zero milliseconds.
		res.Results = append(res.Results, &hourglassv1.ScheduleResponse{Id: strings.Repeat("f", 32),
			DeliverAt: &timestamppb.Timestamp{Seconds: -1 << 62, Nanos: 999_000_000}})
	}
	if n := proto.Size(res); n >= compressMinBytes {
		t.Fatalf("the answer to %d messages can take %d bytes, not below compressMinBytes %d", MaxBatch, n, compressMinBytes)
	}
}

// TestFastPathConcurrent schedules from several goroutines at once, single
// calls and batches of two topics on the fast path, and receives every
// message back: each must come with the body, topic and ID it was
// scheduled with, so pooled buffers never mix calls.
func TestFastPathConcurrent(t *testing.T) {
	ts := newTestServer(t, Options{})
	ctx := context.Background()
	const goroutines, calls = 8, 20
	type sent struct{ topic, body string }
	var mu sync.Mutex
	want := map[string]sent{} // by ID
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			for c := range calls {
				topic := []string{"conc-a", "conc-b"}[(g+c)%2]
				if c%2 == 0 {
					body := fmt.Sprintf("single %d/%d %s", g, c, strings.Repeat("x", c*37))
					res, err := ts.client.Schedule(ctx, connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: topic, Body: []byte(body)}))
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					want[res.Msg.Id] = sent{topic, body}
					mu.Unlock()
					continue
				}
				req := &hourglassv1.ScheduleBatchRequest{}
				for k := range 1 + c%7 {
					req.Messages = append(req.Messages, &hourglassv1.ScheduleRequest{Topic: []string{"conc-a", "conc-b"}[k%2],
						Body: []byte(fmt.Sprintf("batch %d/%d/%d %s", g, c, k, strings.Repeat("y", k*101)))})
				}
				res, err := ts.client.ScheduleBatch(ctx, connect.NewRequest(req))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for k, r := range res.Msg.Results {
					want[r.Id] = sent{req.Messages[k].Topic, string(req.Messages[k].Body)}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if ts.srv.fastServed.Load() != goroutines*calls {
		t.Fatalf("the fast path answered %d of %d calls", ts.srv.fastServed.Load(), goroutines*calls)
	}
	for deadline := time.Now().Add(20 * time.Second); len(want) > 0 && time.Now().Before(deadline); {
		for _, topic := range []string{"conc-a", "conc-b"} {
			res, err := ts.client.Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: topic, MaxMessages: 100, WaitMs: 100}))
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range res.Msg.Messages {
				w, ok := want[m.Id]
				if !ok || w.topic != m.Topic || w.body != string(m.Body) {
					t.Fatalf("received %s on %s with body %q; scheduled as %+v (known: %v)", m.Id, m.Topic, m.Body, w, ok)
				}
				delete(want, m.Id)
			}
		}
	}
	if len(want) != 0 {
		t.Fatalf("%d messages never received", len(want))
	}
}
