// Package h1 is a lean http.RoundTripper for plain http:// HTTP/1.1
// requests: each request is written by the calling goroutine with
// (*http.Request).Write into a buffer flushed once, and its response is
// read by the same goroutine with http.ReadResponse. net/http's Transport
// runs a reader and a writer goroutine per connection and hands every
// request and response between them through channels; with dozens of
// callers making small calls on a 2-core machine that hand-off cost the
// client more CPU than the server spent answering (docs/BENCHMARKS.md).
//
// What it adds to the standard library's pieces:
//
//   - a pool of idle connections per host: the most recently used is
//     reused first (LIFO), at most Options.MaxIdlePerHost are kept, and one
//     idle for longer than Options.IdleTimeout is closed;
//   - a response body that gives its connection back to the pool only
//     when it was read to EOF and then closed; a body closed early, a
//     read error, "Connection: close" on either side, or a request whose
//     context ended closes the connection instead;
//   - the request's context: when it is cancelled or its deadline passes
//     while the request is written, while the response is awaited, or
//     while the body is read, the call returns the context's error at
//     once. A connection whose deadline was disturbed by this is never
//     reused.
//
// # Post
//
// Post sends a POST whose body is in memory with no http.Request or
// http.Response: a Target holds the request line, Host and the fields every
// request carries, formatted once; each call adds its own fields, the
// Content-Length and the body, and leaves in one write. The answer's head
// is read by a strict parser of its own (HTTP/1.1, a final status, one
// Content-Length, no Transfer-Encoding), and its body whole into the
// caller's buffer. An answer the parser does not take, such as a chunked
// or close-delimited body, an informational answer first, HTTP/1.0, or a
// head larger than the read buffer, is read by http.ReadResponse from the
// same buffered bytes, so no answer fails for being unusual. It shares
// RoundTrip's pool, retry rules and context handling.
//
// # Retries
//
// A request is sent again, once and on a new connection, only when nothing
// of it can have been processed by the server, and only if its body can be
// replayed (no body, http.NoBody, or GetBody set):
//
//   - writing it to a reused idle connection failed (the server had
//     closed the connection; a server does not process a request it did
//     not receive whole), whatever the method; or
//   - it was written whole to a reused idle connection, and the server
//     closed or reset the connection before sending a single byte of an
//     answer, and the request is idempotent by net/http's rules: GET,
//     HEAD, OPTIONS or TRACE, or it carries an Idempotency-Key or
//     X-Idempotency-Key header.
//
// Everything else is returned as an error. A POST (a Schedule call) whose
// connection closed after it was sent is not sent again: the server may
// have stored it. Before a reused connection is written to, it is checked
// without blocking (on Linux) for a close the server already sent, so a
// connection the server closed while it sat idle is dropped rather than
// used.
//
// # Pipelining
//
// With Options.PipelineConns above 0, Post pipelines (RoundTrip does not):
// at most PipelineConns connections per host carry Posts, each with up to
// Options.PipelineDepth requests in flight. Each request stays its own
// request with its own answer; only the connections are shared.
//
//   - A Post goes on the connection with the fewest requests in flight; a
//     new one is dialed while fewer than PipelineConns are open and every
//     open one has a request in flight. When every connection is full the
//     Post waits for room (or for its context to end).
//   - Requests leave a connection in the order they were queued. The
//     caller that finds no write in progress writes; the requests queued
//     meanwhile leave together in its next write call, until none is left.
//     When other callers wait on the connection, the writer first yields
//     the processor once (runtime.Gosched), so that callers the reader
//     just answered queue their next requests into its first write.
//   - One goroutine per connection reads the answers, in order, and hands
//     each to its caller, the body appended to the caller's buffer. A
//     connection's end is seen when it happens, not only at the next use.
//   - A caller whose context ends returns the context's error at once. A
//     request already queued is still sent, and its answer is read and
//     dropped: the connection and the other callers' requests go on. (A
//     caller whose context ends while it is itself writing leaves the rest
//     of that write to a goroutine that finishes it.)
//   - A connection on which no caller waits (nothing in flight, or only
//     requests whose callers gave up) is closed after Options.IdleTimeout,
//     and by CloseIdleConnections.
//
// When a connection ends with requests on it unanswered (the server
// closed or reset it, a write or read failed, or an answer said
// "Connection: close", after which the server answers nothing more on it),
// each of them is settled by this rule:
//
//   - a request that never reached a write call is sent on another
//     connection (moved at most 3 times);
//   - a request marked Idempotent that was written is sent again, once, on a
//     connection dialed after the end;
//   - every other request fails with an error saying that it was sent and
//     may have been processed. A request that was written and is not marked
//     Idempotent is never sent again: the server may have stored it.
//
// The request whose answer was being read when the connection failed gets
// the read's error, as without pipelining.
//
// # What it leaves to the fallback
//
// Requests it does not handle go to Options.Fallback unchanged: https and
// any scheme but http, requests a proxy from the environment would carry,
// bodies of unknown length (ContentLength <= 0 with a body other than
// http.NoBody, such as connect-go's client streams) or larger than
// Options.MaxBodySize, explicit Transfer-Encoding or trailers, "Expect",
// "Upgrade" and CONNECT requests, gRPC requests (Content-Type
// application/grpc..., which need HTTP/2), and header fields net/http
// would refuse to send (so the fallback's error explains them).
//
// Unlike net/http it asks for no gzip and decompresses nothing itself; a
// caller that sets Accept-Encoding (connect-go does) handles the encoding,
// as with net/http. It writes the request's headers and body in one flush
// even when the body is not in memory, so a body that waits for the
// response before it can be read must not be given to it.
package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configure a Transport. The zero value of each field selects the
// default its comment names.
type Options struct {
	// Fallback takes every request this transport does not handle
	// (https, proxies, unknown body lengths, gRPC: see the package doc).
	// Default: http.DefaultTransport.
	Fallback http.RoundTripper
	// MaxIdlePerHost is how many idle connections are kept per host;
	// giving back one more closes the one idle the longest. Default 64.
	MaxIdlePerHost int
	// IdleTimeout closes a connection idle for longer. Default 90 s, as
	// net/http's DefaultTransport.
	IdleTimeout time.Duration
	// DialContext opens connections. Default: a net.Dialer with a 30 s
	// timeout and 30 s TCP keep-alive (Go sets TCP_NODELAY by default).
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// Proxy says which proxy a request would go through; a request with
	// a proxy goes to the fallback. Default: http.ProxyFromEnvironment.
	Proxy func(*http.Request) (*url.URL, error)
	// MaxBodySize is the largest request body sent by this transport;
	// larger ones go to the fallback, which writes and reads at the same
	// time (a server may answer before it has read a large body).
	// Default 1 MiB.
	MaxBodySize int64
	// WriteBufferSize is the per-connection write buffer: a request of
	// at most this many bytes, headers included, leaves in one write.
	// Default 16 KiB.
	WriteBufferSize int
	// ReadBufferSize is the per-connection read buffer. Default 4 KiB.
	ReadBufferSize int
	// PipelineConns, when above 0, pipelines Post (see the package doc):
	// at most this many connections per host carry Posts, each with up
	// to PipelineDepth requests in flight, answered in order. 0 (the
	// default) gives each Post a connection of its own. RoundTrip is not
	// affected either way.
	PipelineConns int
	// PipelineDepth is how many requests one pipelined connection
	// carries at once; a Post that finds every connection full waits.
	// Default 64.
	PipelineDepth int
}

