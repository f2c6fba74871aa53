package h1srv

import (
	"bytes"

	"github.com/hourglassmq/hourglass/internal/httpsyntax"
)

// Limits of the subset the loop parses itself. A request beyond any of
// them goes to net/http, which applies its own.
const (
	// maxFields is the most header fields of a request the loop takes.
	maxFields = 32
)

// Field is one header field of a request as it was sent: Name as written
// (compare it with EqualFold), Value without the surrounding blanks. Both
// alias the connection's read buffer and are valid only during the call.
type Field struct {
	Name, Value []byte
}

// Request is one request the loop parsed itself: a POST to one of
// Options.Paths over HTTP/1.1 with a Content-Length body that is wholly in
// memory. Its slices alias the connection's read buffer and are valid only
// until the handler returns.
type Request struct {
	// Path is the request target, one of Options.Paths.
	Path string
	// Fields are the header fields in the order they were sent.
	Fields []Field
	// Body is the whole body (Content-Length bytes).
	Body []byte
	// Close is set when the client sent "Connection: close": the
	// connection is closed after the answer.
	Close bool
	// RemoteAddr is the client's address.
	RemoteAddr string
}

// Header returns the first value of the header field name (compared
// without regard to case) and how many fields of that name the request
// has.
func (r *Request) Header(name string) (value []byte, n int) {
	for i := range r.Fields {
		if equalFold(r.Fields[i].Name, name) {
			if n == 0 {
				value = r.Fields[i].Value
			}
			n++
		}
	}
	return value, n
}

