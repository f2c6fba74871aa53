// Package h1srv answers a server's hottest plain-text HTTP/1.1 calls on a
// connection loop of its own, in front of an http.Server that serves
// everything else.
//
// net/http's server spends most of a small call's CPU around the
// handler: a bufio read of the head, header maps, a Request and a
// response writer per call, and a background read started once the body
// is read, which costs an extra read system call and netpoll arming per
// request and a deadline change to stop it. The loop instead runs one
// goroutine per connection with a pooled 64 KiB read buffer while a
// request is in progress (an idle connection holds only 2 KiB): it peeks at the
// next request without consuming it, parses a strict subset of HTTP/1.1
// (parseHead: POST to one of a few exact paths, Content-Length only, the
// whole body in the buffer), and calls the Handler with the request in
// place. The answer is written with one write.
//
// Everything else, and every request the Handler declines, is handed to
// the http.Server at that request's boundary: the connection, with the
// bytes read but not consumed replayed first, goes to http.Server.Serve
// through a listener of handed-off connections, and net/http owns it from
// then on. So HTTP/2 with prior knowledge (h2c), other paths and methods,
// chunked bodies, Expect, large bodies, and anything the loop cannot
// parse are net/http's, with its checks and its error answers.
//
// Limits and shutdown follow the http.Server's: a head that arrives
// slowly gets Options.ReadHeaderTimeout (a read deadline set only when a
// peek finds a request incomplete, so the common path sets none), as does
// a new connection's first request counted from the accept; an idle
// connection waits for its next request without a deadline as net/http's
// does without IdleTimeout, and Shutdown stops accepting, closes idle
// connections, lets calls in progress finish, then shuts the http.Server
// down.
package h1srv

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// BufferSize is the size of a connection's read buffer: the largest
// request (head and body) the loop answers itself.
const BufferSize = 64 << 10

// maxPendingOut is how many bytes of answers to pipelined requests the
// loop collects before it writes them.
const maxPendingOut = 64 << 10

// Handler answers requests the loop parsed. ServeH1 is called on the
// connection's goroutine, one request at a time per connection. It
// either writes exactly one answer with w.Write and returns true, or
// writes nothing and returns false, and the request (unconsumed) and its
// connection go to the http.Server. ctx is cancelled when the server is
// closed.
type Handler interface {
	ServeH1(ctx context.Context, req *Request, w *ResponseWriter) bool
}

// Options configure a Server.
type Options struct {
	// Handler answers the requests the loop parsed. Required.
	Handler Handler
	// Paths are the request targets the loop parses requests for; a
	// request to any other goes to HTTP. Required.
	Paths []string
	// HTTP serves everything else. Required; the loop calls its Serve
	// with a listener of handed-off connections, and its Shutdown from
	// Shutdown.
	HTTP *http.Server
	// ReadHeaderTimeout bounds how long a request's head may take to
	// arrive once it started; default HTTP.ReadHeaderTimeout, no limit
	// if both are zero.
	ReadHeaderTimeout time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = http.ErrServerClosed

// Server serves connections. Its methods may be called from any
// goroutine.
type Server struct {
	opts    Options
	ctx     context.Context // cancelled by Close
	cancel  context.CancelFunc
	handoff *handoffListener

	mu        sync.Mutex
	listeners map[net.Listener]struct{} // guarded by mu
	conns     map[*conn]struct{}        // guarded by mu
	closing   atomic.Bool
	wg        sync.WaitGroup // connection goroutines
	httpDone  chan error     // Serve of HTTP has returned
	httpOnce  sync.Once
}

// New returns a Server with opts.
func New(opts Options) (*Server, error) {
	if opts.Handler == nil || opts.HTTP == nil || len(opts.Paths) == 0 {
		return nil, errors.New("h1srv: Options.Handler, Options.Paths and Options.HTTP are required")
	}
	if opts.ReadHeaderTimeout == 0 {
		opts.ReadHeaderTimeout = opts.HTTP.ReadHeaderTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{opts: opts, listeners: map[net.Listener]struct{}{}, conns: map[*conn]struct{}{},
		httpDone: make(chan error, 1)}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.handoff = newHandoffListener()
	return s, nil
}

// Serve accepts connections on ln until Shutdown or Close, and returns
// ErrServerClosed then, or the listener's error.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.listeners[ln] = struct{}{}
	s.mu.Unlock()
	s.handoff.setAddr(ln.Addr())
	s.httpOnce.Do(func() {
		go func() { s.httpDone <- s.opts.HTTP.Serve(s.handoff) }()
	})
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() { // as net/http: back off on EMFILE and the like
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.opts.Logger.Warn("h1srv: accept failed; retrying", "err", err, "in", delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		c := &conn{srv: s, nc: nc}
		s.mu.Lock()
		if s.closing.Load() {
			s.mu.Unlock()
			nc.Close()
			return ErrServerClosed
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go c.serve()
	}
}

// Shutdown stops accepting connections, closes idle ones, waits for the
// calls in progress on the loop's connections to end, then shuts the
// http.Server down (http.Server.Shutdown: it does the same for the
// connections it was handed). If ctx ends first, Shutdown returns its
// error; call Close then.
func (s *Server) Shutdown(ctx context.Context) error {
	s.beginClose()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if s.closeIdle() {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	s.wg.Wait()
	return s.opts.HTTP.Shutdown(ctx)
}

// Close closes every listener and connection at once, cancels the
// handlers' context, and closes the http.Server.
func (s *Server) Close() error {
	s.beginClose()
	s.cancel()
	s.mu.Lock()
	for c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return s.opts.HTTP.Close()
}

func (s *Server) beginClose() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Swap(true) {
		return
	}
	for ln := range s.listeners {
		ln.Close()
	}
	s.handoff.Close()
}

// closeIdle closes the connections waiting for a request and reports
// whether none is left open.
func (s *Server) closeIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.state.CompareAndSwap(stateIdle, stateClosed) {
			c.nc.Close()
		}
	}
	return len(s.conns) == 0
}

func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

// Connection states. A connection is idle while it waits for the first
// byte of a request; Shutdown closes it then.
const (
	stateIdle int32 = iota
	stateActive
	stateClosed
)

var readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, BufferSize) }}

