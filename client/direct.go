package client

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/internal/h1"
	"github.com/hourglassmq/hourglass/internal/wirecodec"
)

// direct is the service New gives when no connect option asks for more
// than the default protocol: connect-go's generated client for every RPC
// but those producers and consumers make at high rates, Schedule,
// ScheduleBatch, Receive, AckBatch, Ack and Nack, which it sends itself in
// Connect's unary protocol (binary protobuf, uncompressed) and decodes
// with internal/wirecodec. Over the default
// HTTP client (NewHTTPClient) they go out through internal/h1's Post,
// which needs no http.Request or http.Response; over any other
// http.Client, and for what Post leaves to it (directpost.go), through
// http.Client.Do.
// Connect-go's unary client spent about a third of the load generator's
// CPU per call on header maps, interceptors, its call object and pooled
// compressors that a Schedule never uses (docs/BENCHMARKS.md).
//
// What a caller sees is what connect-go gives: the same request on the
// wire (headers, body bytes, Connect-Timeout-Ms from the ctx deadline,
// the caller's own request headers), and the same results: the response
// message and headers, and for every failure a *connect.Error with the
// same Code, Message, Details and Meta (TestDirectMatchesConnect). Its
// methods may be called from any goroutine.
//
// Known gap: a context from connect.NewClientContext is not filled in
// with the response's headers on this path (connect-go keeps the key it
// looks for private). TODO: fall back to connect-go for such a context
// once connect-go exposes a way to tell.
type direct struct {
	hourglassv1connect.HourglassServiceClient
	hc   connect.HTTPClient
	auth []string // {"Bearer <token>"}, or nil without a token
	// tr is hc's transport when it is internal/h1's and hc adds nothing
	// of its own to a call (no cookie jar, no timeout); nil otherwise.
	// The routes' targets are then for tr.Post.
	tr *h1.Transport
	// The procedures the direct path sends.
	sched, batch, recv, ackBatch, ack, nack route
}

// route is where one procedure's calls go.
type route struct {
	tmpl *http.Request // template of a request: method, URL, host
	// post is the target of tr.Post, nil where tr would not send the
	// request itself (or tr is nil).
	post *h1.Target
}

// newDirect returns the direct service over svc, or nil if connect-go
// would refuse addr (it then answers every call with that error itself).
func newDirect(svc hourglassv1connect.HourglassServiceClient, hc connect.HTTPClient, addr, token string) *direct {
	base := strings.TrimRight(addr, "/")
	d := &direct{HourglassServiceClient: svc, hc: hc}
	if token != "" {
		d.auth = []string{"Bearer " + token}
	}
	var fixed http.Header
	if c, ok := hc.(*http.Client); ok && c.Jar == nil && c.Timeout == 0 {
		if tr, ok := c.Transport.(*h1.Transport); ok {
			fixed = http.Header{"Connect-Protocol-Version": protocolVersionValue, headerContentType: protoContentType, "Accept-Encoding": acceptGzip}
			if d.auth != nil {
				fixed["Authorization"] = d.auth
			}
			d.tr = tr
		}
	}
	for _, p := range []struct {
		dst       *route
		procedure string
		// pipelined: the calls may share pipelined connections (with
		// WithPipelining). A Receive may wait long for its answer (a
		// long poll), and would hold up every call behind it; the
		// consumers' other calls are left as they were.
		pipelined bool
	}{
		{&d.sched, hourglassv1connect.HourglassServiceScheduleProcedure, true},
		{&d.batch, hourglassv1connect.HourglassServiceScheduleBatchProcedure, true},
		{&d.recv, hourglassv1connect.HourglassServiceReceiveProcedure, false},
		{&d.ackBatch, hourglassv1connect.HourglassServiceAckBatchProcedure, false},
		{&d.ack, hourglassv1connect.HourglassServiceAckProcedure, false},
		{&d.nack, hourglassv1connect.HourglassServiceNackProcedure, false},
	} {
		// Parsed as connect-go parses its URLs, so that a transport
		// error names the same URL.
		u, err := url.ParseRequestURI(base + p.procedure)
		if err != nil {
			return nil
		}
		p.dst.tmpl = &http.Request{Method: http.MethodPost, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Host: u.Host}
		if d.tr != nil {
			p.dst.post = d.tr.NewTarget(u, "", fixed)
			if !p.pipelined && p.dst.post != nil {
				p.dst.post = p.dst.post.Unpipelined()
			}
		}
	}
	return d
}

