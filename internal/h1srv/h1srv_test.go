package h1srv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// echo is the loop's handler in these tests: it answers "loop:<body>",
// declines a body of "decline", and waits for entered/release around a
// body of "block".
type echo struct {
	entered, release chan struct{}
	calls            chan string
	// A call whose body is a key of hold reports the body on held, then
	// waits for its channel. A body of "panic" panics; "mute" writes no
	// answer.
	hold map[string]chan struct{}
	held chan string
	// A body of "poll" is a Waiter call: it sends on entered, then waits
	// for release or its ctx, and reports its ctx's error on polled.
	polled chan error
}

func (e *echo) Take(req *Request) (Call, bool) {
	body := string(req.Body)
	e.calls <- body
	switch body {
	case "decline":
		return nil, false
	case "poll":
		return pollCall{e}, true
	}
	return echoCall{e, body}, true
}

type pollCall struct{ e *echo }

func (pollCall) Waits() bool { return true }

func (c pollCall) Serve(ctx context.Context, w *ResponseWriter) {
	c.e.entered <- struct{}{}
	select {
	case <-c.e.release:
	case <-ctx.Done():
	}
	c.e.polled <- ctx.Err()
	w.Write(http.StatusOK, []string{"Content-Type", "text/plain"}, []byte("loop:poll"))
}

type echoCall struct {
	e    *echo
	body string
}

func (c echoCall) Serve(ctx context.Context, w *ResponseWriter) {
	switch c.body {
	case "block":
		c.e.entered <- struct{}{}
		<-c.e.release
	case "panic":
		panic("echo: asked to panic")
	case "mute":
		return
	}
	if ch, ok := c.e.hold[c.body]; ok {
		c.e.held <- c.body
		<-ch
	}
	w.Write(http.StatusOK, []string{"Content-Type", "text/plain"}, []byte("loop:"+c.body))
}

type fixture struct {
	srv  *Server
	addr string
	h    *echo
	done chan error
}

// start serves a loop on a loopback port in front of an http.Server that
// answers "http:<method> <path> <body>".
func start(t *testing.T, headerTimeout time.Duration) *fixture {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "http:%s %s %s", r.Method, r.URL.Path, b)
	})}
	h := &echo{entered: make(chan struct{}), release: make(chan struct{}), calls: make(chan string, 1000),
		hold: map[string]chan struct{}{}, held: make(chan string, 1000), polled: make(chan error, 10)}
	srv, err := New(Options{Handler: h, Paths: testPaths, HTTP: hs, ReadHeaderTimeout: headerTimeout})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{srv: srv, addr: ln.Addr().String(), h: h, done: make(chan error, 1)}
	go func() { f.done <- srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return f
}

func (f *fixture) dial(t *testing.T) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// A guard, not a wait: no test here should need it.
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return c, bufio.NewReader(c)
}

func post(path, body, extra string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n%s", path, extra, len(body), body)
}

func readAnswer(t *testing.T, br *bufio.Reader) (string, *http.Response) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), resp
}

// TestPipelinedAndHandoff sends requests in one write: two the loop
// answers, one to another path, and one the loop would answer, which
// net/http must answer now that it owns the connection. Answers come in
// order.
func TestPipelinedAndHandoff(t *testing.T) {
	for _, c := range []struct{ name, third string }{
		{"other_path", post("/svc/Cancel", "c", "")},
		{"declined", post("/svc/Schedule", "decline", "")},
		{"chunked", "POST /svc/Schedule HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nc\r\n0\r\n\r\n"},
		{"get", "GET /svc/Schedule HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"larger_than_buffer", post("/svc/Schedule", strings.Repeat("L", BufferSize), "")},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := start(t, 0)
			conn, br := f.dial(t)
			if _, err := io.WriteString(conn, post("/svc/Schedule", "a", "")+post("/svc/ScheduleBatch", "b", "")+c.third+post("/svc/Schedule", "d", "")); err != nil {
				t.Fatal(err)
			}
			var got []string
			for range 4 {
				body, resp := readAnswer(t, br)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d", resp.StatusCode)
				}
				got = append(got, body)
			}
			third := map[string]string{"other_path": "http:POST /svc/Cancel c", "declined": "http:POST /svc/Schedule decline",
				"chunked": "http:POST /svc/Schedule c", "get": "http:GET /svc/Schedule ",
				"larger_than_buffer": "http:POST /svc/Schedule " + strings.Repeat("L", BufferSize)}[c.name]
			want := []string{"loop:a", "loop:b", third, "http:POST /svc/Schedule d"}
			if strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("answers %q, want %q", got, want)
			}
		})
	}
}

