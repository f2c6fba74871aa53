package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/hourglassmq/hourglass/access"
)

// caller is who makes a call, once authenticated.
type caller struct {
	cred *access.Credential
	// method is how the call was authenticated: "token", "certificate",
	// or "none" on a server without credentials.
	method string
}

type callerKey struct{}

// callerOf returns the call's caller; nil outside an authenticated call.
func callerOf(ctx context.Context) *caller {
	c, _ := ctx.Value(callerKey{}).(*caller)
	return c
}

// anonymous is every caller of a server with neither --auth-token nor
// credentials: it may do everything, as before credentials existed.
var anonymous = &caller{cred: access.Admin("anonymous"), method: "none"}

// secured reports whether calls need a credential.
func (s *Server) secured() bool { return s.opts.AuthToken != "" || s.opts.CredentialsFile != "" }

// authenticate finds the caller of a call from its Authorization header's
// value and its connection's TLS state (nil on plain text): a bearer
// token first, else a verified client certificate. Its errors are for
// Unauthenticated.
func (s *Server) authenticate(authz string, tlsState *tls.ConnectionState) (*caller, error) {
	if !s.secured() {
		return anonymous, nil
	}
	if authz != "" {
		scheme, got, ok := strings.Cut(authz, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return nil, errors.New("the Authorization header is not a bearer token: send 'Authorization: Bearer <token>'")
		}
		got = strings.TrimSpace(got)
		if s.opts.AuthToken != "" && sameToken(got, s.opts.AuthToken) {
			return &caller{cred: adminToken, method: "token"}, nil
		}
		if c, ok := s.creds.Load().Token(got); ok {
			return &caller{cred: c, method: "token"}, nil
		}
		return nil, errors.New("wrong bearer token: it is neither the server's --auth-token nor one of its --credentials")
	}
	if tlsState != nil && len(tlsState.VerifiedChains) > 0 {
		cert := tlsState.VerifiedChains[0][0]
		if c, ok := s.creds.Load().Certificate(cert); ok {
			return &caller{cred: c, method: "certificate"}, nil
		}
		return nil, fmt.Errorf("the client certificate (names %s) is verified but no credential names it: add one of its names to a credential's certificate list",
			strings.Join(access.CertificateNames(cert), ", "))
	}
	return nil, errors.New("this server needs a credential: send the header 'Authorization: Bearer <token>' (--auth-token or one of --credentials), or a client certificate (--tls-client-ca)")
}

// adminToken is the credential of the server's --auth-token.
var adminToken = access.Admin("admin")

// sameToken compares a guess with the token in a time that depends on
// neither: their SHA-256 digests, of one length, are compared in constant
// time (subtle.ConstantTimeCompare returns at once on a length mismatch,
// which told a caller the token's length).
func sameToken(guess, token string) bool {
	g, t := sha256.Sum256([]byte(guess)), sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(g[:], t[:]) == 1
}

// authorize checks that the caller may make one request of procedure: the
// rule's verb on every topic the request names. A unary request (or a
// stream's open) that names no topic needs the verb on every topic; a
// later stream message that names none needs nothing more. Its error is
// a gRPC status: PermissionDenied naming the verb and the topic.
func authorize(c *caller, procedure string, m proto.Message, stream bool) error {
	r, ok := rules[procedure]
	if !ok {
		return status.Errorf(codes.PermissionDenied, "%s is in no access rule: only the API's procedures are served", procedure)
	}
	if r.verb == "" {
		return nil
	}
	if m == nil { // a stream's open, before its first message
		if !c.cred.Has(r.verb) {
			return denied(c.cred.Allow(r.verb, ""))
		}
		return nil
	}
	topics, named := r.topics(m)
	if !named {
		if stream {
			return nil
		}
		return denied(c.cred.Allow(r.verb, ""))
	}
	for _, t := range topics {
		if err := c.cred.Allow(r.verb, t); err != nil {
			return denied(err)
		}
	}
	return nil
}

func denied(err error) error {
	if err == nil {
		return nil
	}
	return status.Error(codes.PermissionDenied, err.Error())
}

// tlsStateKey holds the TLS state of the connection a net/http request
// came on (Serve's ConnContext puts it there).
type tlsStateKey struct{}

func tlsStateOf(ctx context.Context) *tls.ConnectionState {
	st, _ := ctx.Value(tlsStateKey{}).(*tls.ConnectionState)
	return st
}

// authGate is a connect request gate: it authenticates a call before its
// request message is read, and puts its caller into the context.
func (s *Server) authGate() connect.HandlerOption {
	return connect.WithRequestGate(func(ctx context.Context, spec connect.Spec, _ connect.Peer, header http.Header) (context.Context, error) {
		c, err := s.authenticate(header.Get("Authorization"), tlsStateOf(ctx))
		if err != nil {
			return ctx, connect.NewError(connect.CodeUnauthenticated, err)
		}
		return context.WithValue(ctx, callerKey{}, c), nil
	})
}

// require wraps a plain HTTP handler (/metrics, /debug/pprof/): 401
// without a credential, 403 without verb on every topic.
func (s *Server) require(verb access.Verb, next http.Handler) http.Handler {
	if !s.secured() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := s.authenticate(r.Header.Get("Authorization"), tlsStateOf(r.Context()))
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="hourglass"`)
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		if err := c.cred.Allow(verb, ""); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// report logs a failed call, on any protocol: the server's own failures at
// Error (they need an operator), the callers' mistakes at Debug.
func (s *Server) report(ctx context.Context, procedure, peer string, start time.Time, code uint32, err error) {
	if err == nil {
		return
	}
	level := slog.LevelDebug
	switch codes.Code(code) {
	case codes.Internal, codes.Unknown, codes.DataLoss:
		level = slog.LevelError
	case codes.Unavailable:
		// Streams end so while shutting down: nothing for an operator.
		if !s.life.shutting.Load() {
			level = slog.LevelError
		}
	}
	s.log.Log(ctx, level, "rpc failed", "procedure", procedure, "peer", peer,
		"code", codes.Code(code).String(), "err", err, "duration", time.Since(start))
}
