package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"

	"connectrpc.com/connect"
	"github.com/soheilhy/cmux"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	"github.com/hourglassmq/hourglass/access"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// ReloadCredentials reads Options.CredentialsFile again and, if it is
// valid, serves its credentials from the next call on; a file that is not
// valid leaves the current ones in place and is the error. The change is
// recorded in the audit trail as made by who.
func (s *Server) ReloadCredentials(who string) error {
	if s.opts.CredentialsFile == "" {
		return fmt.Errorf("server: no credentials file to reload (serve --credentials)")
	}
	set, err := access.Load(s.opts.CredentialsFile)
	if err == nil {
		if qerr := s.quotasUsable(set); qerr != nil {
			err = fmt.Errorf("%s: %w", s.opts.CredentialsFile, qerr)
		}
	}
	if err == nil {
		s.creds.Store(set)
	}
	s.auditChange(context.Background(), who, "ReloadCredentials", s.paths.text(s.opts.CredentialsFile), err)
	return err
}

// accessConnect checks every request of a Connect or gRPC-Web call
// against the rules: the unary request, a stream's open and each message
// a stream receives. The request gate (authGate) authenticated the call.
type accessConnect struct{ s *Server }

func (a accessConnect) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	s := a.s
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		m, _ := req.Any().(proto.Message)
		if err := s.checkAccess(ctx, callerOf(ctx), req.Spec().Procedure, req.Peer().Addr, m, false); err != nil {
			return nil, toConnect(err)
		}
		res, err := next(ctx, req)
		var msg any
		if res != nil {
			msg = res.Any()
		}
		s.auditCall(ctx, req.Spec().Procedure, req.Peer().Addr, m, msg, err)
		return res, err
	}
}

func (accessConnect) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a accessConnect) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	s := a.s
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		c, proc, peer := callerOf(ctx), conn.Spec().Procedure, conn.Peer().Addr
		if err := s.checkAccess(ctx, c, proc, peer, nil, true); err != nil {
			return toConnect(err)
		}
		return next(ctx, accessConn{StreamingHandlerConn: conn, ctx: ctx, s: s, c: c, proc: proc, peer: peer})
	}
}

// accessConn checks each message a Connect stream receives.
type accessConn struct {
	connect.StreamingHandlerConn
	ctx        context.Context
	s          *Server
	c          *caller
	proc, peer string
}

func (a accessConn) Receive(m any) error {
	if err := a.StreamingHandlerConn.Receive(m); err != nil {
		return err
	}
	pm, _ := m.(proto.Message)
	return toConnect(a.s.checkAccess(a.ctx, a.c, a.proc, a.peer, pm, true))
}

// accessStream checks each message a gRPC stream receives.
type accessStream struct {
	grpc.ServerStream
	s          *Server
	c          *caller
	proc, peer string
}

func (a accessStream) RecvMsg(m any) error {
	if err := a.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	pm, _ := m.(proto.Message)
	return a.s.checkAccess(a.Context(), a.c, a.proc, a.peer, pm, true)
}

// tlsConnOf finds the TLS connection under the wrappers Serve puts around
// an accepted connection; nil for a plain one.
func tlsConnOf(c net.Conn) *tls.Conn {
	for {
		switch v := c.(type) {
		case *tls.Conn:
			return v
		case *cmux.MuxConn:
			c = v.Conn
		case halfCloser:
			c = v.Conn
		case *ackDropper:
			c = v.Conn
		default:
			return nil
		}
	}
}

// connTLS is Serve's http.Server.ConnContext: it keeps the TLS state of a
// connection in its requests' contexts, for client certificates (TLS is
// Serve's listener's, so net/http itself sees a plain connection).
func connTLS(ctx context.Context, c net.Conn) context.Context {
	if tc := tlsConnOf(c); tc != nil {
		st := tc.ConnectionState()
		return context.WithValue(ctx, tlsStateKey{}, &st)
	}
	return ctx
}

// muxTLS is grpc-go's transport credentials on Serve's connections: the
// handshake is done already (TLS is Serve's listener's), and it hands
// grpc-go the connection's TLS state as the call's peer AuthInfo.
type muxTLS struct{}

func (muxTLS) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if tc := tlsConnOf(c); tc != nil {
		return c, credentials.TLSInfo{State: tc.ConnectionState(),
			CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
	}
	return c, nil, nil
}

func (muxTLS) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, fmt.Errorf("server: muxTLS is for serving only")
}

func (muxTLS) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}
func (m muxTLS) Clone() credentials.TransportCredentials { return m }
func (muxTLS) OverrideServerName(string) error           { return nil }

// WhoAmI answers with the caller's credential.
func (a api) WhoAmI(ctx context.Context, _ *hourglassv1.WhoAmIRequest) (*hourglassv1.WhoAmIResponse, error) {
	c := callerOf(ctx)
	if c == nil {
		c = anonymous
	}
	res := &hourglassv1.WhoAmIResponse{Name: c.cred.Name, Role: c.cred.Role, Topics: c.cred.Topics, Method: c.method}
	for _, v := range c.cred.Verbs() {
		res.Verbs = append(res.Verbs, string(v))
	}
	return res, nil
}
