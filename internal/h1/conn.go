package h1

import (
	"bufio"
	"net"
	"syscall"
	"time"
)

// conn is one connection with its buffers. One goroutine uses it at a
// time: the caller of the request it carries, then the pool.
type conn struct {
	nc   net.Conn
	addr string // the pool's key
	br   *bufio.Reader
	bw   *bufio.Writer // writes to cw
	cw   connWriter
	raw  syscall.RawConn // nil when nc exposes no file descriptor
	// idleSince is when the pool got the connection; guarded by the
	// pool's mutex while it is in the pool.
	idleSince time.Time
	// peekAlive and peekBuf are the result and buffer of the liveness
	// probe (probe_*.go); peekFn is the probe bound to this conn, made
	// once so that a probe allocates nothing.
	peekAlive bool
	peekBuf   [1]byte
	peekFn    func(fd uintptr) bool
}

// connWriter keeps the first error of a write to the connection, so that
// a failed request write can be told apart from a failed body read.
type connWriter struct {
	nc  net.Conn
	err error
}

func (w *connWriter) Write(p []byte) (int, error) {
	n, err := w.nc.Write(p)
	if err != nil && w.err == nil {
		w.err = err
	}
	return n, err
}

func newConn(nc net.Conn, addr string, rbuf, wbuf int) *conn {
	pc := &conn{nc: nc, addr: addr, br: bufio.NewReaderSize(nc, rbuf)}
	pc.cw.nc = nc
	pc.bw = bufio.NewWriterSize(&pc.cw, wbuf)
	if sc, ok := nc.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			pc.raw = raw
			pc.peekFn = pc.peek
		}
	}
	return pc
}

// aLongTimeAgo is a deadline in the past: set on a connection, it makes
// every blocked and future read and write return at once.
var aLongTimeAgo = time.Unix(1, 0)

// disturb aborts what the connection is doing; the request's context
// calls it when it ends. A disturbed connection is never reused.
func (pc *conn) disturb() { pc.nc.SetDeadline(aLongTimeAgo) }

// alive reports whether an idle connection may carry a request: nothing
// unread is buffered, and the server has neither closed it nor sent
// anything on it since (checked without blocking where probe can).
func (pc *conn) alive() bool {
	if pc.br.Buffered() > 0 {
		return false
	}
	if pc.raw == nil {
		return true
	}
	pc.peekAlive = true
	if err := pc.raw.Read(pc.peekFn); err != nil {
		return false
	}
	return pc.peekAlive
}
