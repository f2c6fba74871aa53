package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/internal/h1srv"
)

// countingLoop counts the calls the loop answered itself.
type countingLoop struct {
	s       *Server
	served  atomic.Int64
	viaHTTP atomic.Int64 // calls the loop served through Handler
}

// Take is Server.Take; served counts the calls its fast paths took, not
// those it serves through Handler (takeHTTP).
func (c *countingLoop) Take(req *h1srv.Request) (h1srv.Call, bool) {
	if call, ok := c.s.takeFast(req); ok {
		c.served.Add(1)
		return call, true
	}
	c.viaHTTP.Add(1)
	return c.s.takeHTTP(req), true
}

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

type loopServer struct {
	url  string
	loop *countingLoop
	ln   *countingListener
}

// serveLoop serves ts's Handler as `hourglass serve` does without TLS: the
// connection loop in front of an http.Server with HTTP/1.1 and h2c.
func serveLoop(t testing.TB, ts *testServer) *loopServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	hs := &http.Server{Handler: ts.srv.Handler(), Protocols: &protocols, ReadHeaderTimeout: 10 * time.Second}
	cl := &countingLoop{s: ts.srv}
	loop, err := h1srv.New(h1srv.Options{Handler: cl, Paths: LoopPaths, HTTP: hs})
	if err != nil {
		t.Fatal(err)
	}
	cln := &countingListener{Listener: ln}
	go loop.Serve(cln)
	t.Cleanup(func() { loop.Close() })
	return &loopServer{url: "http://" + ln.Addr().String(), loop: cl, ln: cln}
}

// TestLoopMatchesConnect is TestFastPathMatchesConnect through the
// connection loop: the loop answers what the fast path takes, hands the
// rest to net/http, and every answer is connect-go's byte for byte. Each
// call has a connection of its own (so it sends Connection: close), so
// that the loop sees each one first.
func TestLoopMatchesConnect(t *testing.T) {
	clock := time.Date(2026, 11, 30, 5, 0, 0, 123_456_789, time.UTC)
	now := func() time.Time { return clock }
	const token = "s3cret"
	fast := newTestServerClock(t, Options{AuthToken: token, MaxBody: 1024, MaxDelay: 30 * Day}, now)
	ref := newTestServerClock(t, Options{AuthToken: token, MaxBody: 1024, MaxDelay: 30 * Day}, now)
	ls := serveLoop(t, fast)
	refHTTP := &http.Server{Handler: ref.srv.Handler().(*front).connect}
	refLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go refHTTP.Serve(refLn)
	defer refHTTP.Close()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

	calls := fastPathCalls(t, clock, token)
	c := calls[0]
	c.name = "closed_engine"
	calls = append(calls, c)
	for _, c := range calls {
		if c.name == "closed_engine" {
			for _, ts := range []*testServer{fast, ref} {
				if err := ts.eng.Close(); err != nil {
					t.Fatal(err)
				}
			}
		}
		before := ls.loop.served.Load()
		got := sendRawWith(t, hc, ls.url, c)
		took := ls.loop.served.Load() > before
		want := sendRawWith(t, hc, "http://"+refLn.Addr().String(), c)
		if took != (c.fast || c.name == "closed_engine") {
			t.Errorf("%s: the loop took it: %v, want %v", c.name, took, c.fast)
		}
		if got.status != want.status || !bytes.Equal(got.body, want.body) || !equalHeaders(got.header, want.header) {
			t.Errorf("%s: answers differ\nloop: %d %v\n%q\nconnect-go: %d %v\n%q", c.name, got.status, got.header, got.body, want.status, want.header, want.body)
		}
	}
}

