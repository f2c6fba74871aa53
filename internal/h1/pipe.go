package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Pipelined Posts (Options.PipelineConns; the rules are in the package
// doc). A host's pipeHost holds its connections; each pipeConn has a queue
// of requests in wire order, written by whichever caller finds no write in
// progress, and one goroutine that reads the answers and hands each to the
// request at the head of the queue.

const (
	// defaultPipelineDepth is Options.PipelineDepth when not set.
	defaultPipelineDepth = 64
	// maxMoves is how many times a request that never reached a write
	// call is moved to another connection after the one it was queued on
	// ended.
	maxMoves = 3
	// maxKeptBuffer bounds the write buffer a connection keeps between
	// bursts; a larger one, made for a burst of large requests, is
	// dropped.
	maxKeptBuffer = 64 << 10
)

// pipeHost is one host's pipelined connections. Its methods may be called
// from any goroutine.
type pipeHost struct {
	t    *Transport
	addr string

	mu      sync.Mutex
	conns   []*pipeConn     // open connections taking requests; guarded by mu
	dialing int             // dials in progress; guarded by mu
	dials   uint64          // dials started so far, each connection's seq; guarded by mu
	waiters []chan struct{} // Posts waiting for room; guarded by mu
	nwait   atomic.Int32    // len(waiters), read without mu
}

// pipeHost returns addr's pipelined connections.
func (t *Transport) pipeHost(addr string) *pipeHost {
	t.pipeMu.Lock()
	defer t.pipeMu.Unlock()
	h := t.pipeHosts[addr]
	if h == nil {
		h = &pipeHost{t: t, addr: addr}
		t.pipeHosts[addr] = h
	}
	return h
}

// closeIdlePipes closes every pipelined connection on which no caller
// waits.
func (t *Transport) closeIdlePipes() {
	t.pipeMu.Lock()
	hosts := make([]*pipeHost, 0, len(t.pipeHosts))
	for _, h := range t.pipeHosts {
		hosts = append(hosts, h)
	}
	t.pipeMu.Unlock()
	for _, h := range hosts {
		var idle []*pipeConn
		h.mu.Lock()
		for _, pc := range h.conns {
			if pc.live.Load() == 0 {
				idle = append(idle, pc)
			}
		}
		for _, pc := range idle {
			h.removeLocked(pc)
		}
		h.mu.Unlock()
		for _, pc := range idle {
			pc.fail(errClosedIdle, nil)
		}
	}
}

var errClosedIdle = errors.New("the connection was closed as idle")

// pick reserves room on a connection whose seq is at least minSeq: the
// one with the fewest requests in flight, or a new one while fewer than
// PipelineConns are open or being dialed and every eligible one is busy.
// When all are full it waits for room or for ctx to end.
func (h *pipeHost) pick(ctx context.Context, minSeq uint64) (*pipeConn, error) {
	for {
		h.mu.Lock()
		var best *pipeConn
		least := int32(math.MaxInt32)
		for _, pc := range h.conns {
			if pc.seq < minSeq {
				continue
			}
			if l := pc.load.Load(); l < least {
				best, least = pc, l
			}
		}
		room := len(h.conns)+h.dialing < h.t.pipeConns
		if best != nil && (least == 0 || !room && least < int32(h.t.pipeDepth)) {
			best.reserve()
			h.mu.Unlock()
			return best, nil
		}
		if room {
			h.dialing++
			h.dials++
			seq := h.dials
			h.mu.Unlock()
			return h.dial(ctx, seq)
		}
		ch := make(chan struct{}, 1)
		h.waiters = append(h.waiters, ch)
		h.nwait.Store(int32(len(h.waiters)))
		h.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			h.mu.Lock()
			for i, w := range h.waiters {
				if w == ch {
					h.waiters = append(h.waiters[:i], h.waiters[i+1:]...)
					break
				}
			}
			h.nwait.Store(int32(len(h.waiters)))
			h.mu.Unlock()
			return nil, ctx.Err()
		}
	}
}

