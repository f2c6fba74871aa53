package release

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"regexp"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the image is: the binary as its entrypoint, run as a user that is
// not root, serving on every interface of the container with its data in
// the /data volume.
const (
	// ImageBinary is where the binary lives in the image.
	ImageBinary = "/usr/local/bin/hourglass"
	// ImageUser is the image's user: uid and gid 65532, "nonroot" in
	// the image's /etc/passwd and /etc/group.
	ImageUser = "65532:65532"
	// ImageDataDir is the data directory, a volume.
	ImageDataDir = "/data"
	// ImagePort is the port serve listens on.
	ImagePort = "7420"
	// ImageRepository is the name the tarballs tag their image with.
	ImageRepository = "hourglass"
)

// ImageCmd is the image's default command: serve on every interface, the
// data in the volume.
var ImageCmd = []string{"serve", "--listen", "0.0.0.0:" + ImagePort, "--data-dir", ImageDataDir}

type imageMeta struct {
	version, revision, source string
	caCerts                   string
	created                   time.Time
}

type built struct {
	p   Platform
	img v1.Image
}

// newImage builds the image of the linux binary bin: a base layer with
// the users, groups, CA certificates and directories, a layer with the
// binary, and the config.
func newImage(bin string, p Platform, m imageMeta) (v1.Image, error) {
	exe, err := os.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	base := []file{
		{name: "etc/", mode: 0o755},
		{name: "etc/passwd", mode: 0o644, data: "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"},
		{name: "etc/group", mode: 0o644, data: "root:x:0:\nnonroot:x:65532:\n"},
		{name: "etc/nsswitch.conf", mode: 0o644, data: "hosts: files dns\n"},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: 65532},
		{name: "tmp/", mode: 0o1777},
		{name: "data/", mode: 0o750, uid: 65532},
	}
	if m.caCerts != "" {
		pem, err := os.ReadFile(m.caCerts)
		if err != nil {
			return nil, fmt.Errorf("release: the CA certificates for the image: %w (install ca-certificates, or pass --ca-certs '' to leave them out)", err)
		}
		base = append(base, file{name: "etc/ssl/", mode: 0o755}, file{name: "etc/ssl/certs/", mode: 0o755},
			file{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: string(pem)})
	}
	binary := []file{
		{name: "usr/", mode: 0o755}, {name: "usr/local/", mode: 0o755}, {name: "usr/local/bin/", mode: 0o755},
		{name: ImageBinary[1:], mode: 0o755, data: string(exe)},
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, l := range []struct {
		files []file
		by    string
	}{{base, "hourglass release: users, groups, CA certificates, /data"}, {binary, "hourglass release: " + ImageBinary}} {
		layer, err := tarLayer(l.files, m.created)
		if err != nil {
			return nil, err
		}
		img, err = mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer,
			History: v1.History{Created: v1.Time{Time: m.created}, CreatedBy: l.by}})
		if err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = p.OS, p.Arch
	cf.Created = v1.Time{Time: m.created}
	cf.Config.User = ImageUser
	cf.Config.Entrypoint = []string{ImageBinary}
	cf.Config.Cmd = ImageCmd
	cf.Config.WorkingDir = ImageDataDir
	cf.Config.Env = []string{"PATH=/usr/local/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}
	cf.Config.ExposedPorts = map[string]struct{}{ImagePort + "/tcp": {}}
	cf.Config.Volumes = map[string]struct{}{ImageDataDir: {}}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":       "hourglass",
		"org.opencontainers.image.description": "Hourglass, a durable delayed-message server",
		"org.opencontainers.image.version":     m.version,
		"org.opencontainers.image.source":      m.source,
		"org.opencontainers.image.created":     m.created.UTC().Format(time.RFC3339),
	}
	if m.revision != "" {
		cf.Config.Labels["org.opencontainers.image.revision"] = m.revision
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	return img, nil
}

// file is an entry of a layer; a name ending in / is a directory.
type file struct {
	name string
	mode int64
	uid  int
	data string
}

// tarLayer returns a layer of files, owned by root unless they say
// otherwise, all with the time created.
func tarLayer(files []file, created time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.uid, ModTime: created, Format: tar.FormatPAX}
		if f.name[len(f.name)-1] == '/' {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
		if _, err := io.WriteString(tw, f.data); err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	b := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	return layer, nil
}

// tagOf is the tag of version: what a tag may not hold becomes '-'
// (a pseudo-version's '+dirty').
func tagOf(version string) string {
	t := regexp.MustCompile(`[^A-Za-z0-9_.-]`).ReplaceAllString(version, "-")
	if len(t) > 128 {
		t = t[:128]
	}
	return t
}

// writeTarball writes img as a `docker load` tarball tagged
// hourglass:<version>.
func writeTarball(path string, img v1.Image, version string) error {
	tag, err := name.NewTag(ImageRepository+":"+tagOf(version), name.WithDefaultRegistry(""))
	if err != nil {
		return fmt.Errorf("release: the image's tag: %w", err)
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		return fmt.Errorf("release: writing %s: %w", path, err)
	}
	return nil
}

// writeLayout writes the images as one OCI image layout, each with its
// platform and the version as its ref name.
func writeLayout(dir string, imgs []built, version string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("release: writing %s: %w", dir, err)
	}
	for _, b := range imgs {
		if err := lp.AppendImage(b.img, layout.WithPlatform(v1.Platform{OS: b.p.OS, Architecture: b.p.Arch}),
			layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tagOf(version)})); err != nil {
			return fmt.Errorf("release: writing %s: %w", dir, err)
		}
	}
	return nil
}