// Transport is an http.RoundTripper for http:// HTTP/1.1 requests (see
// the package doc). Its methods may be called from any goroutine.
type Transport struct {
	fallback http.RoundTripper
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	proxy    func(*http.Request) (*url.URL, error)
	maxBody  int64
	wbuf     int
	rbuf     int
	pool     *pool
	// alive reports whether an idle connection may be written to; tests
	// replace it to act out a close that arrives after the check.
	alive func(*conn) bool
	// afterBody, when set by a test, runs in Post once the answer was
	// read, before the connection is released.
	afterBody func()

	// pipeConns and pipeDepth are the Options'; 0 pipeConns: off.
	pipeConns, pipeDepth int
	pipeMu               sync.Mutex
	pipeHosts            map[string]*pipeHost // guarded by pipeMu
	pipeCalls            sync.Pool            // of *pipeCall
}

// max1xx is how many informational (1xx) answers are skipped before the
// final response; more is an error, as in net/http.
const max1xx = 5

// New returns a Transport configured by o.
func New(o Options) *Transport {
	t := &Transport{
		fallback: o.Fallback,
		dial:     o.DialContext,
		proxy:    o.Proxy,
		maxBody:  o.MaxBodySize,
		wbuf:     o.WriteBufferSize,
		rbuf:     o.ReadBufferSize,
		alive:    (*conn).alive,
	}
	if t.fallback == nil {
		t.fallback = http.DefaultTransport
	}
	if t.dial == nil {
		t.dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	if t.proxy == nil {
		t.proxy = http.ProxyFromEnvironment
	}
	if t.maxBody <= 0 {
		t.maxBody = 1 << 20
	}
	if t.wbuf <= 0 {
		t.wbuf = 16 << 10
	}
	if t.rbuf <= 0 {
		t.rbuf = 4 << 10
	}
	maxIdle, idle := o.MaxIdlePerHost, o.IdleTimeout
	if maxIdle <= 0 {
		maxIdle = 64
	}
	if idle <= 0 {
		idle = 90 * time.Second
	}
	t.pool = newPool(maxIdle, idle)
	if o.PipelineConns > 0 {
		t.pipeConns, t.pipeDepth = o.PipelineConns, o.PipelineDepth
		if t.pipeDepth <= 0 {
			t.pipeDepth = defaultPipelineDepth
		}
		t.pipeHosts = map[string]*pipeHost{}
	}
	return t
}

// CloseIdleConnections closes the idle connections of this transport and
// of its fallback, pipelined ones included (those on which no caller
// waits). Connections in use are not affected.
func (t *Transport) CloseIdleConnections() {
	t.pool.closeAll()
	if t.pipeHosts != nil {
		t.closeIdlePipes()
	}
	if c, ok := t.fallback.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// handles reports whether RoundTrip sends req itself rather than through
// the fallback.
func (t *Transport) handles(req *http.Request) bool {
	u := req.URL
	if u == nil || u.Scheme != "http" || u.Host == "" || req.Method == http.MethodConnect {
		return false
	}
	if req.Body != nil && req.Body != http.NoBody && req.ContentLength <= 0 {
		return false // unknown length: net/http probes it and sends it chunked
	}
	if req.ContentLength > t.maxBody || len(req.TransferEncoding) > 0 || len(req.Trailer) > 0 {
		return false
	}
	h := req.Header
	if _, ok := h["Expect"]; ok {
		return false
	}
	if _, ok := h["Upgrade"]; ok {
		return false
	}
	if ct := h["Content-Type"]; len(ct) > 0 && strings.HasPrefix(ct[0], "application/grpc") && !strings.HasPrefix(ct[0], "application/grpc-web") {
		return false
	}
	if !validHeader(h) {
		return false
	}
	if p, err := t.proxy(req); p != nil || err != nil {
		return false
	}
	return true
}

// RoundTrip implements http.RoundTripper: it sends req and returns its
// response, whose body streams from the connection. The rule for sending
// a request again is in the package doc.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.handles(req) {
		return t.fallback.RoundTrip(req)
	}
	ctx := req.Context()
	resp, retry, err := t.roundTrip(ctx, req, false)
	if err != nil && retry {
		// Once, on a new connection: a failure there is not the stale
		// connection case, so it is returned.
		var r *http.Request
		if r, err = rewind(req); err != nil {
			return nil, err
		}
		resp, _, err = t.roundTrip(ctx, r, true)
	}
	if err != nil {
		return nil, err
	}
	resp.Request = req
	return resp, nil
}