// TestAnswer checks the loop's answer is plain HTTP/1.1 as net/http's
// client reads it, with the fields the handler gave and a Date.
func TestAnswer(t *testing.T) {
	f := start(t, 0)
	conn, br := f.dial(t)
	io.WriteString(conn, post("/svc/Schedule", "x", "Content-Type: application/proto\r\n"))
	body, resp := readAnswer(t, br)
	if body != "loop:x" || resp.Proto != "HTTP/1.1" || resp.Header.Get("Content-Type") != "text/plain" ||
		resp.ContentLength != 6 || resp.Close {
		t.Errorf("answer %q %s %v", body, resp.Proto, resp.Header)
	}
	if _, err := http.ParseTime(resp.Header.Get("Date")); err != nil {
		t.Errorf("Date: %v", err)
	}
}

// TestConnectionClose: a request with "Connection: close" is answered
// with it, and the connection is closed after the answer.
func TestConnectionClose(t *testing.T) {
	f := start(t, 0)
	conn, br := f.dial(t)
	io.WriteString(conn, post("/svc/Schedule", "a", "Connection: close\r\n")+post("/svc/Schedule", "b", ""))
	body, resp := readAnswer(t, br)
	if body != "loop:a" || !resp.Close {
		t.Errorf("answer %q, close %v; want loop:a and Connection: close", body, resp.Close)
	}
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("after the answer: %d bytes, %v; want EOF", n, err)
	}
	if got := <-f.h.calls; got != "a" || len(f.h.calls) != 0 {
		t.Errorf("handler calls: %q and %d more; want only a", got, len(f.h.calls))
	}
}

// TestSlowHead: a head that does not arrive whole within the header
// timeout gets the connection closed, and is never handled. The timeout
// is short; nothing waits for it but the server.
func TestSlowHead(t *testing.T) {
	f := start(t, 30*time.Millisecond)
	conn, br := f.dial(t)
	io.WriteString(conn, "POST /svc/Schedule HTTP/1.1\r\nHost: x\r\nContent-Le")
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read %d bytes, %v; want EOF after the header timeout", n, err)
	}
	if len(f.h.calls) != 0 {
		t.Errorf("the handler was called")
	}
	// A new connection that sends nothing gets the same timeout, as from
	// net/http.
	_, br2 := f.dial(t)
	if n, err := br2.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("silent connection: read %d bytes, %v; want EOF after the header timeout", n, err)
	}
	// A head that arrives whole after a first read is answered.
	conn3, br3 := f.dial(t)
	req := post("/svc/Schedule", "a", "")
	io.WriteString(conn3, req[:10])
	io.WriteString(conn3, req[10:])
	if body, _ := readAnswer(t, br3); body != "loop:a" {
		t.Fatalf("answer %q", body)
	}
}

