package server

import (
	"context"
	"maps"
	"net/http"
	"slices"

	"unsafe"

	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/internal/h1srv"
)

// LoopPaths are the request targets whose plain HTTP/1.1 calls a
// connection loop (package h1srv) hands to ServeH1: Schedule and
// ScheduleBatch.
var LoopPaths = []string{
	hourglassv1connect.HourglassServiceScheduleProcedure,
	hourglassv1connect.HourglassServiceScheduleBatchProcedure,
}

// ServeH1 answers a Schedule or ScheduleBatch call that package h1srv's
// connection loop parsed, on the fast path (fast.go): with the same
// checks, and byte for byte the same answers but for the framing, as
// Handler. It declines (false, nothing written) every call Handler's fast
// path would leave to connect-go; the loop then hands the call to the
// http.Server serving Handler.
func (s *Server) ServeH1(ctx context.Context, req *h1srv.Request, w *h1srv.ResponseWriter) bool {
	batch := req.Path == hourglassv1connect.HourglassServiceScheduleBatchProcedure
	if !batch && req.Path != hourglassv1connect.HourglassServiceScheduleProcedure {
		return false
	}
	head := loopHead(req)
	timeout, ok := s.fastTakes(&head, int64(len(req.Body)))
	if !ok {
		return false
	}
	c := fastCalls.Get().(*fastCall)
	own := c.body
	c.body = req.Body // decoded in place in the loop's buffer, valid during the call
	served, err := s.fastCore(ctx, c, batch, timeout, req.RemoteAddr)
	c.body = own
	if !served {
		putFastCall(c)
		return false
	}
	if err != nil {
		var cw captureWriter
		cw.h = http.Header{}
		writeConnectError(&cw, err)
		w.Write(cw.status, cw.fields(), cw.body)
	} else {
		w.Write(http.StatusOK, loopAnswerFields, c.out)
	}
	putFastCall(c)
	return true
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
