package commitlog

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// fdatasync flushes f's data (and the metadata needed to read it back).
// Writes through a shared mapping are in the page cache like any other
// write, so this covers them too.
func fdatasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}

var errNoFallocate = errors.New("fallocate not supported")

// fallocate allocates size bytes of blocks for f, reading back as zeros.
func fallocate(f *os.File, size int64) error {
	for {
		err := unix.Fallocate(int(f.Fd()), 0, 0, size)
		switch err {
		case unix.EINTR:
			continue
		case unix.EOPNOTSUPP, unix.ENOSYS:
			return errNoFallocate
		}
		return err
	}
}
