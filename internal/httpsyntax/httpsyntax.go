// Package httpsyntax holds the character classes of HTTP/1.1 (RFC 9110)
// that the project's own client transport (internal/h1) and server loop
// (internal/h1srv) both check.
package httpsyntax

// IsTokenChar reports whether c may appear in a token, such as a field
// name (RFC 9110 5.6.2): "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" /
// "-" / "." / "^" / "_" / "`" / "|" / "~" / DIGIT / ALPHA.
func IsTokenChar(c byte) bool { return tokenTable[c] }

// IsFieldValueChar reports whether c may appear in a field value as
// net/http accepts it: anything but a control character other than
// horizontal tab.
func IsFieldValueChar(c byte) bool { return (c >= ' ' || c == '\t') && c != 0x7f }

var tokenTable = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()
