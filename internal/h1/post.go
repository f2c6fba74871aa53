package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
)

// ErrUseRoundTrip is what Post returns, before sending anything, for a
// request that RoundTrip would give to the fallback (a body larger than
// Options.MaxBodySize): send it through RoundTrip instead.
var ErrUseRoundTrip = errors.New("h1: Post does not send this request; send it through RoundTrip")

// Target is where Post sends: a connection address and the start of the
// request head, formatted once. It may be used from any goroutine.
type Target struct {
	addr string
	head []byte    // request line, Host, the fixed fields
	pipe *pipeHost // addr's pipelined connections; nil when not pipelining
}

// NewTarget prepares POSTs to u carrying the fields of header (canonical
// names; one line per value) on every request. Host is host, or u's host
// when host is empty. It returns nil for what RoundTrip would not send
// itself (not http://, a proxy from the environment, a field net/http
// would refuse or treat apart, a gRPC content type), and for hosts that
// would need rewriting (non-ASCII, IPv6 zones): such requests go through
// RoundTrip.
func (t *Transport) NewTarget(u *url.URL, host string, header http.Header) *Target {
	req := &http.Request{Method: http.MethodPost, URL: u, Header: header, Host: host, Body: http.NoBody}
	if !t.handles(req) || u.Opaque != "" || u.User != nil {
		return nil
	}
	if host == "" {
		host = u.Host
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; c <= ' ' || c >= 0x7f || c == '%' || c == '/' {
			return nil
		}
	}
	b := append([]byte(nil), "POST "...)
	b = append(b, u.RequestURI()...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\n"...)
	for k, vs := range header {
		for _, v := range vs {
			var ok bool
			if b, ok = AppendField(b, k, v); !ok {
				return nil
			}
		}
	}
	tg := &Target{addr: hostPort(u), head: b}
	if t.pipeHosts != nil {
		tg.pipe = t.pipeHost(tg.addr)
	}
	return tg
}

// Unpipelined returns a copy of tg whose Posts are never pipelined: each
// has a pooled connection to itself, as without Options.PipelineConns.
// It is for calls that may wait long for their answer (a long poll),
// which would hold up the calls queued behind them on a shared
// connection.
func (tg *Target) Unpipelined() *Target {
	c := *tg
	c.pipe = nil
	return &c
}

// AppendField appends the header line "name: value\r\n" to dst for a
// PostRequest's Header. It returns false, and dst unchanged, for a field
// that net/http would refuse to send (a name that is not a token, control
// bytes in the value) or would write in its own way (Host, User-Agent
// excepted: Content-Length, Transfer-Encoding, Trailer, Connection,
// Expect, Upgrade): send that request through RoundTrip instead.
func AppendField(dst []byte, name, value string) ([]byte, bool) {
	if !validName(name) || !validValue(value) {
		return dst, false
	}
	for _, k := range ownFields {
		if asciiEqualFold([]byte(name), k) {
			return dst, false
		}
	}
	dst = append(dst, name...)
	dst = append(dst, ": "...)
	dst = append(dst, value...)
	return append(dst, "\r\n"...), true
}

// ownFields are the fields AppendField refuses: net/http writes them in
// its own way, or RoundTrip gives their requests to the fallback.
var ownFields = []string{"Host", "Content-Length", "Transfer-Encoding", "Trailer", "Connection", "Expect", "Upgrade"}

// PostRequest is one request for Post.
type PostRequest struct {
	Target *Target
	// Header holds more fields, each a line AppendField made.
	Header []byte
	Body   []byte
	// Idempotent says the request carries an Idempotency-Key (or
	// X-Idempotency-Key) field: like RoundTrip, Post then sends it again
	// when the server closed a reused connection without answering.
	Idempotent bool
}

// Answer is the response to a Post.
type Answer struct {
	StatusCode int
	Status     string      // as http.Response.Status: "200 OK"
	Header     http.Header // as http.Response.Header
	// Body is the whole body, appended to Post's dst; when BodyErr is
	// set, what arrived of it before the error.
	Body []byte
	// BodyErr is why the body could not be read whole: the context's
	// error if it ended, else what reading the connection returned (a
	// body cut short gives io.ErrUnexpectedEOF).
	BodyErr error
}

// Post sends a POST with r's head and body, reads the answer's body whole
// into dst and returns it: what RoundTrip and reading the response body
// would do, with no http.Request or http.Response. The request leaves in
// one write when it fits Options.WriteBufferSize. Answers its own parser
// does not take (see parseHead: chunked, informational answers first, no
// Content-Length, HTTP/1.0, folded or oversized heads) are read by
// http.ReadResponse from the same buffered bytes. The connection pool,
// the retry rules and the context's handling are RoundTrip's (package
// doc); errors are worded as RoundTrip's, and an error is returned only
// when no answer's head was read. With Options.PipelineConns, the
// connections, retries and context follow the package doc's Pipelining
// instead.
func (t *Transport) Post(ctx context.Context, r PostRequest, dst []byte) (Answer, error) {
	if int64(len(r.Body)) > t.maxBody {
		return Answer{}, ErrUseRoundTrip
	}
	if r.Target.pipe != nil {
		return t.postPiped(ctx, r, dst)
	}
	a, retry, err := t.post(ctx, r, dst, false)
	if err != nil && retry {
		// Once, on a new connection, as RoundTrip.
		a, _, err = t.post(ctx, r, dst, true)
	}
	return a, err
}

// post makes one attempt, on a new connection if fresh. retry says
// whether a failed attempt may be made again.
func (t *Transport) post(ctx context.Context, r PostRequest, dst []byte, fresh bool) (a Answer, retry bool, err error) {
	if err := ctx.Err(); err != nil {
		return a, false, err
	}
	addr := r.Target.addr
	pc, reused, err := t.getConn(ctx, addr, fresh)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return a, false, cerr
		}
		return a, false, fmt.Errorf("h1: dialing %s: %w", addr, err)
	}
	// As in roundTrip: the context's end disturbs the connection, and
	// only a connection stop says was not disturbed is reused.
	stop := context.AfterFunc(ctx, pc.disturb)
	fail := func(err error) error {
		pc.nc.Close()
		stop()
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		return err
	}

	pc.cw.err = nil
	bw := pc.bw
	bw.Write(r.Target.head)
	bw.Write(r.Header)
	bw.WriteString("Content-Length: ")
	var num [20]byte
	bw.Write(strconv.AppendInt(num[:0], int64(len(r.Body)), 10))
	bw.WriteString("\r\n\r\n")
	bw.Write(r.Body)
	if err := bw.Flush(); err != nil {
		// Only the connection can fail a write of bytes in memory.
		retry = pc.cw.err != nil && reused && ctx.Err() == nil
		return a, retry, fail(fmt.Errorf("h1: writing the request to %s: %w", addr, err))
	}

	if _, err := pc.br.Peek(1); err != nil {
		if pc.br.Buffered() == 0 && (err == io.EOF || errors.Is(err, syscall.ECONNRESET)) {
			retry = reused && r.Idempotent && ctx.Err() == nil
			return a, retry, fail(fmt.Errorf("h1: %s %s: the server closed the connection without answering; "+
				"the request was sent whole and may have been processed, so only idempotent requests are sent again: %w",
				http.MethodPost, addr, err))
		}
		return a, false, fail(fmt.Errorf("h1: reading the response from %s: %w", addr, err))
	}
	var h head
	if readHead(pc.br, &h) {
		dst, a.BodyErr = readN(pc.br, dst, h.length)
	} else if a.BodyErr, err = readResponse(pc.br, addr, &h, &dst); err != nil {
		return a, false, fail(err)
	}
	a.StatusCode, a.Status, a.Header, a.Body = h.status, h.statusText, h.header, dst
	if t.afterBody != nil {
		t.afterBody()
	}
	if a.BodyErr != nil {
		pc.nc.Close()
		stop()
		if cerr := ctx.Err(); cerr != nil {
			a.BodyErr = cerr
		}
		return a, false, nil
	}
	undisturbed := stop() // always called: it also unregisters the hook
	t.release(pc, !h.close && undisturbed)
	return a, false, nil
}