// TestShutdown: Shutdown closes an idle connection at once, waits for the
// call in progress on another (answered with Connection: close), and then
// returns; nothing new is accepted.
func TestShutdown(t *testing.T) {
	f := start(t, 0)
	idle, ibr := f.dial(t)
	io.WriteString(idle, post("/svc/Schedule", "a", ""))
	if body, _ := readAnswer(t, ibr); body != "loop:a" {
		t.Fatalf("answer %q", body)
	}
	busy, bbr := f.dial(t)
	io.WriteString(busy, post("/svc/Schedule", "block", ""))
	<-f.h.entered
	shut := make(chan error, 1)
	go func() { shut <- f.srv.Shutdown(context.Background()) }()
	if n, err := ibr.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("idle connection: read %d bytes, %v; want EOF", n, err)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a call in progress", err)
	default:
	}
	close(f.h.release)
	body, resp := readAnswer(t, bbr)
	if body != "loop:block" || !resp.Close {
		t.Errorf("in-flight answer %q, close %v", body, resp.Close)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-f.done; !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve returned %v, want ErrServerClosed", err)
	}
	if c, err := net.Dial("tcp", f.addr); err == nil {
		c.Close()
		t.Error("a connection was accepted after Shutdown")
	}
}

// TestShutdownHandedOff: a connection net/http owns is shut down by the
// http.Server's Shutdown: an idle one is closed.
func TestShutdownHandedOff(t *testing.T) {
	f := start(t, 0)
	conn, br := f.dial(t)
	io.WriteString(conn, post("/svc/Schedule", "a", "")+post("/svc/Other", "b", ""))
	for _, want := range []string{"loop:a", "http:POST /svc/Other b"} {
		if body, _ := readAnswer(t, br); body != want {
			t.Fatalf("answer %q, want %q", body, want)
		}
	}
	if err := f.srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("handed-off idle connection: read %d bytes, %v; want EOF", n, err)
	}
}

// holdCalls makes the fixture's calls with bodies hold0..hold(n-1) wait
// until released, and returns their bodies.
func (f *fixture) holdCalls(n int) []string {
	var bodies []string
	for i := range n {
		b := fmt.Sprintf("hold%d", i)
		f.h.hold[b] = make(chan struct{})
		bodies = append(bodies, b)
	}
	return bodies
}

// sendPipelined sends a Schedule request for each of bodies in one write
// on a new connection.
func (f *fixture) sendPipelined(t *testing.T, bodies []string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, br := f.dial(t)
	var reqs strings.Builder
	for _, b := range bodies {
		reqs.WriteString(post("/svc/Schedule", b, ""))
	}
	if _, err := io.WriteString(conn, reqs.String()); err != nil {
		t.Fatal(err)
	}
	return conn, br
}

// waitHeld waits until n calls are held, and fails after a guard time:
// calls served one after the other never all get there.
func (f *fixture) waitHeld(t *testing.T, n int) []string {
	t.Helper()
	var got []string
	guard := time.After(10 * time.Second)
	for len(got) < n {
		select {
		case b := <-f.h.held:
			got = append(got, b)
		case <-guard:
			t.Fatalf("%d of %d pipelined calls in flight together; want all", len(got), n)
		}
	}
	return got
}

// TestPipelinedCallsInFlightTogether sends 8 requests in one write whose
// calls each wait until the test releases them: all 8 must be in flight
// at once (the loop does not wait for a call before it takes the next),
// and the answers must come in the requests' order although the calls
// end in the opposite order.
func TestPipelinedCallsInFlightTogether(t *testing.T) {
	f := start(t, 0)
	bodies := f.holdCalls(8)
	conn, br := f.sendPipelined(t, bodies)
	f.waitHeld(t, len(bodies))
	for i := len(bodies) - 1; i >= 0; i-- {
		close(f.h.hold[bodies[i]])
	}
	for _, b := range bodies {
		if got, _ := readAnswer(t, br); got != "loop:"+b {
			t.Fatalf("answer %q, want loop:%s (in the requests' order)", got, b)
		}
	}
	// The connection goes on with a plain call.
	io.WriteString(conn, post("/svc/Schedule", "after", ""))
	if got, _ := readAnswer(t, br); got != "loop:after" {
		t.Fatalf("answer %q after the pipelined ones", got)
	}
}