// TestLoopHandoff makes a call the loop answers, then on the same
// connection a call it must leave to net/http, then another Schedule
// (net/http's now): every answer is right, and it was all one connection.
func TestLoopHandoff(t *testing.T) {
	ts := newTestServer(t, Options{AuthToken: "tok"})
	ls := serveLoop(t, ts)
	one := marshal(t, &hourglassv1.ScheduleRequest{Topic: "orders", Body: []byte("hi"), When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 60_000}})
	proto := map[string]string{"Content-Type": "application/proto", "Authorization": "Bearer tok"}
	with := func(k, v string) map[string]string {
		h := map[string]string{"Authorization": "Bearer tok"}
		if k != "" {
			h[k] = v
		}
		return h
	}
	sched := hourglassv1connect.HourglassServiceScheduleProcedure
	// keeps: the loop serves the middle call itself (through Handler when
	// the fast paths leave it), so the connection stays the loop's and the
	// last Schedule takes the fast path; otherwise the connection is
	// net/http's from the middle call on.
	for _, c := range []struct {
		call       rawCall
		status     int
		bodyPrefix string
		keeps      bool
	}{
		{rawCall{name: "json_connect", method: "POST", procedure: sched, header: with("Content-Type", "application/json"),
			body: []byte(`{"topic":"orders","delayMs":"5000"}`)}, 200, `{"id":"`, true},
		{rawCall{name: "metrics", method: "GET", procedure: "/metrics", header: with("", "")}, 200, "# HELP", false},
		{rawCall{name: "readyz", method: "GET", procedure: "/readyz"}, 200, "ready", false},
		{rawCall{name: "declined_gzip", method: "POST", procedure: sched, header: map[string]string{"Content-Type": "application/proto",
			"Authorization": "Bearer tok", "Content-Encoding": "gzip"}, body: gzipped(t, one)}, 200, "", true},
		{rawCall{name: "declined_no_token", method: "POST", procedure: sched, header: map[string]string{"Content-Type": "application/proto"}, body: one}, 401, `{"code":"unauthenticated"`, true},
		{rawCall{name: "outside_subset_query", method: "POST", procedure: sched + "?x=1", header: proto, body: one}, 200, "", false},
		{rawCall{name: "cancel", method: "POST", procedure: hourglassv1connect.HourglassServiceCancelProcedure, header: with("Content-Type", "application/json"),
			body: []byte(`{"id":"` + strings.Repeat("0", 32) + `"}`)}, 200, "{", true},
		{rawCall{name: "stats_proto", method: "POST", procedure: hourglassv1connect.HourglassServiceStatsProcedure, header: proto}, 200, "", true},
		{rawCall{name: "receive_stream", method: "POST", procedure: hourglassv1connect.HourglassServiceReceiveStreamProcedure,
			header: map[string]string{"Content-Type": "application/connect+proto", "Authorization": "Bearer tok"},
			body:   []byte{0, 0, 0, 0, 0}}, 200, "", false},
	} {
		t.Run(c.call.name, func(t *testing.T) {
			hc := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
			defer hc.CloseIdleConnections()
			accepted := ls.ln.n.Load()
			served := ls.loop.served.Load()
			first := sendRawWith(t, hc, ls.url, rawCall{name: "first", method: "POST", procedure: sched, header: proto, body: one})
			if first.status != 200 || ls.loop.served.Load() != served+1 {
				t.Fatalf("first call: status %d, loop answered %d", first.status, ls.loop.served.Load()-served)
			}
			got := sendRawWith(t, hc, ls.url, c.call)
			if got.status != c.status || !bytes.HasPrefix(got.body, []byte(c.bodyPrefix)) {
				t.Errorf("status %d body %q; want %d and %q...", got.status, got.body, c.status, c.bodyPrefix)
			}
			beforeLast := ls.loop.served.Load()
			last := sendRawWith(t, hc, ls.url, rawCall{name: "last", method: "POST", procedure: sched, header: proto, body: one})
			if last.status != 200 || len(last.body) == 0 {
				t.Errorf("last call: status %d body %q", last.status, last.body)
			}
			if fast := ls.loop.served.Load() > beforeLast; fast != c.keeps {
				t.Errorf("last Schedule on the fast path: %v, want %v", fast, c.keeps)
			}
			if n := ls.ln.n.Load() - accepted; n != 1 {
				t.Errorf("%d connections, want 1", n)
			}
		})
	}
}

// TestLoopGRPC: gRPC over h2c (HTTP/2 with prior knowledge) goes through
// the loop to net/http.
func TestLoopGRPC(t *testing.T) {
	ts := newTestServer(t, Options{})
	ls := serveLoop(t, ts)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	c := hourglassv1connect.NewHourglassServiceClient(&http.Client{Transport: tr}, ls.url, connect.WithGRPC())
	for i := range 3 {
		res, err := c.Schedule(context.Background(), connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "g", Body: []byte{byte(i)}}))
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Msg.Id) != 32 {
			t.Errorf("id %q", res.Msg.Id)
		}
	}
	if n := ls.loop.served.Load(); n != 0 {
		t.Errorf("the loop answered %d gRPC calls", n)
	}
}