// readHead parses the answer's head from br's buffer with parseHead,
// reading more as long as the head may still be one parseHead takes and
// fits the buffer, and consumes it. false means it consumed nothing and
// the answer is left to http.ReadResponse (which also meets any read
// error again, and words it).
func readHead(br *bufio.Reader, h *head) bool {
	for {
		b, _ := br.Peek(br.Buffered())
		n, more := parseHead(b, h)
		if n > 0 {
			br.Discard(n)
			return true
		}
		if !more || len(b) >= br.Size() {
			return false
		}
		if _, err := br.Peek(len(b) + 1); err != nil {
			return false
		}
	}
}

// postRequest is the request http.ReadResponse is told the answer is for.
var postRequest = &http.Request{Method: http.MethodPost}

// readResponse reads an answer parseHead did not take with
// http.ReadResponse, skipping informational answers as roundTrip does,
// and its body whole onto *dst. It returns the error of reading the
// body, and err for the head.
func readResponse(br *bufio.Reader, addr string, h *head, dst *[]byte) (bodyErr, err error) {
	var resp *http.Response
	for n := 0; ; n++ {
		var err error
		resp, err = http.ReadResponse(br, postRequest)
		if err != nil {
			return nil, fmt.Errorf("h1: reading the response from %s: %w", addr, err)
		}
		if resp.StatusCode >= 200 || resp.StatusCode < 100 {
			break
		}
		if resp.StatusCode == http.StatusSwitchingProtocols || n == max1xx {
			return nil, fmt.Errorf("h1: %s answered %q to a request that asked for no upgrade; want a final status (at most %d informational answers first)",
				addr, resp.Status, max1xx)
		}
	}
	*h = head{status: resp.StatusCode, statusText: resp.Status, header: resp.Header, length: -1, close: resp.Close}
	b := *dst
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := resp.Body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			bodyErr = err
			break
		}
	}
	resp.Body.Close()
	*dst = b
	return bodyErr, nil
}

// maxPrealloc bounds how much of a body's announced length is allocated
// before its bytes arrive.
const maxPrealloc = 64 << 10

// readN appends the next n bytes of br to dst. A stream that ends first
// gives io.ErrUnexpectedEOF, as a response body would.
func readN(br *bufio.Reader, dst []byte, n int64) ([]byte, error) {
	for n > 0 {
		if len(dst) == cap(dst) {
			dst = append(dst, make([]byte, min(n, maxPrealloc))...)[:len(dst)]
		}
		m := min(int64(cap(dst)-len(dst)), n)
		k, err := br.Read(dst[len(dst) : len(dst)+int(m)])
		dst = dst[:len(dst)+k]
		n -= int64(k)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return dst, err
		}
	}
	return dst, nil
}
