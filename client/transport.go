package client

import (
	"bytes"
	"fmt"
	"io"
	"net/http"

	"github.com/hourglassmq/hourglass/internal/h1"
)

// oneWriteMax is the largest request body oneWrite copies: with the
// headers it fits net/http's 4 KiB write buffer, so the request leaves in
// one write. A larger body takes several writes anyway, and copying it
// would cost more than the write it could save.
const oneWriteMax = 3 << 10

// oneWrite is an http.RoundTripper that makes a small request leave in
// one write: net/http flushes a request's headers in a write of their own
// unless the body is a reader it knows is in memory (a *bytes.Reader),
// and connect-go hands it another kind. On loopback each write is a
// system call that also runs the receiver's TCP stack, which made the
// second write of a Schedule call about a tenth of its client-side CPU
// (docs/BENCHMARKS.md). It copies the body (at most oneWriteMax bytes)
// into a *bytes.Reader on a shallow copy of the request.
type oneWrite struct{ next http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (t oneWrite) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength <= 0 || req.ContentLength > oneWriteMax {
		return t.next.RoundTrip(req)
	}
	buf := make([]byte, req.ContentLength)
	_, err := io.ReadFull(req.Body, buf)
	req.Body.Close() // a RoundTripper closes the body it was given
	if err != nil {
		return nil, fmt.Errorf("client: reading the request body (%d bytes announced): %w", req.ContentLength, err)
	}
	r := *req
	r.Body = io.NopCloser(bytes.NewReader(buf))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	return t.next.RoundTrip(&r)
}

// CloseIdleConnections closes the idle connections of the transport
// below, so that http.Client.CloseIdleConnections reaches them.
func (t oneWrite) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// NewHTTPClient returns the HTTP/1.1 client New uses when not given one.
// Plain http:// calls go through a lean transport (internal/h1): the
// calling goroutine writes each request in one write and reads its
// response itself, with no per-connection goroutines in between, which
// on a busy 2-core machine left the server more CPU (docs/BENCHMARKS.md).
// Up to maxIdle idle connections are kept per host (64 when 0 or less).
// A call whose connection closes after the request was sent is not sent
// again unless it is idempotent: a Schedule may have been stored.
//
// What the lean transport does not handle (https, a proxy from the
// environment, request bodies of unknown length such as client streams,
// gRPC) goes to net/http's transport, where a request body of 3 KiB or
// less is also sent in one write.
func NewHTTPClient(maxIdle int) *http.Client { return NewPipelinedHTTPClient(maxIdle, 0) }

// NewPipelinedHTTPClient is NewHTTPClient with the Schedule and
// ScheduleBatch calls of the Clients using it pipelined over at most
// conns connections per host, as WithPipelining describes; conns <= 0
// gives NewHTTPClient(maxIdle). It is for several Clients sharing one
// HTTP client (WithHTTPClient) and its connections; its
// CloseIdleConnections closes the pipelined connections no call waits on.
func NewPipelinedHTTPClient(maxIdle, conns int) *http.Client {
	if maxIdle <= 0 {
		maxIdle = 64
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = maxIdle
	return &http.Client{Transport: h1.New(h1.Options{Fallback: oneWrite{next: tr}, MaxIdlePerHost: maxIdle, PipelineConns: max(conns, 0)})}
}
