//go:build !unix

package hourglass

import (
	"fmt"
	"os"
	"path/filepath"
)

// LockName is the lock file a node holds in its data directory.
const LockName = "LOCK"

// lockDir creates dir if missing and opens its LOCK file. On this
// platform it does not lock: keep to one node per data directory.
func lockDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("hourglass: data directory: %w", err)
	}
	return os.OpenFile(filepath.Join(dir, LockName), os.O_CREATE|os.O_RDWR, 0o644)
}
