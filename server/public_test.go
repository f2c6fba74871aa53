package server

import (
	"errors"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestPathNamer: callers see the data directory's files named relative to
// it, whether the directory was given absolute or relative.
func TestPathNamer(t *testing.T) {
	abs, _ := filepath.Abs("rel-data")
	for _, tc := range []struct {
		name, dir, in, want string
	}{
		{"absolute", "/srv/hg", "corrupt data in /srv/hg/queue/topics/qq/log/0.log at offset 33", "corrupt data in queue/topics/qq/log/0.log at offset 33"},
		{"trailing_slash", "/srv/hg/", "open /srv/hg/commitlog: too many open files", "open commitlog: too many open files"},
		{"the_dir_itself", "/srv/hg", "stat /srv/hg: permission denied", "stat <data-dir>: permission denied"},
		{"relative_given", "rel-data", "open " + abs + "/queue/x and rel-data/queue/y", "open queue/x and queue/y"},
		{"other_paths_kept", "/srv/hg", "open /srv/hgx/a and /mnt/srv/hg/b", "open /srv/hgx/a and /mnt/srv/hg/b"},
		{"quoted", "/srv/hg", `path="/srv/hg/a" dir=/srv/hg`, `path="a" dir=<data-dir>`},
		{"no_dir", "", "open /srv/hg/a", "open /srv/hg/a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := newPathNamer(tc.dir).text(tc.in); got != tc.want {
				t.Errorf("text(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	p := newPathNamer("/srv/hg")
	err := p.grpcErr(status.Error(codes.Internal, "corrupt data in /srv/hg/a.log"))
	if status.Code(err) != codes.Internal || status.Convert(err).Message() != "corrupt data in a.log" {
		t.Errorf("grpcErr: %v", err)
	}
	cerr := p.connectErr(connect.NewError(connect.CodeUnavailable, errors.New("open /srv/hg/a.log: EIO")))
	if connect.CodeOf(cerr) != connect.CodeUnavailable || cerr.(*connect.Error).Message() != "open a.log: EIO" {
		t.Errorf("connectErr: %v", cerr)
	}
}

// TestSameToken: the token check compares digests, so a guess of any
// length is compared in full (a length mismatch told the length before).
func TestSameToken(t *testing.T) {
	for _, tc := range []struct {
		guess string
		want  bool
	}{
		{"s3cret", true}, {"s3cre", false}, {"s3crett", false}, {"", false}, {"S3cret", false}, {"x", false},
	} {
		if got := sameToken(tc.guess, "s3cret"); got != tc.want {
			t.Errorf("sameToken(%q) = %v, want %v", tc.guess, got, tc.want)
		}
	}
}
