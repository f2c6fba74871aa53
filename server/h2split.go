package server

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strings"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// HTTP/2 connections are split by the content type of their first
// request: gRPC to grpc-go's own transport, everything else (Connect,
// gRPC-Web, GETs) to net/http's HTTP/2 server. A gRPC client sends no
// request before it has the server's SETTINGS frame, so the matcher sends
// one; net/http, which would take the client's acknowledgement of it for
// one of settings it never sent and end the connection, reads the
// connection through ackDropper, which removes that acknowledgement.

// maxSniffFrames bounds the frames read before a connection's first
// request head; a connection that sends more is not gRPC.
const maxSniffFrames = 16

// isGRPC reports whether a request of this content type is gRPC
// (application/grpc, application/grpc+proto, ...; not gRPC-Web).
func isGRPC(contentType string) bool {
	rest, ok := strings.CutPrefix(contentType, "application/grpc")
	return ok && (rest == "" || rest[0] == '+' || rest[0] == ';')
}

// firstRequestGRPC is the cmux matcher of HTTP/2 connections whose first
// request is gRPC. It reads the client preface and the frames up to the
// first request's head, and sends the client one (empty) SETTINGS frame
// when it reads the client's: a gRPC client waits for it before it sends
// a request. Every HTTP/2 connection it sees is sent that frame, whether
// it matches or not.
func firstRequestGRPC(w io.Writer, r io.Reader) bool {
	if !readPreface(r) {
		return false
	}
	grpc, done := false, false
	dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		if f.Name == "content-type" {
			grpc = isGRPC(f.Value)
		}
	})
	fr := http2.NewFramer(w, r)
	for range maxSniffFrames {
		f, err := fr.ReadFrame()
		if err != nil {
			return false
		}
		var block []byte
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := fr.WriteSettings(); err != nil {
					return false
				}
			}
			continue
		case *http2.HeadersFrame:
			block, done = f.HeaderBlockFragment(), f.HeadersEnded()
		case *http2.ContinuationFrame:
			block, done = f.HeaderBlockFragment(), f.HeadersEnded()
		default:
			continue
		}
		if _, err := dec.Write(block); err != nil {
			return false
		}
		if done {
			return grpc
		}
	}
	return false
}

// readPreface reads r up to the end of the HTTP/2 client preface and
// reports whether it was one. It stops at the first byte that differs,
// so a short request that is not HTTP/2 ("HELLO\r\n\r\n") is told apart
// at once rather than when the header timeout ends a read of 24 bytes.
func readPreface(r io.Reader) bool {
	var b [1]byte
	for i := range len(http2.ClientPreface) {
		if _, err := io.ReadFull(r, b[:]); err != nil || b[0] != http2.ClientPreface[i] {
			return false
		}
	}
	return true
}

// h2Listener hands out the HTTP/2 connections firstRequestGRPC did not
// match, each read through an ackDropper.
type h2Listener struct{ net.Listener }

func (l h2Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &ackDropper{Conn: c, r: bufio.NewReader(c), pass: len(http2.ClientPreface)}, nil
}

// ackDropper is an HTTP/2 connection from which the first SETTINGS
// acknowledgement the client sends is removed: the one of the SETTINGS
// frame firstRequestGRPC sent (it came before the server's own, and
// frames are acknowledged in order). Up to it, it reads frame by frame;
// from then on, or from a read error, straight through. One goroutine
// reads it (net/http's).
type ackDropper struct {
	net.Conn
	r       *bufio.Reader
	pass    int  // bytes to read before the next frame header
	dropped bool // the acknowledgement is gone
}

func (c *ackDropper) Read(p []byte) (int, error) {
	for !c.dropped && c.pass == 0 {
		h, err := c.r.Peek(9) // a frame header
		if err != nil {
			// The connection ends (net/http ends it on any read error):
			// what came of a header goes on, then the error.
			c.dropped = true
			break
		}
		fh, err := http2.ReadFrameHeader(bytes.NewReader(h))
		if err != nil {
			return 0, err
		}
		if fh.Type == http2.FrameSettings && fh.Flags.Has(http2.FlagSettingsAck) && fh.Length == 0 {
			c.r.Discard(len(h))
			c.dropped = true
			break
		}
		c.pass = len(h) + int(fh.Length)
	}
	if !c.dropped {
		p = p[:min(len(p), c.pass)]
	}
	n, err := c.r.Read(p)
	if !c.dropped {
		c.pass -= n
	}
	return n, err
}
