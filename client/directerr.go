package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/anypb"
)

// The rules below are connect-go's (v1.21) for turning what its unary
// client meets into a *connect.Error, restated so that the direct path
// words every failure as connect-go does; TestDirectMatchesConnect and
// FuzzDirectAnswer hold the two to the same Code, Message, Details and
// Meta.

func asConnectError(err error) (*connect.Error, bool) {
	var ce *connect.Error
	ok := errors.As(err, &ce)
	return ce, ok && ce != nil
}

// ctxError is the error of a call whose ctx ended with err.
func ctxError(err error) error { return ctxCoded(err) }

// ctxCoded gives err a code if it is a ctx's error (or a dial's timeout),
// or a sign that the connection was closed under the call.
func ctxCoded(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := asConnectError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	case errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNRESET):
		return connect.NewError(connect.CodeCanceled, err)
	}
	if m := err.Error(); m == "client disconnected" || m == "http2: stream closed" {
		return connect.NewError(connect.CodeCanceled, err)
	}
	return err
}

// contextDone codes err by ctx's state if ctxCoded leaves it uncoded.
func contextDone(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	err = ctxCoded(err)
	if _, ok := asConnectError(err); ok {
		return err
	}
	switch cerr := ctx.Err(); {
	case errors.Is(cerr, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(cerr, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	return err
}

// uncoded gives an error without a code CodeUnknown.
func uncoded(err error) error {
	if err == nil {
		return nil
	}
	err = ctxCoded(err)
	if _, ok := asConnectError(err); ok {
		return err
	}
	return connect.NewError(connect.CodeUnknown, err)
}

// transportError is the error of a call whose http.Client.Do failed
// while ctx is still live.
func transportError(ctx context.Context, r *http.Request, err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF // io.EOF means something else in connect-go
	}
	err = ctxCoded(err)
	if _, ok := asConnectError(err); !ok {
		msg := err.Error()
		switch {
		case r.URL.Scheme == "http" && strings.HasPrefix(msg, `Post "`) &&
			(strings.Contains(msg, "net/http: HTTP/1.x transport connection broken: malformed HTTP response") || strings.HasSuffix(msg, "write: broken pipe")):
			err = fmt.Errorf("possible h2c configuration issue when talking to gRPC server, see %s: %w", connectErrorsURL, err)
		case strings.HasPrefix(msg, `Post "`) && strings.Contains(msg, "http2: Transport: cannot retry err") &&
			strings.HasSuffix(msg, "after Request.Body was written; define Request.GetBody to avoid this error"):
			err = fmt.Errorf("possible missing connect.WithGRPC() client option when talking to gRPC server, see %s: %w", connectErrorsURL, err)
		}
	}
	err = rstError(ctx, err)
	if _, ok := asConnectError(err); !ok {
		err = connect.NewError(connect.CodeUnavailable, err)
	}
	return err
}

// rstError codes an HTTP/2 stream reset from the server (an http.Client
// of the caller's may speak HTTP/2) by its reason.
func rstError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := asConnectError(err); ok {
		return err
	}
	if ue := new(url.Error); errors.As(err, &ue) {
		err = ue.Unwrap()
	}
	msg, ok := strings.CutPrefix(err.Error(), "stream error: ")
	if !ok {
		return err
	}
	if msg, ok = strings.CutSuffix(msg, "; received from peer"); !ok {
		return err
	}
	i := strings.LastIndex(msg, ";")
	if i < 0 || i >= len(msg)-1 {
		return err
	}
	switch strings.TrimSpace(msg[i+1:]) {
	case "NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR",
		"SETTINGS_TIMEOUT", "FRAME_SIZE_ERROR", "COMPRESSION_ERROR", "CONNECT_ERROR":
		return connect.NewError(connect.CodeInternal, err)
	case "REFUSED_STREAM":
		return connect.NewError(connect.CodeUnavailable, err)
	case "CANCEL":
		if deadline, ok := ctx.Deadline(); ok && time.Now().After(deadline) {
			return connect.NewError(connect.CodeDeadlineExceeded, err)
		}
		return connect.NewError(connect.CodeCanceled, err)
	case "ENHANCE_YOUR_CALM":
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("bandwidth exhausted: %w", err))
	case "INADEQUATE_SECURITY":
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("transport protocol insecure: %w", err))
	}
	return err
}

// wireErrorJSON is the JSON body of a Connect error:
// {"code": "invalid_argument", "message": "...", "details": [{"type": ..., "value": base64}]}.
// An unknown code leaves code 0 and the rest is still read.
type wireErrorJSON struct {
	code    connect.Code
	Message string
	Details []*anypb.Any
}

func (w *wireErrorJSON) UnmarshalJSON(data []byte) error {
	var raw struct {
		Code    string        `json:"code"`
		Message string        `json:"message"`
		Details []*wireDetail `json:"details"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	w.Message = raw.Message
	w.Details = nil
	for _, d := range raw.Details {
		if d == nil {
			w.Details = append(w.Details, nil)
			continue
		}
		w.Details = append(w.Details, &anypb.Any{TypeUrl: d.typeURL, Value: d.value})
	}
	_ = w.code.UnmarshalText([]byte(raw.Code))
	return nil
}

// wireDetail is one error detail: a type name (or URL) and base64 bytes,
// padded or not.
type wireDetail struct {
	typeURL string
	value   []byte
}

func (d *wireDetail) UnmarshalJSON(data []byte) error {
	var raw struct {
		Type  string `json:"type"`
		Value string `json:"value"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	if !strings.Contains(raw.Type, "/") {
		raw.Type = "type.googleapis.com/" + raw.Type
	}
	v, err := connect.DecodeBinaryHeader(raw.Value)
	if err != nil {
		return fmt.Errorf("decode base64: %w", err)
	}
	d.typeURL, d.value = raw.Type, v
	return nil
}

// payload is a request body over a pooled buffer: once the call has
// returned it is released, and a transport that still reads it (net/http
// may, after it has the answer) reads nothing more from the buffer.
type payload struct {
	mu   sync.Mutex
	b    []byte // guarded by mu; nil once released
	off  int    // guarded by mu
	done bool   // guarded by mu
}

var errReleased = errors.New("client: request body read after its call returned")

func (p *payload) Read(dst []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return 0, errReleased
	}
	if p.off >= len(p.b) {
		return 0, io.EOF
	}
	n := copy(dst, p.b[p.off:])
	p.off += n
	return n, nil
}

func (p *payload) Close() error { return nil }

// again is the request's GetBody: the same bytes from the start, for a
// transport that sends the request again.
func (p *payload) again() (io.ReadCloser, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return nil, errReleased
	}
	p.off = 0
	return p, nil
}

func (p *payload) release() {
	p.mu.Lock()
	p.done, p.b = true, nil
	p.mu.Unlock()
}

func noBody() (io.ReadCloser, error) { return http.NoBody, nil }

// Buffers for encoded requests and read answers. One larger than
// maxPooledBuffer is left to the garbage collector.
var buffers = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

const maxPooledBuffer = 1 << 20

func getBuffer() *[]byte { return buffers.Get().(*[]byte) }

func putBuffer(b *[]byte) {
	if cap(*b) <= maxPooledBuffer {
		*b = (*b)[:0]
		buffers.Put(b)
	}
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
