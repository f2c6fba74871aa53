package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/internal/wirecodec"
	"github.com/hourglassmq/hourglass/message"
)

// The server answers the calls producers make at high rates, Schedule and
// ScheduleBatch in Connect's protocol with binary protobuf (what package
// client sends), on a path of its own instead of connect-go's handler,
// whose per-call work (contexts, header maps, a request copy, a second
// read for the end of the body, the message structs of the answer and
// their reflection) cost more than storing the messages: a Schedule took
// 38,000 instructions from the mux to the written answer, 8,000 here, and
// a ScheduleBatch of 100 443,000 against 231,000 (BenchmarkHandler under
// callgrind, docs/BENCHMARKS.md). This path reads the body into pooled
// memory, decodes it in place
// (wirecodec.DecodeBatchInto), checks it with the same code as the
// handlers, and writes the answer straight from the IDs
// (wirecodec.AppendResponses). What it answers is byte for byte what
// connect-go answers (TestFastPathMatchesConnect).
//
// It takes only the plain case, and leaves everything else to connect-go
// untouched: other protocols and codecs (gRPC, gRPC-Web, JSON), compressed
// requests, a missing or wrong token, a request it cannot decode in place
// (headers: wirecodec's common shape), and every request that
// fails a check, which connect-go then refuses with its own words. A
// request handed over after its body was read gets the body replayed.
// Cluster nodes never take it (engine.Request bodies here alias pooled
// memory, which a cluster's batching could hold past the call).

// Connect protocol headers and values the fast path reads and writes.
const (
	headerContentType     = "Content-Type"
	headerContentEncoding = "Content-Encoding"
	headerAcceptEncoding  = "Accept-Encoding"
	headerContentLength   = "Content-Length"
	headerConnectVersion  = "Connect-Protocol-Version"
	headerConnectTimeout  = "Connect-Timeout-Ms"
	protoContentType      = "application/proto"
)

var (
	// The values of the answer's fixed headers; net/http copies a
	// response's headers before it sends them and never changes these.
	protoContentTypeValue = []string{protoContentType}
	// acceptEncodingValue is what connect-go announces with its default
	// compressors (gzip only).
	acceptEncodingValue = []string{"gzip"}
)

// front routes the server's HTTP requests: the fast path for what it
// takes, the connect handler for every other RPC (without the mux's
// pattern matching, which was a seventh of a Schedule call's
// instructions), and the mux for the rest.
type front struct {
	s       *Server
	connect http.Handler
	mux     *http.ServeMux
}

const servicePrefix = "/" + hourglassv1connect.HourglassServiceName + "/"

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == hourglassv1connect.HourglassServiceScheduleProcedure:
		if !f.s.fast(w, r, false) {
			f.connect.ServeHTTP(w, r)
		}
	case p == hourglassv1connect.HourglassServiceScheduleBatchProcedure:
		if !f.s.fast(w, r, true) {
			f.connect.ServeHTTP(w, r)
		}
	case strings.HasPrefix(p, servicePrefix) && isMethodName(p[len(servicePrefix):]):
		// What the mux would route there too: a clean path under the
		// service's prefix.
		f.connect.ServeHTTP(w, r)
	default:
		f.mux.ServeHTTP(w, r)
	}
}

// isMethodName reports whether the rest of a path after the service
// prefix is one clean segment, so that the mux would neither clean nor
// redirect it.
func isMethodName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.Contains(s, "/")
}

// fastCall is the memory of one call on the fast path, pooled.
type fastCall struct {
	body []byte
	// err is a panic of fastDecode, answered by fastRun.
	err error
	// loop is set while the connection loop holds the call (loop.go).
	loop loopCall
	msgs wirecodec.Requests
	reqs []engine.Request
	out  []byte
}

var fastCalls = sync.Pool{New: func() any { return new(fastCall) }}

// maxPooledCall bounds the buffers a pooled fastCall keeps: a rare huge
// batch is left to the garbage collector.
const maxPooledCall = 1 << 20

func putFastCall(c *fastCall) {
	if cap(c.body) > maxPooledCall || cap(c.out) > maxPooledCall {
		return
	}
	clear(c.reqs) // drop the references to the bodies and topics
	c.reqs = c.reqs[:0]
	fastCalls.Put(c)
}

// fastHead is what the fast path reads of a call's header fields: the
// first value of each and how many there are.
type fastHead struct {
	contentType, contentEncoding, version, timeout, auth string
	nType, nEncoding, nVersion, nTimeout                 int
}

