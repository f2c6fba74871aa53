package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"connectrpc.com/connect"
)

// callInfo is what the protocol-neutral methods need to know of a call's
// transport; each protocol's adapter puts it in the call's context.
type callInfo struct {
	// conn names the client connection (its remote address), for the
	// per-connection limits.
	conn string
	// forwarded marks a call another cluster node forwarded here.
	forwarded bool
	// traceparent and tracestate are the call's W3C trace context
	// headers, "" when it has none (tracing.go).
	traceparent, tracestate string
}

type callInfoKey struct{}

func withInfo(ctx context.Context, ci callInfo) context.Context {
	return context.WithValue(ctx, callInfoKey{}, ci)
}

// infoOf returns the call's info; the zero value outside a call.
func infoOf(ctx context.Context) callInfo {
	ci, _ := ctx.Value(callInfoKey{}).(callInfo)
	return ci
}

// bodyDeadline reads an HTTP/1.1 request's body before the handler runs,
// within d (the connection's read deadline, cleared once the body is in:
// net/http's own ReadTimeout would also end the long poll that follows, by
// cancelling the request's context when the deadline passes). A body that
// cannot be read (a bad chunk, a cut connection, too slow) is refused as
// InvalidArgument in the request's protocol, not handed on as a failed
// read. At most limit bytes are read ahead; the handler reads the rest of
// a larger body and refuses it by its own limit.
func bodyDeadline(d time.Duration, limit int, next http.Handler) http.Handler {
	errs := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 1 || r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		timed := rc.SetReadDeadline(time.Now().Add(d)) == nil // false: not a connection with deadlines (a test recorder)
		var buf bytes.Buffer
		if r.ContentLength > 0 && r.ContentLength <= int64(limit) {
			buf.Grow(int(r.ContentLength))
		}
		_, err := io.Copy(&buf, io.LimitReader(r.Body, int64(limit)+1))
		if err != nil {
			// The connection's stream is lost in the middle of a body. The
			// deadline stays, so that net/http, which reads on to the end
			// of a body to reuse the connection, gives up and closes it.
			w.Header().Set("Connection", "close")
			errs.Write(w, r, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("reading the request body: %w", err)))
			return
		}
		if timed {
			rc.SetReadDeadline(time.Time{})
		}
		body := io.Reader(&buf)
		if buf.Len() > limit {
			body = io.MultiReader(&buf, r.Body)
		}
		r.Body = struct {
			io.Reader
			io.Closer
		}{body, r.Body}
		next.ServeHTTP(w, r)
	})
}
