package server

import (
	"bytes"
	"maps"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// waitReady waits until topic of ts's queue holds n ready messages.
func waitReady(t *testing.T, ts *testServer, topic string, n int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for ts.srv.q.Stats()[topic].Backlog < n {
		if time.Now().After(deadline) {
			t.Fatalf("topic %s: %d ready, want %d; engine %+v", topic, ts.srv.q.Stats()[topic].Backlog, n, ts.eng.Stats())
		}
		time.Sleep(5 * time.Millisecond) // a bounded poll of a condition
	}
}

// TestLoopConsumeMatchesConnect sends the same Receive, AckBatch, Ack and
// Nack calls
// to two servers with the same clock and the same messages, one through
// the connection loop and one through connect-go's handler alone, and
// wants the same answers byte for byte: messages, receipts, results,
// errors, gzip above compressMinBytes. The requests cover what the loop
// takes and what it must leave to connect-go.
func TestLoopConsumeMatchesConnect(t *testing.T) {
	// On a whole millisecond: a message due now is due at once (relative
	// delays round up to the millisecond, and this clock stands still).
	clock := time.Date(2026, 11, 30, 5, 0, 0, 123_000_000, time.UTC)
	now := func() time.Time { return clock }
	const token = "s3cret"
	opts := Options{AuthToken: token, MaxBody: 4096}
	fast := newTestServerClock(t, opts, now)
	ref := newTestServerClock(t, opts, now)
	ls := serveLoop(t, fast)
	refHTTP := &http.Server{Handler: ref.srv.Handler().(*front).connect}
	refLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go refHTTP.Serve(refLn)
	defer refHTTP.Close()
	refURL := "http://" + refLn.Addr().String()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

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
	recv := hourglassv1connect.HourglassServiceReceiveProcedure
	acks := hourglassv1connect.HourglassServiceAckBatchProcedure

	// The same messages on both: 300 small ones on "c" (one with headers,
	// one of them not UTF-8), 200 of 1 KiB on "big".
	var small, large []*hourglassv1.ScheduleRequest
	for i := range 300 {
		m := &hourglassv1.ScheduleRequest{Topic: "c", Body: []byte(strings.Repeat("b", i%50))}
		if i == 3 {
			m.Headers = []*hourglassv1.Header{{Key: "k", Value: "v"}, {Key: "e", Value: ""}}
		}
		small = append(small, m)
	}
	for i := range 200 {
		large = append(large, &hourglassv1.ScheduleRequest{Topic: "big", Body: bytes.Repeat([]byte{byte(i)}, 1024)})
	}
	for _, ts := range []*testServer{fast, ref} {
		for _, b := range [][]*hourglassv1.ScheduleRequest{small, large} {
			a := sendRawWith(t, hc, ts.http.URL, rawCall{name: "schedule", method: "POST", header: proto1,
				procedure: hourglassv1connect.HourglassServiceScheduleBatchProcedure, body: marshal(t, &hourglassv1.ScheduleBatchRequest{Messages: b})})
			if a.status != http.StatusOK {
				t.Fatalf("schedule: %d %s", a.status, a.body)
			}
		}
		waitReady(t, ts, "c", 300)
		waitReady(t, ts, "big", 200)
	}

	// compare sends c to both and wants the same answer; it returns the
	// answer's body.
	compare := func(c rawCall) []byte {
		t.Helper()
		before := ls.loop.served.Load()
		got := sendRawWith(t, hc, ls.url, c)
		took := ls.loop.served.Load() > before
		want := sendRawWith(t, hc, refURL, c)
		if took != c.fast {
			t.Errorf("%s: the loop took it: %v, want %v", c.name, took, c.fast)
		}
		if got.status != want.status || !bytes.Equal(got.body, want.body) || !equalHeaders(got.header, want.header) {
			t.Errorf("%s: answers differ\nloop: %d %v\n%q\nconnect-go: %d %v\n%q", c.name, got.status, got.header, got.body, want.status, want.header, want.body)
		}
		return got.body
	}
	receive := func(name string, fast bool, header map[string]string, m *hourglassv1.ReceiveRequest) *hourglassv1.ReceiveResponse {
		t.Helper()
		body := compare(rawCall{name: name, method: "POST", procedure: recv, header: header, body: marshal(t, m), fast: fast})
		var res hourglassv1.ReceiveResponse
		if fast {
			if err := proto.Unmarshal(body, &res); err != nil && !strings.Contains(header["Accept-Encoding"], "gzip") {
				t.Errorf("%s: %v", name, err)
			}
		}
		return &res
	}

	first := receive("receive_100", true, proto1, &hourglassv1.ReceiveRequest{Topic: "c", MaxMessages: 100, WaitMs: 1000, LeaseMs: 60_000})
	if len(first.Messages) != 100 || len(first.Messages[3].Headers) != 2 {
		t.Fatalf("receive_100: %d messages, want 100 (the fourth with its 2 headers)", len(first.Messages))
	}
	receive("receive_default_max", true, proto1, &hourglassv1.ReceiveRequest{Topic: "c"})
	receive("receive_no_timeout_no_version", true, with(nil, "Connect-Timeout-Ms", "Connect-Protocol-Version"), &hourglassv1.ReceiveRequest{Topic: "c", MaxMessages: 3})
	receive("receive_identity", true, with(map[string]string{"Content-Encoding": "identity"}), &hourglassv1.ReceiveRequest{Topic: "c", MaxMessages: 2})
	// Above compressMinBytes: gzip when accepted, whatever else is listed.
	receive("receive_gzip_answer", true, proto1, &hourglassv1.ReceiveRequest{Topic: "big", MaxMessages: 70})
	receive("receive_large_no_gzip", true, with(nil, "Accept-Encoding"), &hourglassv1.ReceiveRequest{Topic: "big", MaxMessages: 65})
	receive("receive_br_gzip", true, with(map[string]string{"Accept-Encoding": "br, gzip"}), &hourglassv1.ReceiveRequest{Topic: "big", MaxMessages: 65})
	receive("receive_empty_now", true, proto1, &hourglassv1.ReceiveRequest{Topic: "none", MaxMessages: 10})
	receive("receive_empty_long_poll", true, proto1, &hourglassv1.ReceiveRequest{Topic: "none", WaitMs: 50})
	receive("receive_expired", true, with(map[string]string{"Connect-Timeout-Ms": "0"}), &hourglassv1.ReceiveRequest{Topic: "c"})
	receive("receive_timeout_in_poll", true, with(map[string]string{"Connect-Timeout-Ms": "30"}), &hourglassv1.ReceiveRequest{Topic: "none", WaitMs: 5000})
	for _, tc := range []struct {
		name   string
		header map[string]string
		m      *hourglassv1.ReceiveRequest
	}{
		{"receive_no_topic", proto1, &hourglassv1.ReceiveRequest{}},
		{"receive_bad_topic", proto1, &hourglassv1.ReceiveRequest{Topic: "a b"}},
		{"receive_too_many", proto1, &hourglassv1.ReceiveRequest{Topic: "c", MaxMessages: 1001}},
		{"receive_negative_max", proto1, &hourglassv1.ReceiveRequest{Topic: "c", MaxMessages: -1}},
		{"receive_negative_wait", proto1, &hourglassv1.ReceiveRequest{Topic: "c", WaitMs: -1}},
		{"receive_wait_too_long", proto1, &hourglassv1.ReceiveRequest{Topic: "c", WaitMs: MaxWait.Milliseconds() + 1}},
		{"receive_lease_too_long", proto1, &hourglassv1.ReceiveRequest{Topic: "c", LeaseMs: 13 * 3600 * 1000}},
		{"receive_no_token", with(nil, "Authorization"), &hourglassv1.ReceiveRequest{Topic: "c"}},
		{"receive_wrong_token", with(map[string]string{"Authorization": "Bearer no"}), &hourglassv1.ReceiveRequest{Topic: "c"}},
		{"receive_bad_timeout", with(map[string]string{"Connect-Timeout-Ms": "soon"}), &hourglassv1.ReceiveRequest{Topic: "c"}},
		{"receive_version_2", with(map[string]string{"Connect-Protocol-Version": "2"}), &hourglassv1.ReceiveRequest{Topic: "c"}},
		{"receive_unknown_encoding", with(map[string]string{"Content-Encoding": "br"}), &hourglassv1.ReceiveRequest{Topic: "c"}},
	} {
		receive(tc.name, false, tc.header, tc.m)
	}
	// Requests the loop cannot decode in place: connect-go answers them
	// (and leases the same messages on both).
	twice := append(marshal(t, &hourglassv1.ReceiveRequest{Topic: "x"}), marshal(t, &hourglassv1.ReceiveRequest{Topic: "c", MaxMessages: 2})...)
	compare(rawCall{name: "receive_topic_twice", method: "POST", procedure: recv, header: proto1, body: twice})
	compare(rawCall{name: "receive_malformed", method: "POST", procedure: recv, header: proto1, body: []byte{0x0a, 0x09, 'a'}})
	compare(rawCall{name: "receive_json", method: "POST", procedure: recv, header: with(map[string]string{"Content-Type": "application/json"}), body: []byte(`{"topic":"c","maxMessages":2}`)})
	compare(rawCall{name: "receive_gzip_request", method: "POST", procedure: recv, header: with(map[string]string{"Content-Encoding": "gzip"}),
		body: gzipped(t, marshal(t, &hourglassv1.ReceiveRequest{Topic: "c", MaxMessages: 2}))})

	receipts := make([]string, 0, len(first.Messages))
	for _, m := range first.Messages {
		receipts = append(receipts, m.Receipt)
	}
	ackBatch := func(name string, fast bool, header map[string]string, topic string, receipts ...string) {
		t.Helper()
		compare(rawCall{name: name, method: "POST", procedure: acks, header: header, fast: fast,
			body: marshal(t, &hourglassv1.AckBatchRequest{Topic: topic, Receipts: receipts})})
	}
	ackBatch("ack_batch", true, proto1, "c", append([]string{"nonsense", receipts[0]}, receipts[:60]...)...)
	ackBatch("ack_batch_acked_again", true, proto1, "c", receipts[:5]...)
	ackBatch("ack_batch_other_topic", true, proto1, "big", receipts[60:62]...)
	ackBatch("ack_batch_unknown_topic", true, proto1, "nothing", receipts[60:62]...)
	ackBatch("ack_batch_expired", true, with(map[string]string{"Connect-Timeout-Ms": "0"}), "c", receipts[60])
	ackBatch("ack_batch_empty", false, proto1, "c")
	ackBatch("ack_batch_too_many", false, proto1, "c", make([]string, 1001)...)
	ackBatch("ack_batch_bad_topic", false, proto1, "a b", receipts[60])
	ackBatch("ack_batch_no_token", false, with(nil, "Authorization"), "c", receipts[60])
	settle := func(name string, fast bool, procedure string, m proto.Message) {
		t.Helper()
		compare(rawCall{name: name, method: "POST", procedure: procedure, header: proto1, fast: fast, body: marshal(t, m)})
	}
	ack, nack := hourglassv1connect.HourglassServiceAckProcedure, hourglassv1connect.HourglassServiceNackProcedure
	settle("ack_receipt", true, ack, &hourglassv1.AckRequest{Topic: "c", Receipt: receipts[61]})
	settle("ack_id", true, ack, &hourglassv1.AckRequest{Topic: "c", Id: first.Messages[62].Id})
	settle("ack_acked", true, ack, &hourglassv1.AckRequest{Topic: "c", Receipt: receipts[0]})
	settle("ack_bad_receipt", true, ack, &hourglassv1.AckRequest{Topic: "c", Receipt: "nonsense"})
	settle("ack_both", false, ack, &hourglassv1.AckRequest{Topic: "c", Receipt: receipts[65], Id: first.Messages[65].Id})
	settle("ack_bad_id", false, ack, &hourglassv1.AckRequest{Topic: "c", Id: "x"})
	settle("ack_no_target", false, ack, &hourglassv1.AckRequest{Topic: "c"})
	settle("ack_bad_topic", false, ack, &hourglassv1.AckRequest{Topic: "a b", Receipt: receipts[65]})
	settle("nack_delay", true, nack, &hourglassv1.NackRequest{Topic: "c", Receipt: receipts[63], DelayMs: 60_000})
	settle("nack_now", true, nack, &hourglassv1.NackRequest{Topic: "c", Receipt: receipts[64]})
	settle("nack_id", true, nack, &hourglassv1.NackRequest{Topic: "c", Id: first.Messages[66].Id, DelayMs: 5})
	settle("nack_acked", true, nack, &hourglassv1.NackRequest{Topic: "c", Receipt: receipts[0]})
	settle("nack_negative_delay", false, nack, &hourglassv1.NackRequest{Topic: "c", Receipt: receipts[65], DelayMs: -1})
	settle("nack_delay_too_long", false, nack, &hourglassv1.NackRequest{Topic: "c", Receipt: receipts[65], DelayMs: 11 * 365 * Day.Milliseconds()})
	ackBatch("ack_batch_rest", true, with(nil, "Connect-Timeout-Ms"), "c", receipts[60:]...)
	compare(rawCall{name: "ack_batch_json", method: "POST", procedure: acks, header: with(map[string]string{"Content-Type": "application/json"}),
		body: []byte(`{"topic":"c","receipts":["x"]}`)})
	compare(rawCall{name: "ack_batch_topic_twice", method: "POST", procedure: acks, header: proto1,
		body: append(marshal(t, &hourglassv1.AckBatchRequest{Topic: "x"}), marshal(t, &hourglassv1.AckBatchRequest{Topic: "c", Receipts: receipts[:1]})...)})

	// Both queues agree on what is left.
	for _, topic := range []string{"c", "big"} {
		a, b := fast.srv.q.Stats()[topic], ref.srv.q.Stats()[topic]
		if a != b {
			t.Errorf("topic %s: loop's queue %+v, connect-go's %+v", topic, a, b)
		}
	}
}
