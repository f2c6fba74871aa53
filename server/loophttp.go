package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/textproto"
	"net/url"

	"github.com/hourglassmq/hourglass/internal/h1srv"
)

// httpCall is a call to one of LoopPaths that the fast paths leave to
// connect-go (other procedures, JSON, compression, a bad token, a failed
// check): the loop serves it through Handler on its own connection, with
// the request net/http would have made and the answer net/http would
// have written, but framed with a Content-Length (the whole answer is
// collected first: a unary call's answer is one message).
type httpCall struct {
	s      *Server
	path   string
	host   string
	header http.Header
	body   []byte
	close  bool
	peer   string
}

// takeHTTP copies what serving req through Handler needs.
func (s *Server) takeHTTP(req *h1srv.Request) h1srv.Call {
	c := &httpCall{s: s, path: req.Path, header: make(http.Header, len(req.Fields)),
		body: bytes.Clone(req.Body), close: req.Close, peer: req.RemoteAddr}
	for _, f := range req.Fields {
		k := textproto.CanonicalMIMEHeaderKey(string(f.Name))
		if k == "Host" {
			c.host = string(f.Value) // as net/http: in Request.Host, not the header
			continue
		}
		c.header[k] = append(c.header[k], string(f.Value))
	}
	return c
}

// loopHandler is the Handler the loop serves httpCalls with, made once.
func (s *Server) loopHandler() http.Handler {
	s.loopHTTPOnce.Do(func() { s.loopHTTP = s.Handler() })
	return s.loopHTTP
}

// Serve implements h1srv.Call.
func (c *httpCall) Serve(ctx context.Context, w *h1srv.ResponseWriter) {
	r := &http.Request{
		Method: http.MethodPost, URL: &url.URL{Path: c.path}, RequestURI: c.path,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: c.header, Host: c.host, RemoteAddr: c.peer, Close: c.close,
		Body: io.NopCloser(bytes.NewReader(c.body)), ContentLength: int64(len(c.body)),
	}
	var cw captureWriter
	cw.h = http.Header{}
	c.s.loopHandler().ServeHTTP(&cw, r.WithContext(ctx))
	if cw.status == 0 {
		cw.status = http.StatusOK // as net/http, for a handler that wrote nothing
	}
	if _, ok := cw.h["Content-Type"]; !ok && len(cw.body) > 0 {
		cw.h.Set("Content-Type", http.DetectContentType(cw.body)) // as net/http
	}
	w.Write(cw.status, cw.fields(), cw.body)
}
