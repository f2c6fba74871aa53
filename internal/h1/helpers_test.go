package h1

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// dialer dials real loopback connections and remembers them.
type dialer struct {
	mu    sync.Mutex
	conns []net.Conn // guarded by mu
	wrap  func(net.Conn) net.Conn
}

func (d *dialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if d.wrap != nil {
		c = d.wrap(c)
	}
	d.mu.Lock()
	d.conns = append(d.conns, c)
	d.mu.Unlock()
	return c, nil
}

// dials is how many connections were dialed.
func (d *dialer) dials() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.conns)
}

func (d *dialer) conn(i int) net.Conn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.conns[i]
}

// newTransport returns a Transport dialing through a fresh dialer, closed
// when the test ends. A test that must not reach the fallback gets one
// that fails it.
func newTransport(t *testing.T, o Options) (*Transport, *dialer) {
	t.Helper()
	d := &dialer{}
	o.DialContext = d.dial
	if o.Fallback == nil {
		o.Fallback = roundTripFunc(func(r *http.Request) (*http.Response, error) {
			t.Errorf("%s %s went to the fallback", r.Method, r.URL)
			return nil, http.ErrNotSupported
		})
	}
	if o.Proxy == nil {
		o.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	}
	tr := New(o)
	t.Cleanup(tr.CloseIdleConnections)
	return tr, d
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// newServer starts an httptest server that counts the connections it
// accepts.
func newServer(t *testing.T, h http.Handler) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	s := httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s, &conns
}

// within fails the test if ch is not ready within a generous bound: the
// bound only keeps a broken transport from hanging the test run, nothing
// waits for it to pass.
func within[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not happen within 20 s", what)
		panic("unreachable")
	}
}

// waitUntil polls a network condition with a deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// manualCtx is a context whose end the test decides: Done closes when
// end is called, and Err is then the error given. It lets a test make a
// deadline pass at a chosen point without waiting for a clock.
type manualCtx struct {
	context.Context
	done chan struct{}
	mu   sync.Mutex
	err  error
}

func newManualCtx() *manualCtx {
	return &manualCtx{Context: context.Background(), done: make(chan struct{})}
}

func (c *manualCtx) Done() <-chan struct{} { return c.done }

func (c *manualCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *manualCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

func (c *manualCtx) end(err error) {
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
	close(c.done)
}
