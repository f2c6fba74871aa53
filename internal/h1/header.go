package h1

import (
	"net/http"

	"github.com/hourglassmq/hourglass/internal/httpsyntax"
)

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
		if !httpsyntax.IsTokenChar(s[i]) {
			return false
		}
	}
	return true
}

func validValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if !httpsyntax.IsFieldValueChar(s[i]) {
			return false
		}
	}
	return true
}
