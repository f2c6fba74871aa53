package h1

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// echo answers with what it got: the method, the body's length and a
// header in response headers, the body itself as the response body, in
// the way the query asks: ?chunked=1 flushes before the end (so the
// response is chunked), ?close=1 says Connection: close, ?status=N.
func echo(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	q := r.URL.Query()
	w.Header().Set("X-Method", r.Method)
	w.Header().Set("X-Got-Length", strconv.Itoa(len(b)))
	w.Header().Set("X-Echo", r.Header.Get("X-Test"))
	w.Header().Set("X-Content-Length", strconv.FormatInt(r.ContentLength, 10))
	if q.Get("close") == "1" {
		w.Header().Set("Connection", "close")
	}
	if q.Get("chunked") != "1" {
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	}
	if s := q.Get("status"); s != "" {
		code, _ := strconv.Atoi(s)
		w.WriteHeader(code)
	}
	if q.Get("chunked") == "1" && len(b) > 1 {
		w.Write(b[:len(b)/2])
		w.(http.Flusher).Flush()
		b = b[len(b)/2:]
	}
	w.Write(b)
}

// opaque is a request body net/http does not know to be in memory, as
// connect-go's is not.
type opaque struct{ r io.Reader }

func (o *opaque) Read(p []byte) (int, error) { return o.r.Read(p) }
func (o *opaque) Close() error               { return nil }

func TestRoundTrip(t *testing.T) {
	srv, _ := newServer(t, http.HandlerFunc(echo))
	tr, _ := newTransport(t, Options{})
	big := bytes.Repeat([]byte("0123456789abcdef"), 40<<10/16) // larger than the write buffer
	for _, tc := range []struct {
		name, method, query string
		body                []byte
		wantStatus          int
		wantChunked         bool
	}{
		{"get", "GET", "", nil, 200, false},
		{"post_small", "POST", "", []byte("hello"), 200, false},
		{"post_large", "POST", "", big, 200, false},
		{"post_chunked_response", "POST", "chunked=1", big, 200, true},
		{"post_connection_close", "POST", "close=1", []byte("bye"), 200, false},
		{"head", "HEAD", "", nil, 200, false},
		{"no_content", "POST", "status=204", []byte("x"), 204, false},
		{"empty_body_put", "PUT", "", nil, 200, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body io.ReadCloser = http.NoBody
			if tc.body != nil {
				body = &opaque{bytes.NewReader(tc.body)}
			}
			req, err := http.NewRequest(tc.method, srv.URL+"/x?"+tc.query, body)
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = int64(len(tc.body))
			req.Header.Set("X-Test", "value "+tc.name)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.wantStatus {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.wantStatus)
			}
			if resp.Request != req {
				t.Errorf("resp.Request is not the request sent")
			}
			if m := resp.Header.Get("X-Method"); m != tc.method {
				t.Errorf("server saw method %q, want %q", m, tc.method)
			}
			if e := resp.Header.Get("X-Echo"); e != "value "+tc.name {
				t.Errorf("server saw X-Test %q", e)
			}
			if n := resp.Header.Get("X-Got-Length"); n != strconv.Itoa(len(tc.body)) {
				t.Errorf("server read %s body bytes, want %d", n, len(tc.body))
			}
			if cl := resp.Header.Get("X-Content-Length"); len(tc.body) > 0 && cl != strconv.Itoa(len(tc.body)) {
				t.Errorf("server saw Content-Length %s, want %d", cl, len(tc.body))
			}
			want := tc.body
			if tc.method == "HEAD" || tc.wantStatus == 204 {
				want = nil
			}
			if !bytes.Equal(got, want) {
				t.Errorf("response body: %d bytes, want %d", len(got), len(want))
			}
			if chunked := len(resp.TransferEncoding) > 0 && resp.TransferEncoding[0] == "chunked"; chunked != tc.wantChunked {
				t.Errorf("response chunked = %v (TransferEncoding %q), want %v", chunked, resp.TransferEncoding, tc.wantChunked)
			}
			if !tc.wantChunked && tc.method != "HEAD" && tc.wantStatus == 200 && resp.ContentLength != int64(len(tc.body)) {
				t.Errorf("ContentLength %d, want %d", resp.ContentLength, len(tc.body))
			}
		})
	}
}

