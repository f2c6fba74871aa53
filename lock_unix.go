//go:build unix

package hourglass

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// LockName is the lock file a node holds in its data directory.
const LockName = "LOCK"

// lockDir creates dir if missing and takes an exclusive lock on its LOCK
// file, so that two nodes never share a data directory. The lock lasts
// until the returned file is closed or the process exits (kill -9
// included: the kernel drops it).
func lockDir(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("hourglass: data directory: %w", err)
	}
	path := filepath.Join(dir, LockName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("hourglass: data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("hourglass: data directory %s is in use by another process (it holds %s): %w", dir, path, err)
	}
	return f, nil
}
