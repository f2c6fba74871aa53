package h1

import "golang.org/x/sys/unix"

// peek looks at the socket without blocking or consuming anything: an
// idle connection has nothing to read. End of stream (the server closed
// it), data the server sent unasked, or an error such as a reset all mean
// it must not carry a request.
func (pc *conn) peek(fd uintptr) bool {
	_, _, err := unix.Recvfrom(int(fd), pc.peekBuf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	pc.peekAlive = err == unix.EAGAIN || err == unix.EINTR
	return true // done: do not wait for the socket to become readable
}
