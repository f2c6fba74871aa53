package h1

import "net/http"

// validHeader reports whether every field of h can be sent as it is: each
// name a non-empty RFC 9110 token, each value free of control characters
// other than horizontal tab. net/http's Transport refuses other fields
// with an error; requests that carry them go to the fallback, which does.
func validHeader(h http.Header) bool {
	for k, vs := range h {
		if !validName(k) {
			return false
		}
		for _, v := range vs {
			if !validValue(v) {
				return false
			}
		}
	}
	return true
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return true
}

func validValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// isTokenChar reports whether c is an RFC 9110 tchar:
// "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." / "^" / "_" /
// "`" / "|" / "~" / DIGIT / ALPHA.
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}
