package h1

import (
	"context"
	"errors"
	"io"
	"sync"
)

// errBodyClosed is what a read of a closed response body returns.
var errBodyClosed = errors.New("h1: read on a closed response body")

// body is a response body streaming from its connection. The connection
// goes back to the pool only when the body was read to EOF and then
// closed, nothing went wrong, neither side asked to close, and the
// request's context can no longer disturb it. Read and Close may be
// called from different goroutines; Close aborts a blocked Read.
type body struct {
	rc   io.ReadCloser // http.ReadResponse's body
	pc   *conn
	t    *Transport
	ctx  context.Context
	stop func() bool // stops the context's hook; true if it never ran
	keep bool        // neither request nor response said Connection: close

	mu     sync.Mutex
	eof    bool // guarded by mu
	failed bool // a read failed; guarded by mu
	closed bool // guarded by mu
}

// Read reads from the response. When the request's context has ended it
// returns the context's error.
func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return 0, errBodyClosed
	}
	n, err := b.rc.Read(p)
	if err == nil {
		return n, nil
	}
	b.mu.Lock()
	if err == io.EOF {
		b.eof = true
	} else {
		b.failed = true
	}
	closed = b.closed
	b.mu.Unlock()
	if err != io.EOF {
		if cerr := b.ctx.Err(); cerr != nil {
			return n, cerr
		}
		if closed {
			return n, errBodyClosed
		}
	}
	return n, err
}

// Close ends the response: it gives the connection back to the pool (see
// the type) or closes it.
func (b *body) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	done := b.eof && !b.failed
	b.mu.Unlock()
	if !done {
		// Close the connection first: it unblocks a Read in progress, and
		// keeps rc.Close from draining a body nobody wants.
		b.pc.nc.Close()
		b.stop()
		b.rc.Close()
		return nil
	}
	b.rc.Close() // at EOF: returns at once
	// stop is always called: it also unregisters the hook.
	undisturbed := b.stop()
	b.t.release(b.pc, b.keep && undisturbed)
	return nil
}
