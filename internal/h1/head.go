package h1

import (
	"bytes"
	"net/http"
	"net/textproto"

	"github.com/hourglassmq/hourglass/internal/httpsyntax"
)

// head is a response's status line and header as parseHead reads them.
type head struct {
	status     int
	statusText string      // what http.Response.Status holds: "200 OK"
	header     http.Header // canonical keys, values trimmed, as http.ReadResponse gives them
	length     int64       // Content-Length
	close      bool        // "Connection: close"
}

// parseHead reads a response head from the start of b, strictly: an
// HTTP/1.1 status line with a final status (200 or more, not 204 or 304),
// header lines "Name: value" ending in CRLF, exactly one Content-Length,
// and no field that makes http.ReadResponse read the body or the header
// in another way (Transfer-Encoding, Trailer, Pragma). For an answer it
// accepts, it reports what http.ReadResponse reports on the same bytes:
// the same status, Status text, header, body length and keep-alive
// (FuzzParseHead).
//
// It returns the head and its length in bytes when b holds a whole head
// it accepts; more when b ends before the head does and nothing seen so
// far is refused; and neither (n 0, more false) when the answer is one it
// leaves to http.ReadResponse: HTTP/1.0, 1xx, a missing, repeated or odd
// Content-Length, chunked bodies, folded lines, bare LF line ends, control
// bytes, anything malformed (whose error http.ReadResponse words).
// The header map is new; h.header must be nil on entry.
func parseHead(b []byte, h *head) (n int, more bool) {
	const proto = "HTTP/1.1 "
	if len(b) < len(proto)+5 {
		return 0, bytes.HasPrefix([]byte(proto), b) || bytes.HasPrefix(b, []byte(proto))
	}
	if string(b[:len(proto)]) != proto {
		return 0, false
	}
	line, rest, ok := cutLine(b[len(proto):])
	if !ok {
		return 0, rest == nil
	}
	if len(line) < 3 || !isDigit(line[0]) || !isDigit(line[1]) || !isDigit(line[2]) || len(line) > 3 && line[3] != ' ' {
		return 0, false
	}
	for _, c := range line[3:] {
		if c < ' ' && c != '\t' || c == 0x7f {
			return 0, false
		}
	}
	status := int(line[0]-'0')*100 + int(line[1]-'0')*10 + int(line[2]-'0')
	if status < 200 || status == 204 || status == 304 {
		return 0, false // no body, or an informational answer first
	}
	// Parse the fields before allocating anything, so that a head that
	// is not all there yet costs only a scan.
	fields := rest
	lengths := 0
	var length int64
	for {
		if len(rest) < 2 {
			return 0, len(rest) == 0 || rest[0] != '\n'
		}
		if rest[0] == '\r' && rest[1] == '\n' {
			rest = rest[2:]
			break
		}
		line, next, ok := cutLine(rest)
		if !ok {
			return 0, next == nil
		}
		name, value, ok := field(line)
		if !ok {
			return 0, false
		}
		switch {
		case asciiEqualFold(name, "Content-Length"):
			lengths++
			if length, ok = parseLength(value); !ok || lengths > 1 {
				return 0, false
			}
		case asciiEqualFold(name, "Transfer-Encoding"), asciiEqualFold(name, "Trailer"), asciiEqualFold(name, "Pragma"):
			return 0, false
		}
		rest = next
	}
	if lengths != 1 {
		return 0, false // the body would end at the close: not a connection to keep
	}
	n = len(b) - len(rest)
	h.status, h.statusText, h.length = status, internStatus(line), length
	h.header = make(http.Header, 4)
	for {
		line, next, _ := cutLine(fields)
		if len(line) == 0 {
			break
		}
		name, value := splitField(line) // field accepted it in the first pass
		key := canonicalKey(name)
		h.header[key] = append(h.header[key], internValue(value))
		fields = next
	}
	if h.close = hasToken(h.header["Connection"], "close"); h.close {
		delete(h.header, "Connection") // as http.ReadResponse does
	}
	return n, false
}

// cutLine splits b after its first CRLF. A line holding a bare LF or CR is
// refused (ok false, rest not nil); b without a LF is incomplete (ok
// false, rest nil).
func cutLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		if j := bytes.IndexByte(b, '\r'); j >= 0 && j < len(b)-1 {
			return nil, b, false // a CR not followed by LF
		}
		return nil, nil, false
	}
	if i == 0 || b[i-1] != '\r' || bytes.IndexByte(b[:i-1], '\r') >= 0 {
		return nil, b, false
	}
	return b[:i-1], b[i+1:], true
}

// field splits a header line into its name, a token, and its value
// trimmed of spaces and tabs. It refuses what http.ReadResponse would
// refuse or read in another way: a line starting with white space (a
// folded line), no colon, a name that is not a token, control bytes.
func field(line []byte) (name, value []byte, ok bool) {
	i := bytes.IndexByte(line, ':')
	if i <= 0 {
		return nil, nil, false
	}
	for _, c := range line[:i] {
		if !httpsyntax.IsTokenChar(c) {
			return nil, nil, false
		}
	}
	for _, c := range line[i+1:] {
		if !httpsyntax.IsFieldValueChar(c) {
			return nil, nil, false
		}
	}
	name, value = splitField(line)
	return name, value, true
}

// splitField splits a header line field has accepted.
func splitField(line []byte) (name, value []byte) {
	i := bytes.IndexByte(line, ':')
	name, value = line[:i], line[i+1:]
	for len(value) > 0 && (value[0] == ' ' || value[0] == '\t') {
		value = value[1:]
	}
	for len(value) > 0 && (value[len(value)-1] == ' ' || value[len(value)-1] == '\t') {
		value = value[:len(value)-1]
	}
	return name, value
}

// parseLength reads a Content-Length value: 1 to 18 digits, so it fits
// an int64, as strconv.ParseUint(v, 10, 63) would accept.
func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// hasToken reports whether one of the comma-separated elements of vs is
// token, ignoring case and surrounding white space (as net/http reads
// "Connection").
func hasToken(vs []string, token string) bool {
	for _, v := range vs {
		for len(v) > 0 {
			var e string
			if i := indexComma(v); i >= 0 {
				e, v = v[:i], v[i+1:]
			} else {
				e, v = v, ""
			}
			if asciiEqualFold([]byte(textproto.TrimString(e)), token) {
				return true
			}
		}
	}
	return false
}

func indexComma(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] == ',' {
			return i
		}
	}
	return -1
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		if lower(b[i]) != lower(s[i]) {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// commonKeys are header names a Connect answer carries, in canonical
// form: a name that matches one (in any case) costs no allocation.
var commonKeys = []string{"Content-Type", "Content-Length", "Content-Encoding", "Date", "Connection",
	"Accept-Encoding", "Server", "Vary", "Grpc-Status", "Grpc-Message"}

// canonicalKey is name in net/http's canonical form.
func canonicalKey(name []byte) string {
	for _, k := range commonKeys {
		if string(name) == k {
			return k
		}
	}
	for _, k := range commonKeys {
		if asciiEqualFold(name, k) {
			return k
		}
	}
	return textproto.CanonicalMIMEHeaderKey(string(name))
}

// commonValues are values a Connect answer's fields often have.
var commonValues = []string{"application/proto", "gzip", "application/json", "close", "identity"}

func internValue(v []byte) string {
	for _, c := range commonValues {
		if string(v) == c {
			return c
		}
	}
	return string(v)
}

func internStatus(line []byte) string {
	if string(line) == "200 OK" {
		return "200 OK"
	}
	return string(line)
}
