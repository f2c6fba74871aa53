package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFrom(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"},
		{Key: "GOOS", Value: "darwin"}, {Key: "GOARCH", Value: "arm64"}}
	for _, tc := range []struct {
		name     string
		bi       *debug.BuildInfo
		override string
		want     Info
	}{
		{"release_build", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: ModulePath, Version: "v0.0.0-2026-abc"}, Settings: vcs},
			"v1.2.3", Info{Version: "v1.2.3", Revision: "abc123", Modified: true, GoVersion: "go1.26.0", Platform: "darwin/arm64"}},
		{"checkout_pseudo_version", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: ModulePath, Version: "v0.0.0-20261205-abc123+dirty"}, Settings: vcs[:1]},
			"", Info{Version: "v0.0.0-20261205-abc123+dirty", Revision: "abc123", GoVersion: "go1.26.0"}},
		{"no_vcs_stamp", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: ModulePath, Version: "(devel)"}},
			"", Info{Version: "devel", GoVersion: "go1.26.0"}},
		{"embedded_as_dependency", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "example.com/app", Version: "(devel)"},
			Deps: []*debug.Module{{Path: "example.com/other", Version: "v9.9.9"}, {Path: ModulePath, Version: "v1.4.0"}}, Settings: vcs[:2]},
			"", Info{Version: "v1.4.0", GoVersion: "go1.26.0"}},
		{"no_build_info", nil, "", Info{Version: "devel"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := From(tc.bi, tc.override)
			if tc.want.GoVersion == "" {
				tc.want.GoVersion = got.GoVersion // the running toolchain's
			}
			if tc.want.Platform == "" {
				tc.want.Platform = got.Platform
			}
			if got != tc.want {
				t.Errorf("From = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestWrite(t *testing.T) {
	var b strings.Builder
	if err := (Info{Version: "v1.2.3", Revision: "abc", Modified: true, GoVersion: "go1.26.0", Platform: "linux/amd64"}).Write(&b); err != nil {
		t.Fatal(err)
	}
	want := "hourglass v1.2.3\nrevision: abc (modified)\ngo: go1.26.0\nplatform: linux/amd64\n"
	if b.String() != want {
		t.Errorf("Write:\n%s\nwant:\n%s", b.String(), want)
	}
	if got := (Info{}).RevisionText(); got != "unknown" {
		t.Errorf("RevisionText of no revision = %q, want unknown", got)
	}
}
