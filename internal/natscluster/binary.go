package natscluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// module is the nats-server module whose main package Binary builds, at the
// version the hourglass module's go.mod requires.
const module = "github.com/nats-io/nats-server/v2"

// EnvBinary names an environment variable that, when set, holds the path of
// a nats-server binary to use instead of building one.
const EnvBinary = "HOURGLASS_NATS_SERVER"

var binOnce struct {
	sync.Mutex
	path string // set once a build or lookup succeeded; guarded by the mutex
}

// Binary returns the path of a nats-server binary built from the version of
// github.com/nats-io/nats-server/v2 that the hourglass module requires. The
// first call on a machine builds it with `go build` (this needs the go
// command and the module's source, from the module cache or the module
// proxy) into the user's cache directory,
// <os.UserCacheDir>/hourglass/nats-server-<version>-<os>-<arch>/nats-server;
// later calls, also from other processes, reuse that file. Concurrent
// builds are safe: each writes a temporary file and renames it into place.
//
// When the environment variable HOURGLASS_NATS_SERVER is set, its value is
// returned instead (after checking that the file exists).
func Binary(ctx context.Context) (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("natscluster: %s=%s: %w", EnvBinary, p, err)
		}
		return p, nil
	}
	binOnce.Lock()
	defer binOnce.Unlock()
	if binOnce.path != "" {
		return binOnce.path, nil
	}
	dir := moduleDir()
	version, err := goCmd(ctx, dir, "list", "-m", "-f", "{{.Version}}", module)
	if err != nil {
		return "", fmt.Errorf("natscluster: finding the required version of %s: %w", module, err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	binDir := filepath.Join(cache, "hourglass", fmt.Sprintf("nats-server-%s-%s-%s", version, runtime.GOOS, runtime.GOARCH))
	bin := filepath.Join(binDir, "nats-server")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		binOnce.path = bin
		return bin, nil
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", fmt.Errorf("natscluster: %w", err)
	}
	tmp, err := os.CreateTemp(binDir, "nats-server-*.tmp")
	if err != nil {
		return "", fmt.Errorf("natscluster: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := goCmd(ctx, dir, "build", "-o", tmp.Name(), module); err != nil {
		return "", fmt.Errorf("natscluster: building nats-server %s: %w", version, err)
	}
	if err := os.Rename(tmp.Name(), bin); err != nil {
		return "", fmt.Errorf("natscluster: %w", err)
	}
	binOnce.path = bin
	return bin, nil
}

// moduleDir is a directory inside the hourglass module, for the go command
// to find go.mod from: this package's source directory when it exists (go
// test, go run), else the working directory.
func moduleDir() string {
	if _, file, _, ok := runtime.Caller(0); ok {
		d := filepath.Dir(file)
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			return d
		}
	}
	d, _ := os.Getwd()
	return d
}

// goCmd runs the go command in dir and returns its trimmed stdout.
func goCmd(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var ee *exec.Error
		if errors.As(err, &ee) {
			return "", fmt.Errorf("the go command is needed to build nats-server (or set %s): %w", EnvBinary, err)
		}
		return "", fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), dir, err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}
