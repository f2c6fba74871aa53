package h1

import (
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakeNetConn is a net.Conn that only records Close: the pool never reads
// or writes.
type fakeNetConn struct {
	net.Conn
	closed atomic.Bool
}

func (c *fakeNetConn) Close() error { c.closed.Store(true); return nil }

func fakeConn(addr string) (*conn, *fakeNetConn) {
	f := &fakeNetConn{}
	return newConn(f, addr, 16, 16), f
}

func TestPoolLIFOAndMax(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(2, time.Minute)
		defer p.closeAll()
		a, fa := fakeConn("h:1")
		b, fb := fakeConn("h:1")
		c, fc := fakeConn("h:1")
		other, _ := fakeConn("h:2")
		p.put(a)
		p.put(b)
		p.put(other)
		p.put(c) // h:1 is full: a, the oldest, goes
		if !fa.closed.Load() || fb.closed.Load() || fc.closed.Load() {
			t.Fatalf("closed a=%v b=%v c=%v; want only a (the oldest, over MaxIdlePerHost)", fa.closed.Load(), fb.closed.Load(), fc.closed.Load())
		}
		for i, want := range []*conn{c, b, nil} {
			if got := p.get("h:1"); got != want {
				t.Fatalf("get %d: %p, want %p (newest first)", i, got, want)
			}
		}
		if got := p.get("h:2"); got != other {
			t.Fatalf("h:2: %p, want its own connection", got)
		}
	})
}

func TestPoolIdleTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(4, time.Minute)
		defer p.closeAll()
		a, fa := fakeConn("h:1")
		b, fb := fakeConn("h:1")
		p.put(a)
		time.Sleep(30 * time.Second)
		p.put(b)
		time.Sleep(31 * time.Second) // a has been idle 61 s, b 31 s
		synctest.Wait()
		if !fa.closed.Load() || fb.closed.Load() {
			t.Fatalf("after 61 s: a closed %v, b closed %v; want a only", fa.closed.Load(), fb.closed.Load())
		}
		if n := p.idle("h:1"); n != 1 {
			t.Fatalf("%d idle, want 1", n)
		}
		time.Sleep(30 * time.Second) // b: 61 s, with nobody asking for the host
		synctest.Wait()
		if !fb.closed.Load() {
			t.Fatal("b is still open after 61 s idle")
		}
		p.mu.Lock()
		hosts := len(p.hosts)
		p.mu.Unlock()
		if hosts != 0 {
			t.Errorf("%d hosts remembered after all their connections expired, want 0", hosts)
		}
		// get never hands out an expired connection, even before the
		// timer runs.
		c, fc := fakeConn("h:1")
		p.put(c)
		p.mu.Lock()
		p.hosts["h:1"].timer.Stop()
		p.mu.Unlock()
		time.Sleep(time.Minute)
		if got := p.get("h:1"); got != nil || !fc.closed.Load() {
			t.Errorf("get after a minute idle: %p (closed %v), want nil and closed", got, fc.closed.Load())
		}
	})
}

func TestCloseIdleConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var closed atomic.Int64
		fb := roundTripFunc(nil)
		tr := New(Options{Fallback: closeIdleRecorder{fb, &closed}})
		a, fa := fakeConn("h:1")
		b, fb2 := fakeConn("h:2")
		tr.pool.put(a)
		tr.pool.put(b)
		tr.CloseIdleConnections()
		if !fa.closed.Load() || !fb2.closed.Load() {
			t.Errorf("idle connections left open: h:1 %v, h:2 %v", !fa.closed.Load(), !fb2.closed.Load())
		}
		if tr.pool.get("h:1") != nil {
			t.Error("a connection is still pooled")
		}
		if closed.Load() != 1 {
			t.Error("the fallback's CloseIdleConnections was not called")
		}
		time.Sleep(2 * time.Minute) // the stopped timers must not fire into a retired list
		synctest.Wait()
	})
}

type closeIdleRecorder struct {
	roundTripFunc
	n *atomic.Int64
}

func (c closeIdleRecorder) CloseIdleConnections() { c.n.Add(1) }
