package h1

import (
	"bufio"
	"bytes"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
)

func TestValidHeader(t *testing.T) {
	for _, tc := range []struct {
		name  string
		h     http.Header
		valid bool
	}{
		{"ordinary", http.Header{"Content-Type": {"application/proto"}, "X-A": {"b c\td", ""}}, true},
		{"obs_text", http.Header{"X-A": {"caf\xc3\xa9"}}, true},
		{"space_in_name", http.Header{"X A": {"b"}}, false},
		{"colon_in_name", http.Header{"X:A": {"b"}}, false},
		{"empty_name", http.Header{"": {"b"}}, false},
		{"crlf_in_value", http.Header{"X-A": {"b\r\nX-Injected: 1"}}, false},
		{"nul_in_value", http.Header{"X-A": {"b\x00"}}, false},
		{"del_in_value", http.Header{"X-A": {"b\x7f"}}, false},
	} {
		if got := validHeader(tc.h); got != tc.valid {
			t.Errorf("%s: validHeader = %v, want %v", tc.name, got, tc.valid)
		}
	}
}

// FuzzValidHeader: a field validHeader accepts is sent as given: the
// request read back by net/http's server-side parser has the same field,
// and no other field appears (nothing was smuggled in).
func FuzzValidHeader(f *testing.F) {
	for _, s := range [][2]string{{"A", "b"}, {"A", " b\tc "}, {"A b", "b"}, {"A", "b\r\nX-B: c"}, {"\x80", "\x80"}, {"A", "\x00"}, {"A", "b\n c"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, name, value string) {
		name = "X-" + name // keep clear of the fields Request.Write writes itself
		h := http.Header{name: {value}}
		if !validHeader(h) {
			return
		}
		req, err := http.NewRequest("GET", "http://h/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header = h
		h["User-Agent"] = []string{""} // sends none
		var buf bytes.Buffer
		if err := req.Write(&buf); err != nil {
			t.Fatalf("Write of a valid field %q: %q: %v", name, value, err)
		}
		got, err := http.ReadRequest(bufio.NewReader(&buf))
		if err != nil {
			t.Fatalf("the request with the valid field %q: %q does not parse: %v\n%q", name, value, err, buf.String())
		}
		key := textproto.CanonicalMIMEHeaderKey(name)
		if vs := got.Header[key]; len(vs) != 1 || vs[0] != strings.Trim(value, " \t") {
			t.Fatalf("field %q: %q came back as %q", name, value, vs)
		}
		if len(got.Header) != 1 {
			t.Fatalf("field %q: %q came back with other fields: %q", name, value, got.Header)
		}
	})
}
