package h1

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
)

// rawServer is a listener the test scripts connection by connection: it
// reads requests and answers, or closes, as each test says.
type rawServer struct {
	url     string
	conns   chan net.Conn
	handled atomic.Int64 // requests read whole
}

func newRawServer(t *testing.T) *rawServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{url: "http://" + l.Addr().String() + "/", conns: make(chan net.Conn, 16)}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(s.conns)
				return
			}
			s.conns <- c
		}
	}()
	t.Cleanup(func() {
		l.Close()
		for c := range s.conns {
			c.Close()
		}
	})
	return s
}

// read reads one whole request from br and counts it.
func (s *rawServer) read(t *testing.T, br *bufio.Reader) *http.Request {
	t.Helper()
	req, err := http.ReadRequest(br)
	if err != nil {
		t.Fatalf("server: reading a request: %v", err)
	}
	if _, err := io.Copy(io.Discard, req.Body); err != nil {
		t.Fatalf("server: reading the body: %v", err)
	}
	s.handled.Add(1)
	return req
}

func answer(t *testing.T, c net.Conn, body string) {
	t.Helper()
	if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+itoa(len(body))+"\r\n\r\n"+body); err != nil {
		t.Fatalf("server: answering: %v", err)
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

type result struct {
	body string
	err  error
}

// send runs one RoundTrip in the background; its result arrives on the
// returned channel, the body read whole and closed.
func send(tr *Transport, req *http.Request) <-chan result {
	ch := make(chan result, 1)
	go func() {
		resp, err := tr.RoundTrip(req)
		if err != nil {
			ch <- result{err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		ch <- result{string(b), err}
	}()
	return ch
}

func post(t *testing.T, url, body string, hdr ...string) *http.Request {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return req
}

// firstOnA makes one answered request, so that the connection (A, the
// server's end returned) is idle in the pool.
func firstOnA(t *testing.T, s *rawServer, tr *Transport) (net.Conn, *bufio.Reader) {
	t.Helper()
	done := send(tr, post(t, s.url, "first"))
	a := within(t, "the first connection", s.conns)
	br := bufio.NewReader(a)
	s.read(t, br)
	answer(t, a, "one")
	if r := within(t, "the first answer", done); r.err != nil || r.body != "one" {
		t.Fatalf("first request: %q, %v", r.body, r.err)
	}
	return a, br
}

// closedByPeer reports whether the client's end c has seen the server's
// close or reset (without consuming anything but a pending reset).
func closedByPeer(c net.Conn) bool { return !newConn(c, "", 16, 16).alive() }

func needProbe(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the liveness probe of idle connections is implemented on Linux only")
	}
}

// TestRetryAfterFailedWrite: a POST whose write to a reused connection
// fails (the server reset it while it was idle, and the reset arrived
// after the liveness check) is sent again on a new connection, and the
// server handles it once.
func TestRetryAfterFailedWrite(t *testing.T) {
	needProbe(t)
	s := newRawServer(t)
	tr, d := newTransport(t, Options{})
	a, _ := firstOnA(t, s, tr)
	a.(*net.TCPConn).SetLinger(0)
	a.Close() // a reset, not a FIN: the client's next write fails
	waitUntil(t, "the reset to reach the client", func() bool { return closedByPeer(d.conn(0)) })
	tr.alive = func(*conn) bool { return true } // the reset "arrives after the check"

	done := send(tr, post(t, s.url, "second"))
	b := within(t, "the retry's connection", s.conns)
	br := bufio.NewReader(b)
	if req := s.read(t, br); req.Method != "POST" {
		t.Fatalf("retry: method %s", req.Method)
	}
	answer(t, b, "two")
	if r := within(t, "the answer", done); r.err != nil || r.body != "two" {
		t.Fatalf("second request: %q, %v", r.body, r.err)
	}
	if n := s.handled.Load(); n != 2 {
		t.Errorf("the server handled %d requests, want 2", n)
	}
	if n := d.dials(); n != 2 {
		t.Errorf("%d dials, want 2", n)
	}
}

// TestNoRetryWithoutGetBody: the same failed write with a body that
// cannot be produced again is an error, not a retry.
func TestNoRetryWithoutGetBody(t *testing.T) {
	needProbe(t)
	s := newRawServer(t)
	tr, d := newTransport(t, Options{})
	a, _ := firstOnA(t, s, tr)
	a.(*net.TCPConn).SetLinger(0)
	a.Close()
	waitUntil(t, "the reset to reach the client", func() bool { return closedByPeer(d.conn(0)) })
	tr.alive = func(*conn) bool { return true }

	req, _ := http.NewRequest("POST", s.url, &opaque{strings.NewReader("second")})
	req.ContentLength = 6
	r := within(t, "the answer", send(tr, req))
	if r.err == nil || !strings.Contains(r.err.Error(), "writing the request") {
		t.Fatalf("RoundTrip: %q, %v; want a write error", r.body, r.err)
	}
	if n := d.dials(); n != 1 {
		t.Errorf("%d dials, want 1 (no retry)", n)
	}
}

// TestEOFAfterWrite: the server reads a request whole and closes the
// connection without answering. A POST is not sent again (the server may
// have stored it); an idempotent request is, on a new connection; and
// nothing is sent again after a failure on a new connection.
func TestEOFAfterWrite(t *testing.T) {
	for _, tc := range []struct {
		name      string
		req       func(t *testing.T, url string) *http.Request
		reused    bool
		wantRetry bool
	}{
		{"post_not_retried", func(t *testing.T, url string) *http.Request { return post(t, url, "second") }, true, false},
		{"post_with_idempotency_key_retried", func(t *testing.T, url string) *http.Request {
			return post(t, url, "second", "Idempotency-Key", "k1")
		}, true, true},
		{"post_with_x_idempotency_key_retried", func(t *testing.T, url string) *http.Request {
			return post(t, url, "second", "X-Idempotency-Key", "k1")
		}, true, true},
		{"get_retried", func(t *testing.T, url string) *http.Request {
			r, _ := http.NewRequest("GET", url, nil)
			return r
		}, true, true},
		{"get_on_new_conn_not_retried", func(t *testing.T, url string) *http.Request {
			r, _ := http.NewRequest("GET", url, nil)
			return r
		}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newRawServer(t)
			tr, d := newTransport(t, Options{})
			var c net.Conn
			var br *bufio.Reader
			if tc.reused {
				c, br = firstOnA(t, s, tr)
			}
			before := s.handled.Load()
			done := send(tr, tc.req(t, s.url))
			if !tc.reused {
				c = within(t, "the connection", s.conns)
				br = bufio.NewReader(c)
			}
			s.read(t, br)
			c.Close() // read whole, then closed without an answer
			if tc.wantRetry {
				b := within(t, "the retry's connection", s.conns)
				s.read(t, bufio.NewReader(b))
				answer(t, b, "two")
				if r := within(t, "the answer", done); r.err != nil || r.body != "two" {
					t.Fatalf("retried request: %q, %v", r.body, r.err)
				}
			} else {
				r := within(t, "the answer", done)
				if r.err == nil || !strings.Contains(r.err.Error(), "without answering") {
					t.Fatalf("RoundTrip: %q, %v; want the closed-without-answer error", r.body, r.err)
				}
			}
			wantHandled, wantDials := int64(1), 1
			if tc.wantRetry {
				wantHandled, wantDials = 2, 2
			}
			if n := s.handled.Load() - before; n != wantHandled {
				t.Errorf("the server got the request %d times, want %d", n, wantHandled)
			}
			if n := d.dials(); n != wantDials {
				t.Errorf("%d dials, want %d", n, wantDials)
			}
		})
	}
}

// TestStaleIdleConnDropped: a connection the server closed while it was
// idle is found before it is written to, and the POST goes out once on a
// new connection.
func TestStaleIdleConnDropped(t *testing.T) {
	needProbe(t)
	s := newRawServer(t)
	tr, d := newTransport(t, Options{})
	a, _ := firstOnA(t, s, tr)
	a.Close() // a FIN while the client's end is idle in the pool
	waitUntil(t, "the close to reach the client", func() bool { return closedByPeer(d.conn(0)) })

	done := send(tr, post(t, s.url, "second"))
	b := within(t, "the new connection", s.conns)
	s.read(t, bufio.NewReader(b))
	answer(t, b, "two")
	if r := within(t, "the answer", done); r.err != nil || r.body != "two" {
		t.Fatalf("second request: %q, %v", r.body, r.err)
	}
	if n := s.handled.Load(); n != 2 {
		t.Errorf("the server got %d requests, want 2", n)
	}
	if n := d.dials(); n != 2 {
		t.Errorf("%d dials, want 2", n)
	}
}

// TestUnaskedData: bytes a server sends on an idle connection make it
// unusable; they are not read as the next response.
func TestUnaskedData(t *testing.T) {
	needProbe(t)
	s := newRawServer(t)
	tr, d := newTransport(t, Options{})
	a, _ := firstOnA(t, s, tr)
	answer(t, a, "stray") // an answer to no request
	waitUntil(t, "the stray answer to reach the client", func() bool { return closedByPeer(d.conn(0)) })

	done := send(tr, post(t, s.url, "second"))
	b := within(t, "the new connection", s.conns)
	s.read(t, bufio.NewReader(b))
	answer(t, b, "two")
	if r := within(t, "the answer", done); r.err != nil || r.body != "two" {
		t.Fatalf("second request: %q, %v (the stray answer must not be taken for it)", r.body, r.err)
	}
}

// TestRetryUsesNewConn: the one retry dials a new connection even when
// another idle one is pooled, which may be as stale as the first.
func TestRetryUsesNewConn(t *testing.T) {
	s := newRawServer(t)
	tr, d := newTransport(t, Options{})
	// Two requests in flight at once leave two idle connections.
	first, second := send(tr, post(t, s.url, "a")), send(tr, post(t, s.url, "b"))
	var srv []net.Conn
	var brs []*bufio.Reader
	for range 2 {
		c := within(t, "a connection", s.conns)
		br := bufio.NewReader(c)
		s.read(t, br)
		srv, brs = append(srv, c), append(brs, br)
	}
	for _, c := range srv {
		answer(t, c, "ok")
	}
	for _, ch := range []<-chan result{first, second} {
		if r := within(t, "an answer", ch); r.err != nil {
			t.Fatal(r.err)
		}
	}
	if n := tr.pool.idle(strings.TrimPrefix(s.url[:len(s.url)-1], "http://")); n != 2 {
		t.Fatalf("%d idle connections, want 2", n)
	}

	req, _ := http.NewRequest("GET", s.url, nil)
	done := send(tr, req)
	// Whichever idle connection carries it: read it whole, close unanswered.
	got := make(chan int, 2)
	for i := range srv {
		go func() {
			if _, err := http.ReadRequest(brs[i]); err == nil {
				s.handled.Add(1)
				got <- i
				srv[i].Close()
			}
		}()
	}
	within(t, "the GET on an idle connection", got)
	c := within(t, "the retry's new connection", s.conns)
	s.read(t, bufio.NewReader(c))
	answer(t, c, "fresh")
	if r := within(t, "the answer", done); r.err != nil || r.body != "fresh" {
		t.Fatalf("GET: %q, %v", r.body, r.err)
	}
	if n := d.dials(); n != 3 {
		t.Errorf("%d dials, want 3 (the retry on a new connection)", n)
	}
}
