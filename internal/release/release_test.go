package release

import (
	"archive/tar"
	"bufio"
	"context"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestImage opens the image tarball of this machine's platform, checks its
// config, extracts the binary from its layers and runs it. It checks the
// artefacts in $HOURGLASS_RELEASE_DIR when set (CI builds them there with
// scripts/release), else builds them itself.
func TestImage(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skipf("the image's binary is for linux; this is %s", runtime.GOOS)
	}
	p := Platform{"linux", runtime.GOARCH}
	dir := os.Getenv("HOURGLASS_RELEASE_DIR")
	wantVersion := ""
	if dir == "" {
		if testing.Short() {
			t.Skip("-short: building the release binary and image takes a minute; CI runs this test on scripts/release's output")
		}
		dir, wantVersion = t.TempDir(), "v0.0.0-test.1"
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		if _, err := Build(ctx, Options{Dir: "../..", Out: dir, Version: wantVersion, Platforms: []Platform{p}, Created: time.Unix(1_700_000_000, 0)}); err != nil {
			t.Fatal(err)
		}
	}
	checkSums(t, dir)

	img, err := tarball.ImageFromPath(filepath.Join(dir, ImageName(p)), nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.OS != p.OS || cf.Architecture != p.Arch {
		t.Errorf("image platform %s/%s, want %s", cf.OS, cf.Architecture, p)
	}
	if c.User != "65532:65532" {
		t.Errorf("User %q, want 65532:65532 (not root)", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/hourglass"}) {
		t.Errorf("Entrypoint %q, want the binary", c.Entrypoint)
	}
	if want := []string{"serve", "--listen", "0.0.0.0:7420", "--data-dir", "/data"}; !slices.Equal(c.Cmd, want) {
		t.Errorf("Cmd %q, want %q", c.Cmd, want)
	}
	if _, ok := c.ExposedPorts["7420/tcp"]; !ok || len(c.ExposedPorts) != 1 {
		t.Errorf("ExposedPorts %v, want 7420/tcp", c.ExposedPorts)
	}
	if _, ok := c.Volumes["/data"]; !ok || len(c.Volumes) != 1 {
		t.Errorf("Volumes %v, want /data", c.Volumes)
	}
	version := c.Labels["org.opencontainers.image.version"]
	if version == "" || (wantVersion != "" && version != wantVersion) {
		t.Errorf("label org.opencontainers.image.version %q, want %q", version, wantVersion)
	}
	if src := c.Labels["org.opencontainers.image.source"]; src != DefaultSource {
		t.Errorf("label org.opencontainers.image.source %q, want %q", src, DefaultSource)
	}

	// The files of the image, as a container sees them.
	files := map[string][]byte{}
	modes := map[string]*tar.Header{}
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		modes[strings.TrimSuffix(h.Name, "/")] = h
		if h.Typeflag == tar.TypeReg {
			if files[h.Name], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !strings.Contains(string(files["etc/passwd"]), "nonroot:x:65532:65532:") || !strings.Contains(string(files["etc/group"]), "nonroot:x:65532:") {
		t.Errorf("/etc/passwd or /etc/group has no nonroot 65532:\n%s\n%s", files["etc/passwd"], files["etc/group"])
	}
	if h := modes["data"]; h == nil || h.Uid != 65532 {
		t.Errorf("/data in the image: %+v, want a directory owned by 65532", h)
	}
	exe := files["usr/local/bin/hourglass"]
	if len(exe) == 0 || modes["usr/local/bin/hourglass"].Mode&0o111 == 0 {
		t.Fatalf("the image has no executable /usr/local/bin/hourglass")
	}
	bin := filepath.Join(t.TempDir(), "hourglass")
	if err := os.WriteFile(bin, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	checkStatic(t, bin)
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("the image's binary: hourglass version: %v\n%s", err, out)
	}
	lines := strings.Split(string(out), "\n")
	if lines[0] != "hourglass "+version {
		t.Errorf("the image's binary says %q, its label says version %q", lines[0], version)
	}
	// The revision label is the binary's revision, absent when unknown.
	rev, ok := c.Labels["org.opencontainers.image.revision"]
	if !ok {
		rev = "unknown"
	}
	if len(lines) < 2 || !strings.HasPrefix(lines[1], "revision: "+rev) {
		t.Errorf("the image's binary says %q, its revision label %q", lines[1:], rev)
	}

	// The OCI layout holds the same image for this platform.
	idx, err := layout.ImageIndexFromPath(filepath.Join(dir, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.ConfigName()
	found := false
	for _, d := range im.Manifests {
		if d.Platform == nil || d.Platform.OS != p.OS || d.Platform.Architecture != p.Arch {
			continue
		}
		li, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := li.ConfigName(); got == want {
			found = true
		}
	}
	if !found {
		t.Errorf("the OCI layout has no %s image with the tarball's config %s: %+v", p, want, im.Manifests)
	}
}

// checkSums checks every line of dir's SHA256SUMS against its file, and
// that the sums cover every binary and image tarball there.
func checkSums(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, SumsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	listed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok {
			t.Fatalf("%s: line %q is not in sha256sum's format", SumsFile, sc.Text())
		}
		got, err := fileSHA256(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if got != sum {
			t.Errorf("%s: %s is %s, the file's SHA-256 is %s", SumsFile, name, sum, got)
		}
		listed[name] = true
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "hourglass-") && !listed[e.Name()] {
			t.Errorf("%s does not list %s", SumsFile, e.Name())
		}
	}
}

// checkStatic fails if bin asks for a dynamic loader or shared libraries.
func checkStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has a program interpreter: not static (CGO_ENABLED=0)", bin)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v: not static", bin, libs)
	}
}

func TestParsePlatform(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Platform
		ok   bool
	}{{"linux/amd64", Platform{"linux", "amd64"}, true}, {"darwin/arm64", Platform{"darwin", "arm64"}, true},
		{"linux", Platform{}, false}, {"linux/", Platform{}, false}, {"/amd64", Platform{}, false}, {"linux/arm/v7", Platform{}, false}} {
		got, err := ParsePlatform(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParsePlatform(%q) = %v, %v; want %v (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
	if tagOf("v0.0.0-20261205-abc+dirty") != "v0.0.0-20261205-abc-dirty" {
		t.Errorf("tagOf kept a '+': %s", tagOf("v0.0.0-20261205-abc+dirty"))
	}
}
