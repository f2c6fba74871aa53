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
// A client may pipeline: send requests before the answers to the earlier
// ones. The loop then does not wait for a call before it takes the next:
// each call runs on a worker goroutine (reused: a fresh goroutine per
// call spent 15% of the server's CPU growing its stack), at most
// MaxInFlight per connection, and the answers are written in the
// requests' order, those ready together in one write. So calls that wait
// for the same event (Schedules waiting for one group commit's fsync)
// wait together instead of one after the other. A call alone on its
// connection, with nothing read behind it, runs on the connection's
// goroutine, unless it may wait long for its answer (a Waiter: a long
// poll): that one runs on a worker while the loop reads on, so that a
// client that leaves during the wait ends the call's context, as
// net/http's background read does. A Handler takes (decides on) requests one by one in order
// and copies what it keeps, so that the loop can read on into its buffer
// while calls are in flight.
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

// Handler answers requests the loop parsed, in two steps: Take decides,
// on the connection's goroutine, whether the loop answers a request, and
// the Call it returns answers it.
type Handler interface {
	// Take returns the Call that answers req, or false to leave req
	// (unconsumed) and its connection to the http.Server. It must not act
	// on the request: if it declines a request pipelined behind calls in
	// flight, the loop waits for their answers, then hands the connection
	// over. req, its Body included, is valid during Take only: the Call
	// keeps copies of what it needs.
	Take(req *Request) (Call, bool)
}

// Call answers one request a Handler took.
type Call interface {
	// Serve writes exactly one answer with w.Write. It runs on a
	// goroutine of its own: the calls of requests a client pipelined on
	// one connection (up to MaxInFlight of them) run concurrently, and
	// their answers are written in the requests' order. ctx is cancelled
	// when the server is closed, and when the loop, reading on behind
	// the call, finds the connection closed or broken by the client (as
	// net/http cancels a request's context when its client goes away).
	Serve(ctx context.Context, w *ResponseWriter)
}

// A Waiter is a Call that may wait long before it answers, such as a long
// poll. The loop never runs a call whose Waits reports true on the
// connection's goroutine: it hands it to a worker and reads on, so that
// a client that goes away during the wait ends the call's ctx.
type Waiter interface {
	Waits() bool
}

func waits(c Call) bool {
	w, ok := c.(Waiter)
	return ok && w.Waits()
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
	workers   workers
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
	s.workers.calls, s.workers.stop = make(chan work), make(chan struct{})
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
	s.workers.close()
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
	s.workers.close()
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
	srv *Server
	nc  net.Conn
	// ctx is the calls' context: the server's, cancelled also when the
	// connection's reader finds it ended (await).
	ctx    context.Context
	cancel context.CancelFunc
	state  atomic.Int32
	br     *bufio.Reader // pooled; nil while the connection is idle
	src    firstRead     // what br reads from
	first  [firstReadSize]byte
	// used is set once the connection sent its first request; deadline
	// while a read deadline is set.
	used, deadline bool
	req            Request
	w              ResponseWriter // the answers being written

	pmu      sync.Mutex
	drained  sync.Cond  // on pmu: the queue shrank or a write ended
	queue    []*runCall // calls in flight or not yet written, in order; guarded by pmu
	writing  bool       // a call is writing answers; guarded by pmu
	awaiting bool       // the loop waits for a request's first byte; guarded by pmu
	ended    bool       // no more answers: a write or a call failed, or an answer closed it; guarded by pmu
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
// The connection is idle (Shutdown closes it) while it waits with no call
// in flight.
func (c *conn) await() bool {
	c.release()
	c.pmu.Lock()
	c.awaiting = true
	if len(c.queue) == 0 && !c.writing {
		c.state.Store(stateIdle)
	}
	c.pmu.Unlock()
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
	c.pmu.Lock()
	c.awaiting = false
	c.pmu.Unlock()
	if n == 0 {
		_ = err    // closed, reset or shut down: nothing to answer
		c.cancel() // nor to wait for
		return false
	}
	for {
		switch c.state.Load() {
		case stateActive: // calls are in flight
		case stateIdle:
			if !c.state.CompareAndSwap(stateIdle, stateActive) {
				continue // a call's end or Shutdown changed it meanwhile
			}
		default:
			return false // Shutdown closed it
		}
		break
	}
	c.src.pending = c.first[:n]
	c.br = readers.Get().(*bufio.Reader)
	c.br.Reset(&c.src)
	return true
}

func (c *conn) serve() {
	defer c.srv.forget(c)
	c.ctx, c.cancel = context.WithCancel(c.srv.ctx)
	defer c.cancel()
	c.src.nc = c.nc
	c.req.RemoteAddr = c.nc.RemoteAddr().String()
	c.drained.L = &c.pmu
	handed := false
	defer func() {
		p := recover()
		if p != nil {
			c.srv.opts.Logger.Error("h1srv: panic serving a connection", "remote", c.req.RemoteAddr, "panic", p)
		}
		if !handed {
			if p != nil {
				c.nc.Close() // what is in flight cannot be answered in order now
			}
			c.drain()
			c.nc.Close()
			c.release()
		}
	}()
	for {
		if c.br == nil || c.br.Buffered() == 0 {
			if !c.await() {
				return
			}
		}
		v, headLen, bodyLen := c.next()
		switch v {
		case take:
		case needMore: // the head timed out or the connection failed
			c.cancel()
			return
		default:
			if !c.drain() {
				return
			}
			handed = true
			c.handOff()
			return
		}
		c.req.Body, _ = c.br.Peek(headLen + bodyLen)
		c.req.Body = c.req.Body[headLen:]
		call, ok := c.srv.opts.Handler.Take(&c.req)
		c.req.Body = nil
		if !ok {
			if !c.drain() {
				return
			}
			handed = true
			c.handOff()
			return
		}
		c.br.Discard(headLen + bodyLen)
		r := runCalls.Get().(*runCall)
		r.call = call
		r.w.out, r.w.writes, r.w.closing = r.w.out[:0], 0, c.req.Close
		alone, ok := c.enqueue(r)
		if !ok {
			return // the connection failed, or closes after an answer written
		}
		if alone && c.br.Buffered() == 0 && !waits(call) {
			// Nothing else in flight or read: the client waits for this
			// answer before it sends more, as most do. Serving it here
			// saves a hand-over to a worker. (A call that may wait long
			// goes to a worker, so that the loop sees the client leave.)
			c.serveCall(r)
		} else {
			c.srv.workers.run(c, r)
		}
		if c.req.Close {
			return // the call's answer closes the connection
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

// ResponseWriter holds a call's answer.
type ResponseWriter struct {
	out     []byte
	writes  int  // answers written
	closing bool // the connection closes after this answer
	closeAt int  // where in out a "Connection: close" field goes
}

// Write writes the answer: the status line, the header fields given as
// name, value pairs (names in canonical form, values free of CR and LF),
// Date, Content-Length, "Connection: close" when the connection closes
// after it, and body. It copies body. A Call writes exactly one answer.
func (w *ResponseWriter) Write(status int, fields []string, body []byte) {
	w.writes++
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
	w.closeAt = len(w.out)
	if w.closing {
		w.out = append(w.out, connectionClose...)
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