// dial opens connection seq and reserves room on it for the caller.
func (h *pipeHost) dial(ctx context.Context, seq uint64) (*pipeConn, error) {
	nc, err := h.t.dial(ctx, "tcp", h.addr)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dialing--
	h.wakeLocked()
	if err != nil {
		return nil, err
	}
	pc := newPipeConn(h, nc, seq)
	pc.reserve()
	h.conns = append(h.conns, pc)
	go pc.readLoop()
	return pc, nil
}

// wake lets the Posts waiting for room look again.
func (h *pipeHost) wake() {
	h.mu.Lock()
	h.wakeLocked()
	h.mu.Unlock()
}

func (h *pipeHost) wakeLocked() {
	for _, ch := range h.waiters {
		ch <- struct{}{}
	}
	clear(h.waiters)
	h.waiters = h.waiters[:0]
	h.nwait.Store(0)
}

// removeLocked takes pc out of the connections that take requests and
// reports whether it was there. h.mu must be held.
func (h *pipeHost) removeLocked(pc *pipeConn) bool {
	if pc.removed {
		return false
	}
	pc.removed = true
	for i, c := range h.conns {
		if c == pc {
			n := copy(h.conns[i:], h.conns[i+1:])
			h.conns[i+n] = nil
			h.conns = h.conns[:i+n]
			break
		}
	}
	h.wakeLocked()
	return true
}

// pipeConn is one pipelined connection. Requests are queued by their
// callers and written by whichever caller finds no write in progress;
// the goroutine running readLoop reads the answers in order and hands
// each to its caller.
type pipeConn struct {
	h       *pipeHost
	seq     uint64 // the number of its dial on its host
	nc      net.Conn
	br      *bufio.Reader // readLoop's
	scratch []byte        // readLoop's: bodies that do not fit br
	born    time.Time
	timer   *time.Timer // the idle check

	// load counts the requests reserved, queued or awaiting an answer;
	// live, those of them whose caller still waits. idleAt is when live
	// last fell (time since born, in ns): the connection is idle while
	// live is 0.
	load, live atomic.Int32
	idleAt     atomic.Int64
	removed    bool // taken out of h.conns; guarded by h.mu

	// fired is signalled by interrupt, the context hook of a write.
	fired     chan struct{}
	interrupt func()

	mu      sync.Mutex
	pending []byte      // requests queued, not yet handed to a write call; guarded by mu
	spare   []byte      // the other write buffer; guarded by mu
	calls   []*pipeCall // calls[head:]: the requests not yet answered, in wire order; guarded by mu
	head    int         // guarded by mu
	unsent  int         // how many of the last calls have their bytes in pending; guarded by mu
	writing bool        // a goroutine is writing; guarded by mu
	err     error       // why the connection ended, nil while open; guarded by mu
}

func newPipeConn(h *pipeHost, nc net.Conn, seq uint64) *pipeConn {
	pc := &pipeConn{h: h, seq: seq, nc: nc, br: bufio.NewReaderSize(nc, h.t.rbuf), born: time.Now(), fired: make(chan struct{}, 1)}
	pc.interrupt = func() {
		pc.nc.SetWriteDeadline(aLongTimeAgo)
		pc.fired <- struct{}{}
	}
	pc.timer = time.AfterFunc(h.t.pool.timeout, pc.idleCheck)
	return pc
}

// reserve counts a request the caller is about to queue. h.mu is held,
// so that an idle check never closes a connection someone just picked.
func (pc *pipeConn) reserve() {
	pc.load.Add(1)
	pc.live.Add(1)
}

// leave counts a request that left the connection: answered, settled by
// its end, or never queued; gone says its caller no longer waits on it
// (false for one its caller gave up on earlier).
func (pc *pipeConn) leave(gone bool) {
	if gone {
		pc.unwait()
	}
	pc.load.Add(-1)
	if pc.h.nwait.Load() > 0 {
		pc.h.wake()
	}
}

// unwait counts a caller that no longer waits on the connection.
func (pc *pipeConn) unwait() {
	pc.idleAt.Store(int64(time.Since(pc.born)))
	pc.live.Add(-1)
}

