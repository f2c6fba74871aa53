package h1srv

import (
	"sync"
	"time"
)

// The pipeline. The connection's goroutine reads and takes requests one
// after the other and hands each call to a worker, without waiting
// for the calls before it to end: a client that pipelines requests (sends
// the next before the answer to the last) has them all in flight at once,
// so that calls waiting for the same thing (a Schedule for its group
// commit's fsync) wait together. Answers leave in the requests' order:
// each call, when done, writes the answers that are ready at the head of
// the queue, and the calls that end while it writes leave theirs to it.

// runCall is a call in flight, with its answer.
type runCall struct {
	call   Call
	w      ResponseWriter
	done   bool // Serve returned; guarded by the conn's pmu
	failed bool // it panicked, or did not write exactly one answer
}

// workers run the calls. A call goes to a worker that waits for one, or
// to a new worker when none waits; a worker that got no call for
// workerIdle ends. Reusing goroutines matters: a call of the server's
// grows a new goroutine's stack several times over (runtime.newstack took
// 15% of the server's CPU with a goroutine per call).
type workers struct {
	calls chan work     // unbuffered: a send succeeds only to a waiting worker
	stop  chan struct{} // closed once the server is closed: the waiting workers end
	once  sync.Once
}

func (w *workers) close() { w.once.Do(func() { close(w.stop) }) }

type work struct {
	c *conn
	r *runCall
}

// workerIdle is how long a worker waits for a call before it ends.
const workerIdle = 10 * time.Second

func (w *workers) run(c *conn, r *runCall) {
	select {
	case w.calls <- work{c, r}:
	default:
		go w.loop(work{c, r})
	}
}

func (w *workers) loop(job work) {
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	for {
		job.c.serveCall(job.r)
		job = work{}
		t.Reset(workerIdle)
		select {
		case job = <-w.calls:
		case <-t.C:
			return
		case <-w.stop:
			return
		}
	}
}

var runCalls = sync.Pool{New: func() any { return new(runCall) }}

// enqueue adds r to the calls in flight, waiting while MaxInFlight are,
// and reports whether r is the only one. It reports false, and forgets
// r, when the connection cannot answer more: a write failed, a call
// failed, or an answer closed it.
func (c *conn) enqueue(r *runCall) (alone, ok bool) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	for len(c.queue) >= MaxInFlight && !c.ended {
		c.drained.Wait()
	}
	if c.ended {
		return false, false
	}
	c.queue = append(c.queue, r)
	return len(c.queue) == 1 && !c.writing, true
}

// drain waits until every call in flight has ended and its answer was
// written, and reports whether the connection can go on.
func (c *conn) drain() bool {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	for len(c.queue) > 0 || c.writing {
		c.drained.Wait()
	}
	return !c.ended
}

// serveCall runs one call and writes the answers ready at the head of the
// queue, unless another call is writing them.
func (c *conn) serveCall(r *runCall) {
	func() {
		defer func() {
			if p := recover(); p != nil {
				c.srv.opts.Logger.Error("h1srv: panic serving a call", "remote", c.req.RemoteAddr, "panic", p)
				r.failed = true
			}
		}()
		r.call.Serve(c.ctx, &r.w)
		if r.w.writes != 1 {
			c.srv.opts.Logger.Error("h1srv: a call wrote no answer or more than one; closing its connection",
				"remote", c.req.RemoteAddr, "answers", r.w.writes)
			r.failed = true
		}
	}()
	c.pmu.Lock()
	r.done = true
	if c.writing {
		c.pmu.Unlock()
		return
	}
	c.writing = true
	for {
		out := c.w.out[:0]
		n := 0
		for n < len(c.queue) && c.queue[n].done {
			q := c.queue[n]
			n++
			switch {
			case c.ended: // dropped: nothing more is written
			case q.failed:
				c.ended = true
			default:
				start := len(out)
				out = append(out, q.w.out...)
				if q.w.closing {
					c.ended = true // the request asked to close
				} else if n == len(c.queue) && c.srv.closing.Load() {
					// As net/http's: the last answer while the server
					// shuts down closes the connection. A request the
					// loop reads meanwhile is not served (enqueue).
					out = insertClose(out, start+q.w.closeAt)
					c.ended = true
				}
			}
		}
		for i := range n {
			q := c.queue[i]
			c.queue[i] = nil
			q.call, q.done, q.failed = nil, false, false
			if cap(q.w.out) <= maxKeptAnswer {
				runCalls.Put(q)
			}
		}
		c.queue = c.queue[:copy(c.queue, c.queue[n:])]
		if len(out) == 0 {
			if c.ended {
				c.nc.Close() // a failed call: the reader's Read ends too
			}
			c.w.out = out
			c.writing = false
			if len(c.queue) == 0 && c.awaiting {
				c.state.CompareAndSwap(stateActive, stateIdle)
			}
			c.drained.Broadcast()
			c.pmu.Unlock()
			return
		}
		ended := c.ended
		c.pmu.Unlock()
		_, err := c.nc.Write(out)
		if ended {
			c.nc.Close() // the reader's Read ends too
		}
		if cap(out) > maxKeptOut {
			out = nil
		}
		c.pmu.Lock()
		c.w.out = out
		if err != nil && !c.ended {
			c.ended = true
			c.nc.Close()
		}
	}
}

// insertClose inserts the "Connection: close" field into the answer in b
// at i.
func insertClose(b []byte, i int) []byte {
	b = append(b, connectionClose...)
	copy(b[i+len(connectionClose):], b[i:len(b)-len(connectionClose)])
	copy(b[i:], connectionClose)
	return b
}

const connectionClose = "Connection: close\r\n"

// maxKeptOut bounds the buffer a connection keeps for writing answers.
const maxKeptOut = 128 << 10

// maxKeptAnswer bounds the answer buffer a pooled runCall keeps.
const maxKeptAnswer = 4 << 10

// MaxInFlight is the most calls of one connection in flight at once: the
// connection's goroutine reads no further request until one ends.
const MaxInFlight = 64
