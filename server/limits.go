package server

import (
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// limiter bounds the long-lived calls (long polls and streams) open at
// once, on the whole server and per client connection. Its methods may be
// called from any goroutine.
type limiter struct {
	max, perConn int

	mu     sync.Mutex
	total  int            // guarded by mu
	byConn map[string]int // guarded by mu; entries at 0 are deleted
}

func newLimiter(max, perConn int) *limiter {
	return &limiter{max: max, perConn: perConn, byConn: make(map[string]int)}
}

// acquire takes one slot for a call on conn (a remote address; "" counts
// against the server-wide limit only), or refuses with ResourceExhausted
// naming the limit. what names the kind of call in the message.
func (l *limiter) acquire(conn, what string) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total >= l.max {
		return nil, status.Errorf(codes.ResourceExhausted,
			"the server has %d %s open, its limit (serve --max-streams %d): retry later or on another node", l.total, what, l.max)
	}
	if conn != "" && l.byConn[conn] >= l.perConn {
		return nil, status.Errorf(codes.ResourceExhausted,
			"this connection has %d %s open, the limit per connection (serve --max-streams-per-conn %d): end one, or open another connection", l.byConn[conn], what, l.perConn)
	}
	l.total++
	if conn != "" {
		l.byConn[conn]++
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.total--
			if conn != "" {
				if l.byConn[conn]--; l.byConn[conn] <= 0 {
					delete(l.byConn, conn)
				}
			}
		})
	}, nil
}

// open returns how many calls hold a slot.
func (l *limiter) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}
