package server

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"time"
	"unsafe"

	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/internal/h1srv"
)

// LoopPaths are the request targets whose plain HTTP/1.1 calls a
// connection loop (package h1srv) hands to Take: every unary procedure of
// the service. (ReceiveStream streams its answer: net/http's.)
var LoopPaths = []string{
	hourglassv1connect.HourglassServiceScheduleProcedure,
	hourglassv1connect.HourglassServiceScheduleBatchProcedure,
	hourglassv1connect.HourglassServiceReceiveProcedure,
	hourglassv1connect.HourglassServiceAckBatchProcedure,
	hourglassv1connect.HourglassServiceAckProcedure,
	hourglassv1connect.HourglassServiceNackProcedure,
	hourglassv1connect.HourglassServiceCancelProcedure,
	hourglassv1connect.HourglassServiceStatsProcedure,
	hourglassv1connect.HourglassServiceTimeProcedure,
}

// Take takes every call to LoopPaths that package h1srv's connection loop
// parsed: the hot ones on their own paths (takeFast), and the rest
// through Handler on the loop's connection (takeHTTP), so that no call a
// client makes hands its connection to net/http for good (a client's
// pool reuses its connections for every call; one Cancel on a pooled
// connection used to move that connection's later Schedules and Receives
// off the loop).
func (s *Server) Take(req *h1srv.Request) (h1srv.Call, bool) {
	if c, ok := s.takeFast(req); ok {
		return c, true
	}
	return s.takeHTTP(req), true
}

// takeFast takes a Schedule or ScheduleBatch call that package h1srv's
// connection loop parsed for the fast path (fast.go), or a Receive,
// AckBatch, Ack or Nack call (loopconsume.go), with the same checks as Handler's: it
// copies, decodes and checks the body, and returns the call that acts on
// it and answers byte for byte as Handler would but for the framing. It
// declines (false, nothing done) every call Handler's connect-go would
// answer otherwise, or with an error: takeHTTP takes those.
func (s *Server) takeFast(req *h1srv.Request) (h1srv.Call, bool) {
	batch := req.Path == hourglassv1connect.HourglassServiceScheduleBatchProcedure
	if !batch && req.Path != hourglassv1connect.HourglassServiceScheduleProcedure {
		switch req.Path {
		case hourglassv1connect.HourglassServiceReceiveProcedure:
			return s.takeConsume(req, callReceive)
		case hourglassv1connect.HourglassServiceAckBatchProcedure:
			return s.takeConsume(req, callAckBatch)
		case hourglassv1connect.HourglassServiceAckProcedure:
			return s.takeConsume(req, callAck)
		case hourglassv1connect.HourglassServiceNackProcedure:
			return s.takeConsume(req, callNack)
		}
		return nil, false
	}
	head := loopHead(req)
	timeout, ok := s.fastTakes(&head, int64(len(req.Body)))
	if !ok {
		return nil, false
	}
	c := fastCalls.Get().(*fastCall)
	// The loop reads on while the call is in flight: the body is copied
	// (a few hundred bytes for a Schedule), then decoded in place.
	c.body = append(c.body[:0], req.Body...)
	if !s.fastDecode(c, batch) {
		putFastCall(c)
		return nil, false
	}
	c.loop = loopCall{s: s, batch: batch, timeout: timeout, peer: req.RemoteAddr}
	return c, true
}

// loopCall is what a fastCall the loop took needs to be served.
type loopCall struct {
	s       *Server
	batch   bool
	timeout time.Duration
	peer    string
}

// Serve schedules a call Take took and writes its answer (h1srv.Call).
func (c *fastCall) Serve(ctx context.Context, w *h1srv.ResponseWriter) {
	l := c.loop
	c.loop = loopCall{}
	if err := l.s.fastRun(ctx, c, l.batch, l.timeout, l.peer); err != nil {
		var cw captureWriter
		cw.h = http.Header{}
		writeConnectError(&cw, err)
		w.Write(cw.status, cw.fields(), cw.body)
	} else {
		w.Write(http.StatusOK, loopAnswerFields, c.out)
	}
	putFastCall(c)
}

// loopAnswerFields are the header fields of a fast path's answer, as fast
// writes them.
var loopAnswerFields = []string{headerContentType, protoContentType, headerAcceptEncoding, "gzip"}

// loopHead reads a fastHead from a request of the loop. Its strings alias
// the loop's buffer: they are valid during the call only, and the fast
// path keeps none of them (topicString copies topics).
func loopHead(req *h1srv.Request) fastHead {
	var f fastHead
	var b []byte
	b, f.nType = req.Header(headerContentType)
	f.contentType = bytesString(b)
	b, f.nEncoding = req.Header(headerContentEncoding)
	f.contentEncoding = bytesString(b)
	b, f.nVersion = req.Header(headerConnectVersion)
	f.version = bytesString(b)
	b, f.nTimeout = req.Header(headerConnectTimeout)
	f.timeout = bytesString(b)
	b, _ = req.Header("Authorization")
	f.auth = bytesString(b)
	return f
}

func bytesString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// captureWriter keeps an error answer to write it to the loop.
type captureWriter struct {
	h      http.Header
	status int
	body   []byte
}

func (w *captureWriter) Header() http.Header { return w.h }
func (w *captureWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}
func (w *captureWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body = append(w.body, p...)
	return len(p), nil
}

// fields returns the header as name, value pairs, sorted by name as
// net/http writes them, without the framing the loop writes itself.
func (w *captureWriter) fields() []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(w.h)) {
		if k == headerContentLength || k == "Date" || k == "Connection" || k == "Transfer-Encoding" {
			continue
		}
		for _, v := range w.h[k] {
			out = append(out, k, v)
		}
	}
	return out
}
