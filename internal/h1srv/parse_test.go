package h1srv

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/textproto"
	"slices"
	"testing"
)

var testPaths = []string{"/svc/Schedule", "/svc/ScheduleBatch"}

const goodHead = "POST /svc/Schedule HTTP/1.1\r\nHost: 127.0.0.1:7420\r\nContent-Type: application/proto\r\n" +
	"Content-Length: 5\r\nConnection: close\r\n\r\nhello"

func TestParseHead(t *testing.T) {
	for _, c := range []struct {
		name string
		in   string
		want verdict
	}{
		{"good", goodHead, take},
		{"empty", "", needMore},
		{"partial_method", "PO", needMore},
		{"partial_path", "POST /svc/Sch", needMore},
		{"partial_field", "POST /svc/Schedule HTTP/1.1\r\nHost: x\r\nContent-Le", needMore},
		{"no_blank_line", "POST /svc/Schedule HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n", needMore},
		{"get", "GET /svc/Schedule HTTP/1.1\r\n", decline},
		{"h2_preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", decline},
		{"other_path", "POST /svc/Cancel HTTP/1.1\r\n", decline},
		{"other_path_partial", "POST /svc/C", decline},
		{"path_with_query", "POST /svc/Schedule?x=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", decline},
		{"http10", "POST /svc/Schedule HTTP/1.0\r\nHost: x\r\nContent-Length: 0\r\n\r\n", decline},
		{"bare_lf", "POST /svc/Schedule HTTP/1.1\nHost: x\nContent-Length: 0\n\n", decline},
		{"no_host", "POST /svc/Schedule HTTP/1.1\r\nContent-Length: 0\r\n\r\n", decline},
		{"two_hosts", "POST /svc/Schedule HTTP/1.1\r\nHost: x\r\nHost: y\r\nContent-Length: 0\r\n\r\n", decline},
		{"no_length", "POST /svc/Schedule HTTP/1.1\r\nHost: x\r\n\r\n", decline},
		{"two_lengths", "POST /svc/Schedule HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", decline},
		{"signed_length", "POST /svc/Schedule HTTP/1.1\r\nHost: x\r\nContent-Length: +1\r\n\r\nx", decline},
		{"chunked", "POST /svc/Schedule HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", decline},
		{"expect", "POST /svc/Schedule HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", decline},
		{"upgrade", "POST /svc/Schedule HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nContent-Length: 0\r\n\r\n", decline},
		{"obs_fold", "POST /svc/Schedule HTTP/1.1\r\nHost: x\r\nX-A: b\r\n c\r\nContent-Length: 0\r\n\r\n", decline},
		{"space_before_colon", "POST /svc/Schedule HTTP/1.1\r\nHost : x\r\nContent-Length: 0\r\n\r\n", decline},
		{"ctl_in_value", "POST /svc/Schedule HTTP/1.1\r\nHost: x\r\nX-A: b\x01c\r\nContent-Length: 0\r\n\r\n", decline},
		{"connection_upgrade", "POST /svc/Schedule HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nContent-Length: 0\r\n\r\n", decline},
	} {
		t.Run(c.name, func(t *testing.T) {
			var req Request
			if v, _, _ := parseHead([]byte(c.in), testPaths, &req); v != c.want {
				t.Errorf("verdict %d, want %d", v, c.want)
			}
		})
	}
	var req Request
	v, headLen, bodyLen := parseHead([]byte(goodHead), testPaths, &req)
	if v != take || goodHead[headLen:headLen+bodyLen] != "hello" || !req.Close || req.Path != testPaths[0] {
		t.Fatalf("good: verdict %d, body %q, close %v, path %q", v, goodHead[headLen:headLen+bodyLen], req.Close, req.Path)
	}
	if ct, n := req.Header("content-type"); string(ct) != "application/proto" || n != 1 {
		t.Errorf("Content-Type %q (%d), want application/proto once", ct, n)
	}
}

// FuzzParseHead checks that parseHead takes nothing net/http would read
// differently: for a request it takes, http.ReadRequest on the same bytes
// must give the same method, path, protocol, header fields, body length,
// body and Connection: close. And every prefix of a taken head must ask
// for more, not decline, since the loop parses again as bytes arrive.
func FuzzParseHead(f *testing.F) {
	f.Add([]byte(goodHead))
	f.Add([]byte("POST /svc/ScheduleBatch HTTP/1.1\r\nHost: [::1]:80\r\nAuthorization: Bearer x\t\r\nContent-Length: 0\r\n\r\n"))
	f.Add([]byte("POST /svc/Schedule HTTP/1.1\r\nhost: a\r\ncontent-length: 007\r\nX-Empty:\r\nconnection: Keep-Alive\r\n\r\n1234567"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var req Request
		v, headLen, bodyLen := parseHead(in, testPaths, &req)
		if v != take || headLen+bodyLen > len(in) {
			return
		}
		for k := range headLen {
			var r2 Request
			if v2, _, _ := parseHead(in[:k], testPaths, &r2); v2 != needMore {
				t.Fatalf("prefix of %d bytes of a taken head: verdict %d, want needMore", k, v2)
			}
		}
		hr, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(in)))
		if err != nil {
			t.Fatalf("taken, but net/http refuses it: %v", err)
		}
		if hr.Method != http.MethodPost || hr.RequestURI != req.Path || hr.URL.Path != req.Path || hr.Proto != "HTTP/1.1" {
			t.Fatalf("net/http reads %s %s (%s) %s, the loop POST %s HTTP/1.1", hr.Method, hr.RequestURI, hr.URL.Path, hr.Proto, req.Path)
		}
		if hr.ContentLength != int64(bodyLen) || hr.Close != req.Close {
			t.Fatalf("net/http: length %d close %v; the loop: %d %v", hr.ContentLength, hr.Close, bodyLen, req.Close)
		}
		mine := http.Header{}
		for _, f := range req.Fields {
			k := textproto.CanonicalMIMEHeaderKey(string(f.Name))
			if k == "Host" {
				if hr.Host != string(f.Value) {
					t.Fatalf("net/http: Host %q, the loop %q", hr.Host, f.Value)
				}
				continue
			}
			mine[k] = append(mine[k], string(f.Value))
		}
		if len(mine) != len(hr.Header) {
			t.Fatalf("net/http: fields %q, the loop %q", hr.Header, mine)
		}
		for k, vs := range hr.Header {
			if !slices.Equal(vs, mine[k]) {
				t.Fatalf("field %s: net/http %q, the loop %q", k, vs, mine[k])
			}
		}
		body, err := io.ReadAll(hr.Body)
		if err != nil || !bytes.Equal(body, in[headLen:headLen+bodyLen]) {
			t.Fatalf("body: net/http %q (%v), the loop %q", body, err, in[headLen:headLen+bodyLen])
		}
	})
}