// idleCheck runs on the idle timer: it closes the connection when no
// caller has waited on it for the idle timeout, and sets the timer again
// otherwise.
func (pc *pipeConn) idleCheck() {
	h := pc.h
	timeout := h.t.pool.timeout
	h.mu.Lock()
	if pc.removed {
		h.mu.Unlock()
		return
	}
	if pc.live.Load() > 0 {
		pc.timer.Reset(timeout)
		h.mu.Unlock()
		return
	}
	idle := time.Since(pc.born) - time.Duration(pc.idleAt.Load())
	if idle < timeout {
		pc.timer.Reset(timeout - idle)
		h.mu.Unlock()
		return
	}
	h.removeLocked(pc)
	h.mu.Unlock()
	pc.fail(errClosedIdle, nil)
}

// appendRequest appends r as it goes on the wire.
func appendRequest(b []byte, r *PostRequest) []byte {
	b = append(b, r.Target.head...)
	b = append(b, r.Header...)
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(len(r.Body)), 10)
	b = append(b, "\r\n\r\n"...)
	return append(b, r.Body...)
}

// enqueue queues r for c, the caller having reserved room. The caller
// then writes the queue if nobody is writing it. false means the
// connection has ended and nothing was queued.
func (pc *pipeConn) enqueue(ctx context.Context, c *pipeCall, r *PostRequest) bool {
	pc.mu.Lock()
	if pc.err != nil {
		pc.mu.Unlock()
		return false
	}
	// Bytes and answer queue under one lock: the wire order is the
	// answers' order.
	pc.pending = appendRequest(pc.pending, r)
	pc.calls = append(pc.calls, c)
	pc.unsent++
	if pc.writing {
		pc.mu.Unlock()
		return true
	}
	pc.writing = true
	pc.mu.Unlock()
	pc.writeQueued(ctx)
	return true
}

// errInterrupted is what write returns when ctx ended while it wrote.
var errInterrupted = errors.New("h1: write interrupted")

// writeQueued writes what is queued, in one write call, until the queue
// is empty; pc.writing is set. When ctx ends in the middle of a write,
// a goroutine takes over the rest and the caller returns.
func (pc *pipeConn) writeQueued(ctx context.Context) {
	if pc.live.Load() > 1 {
		// Other callers wait on this connection, and those the reader
		// just handed answers to may be runnable: let them queue their
		// next requests first, so that they leave in this write.
		runtime.Gosched()
	}
	pc.mu.Lock()
	for pc.unsent > 0 && pc.err == nil {
		buf := pc.pending
		pc.pending, pc.spare = pc.spare[:0], nil
		pc.unsent = 0
		pc.mu.Unlock()
		n, err := pc.write(ctx, buf)
		if err == errInterrupted {
			go pc.finishWrite(buf, n)
			return
		}
		pc.mu.Lock()
		pc.keep(buf)
		if err != nil {
			pc.writing = false
			pc.mu.Unlock()
			pc.fail(fmt.Errorf("writing to the connection failed: %w", err), nil)
			return
		}
	}
	pc.writing = false
	pc.mu.Unlock()
}

// finishWrite writes the rest of a write whose caller's context ended,
// then what was queued meanwhile.
func (pc *pipeConn) finishWrite(buf []byte, n int) {
	_, err := pc.nc.Write(buf[n:])
	pc.mu.Lock()
	pc.keep(buf)
	if err != nil {
		pc.writing = false
		pc.mu.Unlock()
		pc.fail(fmt.Errorf("writing to the connection failed: %w", err), nil)
		return
	}
	pc.mu.Unlock()
	pc.writeQueued(context.Background())
}

// keep makes buf the spare write buffer unless it grew too large.
// pc.mu is held.
func (pc *pipeConn) keep(buf []byte) {
	if cap(buf) <= maxKeptBuffer && pc.spare == nil {
		pc.spare = buf[:0]
	}
}

// write writes buf; when ctx ends meanwhile it interrupts the write with
// a past deadline, clears the deadline, and returns errInterrupted with
// what was written.
func (pc *pipeConn) write(ctx context.Context, buf []byte) (int, error) {
	if ctx.Done() == nil {
		return pc.nc.Write(buf)
	}
	stop := context.AfterFunc(ctx, pc.interrupt)
	n, err := pc.nc.Write(buf)
	if stop() {
		return n, err
	}
	<-pc.fired
	pc.nc.SetWriteDeadline(time.Time{})
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		return n, errInterrupted
	}
	return n, err
}

