package server

import (
	"bytes"
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// fakeListener fails Accept with EMFILE fails times, then hands out one
// end of a pipe; after that it blocks until closed.
type fakeListener struct {
	fails  int
	calls  int
	closed chan struct{}
}

func (f *fakeListener) Accept() (net.Conn, error) {
	f.calls++
	if f.calls <= f.fails {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	if f.calls == f.fails+1 {
		c, _ := net.Pipe()
		return c, nil
	}
	<-f.closed
	return nil, net.ErrClosed
}
func (f *fakeListener) Close() error   { close(f.closed); return nil }
func (f *fakeListener) Addr() net.Addr { return &net.TCPAddr{} }

// TestAcceptBackoff: out of descriptors, Accept waits 5 ms doubling to
// 1 s between tries instead of trying again at once, logs the failures
// at most once per 10 s, and Close ends a wait.
func TestAcceptBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		f := &fakeListener{fails: 12, closed: make(chan struct{})}
		l := newBackoffListener(f, slog.New(slog.NewTextHandler(&logs, nil)))
		start := time.Now()
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		// 5+10+...+640 ms, then four waits of 1 s.
		want := 1275*time.Millisecond + 4*time.Second
		if got := time.Since(start); got != want {
			t.Errorf("12 failures took %v of waiting, want %v", got, want)
		}
		if f.calls != 13 {
			t.Errorf("%d calls of the listener's Accept, want 13", f.calls)
		}
		if n := strings.Count(logs.String(), "accepting a connection failed"); n != 1 {
			t.Errorf("%d log lines for 12 failures within 10 s, want 1:\n%s", n, logs.String())
		}

		f2 := &fakeListener{fails: 1 << 30, closed: make(chan struct{})}
		l2 := newBackoffListener(f2, slog.New(slog.DiscardHandler))
		done := make(chan error, 1)
		go func() { _, err := l2.Accept(); done <- err }()
		synctest.Wait()
		l2.Close()
		if err := <-done; !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
	})
}
