package client

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// wire is a listener on 127.0.0.1 that answers every request with the
// answer set last, written out as bytes, and records each request as
// http.ReadRequest reads it. Over it, connect-go goes through
// h1.Transport.RoundTrip and the direct path through h1.Transport.Post.
type wire struct {
	url string

	mu    sync.Mutex
	a     cannedAnswer      // guarded by mu
	sent  []sentRequest     // guarded by mu
	conns map[net.Conn]bool // guarded by mu
}

// The ways a wire answer can differ from a plain one (cannedAnswer.wire).
const (
	wireUnanswered      = "unanswered"       // read the request, close
	wireGarbage         = "garbage"          // bytes that are no HTTP answer, then close
	wireChunked         = "chunked"          // the body chunked
	wireInformational   = "informational"    // a 100 Continue first
	wireConnectionClose = "connection_close" // "Connection: close", then close
	wireHTTP10          = "http_1_0"         // an HTTP/1.0 answer, then close
	wireShortBody       = "short_body"       // a Content-Length 5 more than sent, then close
	wireNoLength        = "no_length"        // no Content-Length: the body ends at the close
)

func newWire(t testing.TB) *wire {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := &wire{url: "http://" + l.Addr().String(), conns: map[net.Conn]bool{}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			w.mu.Lock()
			w.conns[c] = true
			w.mu.Unlock()
			wg.Go(func() { w.serve(c) })
		}
	})
	t.Cleanup(func() {
		l.Close()
		w.mu.Lock()
		for c := range w.conns {
			c.Close()
		}
		w.mu.Unlock()
		wg.Wait()
	})
	return w
}

func (w *wire) set(a cannedAnswer) {
	w.mu.Lock()
	w.a, w.sent = a, nil
	w.mu.Unlock()
}

func (w *wire) requests() []sentRequest {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sent
}

func (w *wire) serve(c net.Conn) {
	defer func() {
		c.Close()
		w.mu.Lock()
		delete(w.conns, c)
		w.mu.Unlock()
	}()
	br := bufio.NewReader(c)
	for {
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		w.mu.Lock()
		a := w.a
		w.sent = append(w.sent, sentRequest{url: r.URL.String(), host: r.Host, header: r.Header.Clone(), body: body, length: r.ContentLength})
		w.mu.Unlock()
		if _, err := io.WriteString(c, a.bytes()); err != nil {
			return
		}
		switch a.wire {
		case wireUnanswered, wireGarbage, wireConnectionClose, wireHTTP10, wireShortBody, wireNoLength:
			return
		}
	}
}

// bytes is the answer as the wire sends it.
func (a cannedAnswer) bytes() string {
	var b strings.Builder
	switch a.wire {
	case wireUnanswered:
		return ""
	case wireGarbage:
		return "\x00not http\r\n\r\n"
	case wireInformational:
		b.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
	}
	proto := "HTTP/1.1"
	if a.wire == wireHTTP10 {
		proto = "HTTP/1.0"
	}
	fmt.Fprintf(&b, "%s %d %s\r\n", proto, a.status, http.StatusText(a.status))
	for _, k := range slices.Sorted(maps.Keys(a.header)) { // the same bytes every time
		fmt.Fprintf(&b, "%s: %s\r\n", k, a.header[k])
	}
	switch a.wire {
	case wireConnectionClose:
		b.WriteString("Connection: close\r\n")
	case wireChunked:
		b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		if len(a.body) > 0 {
			fmt.Fprintf(&b, "%x\r\n%s\r\n", len(a.body), a.body)
		}
		b.WriteString("0\r\n\r\n")
		return b.String()
	case wireShortBody:
		fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(a.body)+5, a.body)
		return b.String()
	case wireNoLength:
		fmt.Fprintf(&b, "\r\n%s", a.body)
		return b.String()
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(a.body), a.body)
	return b.String()
}

// TestDirectPostAnswers drives the direct path through
// h1.Transport.Post, and connect-go through h1.Transport.RoundTrip, over
// a real connection to a listener that writes the same bytes to both:
// every answer of TestDirectAnswers, and what only a wire can carry
// (chunked bodies, informational answers, closes, HTTP/1.0, a cut body).
// Both must give the same result, and send the same request.
func TestDirectPostAnswers(t *testing.T) {
	w := newWire(t)
	hc := NewHTTPClient(4)
	defer hc.CloseIdleConnections()
	viaConnect, viaDirect := services(t, w.url+"/base/", hc, "tok")
	if d := viaDirect.(*direct); d.tr == nil || d.sched.post == nil || d.batch.post == nil {
		t.Fatal("the direct service over NewHTTPClient does not use h1.Transport.Post")
	}
	cases := directAnswerCases(t)
	ok := cases[0]
	for _, mode := range []string{wireUnanswered, wireGarbage, wireChunked, wireInformational, wireConnectionClose, wireHTTP10, wireShortBody, wireNoLength} {
		a := ok
		a.name, a.wire = "wire_"+mode, mode
		cases = append(cases, a)
		e := byName(t, cases, "error_json")
		e.name, e.wire = "wire_error_"+mode, mode
		cases = append(cases, e)
	}
	for _, a := range cases {
		if a.doErr != nil {
			continue // a transport's error: only the canned transport gives those
		}
		sameOutcome(t, w, viaConnect, viaDirect, a)
		a.batch, a.name = !a.batch, a.name+"/other_rpc"
		sameOutcome(t, w, viaConnect, viaDirect, a)
	}
}

// TestDirectPostRedirect: a redirect http.Client follows is followed on
// the direct path too, through http.Client.Do, with the same result.
func TestDirectPostRedirect(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	single, err := proto.Marshal(&hourglassv1.ScheduleResponse{Id: "0000019a1b2c3d4e0000000000000100"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		if !strings.HasPrefix(r.URL.Path, "/moved/") {
			http.Redirect(w, r, "/moved"+r.URL.Path, http.StatusTemporaryRedirect)
			return
		}
		w.Header().Set("Content-Type", "application/proto")
		w.Write(single)
	}))
	defer hs.Close()
	hc := NewHTTPClient(4)
	defer hc.CloseIdleConnections()
	viaConnect, viaDirect := services(t, hs.URL, hc, "")
	var ids []string
	for _, svc := range []interface {
		Schedule(context.Context, *connect.Request[hourglassv1.ScheduleRequest]) (*connect.Response[hourglassv1.ScheduleResponse], error)
	}{viaConnect, viaDirect} {
		res, err := svc.Schedule(context.Background(), connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "t"}))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Msg.Id)
	}
	if ids[0] != ids[1] || ids[0] == "" {
		t.Errorf("ids %q", ids)
	}
	mu.Lock()
	defer mu.Unlock()
	const p = "/hourglass.v1.HourglassService/Schedule"
	want := []string{p, "/moved" + p, p, p, "/moved" + p} // the direct path asks again through http.Client
	if strings.Join(paths, " ") != strings.Join(want, " ") {
		t.Errorf("paths asked %q, want %q", paths, want)
	}
}

// byName is the case called name.
func byName(t *testing.T, cases []cannedAnswer, name string) cannedAnswer {
	for _, a := range cases {
		if a.name == name {
			return a
		}
	}
	t.Fatalf("no case %s", name)
	panic("unreachable")
}
