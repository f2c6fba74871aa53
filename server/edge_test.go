package server

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

const rpcPath = "/hourglass.v1.HourglassService/"

// h1 is an HTTP/1.1 request written by hand: the request line, the given
// header lines as they are (no Host unless given), and body.
func h1(method, path string, headers []string, body string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\n", method, path)
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	return b.String()
}

// jsonCall is a Connect-JSON unary request with a Content-Length, plus
// extra header lines.
func jsonCall(method, body string, extra ...string) string {
	return h1("POST", rpcPath+method, append([]string{"Host: hourglass", "Content-Type: application/json",
		fmt.Sprintf("Content-Length: %d", len(body))}, extra...), body)
}

// rawConn is one client TCP connection that reads HTTP/1.1 responses.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, br: bufio.NewReader(c)}
}

func (r *rawConn) write(s string) {
	r.t.Helper()
	if _, err := io.WriteString(r.c, s); err != nil {
		r.t.Fatal(err)
	}
}

// read reads one response, with its body.
func (r *rawConn) read() (*http.Response, string) {
	r.t.Helper()
	r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(r.br, nil)
	if err != nil {
		r.t.Fatalf("reading a response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatalf("reading a response body: %v", err)
	}
	return resp, string(body)
}

// closed waits for the server to close the connection, and fails if it
// sends anything first.
func (r *rawConn) closed() {
	r.t.Helper()
	r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := r.br.ReadByte()
	var ne net.Error
	switch {
	case err == nil:
		rest, _ := r.br.Peek(r.br.Buffered())
		r.t.Fatalf("got %q, want the connection closed", append([]byte{b}, rest...))
	case errors.As(err, &ne) && ne.Timeout():
		r.t.Fatal("the connection is still open")
	case !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET):
		r.t.Fatalf("reading: %v, want the connection closed", err)
	}
}

