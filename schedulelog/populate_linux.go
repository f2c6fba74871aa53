package schedulelog

import "golang.org/x/sys/unix"

// populate maps b's pages (of a read-only shared file mapping) into the
// process's page tables in one call (MADV_POPULATE_READ, Linux 5.14 and
// later), or by reading a byte of each page where the kernel lacks it.
// It is advice: a reader maps what it reads either way.
func populate(b []byte) {
	if len(b) == 0 {
		return
	}
	if unix.Madvise(b, unix.MADV_POPULATE_READ) == nil {
		return
	}
	touch(b)
}
