package h1

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
)

// target returns the Target of POSTs to rawURL with a Content-Type.
func target(t *testing.T, tr *Transport, rawURL string) *Target {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	tg := tr.NewTarget(u, "", http.Header{"Content-Type": {"application/proto"}})
	if tg == nil {
		t.Fatalf("NewTarget(%s) refused a plain http URL", rawURL)
	}
	return tg
}

// postIn runs one Post in the background; a body error counts as the
// call's error.
func postIn(ctx context.Context, tr *Transport, r PostRequest) <-chan result {
	ch := make(chan result, 1)
	go func() {
		a, err := tr.Post(ctx, r, nil)
		if err == nil {
			err = a.BodyErr
		}
		ch <- result{string(a.Body), err}
	}()
	return ch
}

// TestPost: the request the server reads is the one described (request
// line, Host, fields, body), it leaves in one write, the answer comes
// back, and the connection is reused.
func TestPost(t *testing.T) {
	var got atomic.Pointer[http.Request]
	srv, conns := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got.Store(r)
		w.Header().Set("Content-Type", "application/proto")
		w.Header().Set("Trailer-X", "t")
		w.Write(append([]byte("got:"), body...))
	}))
	var writes atomic.Int64
	tr, _ := newTransport(t, Options{})
	tr.dial = (&dialer{wrap: func(c net.Conn) net.Conn { return countWrites{c, &writes} }}).dial
	tg := target(t, tr, srv.URL+"/svc/Method?x=1")
	extra, ok := AppendField(nil, "Connect-Timeout-Ms", "500")
	if !ok {
		t.Fatal("AppendField refused a plain field")
	}
	const calls = 5
	for i := range calls {
		body := strings.Repeat("b", 100*i)
		a, err := tr.Post(context.Background(), PostRequest{Target: tg, Header: extra, Body: []byte(body)}, nil)
		if err != nil || a.BodyErr != nil {
			t.Fatalf("Post: %v, %v", err, a.BodyErr)
		}
		if a.StatusCode != 200 || a.Status != "200 OK" || string(a.Body) != "got:"+body ||
			a.Header.Get("Content-Type") != "application/proto" || a.Header.Get("Trailer-X") != "t" {
			t.Fatalf("answer %d %q %q %v", a.StatusCode, a.Status, a.Body, a.Header)
		}
		r := got.Load()
		if r.Method != "POST" || r.RequestURI != "/svc/Method?x=1" || r.Host != strings.TrimPrefix(srv.URL, "http://") ||
			r.ContentLength != int64(len(body)) || r.Header.Get("Content-Type") != "application/proto" || r.Header.Get("Connect-Timeout-Ms") != "500" {
			t.Fatalf("the server read %s %s host %s length %d header %v", r.Method, r.RequestURI, r.Host, r.ContentLength, r.Header)
		}
	}
	if w := writes.Load(); w != calls {
		t.Errorf("%d writes for %d requests, want one each", w, calls)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

// TestPostLikeRoundTrip: for answers of every kind the parser takes or
// leaves to http.ReadResponse, Post gives what RoundTrip and reading its
// body give (status, header, body, body error), and pools the connection
// exactly when RoundTrip does.
func TestPostLikeRoundTrip(t *testing.T) {
	long := "HTTP/1.1 200 OK\r\nX-Long: " + strings.Repeat("v", 5000) + "\r\nContent-Length: 2\r\n\r\nok"
	for _, tc := range []struct{ name, answer string }{
		{"plain", headSeeds[0]},
		{"connection_close", headSeeds[1]},
		{"error_answer", headSeeds[2]},
		{"chunked", headSeeds[5]},
		{"informational_first", headSeeds[6]},
		{"http_1_0", headSeeds[7]},
		{"http_1_0_keep_alive", "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx"},
		{"close_delimited", headSeeds[8]},
		{"no_content", "HTTP/1.1 204 No Content\r\n\r\n"},
		{"head_larger_than_buffer", long},
		{"short_body", headSeeds[14]},
		{"malformed", "HTTP/1.1 2x0 OK\r\n\r\n"},
		{"garbage", "\x00\x01\x02\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			type outcome struct {
				status     int
				statusText string
				header     http.Header
				body       string
				err        string
				pooled     int
			}
			var outs [2]outcome
			for i := range outs {
				s := newRawServer(t)
				tr, _ := newTransport(t, Options{})
				var done <-chan outcome
				if i == 0 {
					ch := make(chan outcome, 1)
					done = ch
					go func() {
						var o outcome
						resp, err := tr.RoundTrip(post(t, s.url, "req"))
						if err != nil {
							o.err = err.Error()
							ch <- o
							return
						}
						b, err := io.ReadAll(resp.Body)
						resp.Body.Close()
						o = outcome{status: resp.StatusCode, statusText: resp.Status, header: resp.Header, body: string(b)}
						if err != nil {
							o.err = err.Error()
						}
						ch <- o
					}()
				} else {
					tg := target(t, tr, s.url)
					ch := make(chan outcome, 1)
					done = ch
					go func() {
						a, err := tr.Post(context.Background(), PostRequest{Target: tg, Body: []byte("req")}, nil)
						o := outcome{status: a.StatusCode, statusText: a.Status, header: a.Header, body: string(a.Body)}
						if err != nil {
							o = outcome{err: err.Error()}
						} else if a.BodyErr != nil {
							o.err = a.BodyErr.Error()
						}
						ch <- o
					}()
				}
				c := within(t, "the connection", s.conns)
				s.read(t, bufio.NewReader(c))
				io.WriteString(c, tc.answer)
				if tc.name == "close_delimited" || tc.name == "short_body" || tc.name == "malformed" || tc.name == "garbage" {
					c.Close()
				}
				outs[i] = within(t, "the answer", done)
				outs[i].err = strings.ReplaceAll(outs[i].err, c.LocalAddr().String(), "ADDR")
				outs[i].pooled = tr.pool.idle(strings.TrimSuffix(strings.TrimPrefix(s.url, "http://"), "/"))
				c.Close()
			}
			if !reflect.DeepEqual(outs[0], outs[1]) {
				t.Errorf("RoundTrip gave %+v\nPost gave      %+v", outs[0], outs[1])
			}
		})
	}
}

