package server

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Backoff of the accept loop after a temporary error (net/http's).
const (
	minAcceptBackoff = 5 * time.Millisecond
	maxAcceptBackoff = time.Second
	// acceptLogEvery bounds how often the failures are logged.
	acceptLogEvery = 10 * time.Second
)

// backoffListener is a listener whose Accept waits before it tries again
// after a temporary error (out of descriptors: EMFILE, ENFILE), 5 ms
// doubling to 1 s as net/http's Serve does, and logs the failures at most
// once per acceptLogEvery with their count. cmux, which Serve runs on it,
// retries a temporary error at once: with the pending connection still
// queued, every retry fails at once, and the server spun a core for as
// long as it was out of descriptors. Close ends a wait. Accept is called
// from one goroutine; Close from any.
type backoffListener struct {
	net.Listener
	log *slog.Logger

	closeOnce sync.Once
	closed    chan struct{}

	failures atomic.Int64 // temporary errors since the last log line
	logs     rate.Sometimes
}

func newBackoffListener(ln net.Listener, log *slog.Logger) *backoffListener {
	return &backoffListener{Listener: ln, log: log, closed: make(chan struct{}), logs: rate.Sometimes{Interval: acceptLogEvery}}
}

func (l *backoffListener) Accept() (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			return c, nil
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Temporary() { //nolint:staticcheck // as net/http: the errors accept may recover from
			return nil, err
		}
		delay = min(max(2*delay, minAcceptBackoff), maxAcceptBackoff)
		l.failures.Add(1)
		l.logs.Do(func() {
			l.log.Warn("server: accepting a connection failed; waiting before the next try (out of descriptors? raise ulimit -n)",
				"err", err, "failures", l.failures.Swap(0), "backoff", delay)
		})
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-l.closed:
			t.Stop()
			return nil, net.ErrClosed
		}
	}
}

func (l *backoffListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}
