package client

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
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

// NewHTTPClient returns the HTTP/1.1 client New uses when not given one:
// up to maxIdle idle connections kept per host (64 when 0 or less), and
// each request with a body of 3 KiB or less sent in one write.
func NewHTTPClient(maxIdle int) *http.Client {
	if maxIdle <= 0 {
		maxIdle = 64
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = maxIdle
	return &http.Client{Transport: oneWrite{next: tr}}
}