// TestPostRetryAfterFailedWrite mirrors TestRetryAfterFailedWrite: a
// write to a reused connection that fails is sent again on a new one,
// and the server handles it once.
func TestPostRetryAfterFailedWrite(t *testing.T) {
	needProbe(t)
	s := newRawServer(t)
	tr, d := newTransport(t, Options{})
	tg := target(t, tr, s.url)
	a, _ := firstOnA(t, s, tr)
	a.(*net.TCPConn).SetLinger(0)
	a.Close()
	waitUntil(t, "the reset to reach the client", func() bool { return closedByPeer(d.conn(0)) })
	tr.alive = func(*conn) bool { return true } // the reset "arrives after the check"

	done := postIn(context.Background(), tr, PostRequest{Target: tg, Body: []byte("second")})
	b := within(t, "the retry's connection", s.conns)
	s.read(t, bufio.NewReader(b))
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

// TestPostEOFAfterWrite mirrors TestEOFAfterWrite: the server reads the
// request whole and closes without answering. It is not sent again,
// unless it is marked idempotent and went out on a reused connection.
func TestPostEOFAfterWrite(t *testing.T) {
	for _, tc := range []struct {
		name       string
		idempotent bool
		reused     bool
		wantRetry  bool
	}{
		{"post_not_retried", false, true, false},
		{"idempotent_retried", true, true, true},
		{"idempotent_on_new_conn_not_retried", true, false, false},
		{"post_on_new_conn_not_retried", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newRawServer(t)
			tr, d := newTransport(t, Options{})
			tg := target(t, tr, s.url)
			var c net.Conn
			var br *bufio.Reader
			if tc.reused {
				c, br = firstOnA(t, s, tr)
			}
			before := s.handled.Load()
			done := postIn(context.Background(), tr, PostRequest{Target: tg, Body: []byte("second"), Idempotent: tc.idempotent})
			if !tc.reused {
				c = within(t, "the connection", s.conns)
				br = bufio.NewReader(c)
			}
			s.read(t, br)
			c.Close()
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
					t.Fatalf("Post: %q, %v; want the closed-without-answer error", r.body, r.err)
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

// TestPostStaleIdleConnDropped mirrors TestStaleIdleConnDropped: an idle
// connection the server closed is found before the write, and the POST
// goes out once on a new connection.
func TestPostStaleIdleConnDropped(t *testing.T) {
	needProbe(t)
	s := newRawServer(t)
	tr, d := newTransport(t, Options{})
	tg := target(t, tr, s.url)
	a, _ := firstOnA(t, s, tr)
	a.Close()
	waitUntil(t, "the close to reach the client", func() bool { return closedByPeer(d.conn(0)) })

	done := postIn(context.Background(), tr, PostRequest{Target: tg, Body: []byte("second")})
	b := within(t, "the new connection", s.conns)
	s.read(t, bufio.NewReader(b))
	answer(t, b, "two")
	if r := within(t, "the answer", done); r.err != nil || r.body != "two" {
		t.Fatalf("second request: %q, %v", r.body, r.err)
	}
	if n := s.handled.Load(); n != 2 {
		t.Errorf("the server got %d requests, want 2", n)
	}
}

// TestPostContext mirrors the context tests: the context ends while the
// request is written, while the answer is awaited, and while its body is
// read; Post returns the context's error at once (for the body, as
// BodyErr), and the connection is not pooled.
func TestPostContext(t *testing.T) {
	for _, e := range enders {
		for _, stage := range []string{"writing", "awaiting_head", "reading_body"} {
			t.Run(e.name+"/"+stage, func(t *testing.T) {
				s := newRawServer(t)
				tr, _ := newTransport(t, Options{MaxBodySize: 64 << 20})
				tg := target(t, tr, s.url)
				ctx, end := e.make()
				body := []byte("x")
				if stage == "writing" {
					body = make([]byte, 32<<20) // more than loopback's socket buffers hold
				}
				done := postIn(ctx, tr, PostRequest{Target: tg, Body: body})
				c := within(t, "the connection", s.conns)
				switch stage {
				case "awaiting_head":
					s.read(t, bufio.NewReader(c))
				case "reading_body":
					s.read(t, bufio.NewReader(c))
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nfirst")
				}
				end()
				r := within(t, "Post to return after the context ended", done)
				if !errors.Is(r.err, e.want) {
					t.Fatalf("Post: %q, %v; want %v", r.body, r.err, e.want)
				}
				if !strings.HasPrefix("first", r.body) {
					t.Errorf("body %q, want what arrived of \"first\"", r.body)
				}
				if n := tr.pool.idle(strings.TrimSuffix(strings.TrimPrefix(s.url, "http://"), "/")); n != 0 {
					t.Errorf("%d idle connections, want 0", n)
				}
			})
		}
	}
}

// TestPostContextEndedBeforeRelease mirrors TestContextEndedAfterEOF: a
// context that ends after the answer was read whole, before the
// connection goes back to the pool, may have disturbed it: the answer
// stands, the connection is closed, and the next call dials anew. A
// context that ended before the call makes no connection at all.
func TestPostContextEndedBeforeRelease(t *testing.T) {
	srv, conns := newServer(t, http.HandlerFunc(echo))
	tr, _ := newTransport(t, Options{})
	tg := target(t, tr, srv.URL)
	ctx, cancel := context.WithCancel(context.Background())
	tr.afterBody = cancel
	a, err := tr.Post(ctx, PostRequest{Target: tg, Body: []byte("abc")}, nil)
	if err != nil || a.BodyErr != nil || a.StatusCode != 200 || len(a.Body) == 0 {
		t.Fatalf("Post: %d %q, %v, %v", a.StatusCode, a.Body, err, a.BodyErr)
	}
	tr.afterBody = nil
	if n := tr.pool.idle(strings.TrimPrefix(srv.URL, "http://")); n != 0 {
		t.Fatalf("%d idle connections after a cancel before release, want 0", n)
	}
	if _, err := tr.Post(ctx, PostRequest{Target: tg, Body: []byte("abc")}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Post with an ended context: %v, want context.Canceled", err)
	}
	if a, err := tr.Post(context.Background(), PostRequest{Target: tg, Body: []byte("abc")}, nil); err != nil || a.BodyErr != nil {
		t.Fatalf("Post: %v, %v", err, a.BodyErr)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2 (the disturbed one must not be reused, the ended call makes none)", n)
	}
}

// TestPostFallbackCases: what Post does not send itself.
func TestPostFallbackCases(t *testing.T) {
	tr, _ := newTransport(t, Options{MaxBodySize: 10})
	tg := target(t, tr, "http://127.0.0.1:1/")
	if _, err := tr.Post(context.Background(), PostRequest{Target: tg, Body: make([]byte, 11)}, nil); err != ErrUseRoundTrip {
		t.Errorf("a body over MaxBodySize: %v, want ErrUseRoundTrip", err)
	}
	for _, raw := range []string{"https://127.0.0.1/", "http://user:pw@127.0.0.1/", "http://[fe80::1%25eth0]:80/"} {
		u, _ := url.Parse(raw)
		if tr.NewTarget(u, "", nil) != nil {
			t.Errorf("NewTarget(%s) gave a target", raw)
		}
	}
	u, _ := url.Parse("http://127.0.0.1/")
	for _, h := range []http.Header{{"Content-Type": {"application/grpc"}}, {"Bad Name": {"v"}}, {"X": {"a\nb"}}, {"Expect": {"100-continue"}}} {
		if tr.NewTarget(u, "", h) != nil {
			t.Errorf("NewTarget with %v gave a target", h)
		}
	}
	for _, f := range [][2]string{{"Host", "h"}, {"Content-Length", "1"}, {"Connection", "close"}, {"X", "a\rb"}, {"", "v"}} {
		if b, ok := AppendField([]byte("keep"), f[0], f[1]); ok || string(b) != "keep" {
			t.Errorf("AppendField(%q, %q) = %q, %v; want it refused", f[0], f[1], b, ok)
		}
	}
	proxied := New(Options{Proxy: func(*http.Request) (*url.URL, error) { return url.Parse("http://proxy:1") }})
	if proxied.NewTarget(u, "", nil) != nil {
		t.Error("NewTarget gave a target for a URL that goes through a proxy")
	}
}