// TestMaxInFlight: of MaxInFlight+1 pipelined waiting calls, only
// MaxInFlight are started; the last one starts once one ends.
func TestMaxInFlight(t *testing.T) {
	f := start(t, 0)
	bodies := f.holdCalls(MaxInFlight + 1)
	_, br := f.sendPipelined(t, bodies)
	held := f.waitHeld(t, MaxInFlight)
	if slices.Contains(held, bodies[MaxInFlight]) {
		t.Fatalf("the call beyond MaxInFlight started before any ended")
	}
	// Without the first answer written, the last call stays waiting; the
	// loop is blocked in enqueue. Release the first.
	close(f.h.hold[bodies[0]])
	if got, _ := readAnswer(t, br); got != "loop:"+bodies[0] {
		t.Fatalf("first answer %q", got)
	}
	if last := f.waitHeld(t, 1); last[0] != bodies[MaxInFlight] {
		t.Fatalf("then %q started, want %q", last[0], bodies[MaxInFlight])
	}
	for _, b := range bodies[1:] {
		close(f.h.hold[b])
	}
	for _, b := range bodies[1:] {
		if got, _ := readAnswer(t, br); got != "loop:"+b {
			t.Fatalf("answer %q, want loop:%s", got, b)
		}
	}
}

// TestPipelinedFailure: a call that panics, or writes no answer, ends
// its connection: the answers before it are written, none after it,
// although the calls after it ran.
func TestPipelinedFailure(t *testing.T) {
	for _, bad := range []string{"panic", "mute"} {
		t.Run(bad, func(t *testing.T) {
			f := start(t, 0)
			bodies := f.holdCalls(1) // holds the first answer until all ran
			conn, br := f.dial(t)
			io.WriteString(conn, post("/svc/Schedule", bodies[0], "")+post("/svc/Schedule", bad, "")+post("/svc/Schedule", "c", ""))
			f.waitHeld(t, 1)
			for _, want := range []string{bodies[0], bad, "c"} {
				if got := <-f.h.calls; got != want {
					t.Fatalf("call %q, want %q", got, want)
				}
			}
			close(f.h.hold[bodies[0]])
			if got, _ := readAnswer(t, br); got != "loop:"+bodies[0] {
				t.Fatalf("first answer %q", got)
			}
			if n, err := br.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("after the first answer: %d bytes, %v; want EOF", n, err)
			}
		})
	}
}

