package catalog

import "golang.org/x/sys/unix"

// dropMapped advises the kernel that the n bytes of a shared file mapping
// at addr are not needed (MADV_DONTNEED): they leave the resident set and
// stay in the page cache. It is advice: an error changes nothing a reader
// sees, so it is dropped.
func dropMapped(addr uintptr, n int64) {
	if addr != 0 && n > 0 {
		unix.Syscall(unix.SYS_MADVISE, addr, uintptr(n), unix.MADV_DONTNEED)
	}
}