// gzipped is b compressed.
func gzipped(t *testing.T, b []byte) string {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// TestHTTP1HostileInput: requests that break or stretch HTTP/1.1, sent
// by hand on one connection each, are answered as Go's net/http answers
// them (and Connect's checks then apply), on the port that also serves
// gRPC.
func TestHTTP1HostileInput(t *testing.T) {
	const maxReq = 128 << 10
	s := serveTest(t, Options{MaxBody: 1024, MaxRequestBytes: maxReq}, nil)
	bomb, err := proto.Marshal(&hourglassv1.ScheduleRequest{Topic: "bomb", Body: make([]byte, 4<<20)})
	if err != nil {
		t.Fatal(err)
	}
	bombGz := gzipped(t, bomb)
	if len(bombGz) > 16<<10 {
		t.Fatalf("the bomb is %d bytes on the wire", len(bombGz))
	}
	timeGz := gzipped(t, []byte("{}"))
	for _, tc := range []struct {
		name   string
		req    string
		status []int  // of the responses, in order
		body   string // in the last response's body
		closed bool   // the server closes the connection after them
	}{
		{name: "plain", req: jsonCall("Time", "{}"), status: []int{200}, body: `"now"`},
		{name: "pipelined", req: jsonCall("Time", "{}") + jsonCall("Time", "{}"), status: []int{200, 200}},
		// Transfer-Encoding overrides Content-Length (RFC 9112 6.3): the
		// body ends with its last chunk, and the next request is read
		// after it, not 100 bytes on.
		{name: "content_length_and_chunked",
			req: h1("POST", rpcPath+"Time", []string{"Host: hourglass", "Content-Type: application/json", "Content-Length: 100", "Transfer-Encoding: chunked"},
				"2\r\n{}\r\n0\r\n\r\n") + jsonCall("Time", "{}"),
			status: []int{200, 200}},
		{name: "two_content_lengths",
			req:    h1("POST", rpcPath+"Time", []string{"Host: hourglass", "Content-Type: application/json", "Content-Length: 2", "Content-Length: 3"}, "{} "),
			status: []int{400}, closed: true},
		// net/http joins an obs-fold line to the header it continues.
		{name: "obs_fold", req: jsonCall("Time", "{}", "X-Note: a", " b"), status: []int{200}},
		{name: "headers_too_large", req: jsonCall("Time", "{}", "X-Big: "+strings.Repeat("a", 70<<10)), status: []int{431}, closed: true},
		{name: "unsupported_transfer_encoding",
			req:    h1("POST", rpcPath+"Time", []string{"Host: hourglass", "Content-Type: application/json", "Transfer-Encoding: gzip, chunked"}, "2\r\n{}\r\n0\r\n\r\n"),
			status: []int{501}, closed: true},
		{name: "space_before_colon", req: h1("POST", rpcPath+"Time", []string{"Host: hourglass", "Content-Length : 2"}, "{}"), status: []int{400}, closed: true},
		{name: "no_host", req: h1("POST", rpcPath+"Time", []string{"Content-Type: application/json", "Content-Length: 2"}, "{}"), status: []int{400}, closed: true},
		{name: "bad_request_line", req: "POST  " + rpcPath + "Time HTTP/1.1\r\nHost: hourglass\r\n\r\n", status: []int{400}, closed: true},
		{name: "json_unknown_field", req: jsonCall("Schedule", `{"topic":"t","delayMS":5}`), status: []int{400}, body: "delayMS"},
		{name: "json_unknown_field_code", req: jsonCall("Schedule", `{"topic":"t","delayMS":5}`), status: []int{400}, body: `"code":"invalid_argument"`},
		{name: "gzip", req: jsonCall("Time", timeGz, "Content-Encoding: gzip"), status: []int{200}, body: `"now"`},
		{name: "gzip_bomb",
			req: h1("POST", rpcPath+"Schedule", []string{"Host: hourglass", "Content-Type: application/proto", "Content-Encoding: gzip",
				fmt.Sprintf("Content-Length: %d", len(bombGz))}, bombGz),
			status: []int{429}, body: `"code":"resource_exhausted"`},
		{name: "too_large_plain",
			req:    jsonCall("Schedule", `{"topic":"t","body":"`+strings.Repeat("A", maxReq)+`"}`),
			status: []int{429}, body: `"code":"resource_exhausted"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, s.addr)
			c.write(tc.req)
			var body string
			for i, want := range tc.status {
				var resp *http.Response
				resp, body = c.read()
				if resp.StatusCode != want {
					t.Fatalf("response %d: %s %q, want %d", i, resp.Status, body, want)
				}
			}
			if !strings.Contains(body, tc.body) {
				t.Errorf("body %q lacks %q", body, tc.body)
			}
			if tc.closed {
				c.closed()
				return
			}
			// The connection still serves.
			c.write(jsonCall("Time", "{}"))
			if resp, body := c.read(); resp.StatusCode != 200 {
				t.Errorf("the next request: %s %q", resp.Status, body)
			}
		})
	}
	if n := s.eng.Stats().Scheduled; n != 0 {
		t.Errorf("hostile requests scheduled %d messages", n)
	}
}

// TestHTTP1Timeouts: a connection that is slow to send a request's head
// is closed after HeaderTimeout, and one with no request after
// IdleTimeout, as net/http closes them (with no answer, or the 400 it
// gives a request line cut short); neither before its time.
func TestHTTP1Timeouts(t *testing.T) {
	const header, idle = 200 * time.Millisecond, 300 * time.Millisecond
	s := serveTest(t, Options{HeaderTimeout: header, IdleTimeout: idle}, nil)
	for _, tc := range []struct {
		name    string
		send    string        // then nothing more
		answers []int         // the responses before the connection is closed
		timeout time.Duration // the least time before it is closed
	}{
		{"nothing", "", nil, header},
		// The prefix of both "POST" and the HTTP/2 preface: cmux waits for
		// more, then net/http, which answers a request line cut short.
		{"first_byte", "P", []int{400}, header},
		{"request_line", "POST " + rpcPath + "Time HTTP/1.1\r\n", nil, header},
		{"half_the_headers", "POST " + rpcPath + "Time HTTP/1.1\r\nHost: hourglass\r\nContent-Type: application/json\r\n", nil, header},
		{"idle_after_a_call", jsonCall("Time", "{}"), []int{200}, idle},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each waits for a timeout
			start := time.Now()
			c := dialRaw(t, s.addr)
			c.write(tc.send)
			for _, want := range tc.answers {
				if resp, body := c.read(); resp.StatusCode != want {
					t.Fatalf("%s %q, want %d", resp.Status, body, want)
				}
			}
			c.closed()
			if d := time.Since(start); d < tc.timeout {
				t.Errorf("closed after %v, before the timeout %v", d, tc.timeout)
			}
		})
	}
}

// TestHTTP1LongPollOutlivesTimeouts: a long poll waits as long as it
// asked for, beyond the body, header and idle timeouts of its connection
// (the body's read deadline is lifted once the body is read).
func TestHTTP1LongPollOutlivesTimeouts(t *testing.T) {
	const timeout, wait = 100 * time.Millisecond, 400 * time.Millisecond
	s := serveTest(t, Options{HeaderTimeout: timeout, IdleTimeout: timeout, BodyTimeout: timeout}, nil)
	start := time.Now()
	res, err := s.connectClient(t).Receive(testCtx(t), connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: "idle", WaitMs: wait.Milliseconds()}))
	if err != nil {
		t.Fatalf("long poll of %v with %v timeouts: %v", wait, timeout, err)
	}
	if d := time.Since(start); len(res.Msg.Messages) != 0 || d < wait {
		t.Errorf("long poll answered %v after %v, want nothing after %v", res.Msg.Messages, d, wait)
	}
}

// TestHTTP1SlowBody: a connection whose request body stops coming is
// closed after BodyTimeout (not kept waiting for the rest), and the
// request stores nothing.
func TestHTTP1SlowBody(t *testing.T) {
	s := serveTest(t, Options{BodyTimeout: 200 * time.Millisecond}, nil)
	start := time.Now()
	c := dialRaw(t, s.addr)
	full := jsonCall("Schedule", `{"topic":"slow"}`)
	c.write(full[:len(full)-4])
	c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c.br)
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the connection waits for the rest of the body beyond BodyTimeout")
	}
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatal(err)
	}
	if bytes.HasPrefix(got, []byte("HTTP/1.1 200")) {
		t.Fatalf("a request cut short was answered %q", got)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("cut after %v, before BodyTimeout", d)
	}
	if n := s.eng.Stats().Scheduled; n != 0 {
		t.Errorf("scheduled %d", n)
	}
}

// TestHTTP1PipelinedWrongToken: a request with a wrong token right behind
// a good one on one connection, its last bytes sent after the first
// answer, is refused (401, unauthenticated) and stores nothing; the same
// request with the token then is served.
func TestHTTP1PipelinedWrongToken(t *testing.T) {
	s := serveTest(t, Options{AuthToken: "s3cret"}, nil)
	c := dialRaw(t, s.addr)
	bad := jsonCall("Schedule", `{"topic":"pipelined","body":"aGVsbG8="}`, "Authorization: Bearer wrong")
	c.write(jsonCall("Time", "{}", "Authorization: Bearer s3cret") + bad[:len(bad)-5])
	if resp, body := c.read(); resp.StatusCode != 200 || !strings.Contains(body, `"now"`) {
		t.Fatalf("the good call: %s %q", resp.Status, body)
	}
	c.write(bad[len(bad)-5:])
	resp, body := c.read()
	if resp.StatusCode != 401 || !strings.Contains(body, `"code":"unauthenticated"`) || !strings.Contains(body, "wrong bearer token") {
		t.Errorf("the wrong token: %s %q, want 401 unauthenticated", resp.Status, body)
	}
	if n := s.eng.Stats().Scheduled; n != 0 {
		t.Errorf("the wrong token scheduled %d messages", n)
	}
	if resp.Close {
		return // net/http may close after refusing a body it did not read
	}
	c.write(jsonCall("Schedule", `{"topic":"pipelined"}`, "Authorization: Bearer s3cret"))
	if resp, body := c.read(); resp.StatusCode != 200 {
		t.Fatalf("the right token: %s %q", resp.Status, body)
	}
	if n := s.eng.Stats().Scheduled; n != 1 {
		t.Errorf("scheduled %d messages, want 1", n)
	}
}

// TestCompressedRequests: every protocol accepts gzip-compressed requests,
// and refuses with ResourceExhausted one that inflates beyond
// MaxRequestBytes, storing nothing of it.
func TestCompressedRequests(t *testing.T) {
	const maxReq = 128 << 10
	s := serveTest(t, Options{MaxBody: 1024, MaxRequestBytes: maxReq}, nil)
	grpcGzip := grpcUnary(s.grpcClient(t, grpc.WithDefaultCallOptions(grpc.UseCompressor("gzip"))))
	for _, p := range []struct {
		name string
		api  unaryAPI
	}{
		{"grpc", grpcGzip},
		{"connect", connectUnary(s.connectClient(t, connect.WithSendGzip()))},
		{"grpc-web", connectUnary(s.connectClient(t, connect.WithGRPCWeb(), connect.WithSendGzip()))},
	} {
		t.Run(p.name, func(t *testing.T) {
			ctx := testCtx(t)
			if _, err := p.api.schedule(ctx, &hourglassv1.ScheduleRequest{Topic: "gz", Body: make([]byte, 1024)}); err != nil {
				t.Fatalf("a compressed request: %v", err)
			}
			_, err := p.api.schedule(ctx, &hourglassv1.ScheduleRequest{Topic: "gz", Body: make([]byte, 4<<20)})
			wantStatus(t, "a request inflating to 4 MiB", err, codes.ResourceExhausted)
		})
	}
	if n := s.eng.Stats().Scheduled; n != 3 {
		t.Errorf("scheduled %d messages, want the 3 small ones", n)
	}
}

// TestCORS: with CORSOrigins, a browser's preflight from an allowed
// origin is answered with the headers Connect and gRPC-Web need, and one
// from another origin with none; without CORSOrigins no CORS header is
// sent.
func TestCORS(t *testing.T) {
	const origin = "https://console.example.com"
	withCORS := serveTest(t, Options{CORSOrigins: []string{origin}, AuthToken: "s3cret"}, nil)
	without := serveTest(t, Options{}, nil)
	preflight := func(origin string) *http.Request {
		r, _ := http.NewRequest("OPTIONS", rpcPath+"Schedule", nil)
		r.Header.Set("Origin", origin)
		r.Header.Set("Access-Control-Request-Method", "POST")
		r.Header.Set("Access-Control-Request-Headers", "authorization,connect-protocol-version,connect-timeout-ms,content-type")
		return r
	}
	call := func(origin string) *http.Request {
		r, _ := http.NewRequest("POST", rpcPath+"Time", strings.NewReader("{}"))
		r.Header.Set("Origin", origin)
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer s3cret")
		return r
	}
	for _, tc := range []struct {
		name string
		s    *served
		req  *http.Request
		want map[string]string // header → a value it must hold; "" for absent
	}{
		{"preflight_allowed", withCORS, preflight(origin), map[string]string{
			"Access-Control-Allow-Origin":  origin,
			"Access-Control-Allow-Methods": "POST",
			"Access-Control-Allow-Headers": "connect-protocol-version",
			"Access-Control-Max-Age":       "7200",
		}},
		{"preflight_allowed_token", withCORS, preflight(origin), map[string]string{"Access-Control-Allow-Headers": "authorization"}},
		{"preflight_other_origin", withCORS, preflight("https://evil.example"), map[string]string{
			"Access-Control-Allow-Origin": "", "Access-Control-Allow-Methods": "", "Access-Control-Allow-Headers": "",
		}},
		{"call_allowed", withCORS, call(origin), map[string]string{
			"Access-Control-Allow-Origin":   origin,
			"Access-Control-Expose-Headers": "Grpc-Status",
		}},
		{"call_other_origin", withCORS, call("https://evil.example"), map[string]string{"Access-Control-Allow-Origin": ""}},
		{"no_cors_preflight", without, preflight(origin), map[string]string{
			"Access-Control-Allow-Origin": "", "Access-Control-Allow-Methods": "", "Access-Control-Allow-Headers": "",
		}},
		{"no_cors_call", without, call(origin), map[string]string{"Access-Control-Allow-Origin": "", "Access-Control-Expose-Headers": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			tc.req.URL.Scheme, tc.req.URL.Host = "http", tc.s.addr
			resp, err := (&http.Client{Transport: tr}).Do(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			for h, want := range tc.want {
				got := strings.Join(resp.Header.Values(h), ", ")
				if want == "" && got != "" || !strings.Contains(strings.ToLower(got), strings.ToLower(want)) {
					t.Errorf("%s: %q, want %q (status %s)", h, got, want, resp.Status)
				}
			}
			if tc.req.Method == "POST" && resp.StatusCode != 200 {
				t.Errorf("the call: %s", resp.Status)
			}
		})
	}
}
