// Package console is Hourglass's web console: a page served at /ui/ from
// assets embedded in the binary (dist/, built from web/ by
// scripts/build-console.sh and committed, so building the binary needs no
// node). The page calls the server's own API (Connect-JSON, the same
// RPCs every client uses) from the browser; this package serves only
// static files, and nothing of the API needs a token to load them: with
// --auth-token the page asks for the token before it shows anything.
//
// docs/CONSOLE.md says what the page shows and how it is built and tested.
package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

// Prefix is where Handler expects to be mounted.
const Prefix = "/ui/"

//go:embed dist
var dist embed.FS

// csp allows the page nothing from another origin: its script, style and
// API calls come from the server that served it.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the console's files under Prefix (mount it there, e.g.
// mux.Handle("GET /ui/", console.Handler())): index.html at Prefix, each
// with an ETag of its content, so that a browser revalidates and fetches
// again only what changed.
func Handler() http.Handler {
	files, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // dist is embedded: it is there
	}
	etags := map[string]string{}
	fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(files, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		etags[p] = `"` + hex.EncodeToString(sum[:12]) + `"`
		return nil
	})
	server := http.StripPrefix(strings.TrimSuffix(Prefix, "/"), http.FileServerFS(files))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(path.Clean(r.URL.Path), Prefix)
		if r.URL.Path == Prefix {
			name = "index.html"
		}
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		if tag, ok := etags[name]; ok {
			h.Set("ETag", tag)
		}
		server.ServeHTTP(w, r)
	})
}
