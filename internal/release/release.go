// Package release builds Hourglass's release artefacts from a checkout:
// static binaries (CGO off) for each platform, a SHA256SUMS file, and for
// the linux platforms a container image built without a container daemon
// (go-containerregistry), written as a `docker load` tarball per platform
// and as one OCI image layout holding them all. scripts/release is its
// command line; docs/OPERATIONS.md says how to use what it writes.
//
// In Out:
//
//	hourglass-<os>-<arch>              the binaries
//	hourglass-image-linux-<arch>.tar   an image each (docker load, podman load, crane push)
//	oci/                               an OCI image layout: an index of the linux images
//	SHA256SUMS                         sha256sum -c checks every file above but oci/
package release

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	hgbuild "github.com/hourglassmq/hourglass/internal/buildinfo"
)

// Platform is a GOOS and GOARCH.
type Platform struct{ OS, Arch string }

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// ParsePlatform parses "linux/amd64".
func ParsePlatform(s string) (Platform, error) {
	os, arch, ok := strings.Cut(s, "/")
	if !ok || os == "" || arch == "" || strings.Contains(arch, "/") {
		return Platform{}, fmt.Errorf("release: platform %q: want OS/ARCH, such as linux/amd64", s)
	}
	return Platform{os, arch}, nil
}

// DefaultPlatforms are those a release is built for.
var DefaultPlatforms = []Platform{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}}

// Options say what to build. Zero values take the defaults named.
type Options struct {
	// Dir is the module's root to build from; default ".".
	Dir string
	// Out is the directory the artefacts are written to, created if
	// missing; required.
	Out string
	// Version is stamped into the binaries (-ldflags -X) and the images'
	// labels and tags; default the version the Go toolchain stamps (a
	// pseudo-version from a git checkout, else "devel").
	Version string
	// Platforms to build; default DefaultPlatforms. Images are built for
	// the linux ones.
	Platforms []Platform
	// Source is the image label org.opencontainers.image.source;
	// default DefaultSource.
	Source string
	// CACerts is a PEM bundle of CA certificates copied into the images
	// (for webhooks and NATS over TLS); "" leaves them out.
	CACerts string
	// Created is the images' creation time and their files' time, for
	// reproducible images; default the Unix epoch.
	Created time.Time
	// Log receives a line per step; default io.Discard.
	Log io.Writer
}

// DefaultSource is the source label of the images.
const DefaultSource = "https://github.com/hourglassmq/hourglass"

// SumsFile is the name of the checksum file in Out.
const SumsFile = "SHA256SUMS"

// Result lists what Build wrote, as paths under Out.
type Result struct {
	Version  string
	Revision string
	Binaries map[Platform]string
	Images   map[Platform]string // linux platforms: the docker load tarballs
	Layout   string              // the OCI layout; "" without a linux platform
	Sums     string
}

// BinaryName is the file name of the binary for p.
func BinaryName(p Platform) string { return "hourglass-" + p.OS + "-" + p.Arch }

// ImageName is the file name of the image tarball for p.
func ImageName(p Platform) string { return "hourglass-image-" + p.OS + "-" + p.Arch + ".tar" }

// Build builds every artefact of o.
func Build(ctx context.Context, o Options) (*Result, error) {
	if o.Out == "" {
		return nil, errors.New("release: Options.Out is required: name the output directory")
	}
	o.Dir = cmp.Or(o.Dir, ".")
	o.Source = cmp.Or(o.Source, DefaultSource)
	if o.Platforms == nil {
		o.Platforms = DefaultPlatforms
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Created.IsZero() {
		o.Created = time.Unix(0, 0).UTC()
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	res := &Result{Binaries: map[Platform]string{}, Images: map[Platform]string{}}
	var sums []string
	for _, p := range o.Platforms {
		bin := filepath.Join(o.Out, BinaryName(p))
		fmt.Fprintf(o.Log, "release: building %s\n", bin)
		if err := goBuild(ctx, o, p, bin); err != nil {
			return nil, err
		}
		res.Binaries[p] = bin
		sums = append(sums, bin)
		if res.Version == "" {
			bi, err := buildinfo.ReadFile(bin)
			if err != nil {
				return nil, fmt.Errorf("release: reading the build info of %s: %w", bin, err)
			}
			info := hgbuild.From(bi, o.Version)
			res.Version, res.Revision = info.Version, info.Revision
		}
	}
	var images []built
	for _, p := range o.Platforms {
		if p.OS != "linux" {
			continue
		}
		img, err := newImage(res.Binaries[p], p, imageMeta{version: res.Version, revision: res.Revision, source: o.Source, caCerts: o.CACerts, created: o.Created})
		if err != nil {
			return nil, err
		}
		path := filepath.Join(o.Out, ImageName(p))
		fmt.Fprintf(o.Log, "release: writing the image %s\n", path)
		if err := writeTarball(path, img, res.Version); err != nil {
			return nil, err
		}
		res.Images[p] = path
		sums = append(sums, path)
		images = append(images, built{p, img})
	}
	if len(images) > 0 {
		res.Layout = filepath.Join(o.Out, "oci")
		fmt.Fprintf(o.Log, "release: writing the OCI layout %s\n", res.Layout)
		if err := writeLayout(res.Layout, images, res.Version); err != nil {
			return nil, err
		}
	}
	res.Sums = filepath.Join(o.Out, SumsFile)
	if err := writeSums(res.Sums, sums); err != nil {
		return nil, err
	}
	return res, nil
}

// goBuild builds the hourglass command for p into bin: static, paths
// trimmed, symbols stripped, the version stamped when o sets one.
func goBuild(ctx context.Context, o Options, p Platform, bin string) error {
	abs, err := filepath.Abs(bin)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	ldflags := "-s -w"
	if o.Version != "" {
		ldflags += " -X " + hgbuild.ModulePath + "/internal/buildinfo.version=" + o.Version
	}
	// -buildvcs=auto: stamp the revision where git can (a GOFLAGS of
	// -buildvcs=false would otherwise leave it out).
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=auto", "-ldflags", ldflags, "-o", abs, "./cmd/hourglass")
	cmd.Dir = o.Dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("release: go build for %s: %w\n%s", p, err, out.Bytes())
	}
	return nil
}

// writeSums writes the SHA-256 of each file, in sha256sum's format, by
// base name (the files sit beside it).
func writeSums(path string, files []string) error {
	var b strings.Builder
	slices.Sort(files)
	for _, f := range files {
		sum, err := fileSHA256(f)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, filepath.Base(f))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("release: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("release: reading %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
