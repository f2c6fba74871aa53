package server

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/internal/h1srv"
)

// countingLoop counts the calls the loop answered itself.
type countingLoop struct {
	s      *Server
	served atomic.Int64
}

func (c *countingLoop) ServeH1(ctx context.Context, req *h1srv.Request, w *h1srv.ResponseWriter) bool {
	ok := c.s.ServeH1(ctx, req, w)
	if ok {
		c.served.Add(1)
	}
	return ok
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
func serveLoop(t *testing.T, ts *testServer) *loopServer {
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
	for _, c := range []struct {
		call       rawCall
		status     int
		bodyPrefix string
	}{
		{rawCall{name: "json_connect", method: "POST", procedure: sched, header: with("Content-Type", "application/json"),
			body: []byte(`{"topic":"orders","delayMs":"5000"}`)}, 200, `{"id":"`},
		{rawCall{name: "metrics", method: "GET", procedure: "/metrics", header: with("", "")}, 200, "# HELP"},
		{rawCall{name: "readyz", method: "GET", procedure: "/readyz"}, 200, "ready"},
		{rawCall{name: "declined_gzip", method: "POST", procedure: sched, header: map[string]string{"Content-Type": "application/proto",
			"Authorization": "Bearer tok", "Content-Encoding": "gzip"}, body: gzipped(t, one)}, 200, ""},
		{rawCall{name: "declined_no_token", method: "POST", procedure: sched, header: map[string]string{"Content-Type": "application/proto"}, body: one}, 401, `{"code":"unauthenticated"`},
		{rawCall{name: "outside_subset_query", method: "POST", procedure: sched + "?x=1", header: proto, body: one}, 200, ""},
		{rawCall{name: "cancel", method: "POST", procedure: hourglassv1connect.HourglassServiceCancelProcedure, header: with("Content-Type", "application/json"),
			body: []byte(`{"id":"` + strings.Repeat("0", 32) + `"}`)}, 200, "{"},
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
			last := sendRawWith(t, hc, ls.url, rawCall{name: "last", method: "POST", procedure: sched, header: proto, body: one})
			if last.status != 200 || len(last.body) == 0 {
				t.Errorf("last call: status %d body %q", last.status, last.body)
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