// TestStreamedResponse reads a chunked response while the server is still
// writing it: each part arrives before the server writes the next.
func TestStreamedResponse(t *testing.T) {
	next := make(chan struct{})
	srv, _ := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range 3 {
			if i > 0 {
				<-next
			}
			fmt.Fprintf(w, "part %d;", i)
			w.(http.Flusher).Flush()
		}
	}))
	tr, _ := newTransport(t, Options{})
	req, _ := http.NewRequest("GET", srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 64)
	for i := range 3 {
		want := fmt.Sprintf("part %d;", i)
		var got []byte
		for len(got) < len(want) && err == nil {
			var n int
			n, err = resp.Body.Read(buf)
			got = append(got, buf[:n]...)
		}
		if string(got) != want || (err != nil && (i < 2 || err != io.EOF)) {
			t.Fatalf("part %d: read %q, %v; want %q", i, got, err, want)
		}
		if i < 2 {
			next <- struct{}{} // the server writes the next part only now
		}
	}
	if err == nil {
		if n, err := resp.Body.Read(buf); n != 0 || err != io.EOF {
			t.Fatalf("after the last part: %d bytes, %v; want EOF", n, err)
		}
	}
}

func get(t *testing.T, tr http.RoundTripper, url string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader("payload"))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func readClose(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := resp.Body.Close(); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestReuse(t *testing.T) {
	srv, conns := newServer(t, http.HandlerFunc(echo))
	tr, _ := newTransport(t, Options{})
	addr := strings.TrimPrefix(srv.URL, "http://")

	t.Run("sequential_requests_share_one_conn", func(t *testing.T) {
		before := conns.Load()
		for i := range 20 {
			if got := readClose(t, get(t, tr, srv.URL)); got != "payload" {
				t.Fatalf("request %d: body %q", i, got)
			}
		}
		if n := conns.Load() - before; n != 1 {
			t.Errorf("20 sequential requests used %d connections, want 1", n)
		}
		if n := tr.pool.idle(addr); n != 1 {
			t.Errorf("%d idle connections, want 1", n)
		}
	})
	t.Run("body_closed_before_eof_closes_conn", func(t *testing.T) {
		before := conns.Load()
		resp := get(t, tr, srv.URL)
		b := make([]byte, 3)
		if _, err := io.ReadFull(resp.Body, b); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if n := tr.pool.idle(addr); n != 0 {
			t.Errorf("after a body closed early: %d idle connections, want 0", n)
		}
		if _, err := resp.Body.Read(b); err != errBodyClosed {
			t.Errorf("read after Close: %v, want %v", err, errBodyClosed)
		}
		readClose(t, get(t, tr, srv.URL))
		if n := conns.Load() - before; n != 1 {
			t.Errorf("the next request used %d new connections, want 1 (the old one must not be reused)", n)
		}
	})
	t.Run("body_read_to_eof_but_not_closed_keeps_conn", func(t *testing.T) {
		resp := get(t, tr, srv.URL)
		if _, err := io.ReadAll(resp.Body); err != nil {
			t.Fatal(err)
		}
		if n := tr.pool.idle(addr); n != 0 {
			t.Errorf("before Close: %d idle connections, want 0", n)
		}
		resp.Body.Close()
		if n := tr.pool.idle(addr); n != 1 {
			t.Errorf("after Close: %d idle connections, want 1", n)
		}
	})
	t.Run("connection_close_is_not_pooled", func(t *testing.T) {
		tr.CloseIdleConnections()
		readClose(t, get(t, tr, srv.URL+"/?close=1"))
		if n := tr.pool.idle(addr); n != 0 {
			t.Errorf("after Connection: close: %d idle connections, want 0", n)
		}
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Close = true
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		readClose(t, resp)
		if n := tr.pool.idle(addr); n != 0 {
			t.Errorf("after a request with Close: %d idle connections, want 0", n)
		}
	})
	t.Run("concurrent_requests_bounded_idle", func(t *testing.T) {
		tr, _ := newTransport(t, Options{MaxIdlePerHost: 3})
		resps := make([]*http.Response, 5)
		for i := range resps {
			resps[i] = get(t, tr, srv.URL) // all open at once: 5 connections
		}
		for _, r := range resps {
			readClose(t, r)
		}
		if n := tr.pool.idle(addr); n != 3 {
			t.Errorf("%d idle connections, want MaxIdlePerHost 3", n)
		}
	})
}

// countWrites counts the writes made on a connection.
type countWrites struct {
	net.Conn
	n *atomic.Int64
}

func (c countWrites) Write(p []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(p)
}

// TestOneWrite: a small request leaves in one write even when its body is
// not a reader net/http knows to be in memory.
func TestOneWrite(t *testing.T) {
	srv, _ := newServer(t, http.HandlerFunc(echo))
	var writes atomic.Int64
	d := &dialer{wrap: func(c net.Conn) net.Conn { return countWrites{c, &writes} }}
	tr := New(Options{DialContext: d.dial})
	defer tr.CloseIdleConnections()
	const calls = 10
	for range calls {
		req, _ := http.NewRequest("POST", srv.URL, &opaque{strings.NewReader(strings.Repeat("b", 300))})
		req.ContentLength = 300
		req.Header.Set("Content-Type", "application/proto")
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := readClose(t, resp); len(got) != 300 {
			t.Fatalf("echoed %d bytes, want 300", len(got))
		}
	}
	if w := writes.Load(); w != calls {
		t.Errorf("%d writes for %d requests, want one each", w, calls)
	}
	if d.dials() != 1 {
		t.Errorf("%d dials, want 1", d.dials())
	}
}

func TestFallback(t *testing.T) {
	var got []*http.Request
	fb := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got = append(got, r)
		return &http.Response{StatusCode: 299, Body: http.NoBody, Request: r}, nil
	})
	proxied := func(r *http.Request) (*url.URL, error) {
		if r.URL.Hostname() == "proxied.example" {
			return url.Parse("http://proxy.example:3128")
		}
		return nil, nil
	}
	tr, d := newTransport(t, Options{Fallback: fb, Proxy: proxied, MaxBodySize: 1000})
	mk := func(method, u string, body io.Reader, cl int64, hdr ...string) *http.Request {
		r, err := http.NewRequest(method, u, body)
		if err != nil {
			t.Fatal(err)
		}
		r.ContentLength = cl
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header[hdr[i]] = []string{hdr[i+1]}
		}
		return r
	}
	const h = "http://127.0.0.1:1/"
	for _, tc := range []struct {
		name string
		req  *http.Request
	}{
		{"https", mk("GET", "https://127.0.0.1:1/", nil, 0)},
		{"unknown_length", mk("POST", h, &opaque{strings.NewReader("x")}, -1)},
		{"zero_length_with_body", mk("POST", h, &opaque{strings.NewReader("x")}, 0)},
		{"larger_than_max_body", mk("POST", h, &opaque{strings.NewReader(strings.Repeat("x", 1001))}, 1001)},
		{"proxy", mk("GET", "http://proxied.example/", nil, 0)},
		{"grpc", mk("POST", h, strings.NewReader("x"), 1, "Content-Type", "application/grpc+proto")},
		{"expect", mk("POST", h, strings.NewReader("x"), 1, "Expect", "100-continue")},
		{"upgrade", mk("GET", h, nil, 0, "Upgrade", "websocket", "Connection", "Upgrade")},
		{"bad_header_name", mk("GET", h, nil, 0, "Bad Name", "v")},
		{"bad_header_value", mk("GET", h, nil, 0, "X-Ok", "a\r\nInjected: yes")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got = nil
			resp, err := tr.RoundTrip(tc.req)
			if err != nil || resp.StatusCode != 299 {
				t.Fatalf("RoundTrip: %v, %v", resp, err)
			}
			if len(got) != 1 || got[0] != tc.req {
				t.Fatalf("the fallback got %d requests, want this one", len(got))
			}
		})
	}
	if d.dials() != 0 {
		t.Errorf("the lean transport dialed %d times for requests it must hand over", d.dials())
	}
	// What it keeps: plain http, known lengths, grpc-web (HTTP/1.1).
	for _, r := range []*http.Request{
		mk("GET", h, nil, 0),
		mk("POST", h, strings.NewReader("x"), 1, "Content-Type", "application/grpc-web+proto"),
		mk("POST", h, http.NoBody, 0),
	} {
		if !tr.handles(r) {
			t.Errorf("%s %s %q: handed to the fallback, want sent by the lean transport", r.Method, r.URL, r.Header)
		}
	}
}

func TestDialError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	tr, _ := newTransport(t, Options{})
	req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	_, err = tr.RoundTrip(req)
	if err == nil || !strings.Contains(err.Error(), "dialing "+addr) {
		t.Fatalf("RoundTrip to a closed port: %v, want a dial error naming %s", err, addr)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req = req.WithContext(ctx)
	if _, err := tr.RoundTrip(req); err != context.Canceled {
		t.Fatalf("RoundTrip with a cancelled context: %v, want context.Canceled", err)
	}
}
