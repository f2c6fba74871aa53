package hourglass

import "os"

// LockDataDir takes the lock a node holds on its data directory (its LOCK
// file), for tools that change a stopped node's files, such as hourglass
// repair: it fails while a node runs on dir. Closing the file releases it.
func LockDataDir(dir string) (*os.File, error) { return lockDir(dir) }