// readLoop reads the answers in order and hands each to its request's
// caller, until the connection ends.
func (pc *pipeConn) readLoop() {
	br, addr := pc.br, pc.h.addr
	for {
		if _, err := br.Peek(1); err != nil {
			if br.Buffered() == 0 && (err == io.EOF || errors.Is(err, syscall.ECONNRESET)) {
				pc.fail(fmt.Errorf("the server closed the connection without answering it: %w", err), nil)
			} else {
				pc.fail(fmt.Errorf("reading from the connection failed: %w", err), nil)
			}
			return
		}
		pc.mu.Lock()
		ended, written := pc.err != nil, len(pc.calls)-pc.head-pc.unsent
		pc.mu.Unlock()
		if ended {
			return
		}
		if written == 0 {
			pc.fail(errors.New("the server sent bytes that answer no request"), nil)
			return
		}
		var h head
		var body []byte
		var bodyErr error
		consumed := 0 // body bytes to discard once handed over
		if readHead(br, &h) {
			if h.length <= int64(br.Size()) {
				body, bodyErr = br.Peek(int(h.length))
				consumed = len(body)
				if bodyErr == io.EOF {
					bodyErr = io.ErrUnexpectedEOF
				}
			} else {
				pc.scratch, bodyErr = readN(br, pc.scratch[:0], h.length)
				body = pc.scratch
			}
		} else {
			var err error
			pc.scratch = pc.scratch[:0]
			if bodyErr, err = readResponse(br, addr, &h, &pc.scratch); err != nil {
				pc.fail(fmt.Errorf("reading an earlier answer failed: %w", err), err)
				return
			}
			body = pc.scratch
		}
		pc.mu.Lock()
		if pc.err != nil {
			pc.mu.Unlock()
			return // a failed write settled every request
		}
		c := pc.calls[pc.head]
		pc.calls[pc.head] = nil
		pc.head++
		if pc.head == len(pc.calls) {
			pc.calls, pc.head = pc.calls[:0], 0
		} else if pc.head >= 64 && 2*pc.head >= len(pc.calls) {
			n := copy(pc.calls, pc.calls[pc.head:])
			clear(pc.calls[n:])
			pc.calls, pc.head = pc.calls[:n], 0
		}
		pc.mu.Unlock()
		if c.state.CompareAndSwap(callWaiting, callSettled) {
			c.a = Answer{StatusCode: h.status, Status: h.statusText, Header: h.header, Body: append(c.dst, body...), BodyErr: bodyErr}
			c.out = outAnswer
			pc.leave(true)
			c.done <- struct{}{}
		} else {
			pc.leave(false) // its caller gave up: dropped
		}
		br.Discard(consumed)
		if len(pc.scratch) > maxKeptBuffer {
			pc.scratch = nil
		}
		if bodyErr != nil {
			pc.fail(fmt.Errorf("reading an earlier answer's body failed: %w", bodyErr), nil)
			return
		}
		if h.close {
			pc.fail(errors.New(`the server answered an earlier request with "Connection: close"`), nil)
			return
		}
	}
}

// fail ends the connection for cause, once, and settles every request
// on it without an answer (see the package doc): one that never reached
// a write call is moved, an idempotent one is sent again on a connection
// dialed after now, the others get an error. headErr, when set, is the
// error of the request at the head, whose answer failed to read.
func (pc *pipeConn) fail(cause, headErr error) {
	h := pc.h
	// Out of the host's list first: nothing can be moved or sent again
	// onto this connection.
	h.mu.Lock()
	h.removeLocked(pc)
	minSeq := h.dials + 1
	h.mu.Unlock()
	pc.mu.Lock()
	if pc.err != nil {
		pc.mu.Unlock()
		return
	}
	pc.err = cause
	calls := pc.calls[pc.head:]
	written := len(calls) - pc.unsent
	pc.calls, pc.head, pc.unsent, pc.pending = nil, 0, 0, nil
	pc.mu.Unlock()
	pc.timer.Stop()
	pc.nc.Close()
	addr := h.addr
	for i, c := range calls {
		if !c.state.CompareAndSwap(callWaiting, callSettled) {
			pc.leave(false)
			continue
		}
		switch {
		case i >= written:
			c.out = outUnsent
			c.err = cause
		case i == 0 && headErr != nil:
			c.out, c.err = outError, headErr
		case c.idempotent:
			c.out, c.minSeq = outResend, minSeq
		default:
			c.out = outError
			c.err = fmt.Errorf("h1: %s %s: the connection ended before this request was answered (%w); "+
				"the request was sent and may have been processed, so only idempotent requests are sent again",
				"POST", addr, cause)
		}
		pc.leave(true)
		c.done <- struct{}{}
	}
}