// firstReadSize is the size of a connection's own buffer for the first
// read of a request, while it holds no pooled read buffer: room for a
// whole single Schedule call as the Go client sends it.
const firstReadSize = 2048

type conn struct {
	srv   *Server
	nc    net.Conn
	state atomic.Int32
	br    *bufio.Reader // pooled; nil while the connection is idle
	src   firstRead     // what br reads from
	first [firstReadSize]byte
	// used is set once the connection sent its first request; deadline
	// while a read deadline is set.
	used, deadline bool
	req            Request
	w              ResponseWriter
}

// firstRead reads what the connection's first read of a request got, then
// the connection.
type firstRead struct {
	pending []byte
	nc      net.Conn
}

func (f *firstRead) Read(p []byte) (int, error) {
	if len(f.pending) > 0 {
		n := copy(p, f.pending)
		f.pending = f.pending[n:]
		return n, nil
	}
	return f.nc.Read(p)
}

// release gives the read buffer back to the pool; it must hold nothing.
func (c *conn) release() {
	if c.br != nil {
		c.br.Reset(nil)
		readers.Put(c.br)
		c.br = nil
	}
}

// await waits for the next request's first bytes with no read buffer
// taken from the pool, so that an idle connection holds only its own
// small buffer, then takes one. It reports false if the connection ended.
func (c *conn) await() bool {
	c.release()
	c.state.Store(stateIdle)
	if c.srv.closing.Load() {
		return false
	}
	if !c.used && c.srv.opts.ReadHeaderTimeout > 0 {
		// As net/http: a new connection's first head must arrive in time,
		// counted from the accept; later ones from their first byte.
		c.nc.SetReadDeadline(time.Now().Add(c.srv.opts.ReadHeaderTimeout))
		c.deadline = true
	}
	c.used = true
	n, err := c.nc.Read(c.first[:])
	if n == 0 {
		_ = err // closed, reset or shut down: nothing to answer
		return false
	}
	if !c.state.CompareAndSwap(stateIdle, stateActive) {
		return false // Shutdown closed it
	}
	c.src.pending = c.first[:n]
	c.br = readers.Get().(*bufio.Reader)
	c.br.Reset(&c.src)
	return true
}

func (c *conn) serve() {
	defer c.srv.forget(c)
	c.src.nc = c.nc
	c.req.RemoteAddr = c.nc.RemoteAddr().String()
	handed := false
	defer func() {
		if p := recover(); p != nil {
			c.srv.opts.Logger.Error("h1srv: panic serving a connection", "remote", c.req.RemoteAddr, "panic", p)
		}
		if !handed {
			c.nc.Close()
			c.release()
		}
	}()
	for {
		if c.br == nil || c.br.Buffered() == 0 {
			if len(c.w.out) > 0 && !c.flush() {
				return
			}
			if !c.await() {
				return
			}
		}
		v, headLen, bodyLen := c.next()
		switch v {
		case take:
		case needMore: // the head timed out or the connection failed
			return
		default:
			if len(c.w.out) > 0 && !c.flush() {
				return
			}
			handed = true
			c.handOff()
			return
		}
		c.req.Body, _ = c.br.Peek(headLen + bodyLen)
		c.req.Body = c.req.Body[headLen:]
		c.w.closing = c.req.Close
		c.w.shut = &c.srv.closing
		if !c.srv.opts.Handler.ServeH1(c.srv.ctx, &c.req, &c.w) {
			if len(c.w.out) > 0 && !c.flush() {
				return
			}
			handed = true
			c.handOff()
			return
		}
		c.req.Body = nil
		c.br.Discard(headLen + bodyLen)
		if c.w.closing {
			c.flush()
			return
		}
		if c.br.Buffered() == 0 || len(c.w.out) >= maxPendingOut {
			if !c.flush() {
				return
			}
		}
	}
}

