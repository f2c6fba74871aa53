package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
)

// checkToken reports whether header carries "Authorization: Bearer
// <token>", and if not, what is missing. The comparison takes the same
// time whatever the guess, its length included.
func checkToken(token string, header http.Header) error {
	return checkAuth(token, header.Get("Authorization"))
}

// checkAuth is checkToken with the Authorization header's value.
func checkAuth(token, auth string) error {
	if auth == "" {
		return errors.New("this server needs a bearer token: send the header 'Authorization: Bearer <token>' (the server's --auth-token)")
	}
	scheme, got, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return errors.New("the Authorization header is not a bearer token: send 'Authorization: Bearer <token>'")
	}
	if !sameToken(strings.TrimSpace(got), token) {
		return errors.New("wrong bearer token")
	}
	return nil
}

// sameToken compares a guess with the token in a time that depends on
// neither: their SHA-256 digests, of one length, are compared in constant
// time (subtle.ConstantTimeCompare returns at once on a length mismatch,
// which told a caller the token's length).
func sameToken(guess, token string) bool {
	g, t := sha256.Sum256([]byte(guess)), sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(g[:], t[:]) == 1
}

// authGate is a connect request gate: it rejects an RPC without the token
// before its request message is read. With no token it lets everything
// through.
func authGate(token string) connect.HandlerOption {
	return connect.WithRequestGate(func(ctx context.Context, _ connect.Spec, _ connect.Peer, header http.Header) (context.Context, error) {
		if token == "" {
			return ctx, nil
		}
		if err := checkToken(token, header); err != nil {
			return ctx, connect.NewError(connect.CodeUnauthenticated, err)
		}
		return ctx, nil
	})
}

// requireToken wraps a plain HTTP handler (/metrics) with the same check:
// 401 without the token.
func requireToken(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkToken(token, r.Header); err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="hourglass"`)
			http.Error(w, err.Error(), http.StatusUnauthorized)
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
		if !s.shutting.Load() {
			level = slog.LevelError
		}
	}
	s.log.Log(ctx, level, "rpc failed", "procedure", procedure, "peer", peer,
		"code", codes.Code(code).String(), "err", err, "duration", time.Since(start))
}
