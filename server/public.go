package server

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/grpc/status"
)

// dataDirName stands for the data directory itself in what callers see.
const dataDirName = "<data-dir>"

// pathNamer names the files under the data directory relative to it in
// the texts the server hands to callers (error messages, /readyz): the
// logs keep the full paths for the operator, callers never see where the
// server keeps its files. Its methods may be called from any goroutine.
type pathNamer struct {
	dirs []string // the data directory, absolute and as given; longest first
}

func newPathNamer(dataDir string) pathNamer {
	if dataDir == "" {
		return pathNamer{}
	}
	var p pathNamer
	dirs := []string{filepath.Clean(dataDir)}
	if abs, err := filepath.Abs(dataDir); err == nil {
		dirs = append([]string{abs}, dirs...)
	}
	for _, d := range dirs {
		if d != "." && d != string(filepath.Separator) && !slices.Contains(p.dirs, d) {
			p.dirs = append(p.dirs, d)
		}
	}
	slices.SortFunc(p.dirs, func(a, b string) int { return len(b) - len(a) })
	return p
}

// text returns s with the paths under the data directory made relative
// to it, and the directory itself called dataDirName.
func (p pathNamer) text(s string) string {
	for _, d := range p.dirs {
		s = replacePath(s, d)
	}
	return s
}

// replacePath rewrites the occurrences of the path dir in s that are a
// whole path or its beginning: dir/x becomes x, dir alone dataDirName.
func replacePath(s, dir string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, dir)
		if i < 0 {
			if b.Len() == 0 {
				return s
			}
			b.WriteString(s)
			return b.String()
		}
		b.WriteString(s[:i])
		rest := s[i+len(dir):]
		switch {
		case i > 0 && pathByte(s[i-1]):
			b.WriteString(dir) // inside a longer path
		case strings.HasPrefix(rest, string(filepath.Separator)):
			rest = rest[1:]
		case rest == "" || !pathByte(rest[0]):
			b.WriteString(dataDirName)
		default:
			b.WriteString(dir) // a longer name: /srv/hgx
		}
		s = rest
	}
}

// pathByte reports whether c may be part of a path in an error text.
func pathByte(c byte) bool {
	return c != ' ' && c != '"' && c != '\'' && c != ':' && c != ',' && c != ';' && c != '(' && c != ')' && c != '\n' && c != '='
}

// grpcErr is err, a gRPC status error, with its message through text.
func (p pathNamer) grpcErr(err error) error {
	st, ok := status.FromError(err)
	if err == nil || !ok || len(p.dirs) == 0 {
		return err
	}
	if msg := p.text(st.Message()); msg != st.Message() {
		pb := st.Proto()
		pb.Message = msg
		return status.ErrorProto(pb)
	}
	return err
}

// connectErr is err, a connect-go error, with its message through text.
func (p pathNamer) connectErr(err error) error {
	var ce *connect.Error
	if err == nil || len(p.dirs) == 0 || !errors.As(err, &ce) {
		return err
	}
	msg := p.text(ce.Message())
	if msg == ce.Message() {
		return err
	}
	out := connect.NewError(ce.Code(), errors.New(msg))
	for k, vs := range ce.Meta() {
		for _, v := range vs {
			out.Meta().Add(k, v)
		}
	}
	for _, d := range ce.Details() {
		out.AddDetail(d)
	}
	return out
}
