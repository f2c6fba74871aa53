package h1srv

import (
	"bufio"
	"net"
	"sync"
)

// handoffListener yields the connections the loop hands to the
// http.Server.
type handoffListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once

	mu   sync.Mutex
	addr net.Addr // guarded by mu
}

func newHandoffListener() *handoffListener {
	return &handoffListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *handoffListener) setAddr(a net.Addr) {
	l.mu.Lock()
	if l.addr == nil {
		l.addr = a
	}
	l.mu.Unlock()
}

// put hands c over, and reports false if the listener is closed.
func (l *handoffListener) put(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *handoffListener) Addr() net.Addr {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.addr == nil {
		return &net.TCPAddr{}
	}
	return l.addr
}

// replayConn is a connection whose reads return what br holds of it
// first. net/http reads a connection from one goroutine at a time.
type replayConn struct {
	net.Conn
	br  *bufio.Reader // nil once drained
	src *firstRead    // what br reads from: what it holds of the first read, then the connection
}

func (c *replayConn) Read(p []byte) (int, error) {
	if c.br != nil {
		if n := c.br.Buffered(); n > 0 {
			return c.br.Read(p[:min(len(p), n)])
		}
		c.br.Reset(nil)
		readers.Put(c.br)
		c.br = nil
	}
	return c.src.Read(p)
}

// CloseWrite shuts the writing side down, as net/http does on a TCP
// connection before it closes one with an error answer.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