// equalFold reports whether b equals the ASCII string s without regard to
// case.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c, d := b[i], s[i]
		if c != d && lower(c) != lower(d) {
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

// verdict is what parseHead made of the start of a connection's buffer.
type verdict int

const (
	// needMore: the head is incomplete but, so far, inside the subset.
	needMore verdict = iota
	// take: a complete head inside the subset.
	take
	// decline: outside the subset, or unparseable: net/http's to answer.
	decline
)

var (
	methodPost = []byte("POST ")
	proto11    = []byte(" HTTP/1.1\r\n")
	crlf       = []byte("\r\n")
)

// parseHead parses the request head at the start of buf into req (Path,
// Fields, Close) and returns the verdict, the head's length (through its
// blank line) and the body's length. It takes only a strict subset of
// HTTP/1.1, one that net/http reads the same way (FuzzParseHead): the
// request line "POST <one of paths> HTTP/1.1", then fields "name: value"
// each ended by CRLF, with a token name, a value of visible characters,
// spaces and tabs, exactly one Host of plain host characters, exactly one
// Content-Length of at most 9 digits, an optional Connection of "close"
// or "keep-alive", and no Transfer-Encoding, Expect, Upgrade, or
// continuation lines. Anything else is declined as soon as it is seen,
// before the head is complete.
func parseHead(buf []byte, paths []string, req *Request) (v verdict, headLen, bodyLen int) {
	// Request line.
	if len(buf) < len(methodPost) {
		if !bytes.HasPrefix(methodPost, buf) {
			return decline, 0, 0
		}
		return needMore, 0, 0
	}
	if !bytes.HasPrefix(buf, methodPost) {
		return decline, 0, 0
	}
	eol := bytes.IndexByte(buf, '\n')
	if eol < 0 {
		// Decline early once the line can be no known path.
		rest := buf[len(methodPost):]
		for _, p := range paths {
			if len(rest) <= len(p) && bytes.HasPrefix([]byte(p), rest) ||
				len(rest) > len(p) && bytes.HasPrefix(rest, []byte(p)) && bytes.HasPrefix(proto11, rest[len(p):]) {
				return needMore, 0, 0
			}
		}
		return decline, 0, 0
	}
	line := buf[len(methodPost) : eol+1]
	req.Path = ""
	for _, p := range paths {
		if len(line) == len(p)+len(proto11) && string(line[:len(p)]) == p && bytes.Equal(line[len(p):], proto11) {
			req.Path = p
			break
		}
	}
	if req.Path == "" {
		return decline, 0, 0
	}
	// Header fields.
	req.Fields = req.Fields[:0]
	req.Close = false
	pos := eol + 1
	host, length, conn := 0, -1, 0
	for {
		rest := buf[pos:]
		if len(rest) < 2 {
			if len(rest) == 1 && rest[0] != '\r' && !httpsyntax.IsTokenChar(rest[0]) {
				return decline, 0, 0
			}
			return needMore, 0, 0
		}
		if rest[0] == '\r' {
			if rest[1] != '\n' {
				return decline, 0, 0
			}
			pos += 2
			break
		}
		eol := bytes.IndexByte(rest, '\n')
		if eol < 0 {
			if !validPartialField(rest) {
				return decline, 0, 0
			}
			return needMore, 0, 0
		}
		if eol == 0 || rest[eol-1] != '\r' || len(req.Fields) == maxFields {
			return decline, 0, 0
		}
		f, ok := parseField(rest[:eol-1])
		if !ok {
			return decline, 0, 0
		}
		switch {
		case equalFold(f.Name, "Host"):
			host++
			if host > 1 || !validHost(f.Value) {
				return decline, 0, 0
			}
		case equalFold(f.Name, "Content-Length"):
			if length >= 0 || len(f.Value) == 0 || len(f.Value) > 9 {
				return decline, 0, 0
			}
			n := 0
			for _, c := range f.Value {
				if c < '0' || c > '9' {
					return decline, 0, 0
				}
				n = n*10 + int(c-'0')
			}
			length = n
		case equalFold(f.Name, "Connection"):
			conn++
			switch {
			case conn > 1:
				return decline, 0, 0
			case equalFold(f.Value, "close"):
				req.Close = true
			case equalFold(f.Value, "keep-alive"):
			default:
				return decline, 0, 0
			}
		case equalFold(f.Name, "Transfer-Encoding"), equalFold(f.Name, "Expect"),
			equalFold(f.Name, "Upgrade"), equalFold(f.Name, "Trailer"):
			return decline, 0, 0
		}
		req.Fields = append(req.Fields, f)
		pos += eol + 1
	}
	if host != 1 || length < 0 {
		return decline, 0, 0
	}
	return take, pos, length
}

// parseField splits one field line (without its CRLF): a token name, a
// colon, the value between optional blanks.
func parseField(line []byte) (Field, bool) {
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 {
		return Field{}, false
	}
	name := line[:colon]
	for _, c := range name {
		if !httpsyntax.IsTokenChar(c) {
			return Field{}, false
		}
	}
	v := line[colon+1:]
	for len(v) > 0 && (v[0] == ' ' || v[0] == '\t') {
		v = v[1:]
	}
	for len(v) > 0 && (v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		v = v[:len(v)-1]
	}
	for _, c := range v {
		if !httpsyntax.IsFieldValueChar(c) {
			return Field{}, false
		}
	}
	return Field{Name: name, Value: v}, true
}

// validPartialField reports whether b can still become a valid field line.
func validPartialField(b []byte) bool {
	colon := bytes.IndexByte(b, ':')
	name := b
	if colon >= 0 {
		name = b[:colon]
		if colon == 0 {
			return false
		}
	}
	for _, c := range name {
		if !httpsyntax.IsTokenChar(c) {
			return false
		}
	}
	if colon >= 0 {
		for i, c := range b[colon+1:] {
			if c == '\r' && i == len(b)-colon-2 {
				continue // the CR of the line's end
			}
			if !httpsyntax.IsFieldValueChar(c) {
				return false
			}
		}
	}
	return true
}

// validHost reports whether a Host value is one the loop takes: a
// non-empty name or address of letters, digits and ".-:[]_", which
// net/http accepts as it is.
func validHost(v []byte) bool {
	if len(v) == 0 {
		return false
	}
	for _, c := range v {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.' || c == '-' || c == ':' || c == '[' || c == ']' || c == '_':
		default:
			return false
		}
	}
	return true
}
