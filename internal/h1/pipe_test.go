package h1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// gatedConn is a client connection that records each write and can hold
// writes: while gate is set, a write waits until it is closed.
type gatedConn struct {
	net.Conn
	entered chan struct{} // a write began (capacity 1, not blocking)

	mu     sync.Mutex
	gate   chan struct{} // guarded by mu
	writes [][]byte      // a copy of each write; guarded by mu
}

func (c *gatedConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes = append(c.writes, append([]byte(nil), p...))
	gate := c.gate
	c.mu.Unlock()
	select {
	case c.entered <- struct{}{}:
	default:
	}
	if gate != nil {
		<-gate
	}
	return c.Conn.Write(p)
}

func (c *gatedConn) hold() {
	c.mu.Lock()
	c.gate = make(chan struct{})
	c.mu.Unlock()
}

func (c *gatedConn) release() {
	c.mu.Lock()
	if c.gate != nil {
		close(c.gate)
		c.gate = nil
	}
	c.mu.Unlock()
}

func (c *gatedConn) written() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]byte(nil), c.writes...)
}

// gatedTransport is a pipelining Transport whose connections are
// gatedConns; the first is held from the start when hold is set.
func gatedTransport(t *testing.T, o Options, hold bool) (*Transport, *dialer) {
	t.Helper()
	tr, d := newTransport(t, o)
	d.wrap = func(c net.Conn) net.Conn {
		g := &gatedConn{Conn: c, entered: make(chan struct{}, 1)}
		if hold && d.dials() == 0 {
			g.hold()
		}
		return g
	}
	t.Cleanup(func() {
		for i := range d.dials() {
			d.conn(i).(*gatedConn).release()
		}
	})
	return tr, d
}

// queued is how many requests the host's open pipelined connections hold
// (queued or awaiting an answer).
func queued(tg *Target) int {
	h := tg.pipe
	h.mu.Lock()
	conns := append([]*pipeConn(nil), h.conns...)
	h.mu.Unlock()
	n := 0
	for _, pc := range conns {
		pc.mu.Lock()
		n += len(pc.calls) - pc.head
		pc.mu.Unlock()
	}
	return n
}

// postsInOrder starts one Post per body, each once the one before is
// queued, so that they are queued (and go on the wire) in this order.
func postsInOrder(t *testing.T, tr *Transport, tg *Target, ctxs []context.Context, bodies []string, idempotent map[int]bool) []<-chan result {
	t.Helper()
	var out []<-chan result
	base := queued(tg)
	for i, b := range bodies {
		ctx := context.Background()
		if ctxs != nil && ctxs[i] != nil {
			ctx = ctxs[i]
		}
		out = append(out, postIn(ctx, tr, PostRequest{Target: tg, Body: []byte(b), Idempotent: idempotent[i]}))
		waitUntil(t, fmt.Sprintf("request %d to be queued", i), func() bool { return queued(tg) == base+i+1 })
	}
	return out
}

// readBodies reads n whole requests from br, counts them, and returns
// their bodies.
func (s *rawServer) readBodies(t *testing.T, br *bufio.Reader, n int) []string {
	t.Helper()
	var got []string
	for range n {
		req, err := http.ReadRequest(br)
		if err != nil {
			t.Fatalf("server: reading a request: %v", err)
		}
		b, err := io.ReadAll(req.Body)
		if err != nil {
			t.Fatalf("server: reading the body: %v", err)
		}
		s.handled.Add(1)
		got = append(got, string(b))
	}
	return got
}