// unary makes a call of route r through d.call and wraps its answer as
// connect-go's client does.
func unary[Req, Res any](ctx context.Context, d *direct, r *route, req *connect.Request[Req]) (*connect.Response[Res], error) {
	res := new(Res)
	h, err := d.call(ctx, r.tmpl, r.post, req.Header(), req.Msg, res)
	if err != nil {
		return nil, err
	}
	out := connect.NewResponse(res)
	copyResponseHeader(out.Header(), out.Trailer(), h)
	return out, nil
}

// Schedule implements hourglassv1connect.HourglassServiceClient.
func (d *direct) Schedule(ctx context.Context, req *connect.Request[hourglassv1.ScheduleRequest]) (*connect.Response[hourglassv1.ScheduleResponse], error) {
	return unary[hourglassv1.ScheduleRequest, hourglassv1.ScheduleResponse](ctx, d, &d.sched, req)
}

// ScheduleBatch implements hourglassv1connect.HourglassServiceClient.
func (d *direct) ScheduleBatch(ctx context.Context, req *connect.Request[hourglassv1.ScheduleBatchRequest]) (*connect.Response[hourglassv1.ScheduleBatchResponse], error) {
	return unary[hourglassv1.ScheduleBatchRequest, hourglassv1.ScheduleBatchResponse](ctx, d, &d.batch, req)
}

// Receive implements hourglassv1connect.HourglassServiceClient.
func (d *direct) Receive(ctx context.Context, req *connect.Request[hourglassv1.ReceiveRequest]) (*connect.Response[hourglassv1.ReceiveResponse], error) {
	return unary[hourglassv1.ReceiveRequest, hourglassv1.ReceiveResponse](ctx, d, &d.recv, req)
}

// AckBatch implements hourglassv1connect.HourglassServiceClient.
func (d *direct) AckBatch(ctx context.Context, req *connect.Request[hourglassv1.AckBatchRequest]) (*connect.Response[hourglassv1.AckBatchResponse], error) {
	return unary[hourglassv1.AckBatchRequest, hourglassv1.AckBatchResponse](ctx, d, &d.ackBatch, req)
}

// Ack implements hourglassv1connect.HourglassServiceClient.
func (d *direct) Ack(ctx context.Context, req *connect.Request[hourglassv1.AckRequest]) (*connect.Response[hourglassv1.AckResponse], error) {
	return unary[hourglassv1.AckRequest, hourglassv1.AckResponse](ctx, d, &d.ack, req)
}

// Nack implements hourglassv1connect.HourglassServiceClient.
func (d *direct) Nack(ctx context.Context, req *connect.Request[hourglassv1.NackRequest]) (*connect.Response[hourglassv1.NackResponse], error) {
	return unary[hourglassv1.NackRequest, hourglassv1.NackResponse](ctx, d, &d.nack, req)
}

// The Connect protocol's headers and values, as connect-go sends them.
const (
	headerContentType     = "Content-Type"
	headerContentEncoding = "Content-Encoding"
	headerTimeout         = "Connect-Timeout-Ms"
	trailerPrefix         = "Trailer-"
	connectErrorsURL      = "https://connectrpc.com/docs/go/common-errors"
)

// Shared values of the request headers. net/http only reads them; a
// caller who appends to one gets a copy (their capacity is their length).
var (
	userAgentValue       = []string{fmt.Sprintf("connect-go/%s (%s)", connect.Version, runtime.Version())}
	protocolVersionValue = []string{"1"}
	protoContentType     = []string{"application/proto"}
	acceptGzip           = []string{"gzip"}
)