func firstOf(vals []string) (string, int) {
	if len(vals) == 0 {
		return "", 0
	}
	return vals[0], len(vals)
}

// httpHead reads a fastHead from net/http's header map.
func httpHead(h http.Header) fastHead {
	var f fastHead
	f.contentType, f.nType = firstOf(h[headerContentType])
	f.contentEncoding, f.nEncoding = firstOf(h[headerContentEncoding])
	f.version, f.nVersion = firstOf(h[headerConnectVersion])
	f.timeout, f.nTimeout = firstOf(h[headerConnectTimeout])
	f.auth, _ = firstOf(h["Authorization"])
	return f
}

// fastTakes reports whether the fast path takes a call with these header
// fields, and its Connect timeout (-1 for none).
func (s *Server) fastTakes(h *fastHead, contentLength int64) (time.Duration, bool) {
	if s.opts.Cluster != nil || contentLength > int64(s.readMaxBytes()) {
		return 0, false
	}
	if h.nType != 1 || h.contentType != protoContentType ||
		(h.nEncoding > 0 && (h.nEncoding != 1 || h.contentEncoding != "identity")) ||
		(h.nVersion > 0 && (h.nVersion != 1 || h.version != "1")) {
		return 0, false
	}
	timeout, ok := connectTimeout(h.timeout, h.nTimeout)
	if !ok {
		return 0, false
	}
	if s.opts.AuthToken != "" && checkAuth(s.opts.AuthToken, h.auth) != nil {
		return 0, false
	}
	return timeout, true
}

// fast serves a Schedule (batch false) or ScheduleBatch call on the fast
// path if it can, and reports whether it did. When it did not, connect-go
// must serve r, whose body reads as it did.
func (s *Server) fast(w http.ResponseWriter, r *http.Request, batch bool) bool {
	if r.Method != http.MethodPost {
		return false
	}
	head := httpHead(r.Header)
	timeout, ok := s.fastTakes(&head, r.ContentLength)
	if !ok {
		return false
	}
	c := fastCalls.Get().(*fastCall)
	var err error
	c.body, err = readBody(c.body[:0], r.Body, r.ContentLength, s.readMaxBytes())
	if err != nil {
		// Connect-go reads on from where this stopped and answers the
		// error. c.body stays with the replay, out of the pool.
		replay(r, c.body)
		return false
	}
	served, err := s.fastCore(r.Context(), c, batch, timeout, r.RemoteAddr)
	if !served {
		replay(r, c.body)
		return false
	}
	r.Body.Close()
	if err != nil {
		writeConnectError(w, err)
		putFastCall(c)
		return true
	}
	hdr := w.Header()
	hdr[headerContentType] = protoContentTypeValue
	hdr[headerAcceptEncoding] = acceptEncodingValue
	hdr[headerContentLength] = []string{strconv.Itoa(len(c.out))}
	w.WriteHeader(http.StatusOK)
	w.Write(c.out) // a failed write is the client's loss, as in connect-go
	putFastCall(c)
	return true
}

// fastCore is the fast path after the header checks, for net/http: it
// decodes and checks the body in c (fastDecode), and schedules it under
// the call's timeout (fastRun). served is false when connect-go must take
// the call instead: nothing was scheduled then. err is the call's error,
// to be answered in Connect's form (writeConnectError); without one, the
// encoded answer is in c.out.
func (s *Server) fastCore(ctx context.Context, c *fastCall, batch bool, timeout time.Duration, peer string) (served bool, err error) {
	if !s.fastDecode(c, batch) {
		return false, nil
	}
	return true, s.fastRun(ctx, c, batch, timeout, peer)
}

func procedureOf(batch bool) string {
	if batch {
		return hourglassv1connect.HourglassServiceScheduleBatchProcedure
	}
	return hourglassv1connect.HourglassServiceScheduleProcedure
}

// fastDecode decodes and checks the body in c, without acting on it. It
// reports false when connect-go must take the call instead (it could not
// be decoded in place, or it fails a check). A panic while decoding is
// kept in c.err, as connect.WithRecover in Handler would answer it.
func (s *Server) fastDecode(c *fastCall, batch bool) (ok bool) {
	c.err = nil
	defer s.recoverCall(procedureOf(batch), &ok, &c.err)
	if batch {
		if !wirecodec.DecodeBatchInto(c.body, &c.msgs, s.topicString) || len(c.msgs.Msgs) > MaxBatch {
			return false
		}
	} else if !wirecodec.DecodeRequestInto(c.body, &c.msgs, s.topicString) {
		return false
	}
	var cerr *connect.Error
	if c.reqs, cerr = s.requests(c.reqs[:0], c.msgs.Msgs, s.eng.Now()); cerr != nil {
		return false
	}
	return true
}

