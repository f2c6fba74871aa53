//go:build !unix

package server

import (
	"fmt"
	"os"
	"path/filepath"
)

// LockName is the lock file a server holds in its data directory.
const LockName = "LOCK"

// LockDir creates dir if missing and opens its LOCK file. On this
// platform it does not lock: keep to one server per data directory.
func LockDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("server: data directory: %w", err)
	}
	return os.OpenFile(filepath.Join(dir, LockName), os.O_CREATE|os.O_RDWR, 0o644)
}
