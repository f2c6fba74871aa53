package hourglass

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// bench/results holds the raw output of the runs the documents cite, and
// nothing else: every entry is named by README.md, docs/*.md or
// bench/README.md, and every bench/results file they name exists.

// citingDocs returns README.md, docs/*.md and bench/README.md, concatenated.
func citingDocs(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("bench", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return readDocs(t) + "\n" + string(data)
}

// resultRef matches a path into bench/results as the documents write it;
// a trailing < or * marks a pattern (peers-<UTC time>.json), not a file.
var resultRef = regexp.MustCompile(`results/([A-Za-z0-9][A-Za-z0-9._-]*)([<*]?)`)

// uncited returns the entries that docs never names.
func uncited(entries []string, docs string) []string {
	var out []string
	for _, e := range entries {
		if e != "README.md" && !strings.Contains(docs, e) {
			out = append(out, e)
		}
	}
	return out
}

// missing returns the bench/results entries docs names that are not in
// entries.
func missing(entries []string, docs string) []string {
	var out []string
	for _, m := range resultRef.FindAllStringSubmatch(docs, -1) {
		if m[2] == "" && !slices.Contains(entries, m[1]) && !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

func TestDocsBenchResultsCheckersFail(t *testing.T) {
	entries := []string{"README.md", "a.txt", "b-dir"}
	docs := "see `bench/results/a.txt` and results/gone.json; every run writes results/peers-<time>.json"
	if got := uncited(entries, docs); !slices.Equal(got, []string{"b-dir"}) {
		t.Errorf("uncited = %q, want [b-dir]", got)
	}
	if got := missing(entries, docs); !slices.Equal(got, []string{"gone.json"}) {
		t.Errorf("missing = %q, want [gone.json]", got)
	}
}

// TestDocsBenchResults checks that bench/results keeps exactly the runs the
// documents cite.
func TestDocsBenchResults(t *testing.T) {
	des, err := os.ReadDir(filepath.Join("bench", "results"))
	if err != nil {
		t.Fatal(err)
	}
	var entries []string
	for _, de := range des {
		entries = append(entries, de.Name())
	}
	docs := citingDocs(t)
	for _, e := range uncited(entries, docs) {
		t.Errorf("bench/results/%s is cited by no document (README.md, docs/*.md, bench/README.md): cite it or delete it", e)
	}
	for _, m := range missing(entries, docs) {
		t.Errorf("a document cites bench/results/%s, which does not exist", m)
	}
}

// mdLink matches a Markdown link's target, without its #fragment.
var mdLink = regexp.MustCompile(`\]\(([^)#\s]+)(?:#[^)]*)?\)`)

// TestDocsLinks checks that every relative link in README.md, docs/*.md and
// bench/README.md names a file or directory that exists.
func TestDocsLinks(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	paths = append(paths, "README.md", filepath.Join("bench", "README.md"))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(p), target)); err != nil {
				t.Errorf("%s links to %s, which does not exist", p, target)
			}
		}
	}
}
