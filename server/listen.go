package server

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"

	connectcors "connectrpc.com/cors"
	"github.com/rs/cors"
	"github.com/soheilhy/cmux"
	"google.golang.org/grpc"
)

// serving is what Serve runs.
type serving struct {
	ln   net.Listener
	mux  cmux.CMux
	grpc *grpc.Server
	http *http.Server  // HTTP/1.1
	h2   *http.Server  // HTTP/2 that is not gRPC; http's settings otherwise
	done chan struct{} // closed when Serve returns

	stopOnce sync.Once
	stopping chan struct{} // closed by Shutdown before it closes ln
	stopped  chan struct{} // closed by Shutdown once both servers stopped
	stopErr  error         // Shutdown's result; set before stopped is closed
}

// Serve serves the whole API on ln until Shutdown: one address for every
// protocol. Each connection is told apart by its first bytes
// (soheilhy/cmux): an HTTP/2 connection whose first request is gRPC goes
// to grpc-go (native gRPC: the fast path for gRPC clients and the
// streams); any other HTTP/2 connection to net/http's HTTP/2 server, and
// anything else to net/http on HTTP/1.1 (Connect, Connect-JSON, gRPC-Web,
// /healthz, /readyz, /metrics, /ui/). h2split.go says how.
//
// With tlsConfig, connections are TLS first, and ALPN offers "h2", then
// "http/1.1"; the split above then applies to what TLS carries.
//
// Out of descriptors, Serve waits between accepts, 5 ms doubling to 1 s,
// and logs it at most every 10 s (backoffListener).
func (s *Server) Serve(ln net.Listener, tlsConfig *tls.Config) error {
	ln = newBackoffListener(ln, s.log)
	if tlsConfig != nil {
		c := tlsConfig.Clone()
		c.NextProtos = []string{"h2", "http/1.1"}
		ln = tls.NewListener(ln, c)
	}
	m := cmux.New(ln)
	// A connection that sends nothing recognizable within the header
	// timeout is closed; an HTTP/2 one that sends no request head within
	// it goes to net/http.
	m.SetReadTimeout(s.opts.HeaderTimeout)
	grpcL := m.MatchWithWriters(firstRequestGRPC)
	h2L := m.Match(cmux.HTTP2())
	httpL := m.Match(cmux.Any())
	// Two servers with one handler: net/http's HTTP/1.1 server, were it
	// to serve unencrypted HTTP/2 too, would wait for 24 bytes of every
	// connection to look for the preface cmux has already looked for,
	// and a short request that is neither ("HELLO\r\n\r\n") would get no
	// answer until the header timeout.
	h1 := &http.Server{
		Handler:           s.Handler(),
		Protocols:         new(http.Protocols),
		ReadHeaderTimeout: s.opts.HeaderTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		ConnContext:       connTLS,
	}
	h1.Protocols.SetHTTP1(true)
	h2 := &http.Server{
		Handler:           h1.Handler,
		Protocols:         new(http.Protocols),
		ReadHeaderTimeout: h1.ReadHeaderTimeout,
		IdleTimeout:       h1.IdleTimeout,
		MaxHeaderBytes:    h1.MaxHeaderBytes,
		ErrorLog:          h1.ErrorLog,
		ConnContext:       connTLS,
	}
	h2.Protocols.SetUnencryptedHTTP2(true) // TLS is the listener's: net/http sees what it carries
	sv := &serving{
		ln:       ln,
		mux:      m,
		grpc:     s.GRPCServer(),
		http:     h1,
		h2:       h2,
		done:     make(chan struct{}),
		stopping: make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	if !s.life.serving.CompareAndSwap(nil, sv) {
		return errors.New("server: Serve called twice")
	}
	defer close(sv.done)
	errs := make(chan error, 3)
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); errs <- sv.grpc.Serve(muxChild{grpcL}) }()
	go func() { defer wg.Done(); errs <- sv.h2.Serve(h2Listener{muxChild{h2L}}) }()
	go func() { defer wg.Done(); errs <- sv.http.Serve(h1Listener{muxChild{httpL}}) }()
	err := m.Serve()
	select {
	case <-sv.stopping:
		// Shutdown closed the listener: it stops both servers gracefully,
		// letting the calls in flight finish.
		<-sv.stopped
		err = nil
	default:
		// The listener failed: end everything.
		if s.life.shutting.Load() {
			err = nil
		}
		ln.Close()
		sv.grpc.Stop()
		sv.http.Close()
		sv.h2.Close()
	}
	wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return http.ErrServerClosed
}

// muxChild is one of cmux's listeners, whose Close would close the
// listener they share: Serve and Shutdown close that one.
type muxChild struct{ net.Listener }

func (muxChild) Close() error { return nil }

// h1Listener is the HTTP/1.1 side's listener: its connections can be
// half-closed like the TCP and TLS connections cmux wraps, so that
// net/http, which refuses a request by writing its answer and closing the
// sending side first, gets that answer to the client before the reset
// that closing a connection with unread input sends.
type h1Listener struct{ net.Listener }

func (l h1Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if mc, ok := c.(*cmux.MuxConn); ok {
		if cw, ok := mc.Conn.(closeWriter); ok {
			return halfCloser{Conn: c, cw: cw}, nil
		}
	}
	return c, nil
}

type closeWriter interface{ CloseWrite() error }

// halfCloser is a connection with the CloseWrite of the one under it.
type halfCloser struct {
	net.Conn
	cw closeWriter
}

func (c halfCloser) CloseWrite() error { return c.cw.CloseWrite() }

// Shutdown stops Serve: it ends long polls and streams (BeginShutdown),
// stops accepting connections, and waits for calls in flight to finish
// until ctx ends, when it closes the connections left. Serve then returns
// http.ErrServerClosed.
func (s *Server) Shutdown(ctx context.Context) error {
	s.BeginShutdown()
	sv := s.life.serving.Load()
	if sv == nil {
		return nil
	}
	sv.stopOnce.Do(func() {
		defer close(sv.stopped)
		close(sv.stopping)
		sv.mux.Close()
		sv.ln.Close() // cmux's Close leaves its listener open
		done := make(chan struct{})
		go func() {
			sv.grpc.GracefulStop()
			close(done)
		}()
		h2err := make(chan error, 1)
		go func() { h2err <- sv.h2.Shutdown(ctx) }()
		herr := errors.Join(sv.http.Shutdown(ctx), <-h2err)
		select {
		case <-done:
		case <-ctx.Done():
			sv.grpc.Stop()
			<-done
			sv.stopErr = ctx.Err()
		}
		if herr != nil {
			sv.http.Close()
			sv.h2.Close()
			sv.stopErr = herr
		}
	})
	<-sv.stopped
	select {
	case <-sv.done:
	case <-ctx.Done():
	}
	return sv.stopErr
}

// withCORS answers browsers' preflight requests and adds the CORS headers
// the Connect and gRPC-Web protocols need, for Options.CORSOrigins.
func (s *Server) withCORS(h http.Handler) http.Handler {
	if len(s.opts.CORSOrigins) == 0 {
		return h
	}
	return cors.New(cors.Options{
		AllowedOrigins: s.opts.CORSOrigins,
		AllowedMethods: connectcors.AllowedMethods(),
		AllowedHeaders: append(connectcors.AllowedHeaders(), "Authorization"),
		ExposedHeaders: connectcors.ExposedHeaders(),
		MaxAge:         7200,
	}).Handler(h)
}