// TestPipeAnswersReachCallers: 64 goroutines make pipelined Posts with
// distinct bodies to an echoing server; each gets its own body back, and
// no more than PipelineConns connections are ever dialed.
func TestPipeAnswersReachCallers(t *testing.T) {
	for _, conns := range []int{1, 4} {
		t.Run(fmt.Sprintf("conns_%d", conns), func(t *testing.T) {
			srv, accepted := newServer(t, http.HandlerFunc(echo))
			tr, d := newTransport(t, Options{PipelineConns: conns})
			tg := target(t, tr, srv.URL)
			const callers, calls = 64, 40
			var wg sync.WaitGroup
			errs := make(chan error, callers)
			for g := range callers {
				wg.Go(func() {
					var dst []byte
					for i := range calls {
						body := fmt.Sprintf("caller %d call %d %s", g, i, strings.Repeat("x", (g*7+i)%300))
						a, err := tr.Post(context.Background(), PostRequest{Target: tg, Body: []byte(body)}, dst[:0])
						if err == nil {
							err = a.BodyErr
						}
						if err != nil {
							errs <- err
							return
						}
						if string(a.Body) != body || a.StatusCode != 200 || a.Header.Get("X-Got-Length") != fmt.Sprint(len(body)) {
							errs <- fmt.Errorf("caller %d call %d got %d %q (header %v), want its own body", g, i, a.StatusCode, a.Body, a.Header)
							return
						}
						dst = a.Body
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if n := d.dials(); n < 1 || n > conns {
				t.Errorf("%d connections dialed, want 1 to %d", n, conns)
			}
			if n := accepted.Load(); n > int64(conns) {
				t.Errorf("the server accepted %d connections, want at most %d", n, conns)
			}
		})
	}
}

// TestPipeCoalescedWrites: while the first request's write is held, more
// Posts queue; they leave together in the next write call, and every write
// holds whole requests in the order they were queued.
func TestPipeCoalescedWrites(t *testing.T) {
	s := newRawServer(t)
	tr, d := gatedTransport(t, Options{PipelineConns: 1}, true)
	tg := target(t, tr, s.url)
	first := postsInOrder(t, tr, tg, nil, []string{"r0"}, nil)
	g := within(t, "the first connection", s.conns)
	gc := d.conn(0).(*gatedConn)
	within(t, "the first write", gc.entered)
	const k = 7
	var bodies []string
	for i := 1; i <= k; i++ {
		bodies = append(bodies, fmt.Sprintf("r%d", i))
	}
	rest := postsInOrder(t, tr, tg, nil, bodies, nil)
	gc.release()

	br := bufio.NewReader(g)
	got := s.readBodies(t, br, k+1)
	if want := append([]string{"r0"}, bodies...); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the server read %v, want %v (queue order)", got, want)
	}
	writes := gc.written()
	if len(writes) != 2 {
		t.Fatalf("%d write calls, want 2: the held one, then the %d queued meanwhile together", len(writes), k)
	}
	var order []string
	for i, w := range writes {
		r := bufio.NewReader(bytes.NewReader(w))
		n := 0
		for {
			if _, err := r.Peek(1); err == io.EOF {
				break
			}
			req, err := http.ReadRequest(r)
			if err != nil {
				t.Fatalf("write %d: not whole requests: %v\n%q", i, err, w)
			}
			b, err := io.ReadAll(req.Body)
			if err != nil {
				t.Fatalf("write %d: a request cut short: %v", i, err)
			}
			order = append(order, string(b))
			n++
		}
		if want := []int{1, k}[i]; n != want {
			t.Errorf("write %d holds %d requests, want %d", i, n, want)
		}
	}
	if fmt.Sprint(order) != fmt.Sprint(got) {
		t.Errorf("the writes hold %v, the server read %v", order, got)
	}
	for _, b := range got {
		answer(t, g, "answer to "+b)
	}
	for i, ch := range append(first, rest...) {
		if r := within(t, "an answer", ch); r.err != nil || r.body != fmt.Sprintf("answer to r%d", i) {
			t.Errorf("request %d: %q, %v; want its own answer", i, r.body, r.err)
		}
	}
}

// TestPipeCancelOne: a caller whose context ends returns at once; the
// others on the connection get their answers, its own answer is read and
// dropped, and the connection goes on.
func TestPipeCancelOne(t *testing.T) {
	for _, e := range enders {
		t.Run(e.name, func(t *testing.T) {
			s := newRawServer(t)
			tr, d := newTransport(t, Options{PipelineConns: 1})
			tg := target(t, tr, s.url)
			ctx, end := e.make()
			res := postsInOrder(t, tr, tg, []context.Context{nil, ctx, nil}, []string{"a", "b", "c"}, nil)
			c := within(t, "the connection", s.conns)
			br := bufio.NewReader(c)
			if got := s.readBodies(t, br, 3); fmt.Sprint(got) != "[a b c]" {
				t.Fatalf("the server read %v", got)
			}
			end()
			if r := within(t, "the cancelled Post to return", res[1]); !errors.Is(r.err, e.want) {
				t.Fatalf("cancelled Post: %q, %v; want %v", r.body, r.err, e.want)
			}
			for _, b := range []string{"a", "b", "c"} {
				answer(t, c, "to "+b)
			}
			for i, want := range map[int]string{0: "to a", 2: "to c"} {
				if r := within(t, "an answer", res[i]); r.err != nil || r.body != want {
					t.Errorf("request %d: %q, %v; want %q", i, r.body, r.err, want)
				}
			}
			// The connection goes on: the next request uses it.
			next := postIn(context.Background(), tr, PostRequest{Target: tg, Body: []byte("d")})
			if got := s.readBodies(t, br, 1); got[0] != "d" {
				t.Fatalf("the server read %v", got)
			}
			answer(t, c, "to d")
			if r := within(t, "the next answer", next); r.err != nil || r.body != "to d" {
				t.Fatalf("next request: %q, %v (the dropped answer must not be taken for it)", r.body, r.err)
			}
			if n := d.dials(); n != 1 {
				t.Errorf("%d dials, want 1", n)
			}
		})
	}
}

// TestPipeWriterCancelled: the caller writing a burst that the server
// does not read (larger than the socket buffers) has its context end: it
// returns at once, and the write is finished for the request queued
// behind it, which gets its answer.
func TestPipeWriterCancelled(t *testing.T) {
	s := newRawServer(t)
	tr, _ := newTransport(t, Options{PipelineConns: 1, MaxBodySize: 64 << 20})
	tg := target(t, tr, s.url)
	ctx, cancel := context.WithCancel(context.Background())
	big := bytes.Repeat([]byte("b"), 32<<20) // more than loopback's socket buffers hold
	first := postIn(ctx, tr, PostRequest{Target: tg, Body: big})
	c := within(t, "the connection", s.conns) // accepted, not read yet
	waitUntil(t, "the big request to be queued", func() bool { return queued(tg) == 1 })
	second := postsInOrder(t, tr, tg, nil, []string{"small"}, nil)[0]
	cancel()
	if r := within(t, "the writer to return", first); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("writer: %v, want context.Canceled", r.err)
	}
	br := bufio.NewReader(c)
	got := s.readBodies(t, br, 2)
	if len(got[0]) != len(big) || got[1] != "small" {
		t.Fatalf("the server read bodies of %d and %d bytes, want %d and %q", len(got[0]), len(got[1]), len(big), "small")
	}
	answer(t, c, "to big")
	answer(t, c, "to small")
	if r := within(t, "the second answer", second); r.err != nil || r.body != "to small" {
		t.Fatalf("second request: %q, %v", r.body, r.err)
	}
}

// TestPipeServerCloses: the server reads k requests, answers j and
// closes. The rest fail with the may-have-been-processed error, except
// the idempotent one, sent again exactly once on a new connection; a
// non-idempotent request is never sent twice.
func TestPipeServerCloses(t *testing.T) {
	for _, tc := range []struct {
		name        string
		answered    int
		idempotent  int // index of the idempotent request, -1 for none
		byHeaderEnd bool
	}{
		{"eof_after_2_of_5", 2, 3, false},
		{"eof_before_any", 0, 1, false},
		{"eof_no_idempotent", 3, -1, false},
		{"connection_close_after_2_of_5", 2, 3, true},
		{"connection_close_first", 1, 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const k = 5
			s := newRawServer(t)
			tr, d := newTransport(t, Options{PipelineConns: 1})
			tg := target(t, tr, s.url)
			var bodies []string
			for i := range k {
				bodies = append(bodies, fmt.Sprintf("r%d", i))
			}
			res := postsInOrder(t, tr, tg, nil, bodies, map[int]bool{tc.idempotent: true})
			c := within(t, "the connection", s.conns)
			br := bufio.NewReader(c)
			if got := s.readBodies(t, br, k); fmt.Sprint(got) != fmt.Sprint(bodies) {
				t.Fatalf("the server read %v", got)
			}
			for i := range tc.answered {
				if tc.byHeaderEnd && i == tc.answered-1 {
					io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nto r"+itoa(i))
				} else {
					answer(t, c, "to r"+itoa(i))
				}
			}
			c.Close()
			if tc.idempotent >= 0 {
				c2 := within(t, "the resend's connection", s.conns)
				br2 := bufio.NewReader(c2)
				if got := s.readBodies(t, br2, 1); got[0] != bodies[tc.idempotent] {
					t.Fatalf("resent %q, want %q", got[0], bodies[tc.idempotent])
				}
				answer(t, c2, "again")
			}
			for i := range k {
				r := within(t, "an outcome", res[i])
				switch {
				case i < tc.answered:
					if r.err != nil || r.body != "to r"+itoa(i) {
						t.Errorf("request %d: %q, %v; want its answer", i, r.body, r.err)
					}
				case i == tc.idempotent:
					if r.err != nil || r.body != "again" {
						t.Errorf("idempotent request %d: %q, %v; want the resend's answer", i, r.body, r.err)
					}
				default:
					if r.err == nil || !strings.Contains(r.err.Error(), "may have been processed") {
						t.Errorf("request %d: %q, %v; want the may-have-been-processed error", i, r.body, r.err)
					}
				}
			}
			wantHandled, wantDials := int64(k), 1
			if tc.idempotent >= 0 {
				wantHandled, wantDials = k+1, 2
			}
			if n := s.handled.Load(); n != wantHandled {
				t.Errorf("the server got %d requests, want %d (only the idempotent one twice)", n, wantHandled)
			}
			if n := d.dials(); n != wantDials {
				t.Errorf("%d dials, want %d", n, wantDials)
			}
		})
	}
}

// TestPipeUnsentMoved: requests queued behind a held write when the
// server closes the connection never reached a write call: they go out
// on a new connection (each is placed anew, so their order may change).
// The one in the held write did, and fails.
func TestPipeUnsentMoved(t *testing.T) {
	s := newRawServer(t)
	tr, d := gatedTransport(t, Options{PipelineConns: 1}, true)
	tg := target(t, tr, s.url)
	first := postsInOrder(t, tr, tg, nil, []string{"held"}, nil)[0]
	c := within(t, "the first connection", s.conns)
	gc := d.conn(0).(*gatedConn)
	within(t, "the held write", gc.entered)
	moved := postsInOrder(t, tr, tg, nil, []string{"m1", "m2"}, nil)
	c.Close() // before a byte of a request arrived

	c2 := within(t, "the new connection", s.conns)
	br := bufio.NewReader(c2)
	got := s.readBodies(t, br, 2)
	if !(fmt.Sprint(got) == "[m1 m2]" || fmt.Sprint(got) == "[m2 m1]") {
		t.Fatalf("the new connection carried %v, want m1 and m2", got)
	}
	for _, b := range got {
		answer(t, c2, "to "+b)
	}
	for i, ch := range moved {
		if r := within(t, "a moved request's answer", ch); r.err != nil || r.body != "to m"+itoa(i+1) {
			t.Errorf("moved request %d: %q, %v", i+1, r.body, r.err)
		}
	}
	gc.release()
	if r := within(t, "the held request's outcome", first); r.err == nil || !strings.Contains(r.err.Error(), "may have been processed") {
		t.Errorf("held request: %q, %v; want the may-have-been-processed error", r.body, r.err)
	}
	if n := s.handled.Load(); n != 2 {
		t.Errorf("the server got %d requests, want 2", n)
	}
}

// TestPipeAnswerKinds: answers the strict parser leaves to
// http.ReadResponse (chunked, informational first, a head over the read
// buffer) are read in the middle of a pipeline as Post reads them alone,
// and the answer behind each still reaches its caller.
func TestPipeAnswerKinds(t *testing.T) {
	long := "HTTP/1.1 200 OK\r\nX-Long: " + strings.Repeat("v", 5000) + "\r\nContent-Length: 2\r\n\r\nok"
	bigBody := strings.Repeat("z", 10000) // more than the read buffer
	for _, tc := range []struct{ name, answer string }{
		{"plain", headSeeds[0]},
		{"error_answer", headSeeds[2]},
		{"chunked", headSeeds[5]},
		{"informational_first", headSeeds[6]},
		{"head_larger_than_buffer", long},
		{"body_larger_than_buffer", "HTTP/1.1 200 OK\r\nContent-Length: 10000\r\n\r\n" + bigBody},
	} {
		t.Run(tc.name, func(t *testing.T) {
			type outcome struct {
				status int
				header http.Header
				body   string
				err    error
			}
			var outs [2]outcome
			for i, conns := range []int{0, 1} {
				s := newRawServer(t)
				tr, _ := newTransport(t, Options{PipelineConns: conns})
				tg := target(t, tr, s.url)
				done := make(chan outcome, 1)
				go func() {
					a, err := tr.Post(context.Background(), PostRequest{Target: tg, Body: []byte("x")}, nil)
					done <- outcome{a.StatusCode, a.Header, string(a.Body), errors.Join(err, a.BodyErr)}
				}()
				c := within(t, "the connection", s.conns)
				br := bufio.NewReader(c)
				s.readBodies(t, br, 1)
				var behind <-chan result
				if conns > 0 {
					behind = postIn(context.Background(), tr, PostRequest{Target: tg, Body: []byte("y")})
					s.readBodies(t, br, 1)
				}
				io.WriteString(c, tc.answer)
				outs[i] = within(t, "the answer", done)
				if behind != nil {
					answer(t, c, "behind")
					if r := within(t, "the answer behind", behind); r.err != nil || r.body != "behind" {
						t.Errorf("the answer behind: %q, %v", r.body, r.err)
					}
				}
			}
			if fmt.Sprint(outs[0]) != fmt.Sprint(outs[1]) {
				t.Errorf("alone:     %+v\npipelined: %+v", outs[0], outs[1])
			}
		})
	}
}

// TestPipeWaitsForRoom: with every connection at PipelineDepth, a Post
// waits (sending nothing) until an answer makes room, and a waiting Post
// whose context ends returns its error.
func TestPipeWaitsForRoom(t *testing.T) {
	s := newRawServer(t)
	tr, d := newTransport(t, Options{PipelineConns: 1, PipelineDepth: 2})
	tg := target(t, tr, s.url)
	res := postsInOrder(t, tr, tg, nil, []string{"a", "b"}, nil)
	c := within(t, "the connection", s.conns)
	br := bufio.NewReader(c)
	s.readBodies(t, br, 2)
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := postIn(ctx, tr, PostRequest{Target: tg, Body: []byte("gave up")})
	third := postIn(context.Background(), tr, PostRequest{Target: tg, Body: []byte("c")})
	waitUntil(t, "two Posts to wait for room", func() bool { return tg.pipe.nwait.Load() == 2 })
	cancel()
	if r := within(t, "the waiting Post to give up", gaveUp); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("waiting Post: %v, want context.Canceled", r.err)
	}
	if n := queued(tg); n != 2 {
		t.Fatalf("%d requests on the connection while full, want 2", n)
	}
	answer(t, c, "to a")
	if got := s.readBodies(t, br, 1); got[0] != "c" {
		t.Fatalf("after room was made the server read %q, want c", got[0])
	}
	answer(t, c, "to b")
	answer(t, c, "to c")
	for i, ch := range append(res, third) {
		if r := within(t, "an answer", ch); r.err != nil || r.body != "to "+string(rune('a'+i)) {
			t.Errorf("request %d: %q, %v", i, r.body, r.err)
		}
	}
	if n := d.dials(); n != 1 {
		t.Errorf("%d dials, want 1", n)
	}
}