// call sends msg as a Connect unary call through tmpl's URL with the
// caller's header (which it fills in, as connect-go does), decodes the
// answer into out, and returns the response's header. Errors are
// *connect.Error as connect-go's unary client words them. With a target
// (tg not nil) it is sent with d.tr.Post when Post can, else through
// http.Client.Do.
func (d *direct) call(ctx context.Context, tmpl *http.Request, tg *h1.Target, header http.Header, msg, out any) (http.Header, error) {
	buf := getBuffer()
	data, err := wirecodec.Codec{}.MarshalAppend((*buf)[:0], msg)
	if err != nil {
		putBuffer(buf)
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("marshal message: %w", err))
	}
	if _, ok := header["User-Agent"]; !ok {
		header["User-Agent"] = userAgentValue
	}
	header["Connect-Protocol-Version"] = protocolVersionValue
	header[headerContentType] = protoContentType
	header["Accept-Encoding"] = acceptGzip
	if d.auth != nil {
		header["Authorization"] = d.auth
	}
	if deadline, ok := ctx.Deadline(); ok {
		if v := encodeTimeout(time.Until(deadline)); v != "" {
			header[headerTimeout] = []string{v}
		}
	}
	if tg != nil {
		h, done, err := d.post(ctx, tmpl, tg, header, buf, data, out)
		if done {
			putBuffer(buf)
			return h, err
		}
	}
	r := tmpl.WithContext(ctx)
	r.Header = header
	if h := header["Host"]; len(h) > 0 && h[0] != "" {
		r.Host = h[0]
	}
	var body *payload
	if len(data) > 0 {
		body = &payload{b: data}
		r.Body, r.ContentLength, r.GetBody = body, int64(len(data)), body.again
	} else {
		r.Body, r.GetBody = http.NoBody, noBody
	}
	resp, err := d.hc.Do(r)
	if body != nil {
		body.release()
	}
	*buf = data
	putBuffer(buf)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, ctxError(cerr)
		}
		return nil, transportError(ctx, r, err)
	}
	if err := validate(resp); err != nil {
		resp.Body.Close()
		if cerr := ctx.Err(); cerr != nil {
			return nil, ctxError(cerr)
		}
		return nil, err
	}
	if err := receive(ctx, resp, out); err != nil {
		resp.Body.Close()
		return nil, err
	}
	if err := resp.Body.Close(); err != nil {
		return nil, uncoded(rstError(ctx, contextDone(ctx, err)))
	}
	return resp.Header, nil
}

// validate checks the status, Content-Type and Content-Encoding of an
// answer as connect-go does, and for a non-200 answer returns the error
// its JSON body holds, with its headers as Meta.
func validate(resp *http.Response) error {
	if err := checkHead(resp.StatusCode, resp.Status, resp.Header); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return wireError(resp)
	}
	return nil
}

// checkHead checks the status, Content-Type and Content-Encoding of an
// answer as connect-go does, before it reads the body.
func checkHead(status int, statusText string, h http.Header) error {
	ct := first(h[headerContentType])
	if status != http.StatusOK {
		if ct != "application/json" && ct != "application/json; charset=utf-8" {
			return connect.NewError(httpToCode(status), errors.New(statusText))
		}
	} else {
		codec, ok := strings.CutPrefix(ct, "application/")
		switch {
		case !ok:
			return connect.NewError(connect.CodeUnknown, fmt.Errorf("invalid content-type: %q; expecting %q", ct, protoContentType[0]))
		case codec != "proto":
			return connect.NewError(connect.CodeInternal, fmt.Errorf("invalid content-type: %q; expecting %q", ct, protoContentType[0]))
		}
	}
	if enc := first(h[headerContentEncoding]); enc != "" && enc != "identity" && enc != "gzip" {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("unknown encoding %q: accepted encodings are %v", enc, "gzip"))
	}
	return nil
}

// wireError decodes the Connect JSON error body of a non-200 answer. A
// body that cannot be read or decoded gives the code the HTTP status
// maps to and the status line as the message.
func wireError(resp *http.Response) *connect.Error {
	buf := getBuffer()
	defer putBuffer(buf)
	// Any failure to read it gives the status's error, so no ctx rules.
	data, err := readBody(context.Background(), (*buf)[:0], resp.Body)
	*buf = data
	return wireErrorOf(resp.StatusCode, resp.Status, resp.Header, data, err)
}

// wireErrorOf is wireError for an answer whose body was read: data, and
// the error that stopped the reading, if any.
func wireErrorOf(status int, statusText string, h http.Header, data []byte, err error) *connect.Error {
	byStatus := func() *connect.Error { return connect.NewError(httpToCode(status), errors.New(statusText)) }
	if err != nil {
		return byStatus()
	}
	if len(data) > 0 && first(h[headerContentEncoding]) == "gzip" {
		if data, err = gunzip(data); err != nil {
			return byStatus()
		}
	}
	var w wireErrorJSON
	if json.Unmarshal(data, &w) != nil {
		return byStatus()
	}
	code := w.code
	if code == 0 {
		code = httpToCode(status)
	}
	if code < connect.CodeCanceled || code > connect.CodeUnauthenticated {
		code = connect.CodeUnknown
	}
	e := connect.NewWireError(code, errors.New(w.Message))
	for _, det := range w.Details {
		if det == nil {
			e.AddDetail(nil)
			continue
		}
		dd, err := connect.NewErrorDetail(det)
		if err != nil {
			return byStatus() // not reached: an *anypb.Any is taken as it is
		}
		e.AddDetail(dd)
	}
	meta := e.Meta()
	for k, v := range h {
		if !strings.HasPrefix(k, trailerPrefix) {
			meta[k] = append([]string(nil), v...)
		}
	}
	for k, v := range h {
		if t, ok := strings.CutPrefix(k, trailerPrefix); ok && len(v) > 0 {
			meta[t] = append(meta[t], v...)
		}
	}
	return e
}

