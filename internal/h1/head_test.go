package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"reflect"
	"testing"
)

// headSeeds are answers to parse: what the server sends, and the kinds
// parseHead must leave to http.ReadResponse.
var headSeeds = []string{
	"HTTP/1.1 200 OK\r\nContent-Type: application/proto\r\nDate: Mon, 30 Nov 2026 16:00:00 GMT\r\nContent-Length: 3\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nContent-Type: application/proto\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nX-A: 1\r\nx-a: 2\r\nTrailer-Why: no\r\nContent-Length: 2\r\n\r\n{}",
	"HTTP/1.1 503 \r\ncontent-length:  5 \r\nconnection: keep-alive, Close\r\n\r\nhello",
	"HTTP/1.1 200\r\nContent-Length: 1\r\n\r\nxtrailing",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\n\r\nclose-delimited",
	"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
	"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n folded\r\n\r\nx",
	"HTTP/1.1 200 OK\nContent-Length: 1\n\nx",
	"HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\n",
	"HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
	"HTTP/1.1 2x0 OK\r\n\r\n",
}

// FuzzParseHead holds parseHead to http.ReadResponse: for every input it
// accepts, ReadResponse on the same bytes gives the same status, Status,
// header, keep-alive and body (or the same short body); and every prefix
// of an accepted head asks for more bytes rather than being refused.
func FuzzParseHead(f *testing.F) {
	for _, s := range headSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var h head
		n, more := parseHead(data, &h)
		if n == 0 {
			if h.header != nil {
				t.Fatalf("refused (more %v) but filled in a header", more)
			}
			return
		}
		if more {
			t.Fatal("a parsed head also asks for more")
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(data)), postRequest)
		if err != nil {
			t.Fatalf("parseHead took %q, http.ReadResponse refused it: %v", data[:n], err)
		}
		if resp.StatusCode != h.status || resp.Status != h.statusText {
			t.Errorf("status %d %q, ReadResponse %d %q", h.status, h.statusText, resp.StatusCode, resp.Status)
		}
		if !reflect.DeepEqual(resp.Header, h.header) {
			t.Errorf("header %q, ReadResponse %q", h.header, resp.Header)
		}
		if resp.ContentLength != h.length || resp.Close != h.close {
			t.Errorf("length %d close %v, ReadResponse %d %v", h.length, h.close, resp.ContentLength, resp.Close)
		}
		want, wantErr := io.ReadAll(resp.Body)
		got, gotErr := readN(bufio.NewReader(bytes.NewReader(data[n:])), nil, h.length)
		if !bytes.Equal(got, want) || !errors.Is(gotErr, wantErr) && (gotErr == nil || wantErr == nil || gotErr.Error() != wantErr.Error()) {
			t.Errorf("body %q, %v; ReadResponse %q, %v", got, gotErr, want, wantErr)
		}
		if n <= 1024 {
			for k := range n {
				var p head
				if m, more := parseHead(data[:k], &p); m != 0 || !more {
					t.Fatalf("the prefix %q of an accepted head gave %d, more %v", data[:k], m, more)
				}
			}
		}
	})
}

// TestParseHead: what parseHead takes and what it leaves to
// http.ReadResponse, by name.
func TestParseHead(t *testing.T) {
	for _, tc := range []struct {
		name  string
		in    string
		taken bool
	}{
		{"server_answer", headSeeds[0], true},
		{"connection_close", headSeeds[1], true},
		{"repeated_fields", headSeeds[2], true},
		{"lower_case_and_spaces", headSeeds[3], true},
		{"no_reason", headSeeds[4], true},
		{"chunked", headSeeds[5], false},
		{"informational_first", headSeeds[6], false},
		{"http_1_0", headSeeds[7], false},
		{"no_length", headSeeds[8], false},
		{"two_lengths", headSeeds[9], false},
		{"folded", headSeeds[10], false},
		{"bare_lf", headSeeds[11], false},
		{"no_content", headSeeds[12], false},
		{"pragma", headSeeds[13], false},
		{"bad_status", headSeeds[15], false},
		{"negative_length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", false},
		{"space_before_colon", "HTTP/1.1 200 OK\r\nContent-Length : 1\r\n\r\nx", false},
		{"control_byte", "HTTP/1.1 200 OK\r\nX: a\x01b\r\nContent-Length: 1\r\n\r\nx", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h head
			n, _ := parseHead([]byte(tc.in), &h)
			if (n > 0) != tc.taken {
				t.Fatalf("parseHead took %d bytes; want taken %v", n, tc.taken)
			}
		})
	}
	var h head
	if n, more := parseHead([]byte("HTTP/1.1 200 OK\r\nContent-Le"), &h); n != 0 || !more {
		t.Errorf("a cut head: %d, more %v; want more", n, more)
	}
}