// TestShutdownPipelined: Shutdown with pipelined calls in flight lets
// them end; all are answered in order, the last with Connection: close,
// and the connection is closed.
func TestShutdownPipelined(t *testing.T) {
	f := start(t, 0)
	bodies := f.holdCalls(3)
	_, br := f.sendPipelined(t, bodies)
	f.waitHeld(t, len(bodies))
	shut := make(chan error, 1)
	go func() { shut <- f.srv.Shutdown(context.Background()) }()
	// Shutdown must be under way (it stops accepting first) before the
	// calls end; a new connection is refused once it is.
	for {
		c, err := net.Dial("tcp", f.addr)
		if err != nil {
			break
		}
		c.Close()
		runtime.Gosched()
	}
	for _, b := range bodies {
		close(f.h.hold[b])
	}
	for i, b := range bodies {
		got, resp := readAnswer(t, br)
		if got != "loop:"+b || resp.Close != (i == len(bodies)-1) {
			t.Fatalf("answer %d: %q close=%v; want loop:%s, close only on the last", i, got, resp.Close, b)
		}
	}
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after the answers: %d bytes, %v; want EOF", n, err)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// TestPipelinedRandom sends random sequences of pipelined requests, cut
// into random writes: calls the loop answers, calls it declines or leaves
// to net/http (another path, a GET, a chunked body), and a request that
// asks to close. The answers must be exactly the sequence a one-at-a-time
// server gives: the loop's until the first request it does not take,
// net/http's from then on, and nothing after the answer to a request that
// asked to close.
func TestPipelinedRandom(t *testing.T) {
	f := start(t, 0)
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 200 {
		var wire strings.Builder
		var want []string
		handed, closed := false, false
		n := 1 + rng.IntN(12)
		for i := range n {
			body := fmt.Sprintf("b%d-%d", iter, i)
			extra := ""
			last := i == n-1
			if last && rng.IntN(3) == 0 {
				extra = "Connection: close\r\n"
				closed = true
			}
			switch k := rng.IntN(10); {
			case k < 6: // one the loop takes, unless net/http owns the connection
				wire.WriteString(post("/svc/Schedule", body, extra))
				if handed {
					want = append(want, "http:POST /svc/Schedule "+body)
				} else {
					want = append(want, "loop:"+body)
				}
			case k < 7: // declined by the Handler
				wire.WriteString(post("/svc/Schedule", "decline", extra))
				want = append(want, "http:POST /svc/Schedule decline")
				handed = true
			case k < 8:
				wire.WriteString(post("/svc/Other", body, extra))
				want = append(want, "http:POST /svc/Other "+body)
				handed = true
			case k < 9:
				wire.WriteString("GET /svc/Schedule HTTP/1.1\r\nHost: x\r\n" + extra + "\r\n")
				want = append(want, "http:GET /svc/Schedule ")
				handed = true
			default:
				wire.WriteString("POST /svc/Schedule HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n" + extra + "\r\n" +
					fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body))
				want = append(want, "http:POST /svc/Schedule "+body)
				handed = true
			}
		}
		conn, br := f.dial(t)
		b := wire.String()
		for len(b) > 0 {
			k := min(len(b), 1+rng.IntN(200))
			if _, err := io.WriteString(conn, b[:k]); err != nil {
				t.Fatalf("iteration %d: write: %v", iter, err)
			}
			b = b[k:]
		}
		for i, w := range want {
			got, _ := readAnswer(t, br)
			if got != w {
				t.Fatalf("iteration %d, answer %d: %q, want %q (all: %q)", iter, i, got, w, want)
			}
		}
		if closed {
			if n, err := br.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("iteration %d: after the answer to a request that asked to close: %d bytes, %v; want EOF", iter, n, err)
			}
		}
		conn.Close()
		for len(f.h.calls) > 0 { // the handler's record of Takes, unused here
			<-f.h.calls
		}
	}
}

// TestWaiterCancelledWhenClientLeaves holds a Waiter call (a long poll)
// while its client closes the connection: the loop, reading on, sees it
// and cancels the call's ctx. A Waiter that is answered leaves the
// connection usable.
func TestWaiterCancelledWhenClientLeaves(t *testing.T) {
	f := start(t, 0)
	c, br := f.dial(t)
	io.WriteString(c, post("/svc/Schedule", "poll", ""))
	guard := func() <-chan time.Time {
		return time.After(20 * time.Second) // a guard, not a wait
	}
	select {
	case <-f.h.entered:
	case <-guard():
		t.Fatal("the poll did not start")
	}
	f.h.release <- struct{}{}
	if err := <-f.h.polled; err != nil {
		t.Fatalf("answered poll: ctx error %v", err)
	}
	if body, _ := readAnswer(t, br); body != "loop:poll" {
		t.Fatalf("answer %q", body)
	}
	io.WriteString(c, post("/svc/Schedule", "after", ""))
	if body, _ := readAnswer(t, br); body != "loop:after" {
		t.Fatalf("answer after the poll %q", body)
	}

	io.WriteString(c, post("/svc/Schedule", "poll", ""))
	select {
	case <-f.h.entered:
	case <-guard():
		t.Fatal("the second poll did not start")
	}
	c.Close()
	select {
	case err := <-f.h.polled:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("poll of a client that left: ctx error %v, want Canceled", err)
		}
	case <-guard():
		t.Fatal("the poll of a client that left was not cancelled")
	}
}