// TestLoopKeepAlive: the Go client's calls over kept-alive connections are
// all answered by the loop, on as many connections as calls in parallel.
func TestLoopKeepAlive(t *testing.T) {
	ts := newTestServer(t, Options{})
	ls := serveLoop(t, ts)
	hc := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	defer hc.CloseIdleConnections()
	c := hourglassv1connect.NewHourglassServiceClient(hc, ls.url)
	const n = 20
	for i := range n {
		if _, err := c.Schedule(context.Background(), connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "k", Body: []byte{byte(i)}})); err != nil {
			t.Fatal(err)
		}
	}
	res, err := c.ScheduleBatch(context.Background(), connect.NewRequest(&hourglassv1.ScheduleBatchRequest{
		Messages: []*hourglassv1.ScheduleRequest{{Topic: "k"}, {Topic: "k"}}}))
	if err != nil || len(res.Msg.Results) != 2 {
		t.Fatalf("batch: %v", err)
	}
	if got := ls.loop.served.Load(); got != n+1 || ls.ln.n.Load() != 1 {
		t.Errorf("loop answered %d of %d calls on %d connections; want all on 1", got, n+1, ls.ln.n.Load())
	}
}

// rawClient sends one fixed request at a time on a connection and reads
// the answer with as little work as it can, so that a benchmark's CPU is
// mostly the server's.
type rawClient struct {
	conn net.Conn
	req  []byte
	buf  []byte
}

func newRawClient(b *testing.B, addr string, req []byte) *rawClient {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return &rawClient{conn: c, req: req, buf: make([]byte, 0, 4096)}
}

var contentLength = []byte("\r\nContent-Length: ")

// call sends the request and reads one answer, which must be a 200.
func (c *rawClient) call() error {
	if _, err := c.conn.Write(c.req); err != nil {
		return err
	}
	c.buf = c.buf[:0]
	for {
		n, err := c.conn.Read(c.buf[len(c.buf):cap(c.buf)])
		c.buf = c.buf[:len(c.buf)+n]
		if end := bytes.Index(c.buf, []byte("\r\n\r\n")); end >= 0 {
			i := bytes.Index(c.buf[:end], contentLength)
			if i < 0 || !bytes.HasPrefix(c.buf, []byte("HTTP/1.1 200 ")) {
				return fmt.Errorf("answer %q", c.buf)
			}
			length := 0
			for _, d := range c.buf[i+len(contentLength) : end] {
				if d < '0' || d > '9' {
					break
				}
				length = length*10 + int(d-'0')
			}
			if len(c.buf) == end+4+length {
				return nil
			}
		}
		if err != nil {
			return err
		}
	}
}

// BenchmarkServeConn sends Schedule calls as the Go client writes them
// over real loopback connections to the server behind net/http's server
// alone and behind the connection loop (engine at fsync none), from one
// connection (sequential: repeatable instruction counts under callgrind)
// and from 64 in parallel. The client is raw bytes, the same for both, so
// the difference of cpu-µs/msg is the server's.
func BenchmarkServeConn(b *testing.B) {
	payload, err := proto.Marshal(&hourglassv1.ScheduleRequest{Topic: "bench", Body: make([]byte, 256), When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 3_600_000}})
	if err != nil {
		b.Fatal(err)
	}
	req := []byte(fmt.Sprintf("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: connect-go/1.19.1 (go1.26)\r\nContent-Length: %d\r\n"+
		"Accept-Encoding: gzip\r\nConnect-Protocol-Version: 1\r\nConnect-Timeout-Ms: 30000\r\nContent-Type: application/proto\r\n\r\n%s",
		hourglassv1connect.HourglassServiceScheduleProcedure, len(payload), payload))
	for _, server := range []string{"nethttp", "loop"} {
		for _, conns := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/conns=%d", server, conns), func(b *testing.B) {
				ts := newTestServer(b, Options{})
				var addr string
				if server == "loop" {
					ls := serveLoop(b, ts)
					addr = strings.TrimPrefix(ls.url, "http://")
				} else {
					addr = strings.TrimPrefix(ts.http.URL, "http://")
				}
				clients := make(chan *rawClient, conns)
				for range conns {
					clients <- newRawClient(b, addr, req)
				}
				if conns == 1 {
					c := <-clients
					b.ResetTimer()
					cpu := startCPU()
					for range b.N {
						serveConnOnce(b, c)
					}
					cpu.report(b, b.N)
					return
				}
				b.SetParallelism((conns + 1) / 2)
				b.ResetTimer()
				cpu := startCPU()
				b.RunParallel(func(pb *testing.PB) {
					c := <-clients
					for pb.Next() {
						if err := c.call(); err != nil {
							b.Error(err)
							return
						}
					}
				})
				cpu.report(b, b.N)
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}

