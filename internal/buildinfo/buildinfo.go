// Package buildinfo says which Hourglass a binary is: its version, the VCS
// revision it was built from and the Go that built it. It is the one owner
// of those facts; `hourglass version`, the serve log line at start and the
// hourglass_build_info metric all ask it.
//
// The version is, in order: the one a release build sets with
//
//	go build -ldflags "-X github.com/hourglassmq/hourglass/internal/buildinfo.version=v1.2.3"
//
// (scripts/release does), else the Hourglass module's version as the Go
// toolchain stamped it (a tag, or a pseudo-version built from a git
// checkout), else "devel".
package buildinfo

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
)

// ModulePath is the Hourglass module, whose version a program that embeds
// it finds among its dependencies.
const ModulePath = "github.com/hourglassmq/hourglass"

// version is set by the linker for release builds (see the package doc).
var version string

// Info is what a binary knows of its own build.
type Info struct {
	Version   string // v1.2.3, a pseudo-version, or "devel"
	Revision  string // the VCS commit; "" when unknown (built outside a checkout, or embedded)
	Modified  bool   // the checkout had changes not committed
	GoVersion string // go1.26.0
	Platform  string // linux/amd64
}

// Get returns the running binary's Info.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return From(bi, version)
}

// From returns the Info of bi (nil: nothing known but the Go version),
// with override, when not empty, as the version. Revision and Modified
// are the main module's VCS stamp and are left empty when Hourglass is a
// dependency of another main module.
func From(bi *debug.BuildInfo, override string) Info {
	info := Info{Version: override, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		if info.Version == "" {
			info.Version = "devel"
		}
		return info
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	mod, main := &bi.Main, true
	if bi.Main.Path != ModulePath {
		main = false
		for _, d := range bi.Deps {
			if d.Path == ModulePath {
				mod = d
				if d.Replace != nil {
					mod = d.Replace
				}
			}
		}
	}
	if info.Version == "" && mod.Path == ModulePath && mod.Version != "" && mod.Version != "(devel)" {
		info.Version = mod.Version
	}
	if info.Version == "" {
		info.Version = "devel"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if main {
				info.Revision = s.Value
			}
		case "vcs.modified":
			info.Modified = main && s.Value == "true"
		case "GOOS":
			info.Platform = s.Value + info.Platform[strings.IndexByte(info.Platform, '/'):]
		case "GOARCH":
			info.Platform = info.Platform[:strings.IndexByte(info.Platform, '/')+1] + s.Value
		}
	}
	return info
}

// RevisionText is the revision as a person reads it: the commit, with
// "(modified)" after it when the checkout had changes, or "unknown".
func (i Info) RevisionText() string {
	switch {
	case i.Revision == "":
		return "unknown"
	case i.Modified:
		return i.Revision + " (modified)"
	}
	return i.Revision
}

// Write prints i as `hourglass version` does: one "name: value" line each.
func (i Info) Write(w io.Writer) error {
	_, err := fmt.Fprintf(w, "hourglass %s\nrevision: %s\ngo: %s\nplatform: %s\n", i.Version, i.RevisionText(), i.GoVersion, i.Platform)
	return err
}