// fastRun schedules what fastDecode made of c's body under the call's
// timeout (-1: none) and leaves the encoded answer in c.out, or returns
// the call's error.
func (s *Server) fastRun(ctx context.Context, c *fastCall, batch bool, timeout time.Duration, peer string) (err error) {
	procedure := procedureOf(batch)
	start := time.Now()
	if timeout >= 0 {
		d := newLazyDeadline(ctx, start.Add(timeout))
		defer d.cancel()
		ctx = d
	}
	s.fastServed.Add(1)
	ids, err := s.fastSchedule(ctx, c, procedure)
	if err != nil {
		newLogInterceptor(s.log).report(ctx, procedure, peer, start, err)
		return err
	}
	if batch {
		c.out = wirecodec.AppendResponses(c.out[:0], ids)
	} else {
		c.out = wirecodec.AppendResponse(c.out[:0], ids[0])
	}
	return nil
}

// fastSchedule schedules what fastDecode made of c's body.
func (s *Server) fastSchedule(ctx context.Context, c *fastCall, procedure string) (ids []message.ID, err error) {
	ok := true
	defer s.recoverCall(procedure, &ok, &err)
	if c.err != nil {
		return nil, c.err // fastDecode panicked
	}
	if err := ctx.Err(); err != nil {
		// Connect-go checks the deadline before it calls a handler.
		return nil, serverError(err)
	}
	return s.schedule(ctx, c.reqs)
}

// recoverCall turns a panic of a call into the Internal error
// connect.WithRecover in Handler answers, in *err, and sets *ok: the
// call is answered. It must be deferred.
func (s *Server) recoverCall(procedure string, ok *bool, err *error) {
	p := recover()
	if p == nil {
		return
	}
	if p == http.ErrAbortHandler { //nolint:errorlint // net/http compares with ==
		panic(p)
	}
	s.log.Error("server: panic in handler", "procedure", procedure, "panic", fmt.Sprint(p))
	*ok, *err = true, connect.NewError(connect.CodeInternal, errors.New("internal error"))
}

// topicString returns b as a string, the same one as last time for the
// same topic: most calls name the topic of the one before.
func (s *Server) topicString(b []byte) string {
	if p := s.lastTopic.Load(); p != nil && *p == string(b) {
		return *p
	}
	t := string(b)
	s.lastTopic.Store(&t)
	return t
}

// connectTimeout parses Connect-Timeout-Ms as connect-go does: -1 without
// one, ok false for a value connect-go refuses (it words the error).
func connectTimeout(val string, n int) (time.Duration, bool) {
	if n == 0 {
		return -1, true
	}
	if n != 1 || len(val) > 10 {
		return 0, false
	}
	ms, err := strconv.ParseInt(val, 10, 64)
	if err != nil || ms < 0 {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// readBody appends body to dst up to its end. An error means the caller
// must leave the request to connect-go: a read failed, or the body is
// longer than limit (dst then holds what was read).
func readBody(dst []byte, body io.Reader, length int64, limit int) ([]byte, error) {
	if length >= 0 && cap(dst) < int(length)+1 {
		// One byte more, so that the read that finds the end needs no
		// larger buffer.
		dst = make([]byte, 0, length+1)
	}
	for {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		n, err := body.Read(dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+n]
		if len(dst) > limit {
			return dst, errTooLong
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

var errTooLong = errors.New("server: request body too long")

// replay makes r's body read as it did before read was taken from it.
func replay(r *http.Request, read []byte) {
	r.Body = replayBody{Reader: io.MultiReader(bytes.NewReader(read), r.Body), Closer: r.Body}
}

type replayBody struct {
	io.Reader
	io.Closer
}

// errorWriter writes errors as connect-go's handlers do.
var errorWriter = connect.NewErrorWriter()

// writeConnectError answers a Connect unary call with err, as connect-go's
// handler does: the header it sets on every answer, then the error (whose
// Content-Type is JSON).
func writeConnectError(w http.ResponseWriter, err error) {
	w.Header()[headerAcceptEncoding] = acceptEncodingValue
	errorWriter.Write(w, fakeConnectRequest, err)
}

// fakeConnectRequest is what connect.ErrorWriter needs to know of a call
// to answer it in Connect's unary protocol.
var fakeConnectRequest = &http.Request{Method: http.MethodPost, Header: http.Header{
	headerContentType: protoContentTypeValue, headerConnectVersion: {"1"},
}}