// receive reads and decodes a 200 answer's body into out.
func receive(ctx context.Context, resp *http.Response, out any) error {
	buf := getBuffer()
	defer putBuffer(buf)
	data, err := readBody(ctx, (*buf)[:0], resp.Body)
	*buf = data
	return decodeAnswer(ctx, resp.Header, data, err, out)
}

// decodeAnswer decodes a 200 answer's body, data, into out; err is what
// stopped reading it (readBody's error), if anything did.
func decodeAnswer(ctx context.Context, h http.Header, data []byte, err error, out any) error {
	if err != nil {
		err = contextDone(ctx, err)
		if _, ok := asConnectError(err); !ok {
			err = connect.NewError(connect.CodeUnknown, fmt.Errorf("read message: %w", err))
		}
		return unaryReceiveError(err)
	}
	if len(data) > 0 && first(h[headerContentEncoding]) == "gzip" {
		if data, err = gunzip(data); err != nil {
			return unaryReceiveError(err)
		}
	}
	if err := (wirecodec.Codec{}).Unmarshal(data, out); err != nil {
		return unaryReceiveError(connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("unmarshal message: %w", err)))
	}
	return nil
}

// unaryReceiveError is how connect-go reports a failure to receive the
// one message of a unary answer.
func unaryReceiveError(err error) error {
	err = uncoded(err)
	if errors.Is(err, io.EOF) {
		return connect.NewError(connect.CodeUnimplemented, errors.New("unary response has zero messages"))
	}
	return err
}

// readBody appends what r holds to dst. A ctx that has ended stops it
// before each read, as connect-go checks before it reads.
func readBody(ctx context.Context, dst []byte, r io.Reader) ([]byte, error) {
	for {
		if err := ctx.Err(); err != nil {
			return dst, ctxError(err)
		}
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := r.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, rstError(ctx, contextDone(ctx, err))
		}
	}
}

// gunzip decompresses a gzip body, with connect-go's errors.
func gunzip(data []byte) ([]byte, error) {
	zr, _ := gzipReaders.Get().(*gzip.Reader)
	if zr == nil {
		zr = new(gzip.Reader)
	}
	if err := zr.Reset(bytesReader(data)); err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("get decompressor: %w", err))
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		if e, ok := asConnectError(ctxCoded(err)); ok {
			return nil, e
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("decompress: %w", err))
	}
	if err := zr.Close(); err != nil {
		return nil, connect.NewError(connect.CodeUnknown, fmt.Errorf("recycle decompressor: %w", err))
	}
	gzipReaders.Put(zr)
	return out, nil
}

var gzipReaders sync.Pool

// copyResponseHeader splits an answer's header into a response's header
// and trailer, as connect-go does for unary calls (trailers travel as
// "Trailer-" headers).
func copyResponseHeader(header, trailer, from http.Header) {
	for k, v := range from {
		if t, ok := strings.CutPrefix(k, trailerPrefix); ok {
			trailer[t] = v
			continue
		}
		header[k] = v
	}
}

// encodeTimeout is Connect-Timeout-Ms for a ctx with d left: whole
// milliseconds, at least 1, and "" (no header) past ten digits.
func encodeTimeout(d time.Duration) string {
	s := strconv.FormatInt(max(int64(d/time.Millisecond), 1), 10)
	if len(s) > 10 {
		return ""
	}
	return s
}

// httpToCode is the code connect-go gives an answer with this HTTP status
// and no Connect error body (the gRPC mapping of HTTP statuses).
func httpToCode(status int) connect.Code {
	switch status {
	case 400:
		return connect.CodeInternal
	case 401:
		return connect.CodeUnauthenticated
	case 403:
		return connect.CodePermissionDenied
	case 404:
		return connect.CodeUnimplemented
	case 429, 502, 503, 504:
		return connect.CodeUnavailable
	}
	return connect.CodeUnknown
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
