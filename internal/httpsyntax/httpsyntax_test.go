package httpsyntax

import (
	"net/http"
	"testing"
)

// TestClassesAgreeWithNetHTTP: a byte is a token character exactly when
// net/http takes it as a one-character method (a method is a token), and
// the value class holds the bytes net/http sends and refuses.
func TestClassesAgreeWithNetHTTP(t *testing.T) {
	for c := 0; c < 256; c++ {
		b := byte(c)
		_, err := http.NewRequest(string([]byte{b}), "http://127.0.0.1/", nil)
		nameOK := err == nil
		if got := IsTokenChar(b); got != nameOK {
			t.Errorf("IsTokenChar(%q) = %v, net/http's token rule says %v", b, got, nameOK)
		}
	}
	for _, tc := range []struct {
		c    byte
		want bool
	}{{'\t', true}, {' ', true}, {'a', true}, {0x80, true}, {0xff, true}, {0, false}, {'\r', false}, {'\n', false}, {0x1f, false}, {0x7f, false}} {
		if got := IsFieldValueChar(tc.c); got != tc.want {
			t.Errorf("IsFieldValueChar(%q) = %v, want %v", tc.c, got, tc.want)
		}
	}
}
