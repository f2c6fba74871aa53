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

// fallocate allocates blocks for the n bytes of f from off on, reading
// back as zeros where nothing was written; it never changes data already
// there, nor the file's size when the range lies inside it.
func fallocate(f *os.File, off, n int64) error {
	for {
		err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, off, n)
		switch err {
		case unix.EINTR:
			continue
		case unix.EOPNOTSUPP, unix.ENOSYS:
			return errNoFallocate
		}
		return err
	}
}

// dataEnd returns the file position one past the last byte of f that is
// not in a hole (SEEK_DATA/SEEK_HOLE; holes read as zeros), at most size;
// size when it cannot tell. Unwritten preallocated extents may count as
// holes, which read as zeros too.
func dataEnd(f *os.File, size int64) int64 {
	fd := int(f.Fd())
	end, from := int64(0), int64(0)
	for range 1 << 16 { // bounded: a segment has few extents
		off, err := unix.Seek(fd, from, unix.SEEK_DATA)
		if err == unix.ENXIO {
			return end // only holes from here on
		}
		if err != nil {
			return size
		}
		hole, err := unix.Seek(fd, off, unix.SEEK_HOLE)
		if err != nil {
			return size
		}
		if hole >= size {
			return size
		}
		end, from = hole, hole
	}
	return size
}

// dropPages tells the kernel this process no longer needs m's pages (a
// range of a shared file mapping): they leave its resident set and stay in
// the page cache, dirty ones included, and a later read maps them again.
// It is advice: an error changes nothing a reader sees, so it is dropped.
func dropPages(m []byte) {
	if len(m) > 0 {
		unix.Madvise(m, unix.MADV_DONTNEED)
	}
}
