package h1

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
)

// ender ends a request's context the way a test case says: a cancel, or
// a deadline that passes at that moment.
type ender struct {
	name string
	make func() (context.Context, func())
	want error
}

var enders = []ender{
	{"cancel", func() (context.Context, func()) { return context.WithCancel(context.Background()) }, context.Canceled},
	{"deadline", func() (context.Context, func()) {
		c := newManualCtx()
		return c, func() { c.end(context.DeadlineExceeded) }
	}, context.DeadlineExceeded},
}

// TestContextWhileAwaitingHeaders: the context ends while the server
// holds the response; RoundTrip returns the context's error at once and
// the connection is not pooled.
func TestContextWhileAwaitingHeaders(t *testing.T) {
	for _, e := range enders {
		t.Run(e.name, func(t *testing.T) {
			arrived, release := make(chan struct{}), make(chan struct{})
			srv, _ := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				arrived <- struct{}{}
				<-release
			}))
			defer close(release)
			tr, _ := newTransport(t, Options{})
			ctx, end := e.make()
			req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL, strings.NewReader("x"))
			done := send(tr, req)
			within(t, "the request to arrive", arrived)
			end()
			r := within(t, "RoundTrip to return after the context ended", done)
			if r.err != e.want {
				t.Fatalf("RoundTrip: %q, %v; want %v", r.body, r.err, e.want)
			}
			if n := tr.pool.idle(strings.TrimPrefix(srv.URL, "http://")); n != 0 {
				t.Errorf("%d idle connections, want 0", n)
			}
		})
	}
}

// TestContextWhileReadingBody: the context ends while the body is read;
// Read returns the context's error.
func TestContextWhileReadingBody(t *testing.T) {
	for _, e := range enders {
		t.Run(e.name, func(t *testing.T) {
			release := make(chan struct{})
			srv, _ := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "first")
				w.(http.Flusher).Flush()
				<-release
			}))
			defer close(release)
			tr, _ := newTransport(t, Options{})
			ctx, end := e.make()
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			buf := make([]byte, 5)
			if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first" {
				t.Fatalf("first part: %q, %v", buf, err)
			}
			readErr := make(chan error, 1)
			go func() {
				_, err := resp.Body.Read(buf) // blocks: the server holds the rest
				readErr <- err
			}()
			end()
			if err := within(t, "Read to return after the context ended", readErr); err != e.want {
				t.Fatalf("Read: %v, want %v", err, e.want)
			}
		})
	}
}

// TestContextWhileWriting: the context ends while a request body larger
// than the socket buffers is written to a server that reads nothing.
func TestContextWhileWriting(t *testing.T) {
	for _, e := range enders {
		t.Run(e.name, func(t *testing.T) {
			s := newRawServer(t)
			tr, _ := newTransport(t, Options{MaxBodySize: 64 << 20})
			ctx, end := e.make()
			const size = 32 << 20 // more than loopback's socket buffers hold
			req, _ := http.NewRequestWithContext(ctx, "POST", s.url, &opaque{bytes.NewReader(make([]byte, size))})
			req.ContentLength = size
			done := send(tr, req)
			within(t, "the connection", s.conns) // accepted, never read
			end()
			if r := within(t, "RoundTrip to return after the context ended", done); r.err != e.want {
				t.Fatalf("RoundTrip: %v, want %v", r.err, e.want)
			}
		})
	}
}

// TestContextEndedAfterEOF: a context that ends after the body was read
// to EOF but before Close may have disturbed the connection: it is closed,
// not pooled.
func TestContextEndedAfterEOF(t *testing.T) {
	srv, conns := newServer(t, http.HandlerFunc(echo))
	tr, _ := newTransport(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL, strings.NewReader("abc"))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "abc" {
		t.Fatalf("body %q, %v", b, err)
	}
	cancel()
	resp.Body.Close()
	if n := tr.pool.idle(strings.TrimPrefix(srv.URL, "http://")); n != 0 {
		t.Fatalf("%d idle connections after a cancel before Close, want 0", n)
	}
	readClose(t, get(t, tr, srv.URL))
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2 (the disturbed one must not be reused)", n)
	}
}

// TestBodyCloseAbortsRead: Close from another goroutine ends a Read
// blocked on a streaming response.
func TestBodyCloseAbortsRead(t *testing.T) {
	release := make(chan struct{})
	srv, _ := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-release
	}))
	defer close(release)
	tr, _ := newTransport(t, Options{})
	req, _ := http.NewRequest("GET", srv.URL, nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	readErr := make(chan error, 1)
	go func() {
		_, err := resp.Body.Read(make([]byte, 10))
		readErr <- err
	}()
	resp.Body.Close()
	if err := within(t, "Read to return after Close", readErr); err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("Read after a concurrent Close: %v, want an error", err)
	}
}