// serveConnOnce makes one call; a function of its own for callgrind's
// --toggle-collect.
//
//go:noinline
func serveConnOnce(b *testing.B, c *rawClient) {
	if err := c.call(); err != nil {
		b.Fatal(err)
	}
}

// TestLoopPipelined sends 100 Schedule calls in one write on one
// connection, with a ScheduleBatch and a call the loop declines in their
// midst: each is answered, in order, with its own message ID (the
// message the answer names is the one the call carried), and every
// message is stored once.
func TestLoopPipelined(t *testing.T) {
	ts := newTestServer(t, Options{})
	ls := serveLoop(t, ts)
	host := strings.TrimPrefix(ls.url, "http://")
	frame := func(procedure, contentType string, body []byte) string {
		return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s",
			procedure, host, contentType, len(body), body)
	}
	const n = 100
	var reqs strings.Builder
	for i := range n {
		if i == 50 {
			batch := marshal(t, &hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{
				{Topic: "pipe", Body: []byte("batch-a")}, {Topic: "pipe", Body: []byte("batch-b")}}})
			reqs.WriteString(frame(hourglassv1connect.HourglassServiceScheduleBatchProcedure, "application/proto", batch))
		}
		body := marshal(t, &hourglassv1.ScheduleRequest{Topic: "pipe", Body: fmt.Appendf(nil, "m%03d", i)})
		reqs.WriteString(frame(hourglassv1connect.HourglassServiceScheduleProcedure, "application/proto", body))
	}
	// Declined (JSON): the http.Server answers it once the loop's answers
	// are out, and the connection is net/http's from then on.
	reqs.WriteString(frame(hourglassv1connect.HourglassServiceScheduleProcedure, "application/json", []byte(`{"topic":"pipe","body":"anNvbg=="}`)))

	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second)) // a guard: nothing here waits on time
	if _, err := io.WriteString(conn, reqs.String()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	ids := map[string]string{} // id -> body it must carry
	for i := range n {
		if i == 50 {
			var res hourglassv1.ScheduleBatchResponse
			readProto(t, br, &res)
			if len(res.Results) != 2 {
				t.Fatalf("batch answer: %d results", len(res.Results))
			}
			ids[res.Results[0].Id], ids[res.Results[1].Id] = "batch-a", "batch-b"
		}
		var res hourglassv1.ScheduleResponse
		readProto(t, br, &res)
		if _, dup := ids[res.Id]; dup {
			t.Fatalf("answer %d: id %s given twice", i, res.Id)
		}
		ids[res.Id] = fmt.Sprintf("m%03d", i)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	jsonBody, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !bytes.HasPrefix(jsonBody, []byte(`{"id":"`)) {
		t.Fatalf("declined call: %d %q", resp.StatusCode, jsonBody)
	}
	// Every message is stored once, under the ID its answer gave.
	got := map[string]string{}
	for len(got) < len(ids)+1 {
		res, err := ts.client.Receive(context.Background(), connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: "pipe", MaxMessages: 500, WaitMs: 2000}))
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Msg.Messages) == 0 {
			t.Fatalf("received %d of %d messages", len(got), len(ids)+1)
		}
		for _, m := range res.Msg.Messages {
			if _, dup := got[m.Id]; dup {
				t.Fatalf("message %s received twice", m.Id)
			}
			got[m.Id] = string(m.Body)
		}
	}
	for id, body := range ids {
		if got[id] != body {
			t.Errorf("message %s: body %q, want %q (the answer named another call's message)", id, got[id], body)
		}
	}
}

// readProto reads one answer of the loop and decodes its body into m.
func readProto(t *testing.T, br *bufio.Reader, m proto.Message) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if err := proto.Unmarshal(b, m); err != nil {
		t.Fatal(err)
	}
}