// TestPipeNoGoroutineLeak: once the calls are done, CloseIdleConnections
// closes the pipelined connections and every goroutine the transport
// started ends.
func TestPipeNoGoroutineLeak(t *testing.T) {
	srv, _ := newServer(t, http.HandlerFunc(echo))
	base := runtime.NumGoroutine()
	tr, d := newTransport(t, Options{PipelineConns: 4})
	tg := target(t, tr, srv.URL)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 32 {
		wg.Go(func() {
			for range 20 {
				if _, err := tr.Post(context.Background(), PostRequest{Target: tg, Body: []byte("x")}, nil); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d Posts failed", n)
	}
	if d.dials() == 0 {
		t.Fatal("nothing was dialed")
	}
	tr.CloseIdleConnections()
	tg.pipe.mu.Lock()
	open := len(tg.pipe.conns)
	tg.pipe.mu.Unlock()
	if n := open; n != 0 {
		t.Errorf("%d pipelined connections open after CloseIdleConnections, want 0", n)
	}
	// The bound only keeps a leak from hanging the test: the readers
	// end as soon as their connections are closed.
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before the transport:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
}

// pipeServer answers every request read from c with its body, until c
// ends, unless silent: then it reads and never answers.
func pipeServer(c net.Conn, silent bool) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		b, _ := io.ReadAll(req.Body)
		if silent {
			continue
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+itoa(len(b))+"\r\n\r\n"+string(b)); err != nil {
			return
		}
	}
}

// TestPipeIdleTimeout: a pipelined connection with nothing in flight is
// closed after IdleTimeout, not before; so is one whose only request's
// caller gave up, its answer never having come.
func TestPipeIdleTimeout(t *testing.T) {
	for _, silent := range []bool{false, true} {
		name := map[bool]string{false: "answered", true: "caller_gave_up"}[silent]
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				dials := 0
				tr := New(Options{PipelineConns: 2, IdleTimeout: time.Minute,
					Proxy: func(*http.Request) (*url.URL, error) { return nil, nil },
					DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
						client, server := net.Pipe()
						dials++ // one Post at a time here
						go pipeServer(server, silent && dials == 1)
						return client, nil
					}})
				defer tr.CloseIdleConnections()
				tg := tr.NewTarget(&url.URL{Scheme: "http", Host: "h:1", Path: "/"}, "", nil)
				if silent {
					ctx, cancel := context.WithTimeout(context.Background(), time.Second)
					_, err := tr.Post(ctx, PostRequest{Target: tg, Body: []byte("x")}, nil)
					cancel()
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Fatalf("Post to a silent server: %v, want context.DeadlineExceeded", err)
					}
				} else if a, err := tr.Post(context.Background(), PostRequest{Target: tg, Body: []byte("x")}, nil); err != nil || string(a.Body) != "x" {
					t.Fatalf("Post: %q, %v", a.Body, err)
				}
				open := func() int {
					tg.pipe.mu.Lock()
					defer tg.pipe.mu.Unlock()
					return len(tg.pipe.conns)
				}
				time.Sleep(59 * time.Second)
				synctest.Wait()
				if n := open(); n != 1 {
					t.Fatalf("%d open after 59 s idle, want 1", n)
				}
				time.Sleep(2 * time.Second)
				synctest.Wait()
				if n := open(); n != 0 {
					t.Fatalf("%d open after 61 s idle, want 0", n)
				}
				// A Post after that dials again and works.
				if a, err := tr.Post(context.Background(), PostRequest{Target: tg, Body: []byte("y")}, nil); err != nil || string(a.Body) != "y" {
					t.Fatalf("Post after the idle close: %q, %v", a.Body, err)
				}
				if dials != 2 {
					t.Errorf("%d dials, want 2", dials)
				}
			})
		})
	}
}
