package console

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func serve(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("GET "+Prefix, Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, url string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestHandler(t *testing.T) {
	srv := serve(t)
	for _, tc := range []struct {
		name, path string
		status     int
		ctype      string
		body       string
	}{
		{"index", "/ui/", 200, "text/html; charset=utf-8", `<script defer src="console.js"></script>`},
		{"script", "/ui/console.js", 200, "text/javascript; charset=utf-8", "Bearer "},
		{"style", "/ui/console.css", 200, "text/css; charset=utf-8", ".uplot"},
		{"missing", "/ui/nothing.js", 404, "text/plain; charset=utf-8", "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := get(t, srv.URL+tc.path)
			if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != tc.ctype || !strings.Contains(body, tc.body) {
				t.Fatalf("GET %s: %d %q, body %.80q; want %d %q holding %q", tc.path, resp.StatusCode,
					resp.Header.Get("Content-Type"), body, tc.status, tc.ctype, tc.body)
			}
			if csp := resp.Header.Get("Content-Security-Policy"); !strings.HasPrefix(csp, "default-src 'none'") {
				t.Errorf("Content-Security-Policy %q", csp)
			}
			if tc.status != 200 {
				return
			}
			etag := resp.Header.Get("ETag")
			if etag == "" {
				t.Fatal("no ETag")
			}
			if resp, _ := get(t, srv.URL+tc.path, "If-None-Match", etag); resp.StatusCode != http.StatusNotModified {
				t.Errorf("with If-None-Match %s: %d, want 304", etag, resp.StatusCode)
			}
		})
	}
}

// TestNoOutsideAssets: the page loads nothing but its own files (no CDN):
// every src and href of index.html is a relative path.
func TestNoOutsideAssets(t *testing.T) {
	b, err := dist.ReadFile("dist/index.html")
	if err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllStringSubmatch(string(b), -1)
	if len(refs) < 2 {
		t.Fatalf("index.html names %d files; want its script and style", len(refs))
	}
	for _, m := range refs {
		if strings.Contains(m[1], ":") || strings.HasPrefix(m[1], "/") {
			t.Errorf("index.html loads %q: want a path beside it", m[1])
		}
	}
}