// next peeks until the request at the start of the buffer is complete
// (head and body), or declined, or the head timed out (needMore).
func (c *conn) next() (v verdict, headLen, bodyLen int) {
	defer func() {
		if c.deadline && v != needMore {
			c.nc.SetReadDeadline(time.Time{})
			c.deadline = false
		}
	}()
	paths := c.srv.opts.Paths
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		v, headLen, bodyLen = parseHead(buf, paths, &c.req)
		switch {
		case v == decline:
			return v, 0, 0
		case v == take && headLen+bodyLen > BufferSize:
			return decline, 0, 0
		case v == take && headLen+bodyLen <= len(buf):
			return v, headLen, bodyLen
		case v == take:
			// The body is not all here: wait for it without a deadline, as
			// net/http does without a ReadTimeout.
			if c.deadline {
				c.nc.SetReadDeadline(time.Time{})
				c.deadline = false
			}
			if _, err := c.br.Peek(headLen + bodyLen); err != nil {
				return needMore, 0, 0
			}
			return v, headLen, bodyLen
		}
		if len(buf) == BufferSize {
			return decline, 0, 0 // a head larger than the buffer: net/http's
		}
		if !c.deadline && c.srv.opts.ReadHeaderTimeout > 0 {
			c.nc.SetReadDeadline(time.Now().Add(c.srv.opts.ReadHeaderTimeout))
			c.deadline = true
		}
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			if c.br.Buffered() > len(buf) {
				continue
			}
			return needMore, 0, 0
		}
	}
}

func (c *conn) flush() bool {
	_, err := c.nc.Write(c.w.out)
	if cap(c.w.out) > 2*maxPendingOut {
		c.w.out = nil
	} else {
		c.w.out = c.w.out[:0]
	}
	return err == nil
}

// handOff gives the connection to the http.Server, with what was read of
// it and not consumed read first.
func (c *conn) handOff() {
	c.state.Store(stateClosed) // Shutdown leaves it to the http.Server
	c.nc.SetReadDeadline(time.Time{})
	rc := &replayConn{Conn: c.nc, br: c.br, src: &c.src}
	if !c.srv.handoff.put(rc) {
		c.nc.Close()
	}
}

// ResponseWriter collects the answers of a connection's requests.
type ResponseWriter struct {
	out     []byte
	closing bool         // the connection closes after this answer
	shut    *atomic.Bool // the server's closing
}

// Write appends one answer: the status line, the header fields given as
// name, value pairs (names in canonical form, values free of CR and LF),
// Date, Content-Length, "Connection: close" when the connection closes
// after it, and body. It copies body.
func (w *ResponseWriter) Write(status int, fields []string, body []byte) {
	if w.shut != nil && w.shut.Load() {
		w.closing = true // the server is shutting down: a call in progress is its connection's last
	}
	w.out = append(w.out, "HTTP/1.1 "...)
	w.out = strconv.AppendInt(w.out, int64(status), 10)
	w.out = append(w.out, ' ')
	w.out = append(w.out, http.StatusText(status)...)
	w.out = append(w.out, "\r\n"...)
	for i := 0; i+1 < len(fields); i += 2 {
		w.out = append(w.out, fields[i]...)
		w.out = append(w.out, ": "...)
		w.out = append(w.out, fields[i+1]...)
		w.out = append(w.out, "\r\n"...)
	}
	if w.closing {
		w.out = append(w.out, "Connection: close\r\n"...)
	}
	w.out = append(w.out, "Date: "...)
	w.out = appendDate(w.out)
	w.out = append(w.out, "\r\nContent-Length: "...)
	w.out = strconv.AppendInt(w.out, int64(len(body)), 10)
	w.out = append(w.out, "\r\n\r\n"...)
	w.out = append(w.out, body...)
}

// dateCache holds the Date header's value for the current second.
type dateCache struct {
	sec  int64
	text []byte
}

var date atomic.Pointer[dateCache]

func appendDate(b []byte) []byte {
	now := time.Now()
	d := date.Load()
	if d == nil || d.sec != now.Unix() {
		d = &dateCache{sec: now.Unix(), text: now.UTC().AppendFormat(nil, http.TimeFormat)}
		date.Store(d)
	}
	return append(b, d.text...)
}