// pipeCall is one pipelined request's place in its connection's queue.
// Until its caller receives from done, the connection's side owns its
// answer fields; a caller that gives up (callAbandoned) never touches it
// again.
type pipeCall struct {
	state atomic.Int32
	done  chan struct{} // capacity 1: settled
	dst   []byte        // where the answer's body is appended
	// idempotent: sent again once after its connection ended unanswered.
	idempotent bool

	out    outcome
	a      Answer
	err    error
	minSeq uint64 // outResend: the first connection that may carry it
}

// The states of a pipeCall.
const (
	callWaiting   int32 = iota
	callSettled         // the connection's side settled it
	callAbandoned       // its caller gave up
)

// outcome is how a request's time on a connection ended.
type outcome uint8

const (
	outAnswer outcome = iota
	outError
	outUnsent // never reached a write call: send it on another connection
	outResend // idempotent, written, unanswered: send it again once
)

// getCall returns a pipeCall from the transport's pool. The pool is the
// transport's, not the package's, so that a channel made in one
// testing/synctest bubble never reaches another.
func (t *Transport) getCall() *pipeCall {
	if c, ok := t.pipeCalls.Get().(*pipeCall); ok {
		return c
	}
	return &pipeCall{done: make(chan struct{}, 1)}
}

// putCall clears c, which its caller owns again, and pools it.
func (t *Transport) putCall(c *pipeCall) {
	c.state.Store(callWaiting)
	c.dst, c.idempotent, c.out, c.a, c.err, c.minSeq = nil, false, outAnswer, Answer{}, nil, 0
	t.pipeCalls.Put(c)
}

// postPiped is Post on pipelined connections.
func (t *Transport) postPiped(ctx context.Context, r PostRequest, dst []byte) (Answer, error) {
	h := r.Target.pipe
	idempotent := r.Idempotent
	var minSeq uint64
	for moves := 0; ; {
		if err := ctx.Err(); err != nil {
			return Answer{}, err
		}
		pc, err := h.pick(ctx, minSeq)
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return Answer{}, cerr
			}
			return Answer{}, fmt.Errorf("h1: dialing %s: %w", h.addr, err)
		}
		c := t.getCall()
		c.dst, c.idempotent = dst, idempotent
		if !pc.enqueue(ctx, c, &r) {
			pc.leave(true) // ended between pick and enqueue: nothing sent
			t.putCall(c)
			if moves++; moves > maxMoves {
				return Answer{}, fmt.Errorf("h1: POST %s: the request was not sent: %d connections ended before it could be queued", h.addr, moves)
			}
			continue
		}
		select {
		case <-c.done:
		case <-ctx.Done():
			if c.state.CompareAndSwap(callWaiting, callAbandoned) {
				pc.unwait() // the connection drops its answer
				return Answer{}, ctx.Err()
			}
			<-c.done // settled meanwhile: the answer is in memory
		}
		out, a, err, seq := c.out, c.a, c.err, c.minSeq
		t.putCall(c)
		switch out {
		case outAnswer:
			return a, nil
		case outError:
			return Answer{}, err
		case outUnsent:
			if moves++; moves > maxMoves {
				return Answer{}, fmt.Errorf("h1: POST %s: the request was not sent: %d connections ended before it could be written, the last because %w", h.addr, moves, err)
			}
		case outResend:
			idempotent, minSeq = false, seq
		}
	}
}
