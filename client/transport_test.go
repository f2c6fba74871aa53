package client

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/internal/h1"
)

// countingConn counts the writes made on a client connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// writesPerCall sends Schedule calls through rt's transport and returns
// the client-side writes per call.
func writesPerCall(t *testing.T, url string, wrap func(http.RoundTripper) http.RoundTripper) float64 {
	t.Helper()
	var writes atomic.Int64
	tr := http.DefaultTransport.(*http.Transport).Clone()
	d := &net.Dialer{}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, &writes}, nil
	}
	defer tr.CloseIdleConnections()
	svc := hourglassv1connect.NewHourglassServiceClient(&http.Client{Transport: wrap(tr)}, url)
	const calls = 20
	for i := range calls {
		body := make([]byte, 256)
		body[0] = byte(i)
		res, err := svc.Schedule(context.Background(), connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "t", Body: body}))
		if err != nil {
			t.Fatal(err)
		}
		if want := "id:" + string(body); res.Msg.Id != want {
			t.Fatalf("call %d: the server got another body (id %q)", i, res.Msg.Id)
		}
	}
	return float64(writes.Load()) / calls
}

func TestOneWritePerRequest(t *testing.T) {
	url := startFake(t, newFake(false))
	plain := writesPerCall(t, url, func(rt http.RoundTripper) http.RoundTripper { return rt })
	one := writesPerCall(t, url, func(rt http.RoundTripper) http.RoundTripper { return oneWrite{next: rt} })
	if one != 1 {
		t.Errorf("with oneWrite: %.2f writes per call, want 1", one)
	}
	t.Logf("writes per call: net/http alone %.2f, with oneWrite %.2f", plain, one)
	if plain <= one {
		t.Logf("net/http alone already sends %.2f writes per call: oneWrite may no longer be needed", plain)
	}
}

// streamFake answers Schedule with "id:" + body and ReceiveStream with
// one response per ID sent on next, until next is closed.
type streamFake struct {
	hourglassv1connect.UnimplementedHourglassServiceHandler
	next chan string
}

func (f *streamFake) Schedule(_ context.Context, req *connect.Request[hourglassv1.ScheduleRequest]) (*connect.Response[hourglassv1.ScheduleResponse], error) {
	return connect.NewResponse(&hourglassv1.ScheduleResponse{Id: "id:" + string(req.Msg.Body)}), nil
}

func (f *streamFake) ReceiveStream(ctx context.Context, _ *connect.Request[hourglassv1.ReceiveStreamRequest], s *connect.ServerStream[hourglassv1.ReceiveStreamResponse]) error {
	for id := range f.next {
		if err := s.Send(&hourglassv1.ReceiveStreamResponse{Messages: []*hourglassv1.Message{{Id: id}}}); err != nil {
			return err
		}
	}
	return nil
}

// TestNewHTTPClient: the default client's calls, unary and a server
// stream read while the server is still sending, go over the lean
// transport and share one connection when made one after another.
func TestNewHTTPClient(t *testing.T) {
	f := &streamFake{next: make(chan string)}
	mux := http.NewServeMux()
	mux.Handle(hourglassv1connect.NewHourglassServiceHandler(f))
	hs := httptest.NewUnstartedServer(mux)
	var conns atomic.Int64
	hs.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	hs.Start()
	defer hs.Close()

	hc := NewHTTPClient(4)
	defer hc.CloseIdleConnections()
	if _, ok := hc.Transport.(*h1.Transport); !ok {
		t.Fatalf("NewHTTPClient's transport is a %T, want *h1.Transport", hc.Transport)
	}
	c := New(hs.URL, WithHTTPClient(hc))
	ctx := context.Background()
	for i := range 5 {
		id, err := c.Schedule(ctx, Message{Topic: "t", Body: []byte{'a' + byte(i)}})
		if err != nil || id != "id:"+string(rune('a'+i)) {
			t.Fatalf("Schedule %d: %q, %v", i, id, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("5 sequential Schedules used %d connections, want 1", n)
	}

	// The server answers the stream's headers with its first message,
	// and the call returns only then: that one is sent from aside.
	go func() { f.next <- "m1" }()
	st, err := c.svc.ReceiveStream(ctx, connect.NewRequest(&hourglassv1.ReceiveStreamRequest{Topic: "t"}))
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"m1", "m2", "m3"} {
		if i > 0 {
			f.next <- id // sent only once the previous response was read
		}
		if !st.Receive() {
			t.Fatalf("stream ended before %s: %v", id, st.Err())
		}
		if got := st.Msg().Messages[0].Id; got != id {
			t.Fatalf("stream gave %q, want %q", got, id)
		}
	}
	close(f.next)
	if st.Receive() {
		t.Fatal("stream did not end")
	}
	if err := st.Err(); err != nil {
		t.Fatalf("stream end: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Schedule(ctx, Message{Topic: "t", Body: []byte("z")}); err != nil {
		t.Fatal(err)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("after the stream ended, %d connections, want still 1 (the stream's connection reused)", n)
	}
}