// rewind returns a copy of req with a fresh body for another attempt.
func rewind(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	b, err := req.GetBody()
	if err != nil {
		return nil, fmt.Errorf("h1: getting the request body again for a retry: %w", err)
	}
	r := *req
	r.Body = b
	return &r, nil
}

// replayable reports whether req may be sent again after it was written
// whole (the second retry case of the package doc).
func replayable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	if _, ok := req.Header["Idempotency-Key"]; ok {
		return true
	}
	_, ok := req.Header["X-Idempotency-Key"]
	return ok
}

// rewindable reports whether req's body can be produced again.
func rewindable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// noFlush hides the *bufio.Writer type from (*http.Request).Write, which
// would otherwise flush the headers in a write of their own before any
// body it does not know to be in memory (connect-go's is not). It is
// still an io.ByteWriter, so Write adds no buffer of its own.
type noFlush struct{ *bufio.Writer }

// roundTrip makes one attempt, on a new connection if fresh. retry says
// whether a failed attempt may be made again (see the package doc).
func (t *Transport) roundTrip(ctx context.Context, req *http.Request, fresh bool) (resp *http.Response, retry bool, err error) {
	if err := ctx.Err(); err != nil {
		closeBody(req)
		return nil, false, err
	}
	addr := hostPort(req.URL)
	pc, reused, err := t.getConn(ctx, addr, fresh)
	if err != nil {
		closeBody(req)
		if cerr := ctx.Err(); cerr != nil {
			return nil, false, cerr
		}
		return nil, false, fmt.Errorf("h1: dialing %s: %w", addr, err)
	}
	// From here until the connection is pooled or closed, the context's
	// end sets a past deadline on it, which makes the blocked write or
	// read return at once; stop reports whether that can no longer
	// happen, and only then may the connection be reused.
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
	err = req.Write(noFlush{pc.bw})
	if err == nil {
		err = pc.bw.Flush()
	}
	if err != nil {
		// Only a failed write to the connection says the server did not
		// get the request; a body that failed to read is the caller's.
		retry = pc.cw.err != nil && reused && rewindable(req) && ctx.Err() == nil
		return nil, retry, fail(fmt.Errorf("h1: writing the request to %s: %w", addr, err))
	}

	if _, err := pc.br.Peek(1); err != nil {
		if pc.br.Buffered() == 0 && (err == io.EOF || errors.Is(err, syscall.ECONNRESET)) {
			retry = reused && replayable(req) && rewindable(req) && ctx.Err() == nil
			return nil, retry, fail(fmt.Errorf("h1: %s %s: the server closed the connection without answering; "+
				"the request was sent whole and may have been processed, so only idempotent requests are sent again: %w",
				req.Method, addr, err))
		}
		return nil, false, fail(fmt.Errorf("h1: reading the response from %s: %w", addr, err))
	}
	for n := 0; ; n++ {
		resp, err = http.ReadResponse(pc.br, req)
		if err != nil {
			return nil, false, fail(fmt.Errorf("h1: reading the response from %s: %w", addr, err))
		}
		if resp.StatusCode >= 200 || resp.StatusCode < 100 {
			break
		}
		if resp.StatusCode == http.StatusSwitchingProtocols || n == max1xx {
			return nil, false, fail(fmt.Errorf("h1: %s answered %q to a request that asked for no upgrade; want a final status (at most %d informational answers first)",
				addr, resp.Status, max1xx))
		}
	}
	keep := !req.Close && !resp.Close
	if resp.Body == http.NoBody {
		undisturbed := stop() // always called: it also unregisters the hook
		t.release(pc, keep && undisturbed)
		return resp, false, nil
	}
	resp.Body = &body{rc: resp.Body, pc: pc, t: t, ctx: ctx, stop: stop, keep: keep}
	return resp, false, nil
}

// closeBody closes req's body, as a RoundTripper must even on errors.
func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// hostPort is the address to dial for u: its host and port, port 80 when
// none is given.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host // host:port or [v6]:port
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// getConn returns an idle connection to addr that is still open (reused
// true), or dials a new one; always a new one if fresh.
func (t *Transport) getConn(ctx context.Context, addr string, fresh bool) (pc *conn, reused bool, err error) {
	for !fresh {
		pc := t.pool.get(addr)
		if pc == nil {
			break
		}
		if t.alive(pc) {
			return pc, true, nil
		}
		pc.nc.Close()
	}
	nc, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	return newConn(nc, addr, t.rbuf, t.wbuf), false, nil
}

// release gives pc back to the pool when reuse is true and nothing is
// left unread on it, and closes it otherwise.
func (t *Transport) release(pc *conn, reuse bool) {
	if reuse && pc.br.Buffered() == 0 {
		t.pool.put(pc)
		return
	}
	pc.nc.Close()
}
