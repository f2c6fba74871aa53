package client

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// startCountingFake serves f and counts the connections it accepts.
func startCountingFake(t *testing.T, f *fakeServer) (string, *atomic.Int64) {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(hourglassv1connect.NewHourglassServiceHandler(f))
	hs := httptest.NewUnstartedServer(mux)
	var conns atomic.Int64
	hs.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	hs.Start()
	t.Cleanup(hs.Close)
	return hs.URL, &conns
}

// scheduleConcurrently makes calls Schedules from each of goroutines
// goroutines, each with its own body, and checks that every caller gets
// the ID of its own message.
func scheduleConcurrently(t *testing.T, c *Client, goroutines, calls int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			for i := range calls {
				body := fmt.Sprintf("g%d-%d", g, i)
				id, err := c.Schedule(context.Background(), Message{Topic: "t", Body: []byte(body)})
				if err != nil {
					errs <- err
					return
				}
				if id != "id:"+body {
					errs <- fmt.Errorf("goroutine %d call %d: ID %q, want the ID of its own message %q", g, i, id, "id:"+body)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestWithPipelining: 64 goroutines making single calls through a Client
// with WithPipelining(2) each get their own answer, over at most 2
// connections; so do Clients sharing a NewPipelinedHTTPClient.
func TestWithPipelining(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts func() []Option
	}{
		{"option", func() []Option { return []Option{WithPipelining(2)} }},
		{"shared_http_client", func() []Option { return []Option{WithHTTPClient(NewPipelinedHTTPClient(8, 2))} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(false)
			url, conns := startCountingFake(t, f)
			c := New(url, append(tc.opts(), WithMaxCalls(0))...)
			scheduleConcurrently(t, c, 64, 20)
			if n := conns.Load(); n < 1 || n > 2 {
				t.Errorf("the server accepted %d connections, want 1 or 2", n)
			}
			f.mu.Lock()
			singles := f.singles
			f.mu.Unlock()
			if singles != 64*20 {
				t.Errorf("the server got %d Schedules, want %d (each its own call)", singles, 64*20)
			}
		})
	}
}

// TestWithPipeliningIgnoredWithHTTPClient: with WithHTTPClient, the
// option changes nothing: a call goes on a connection of its own while
// another's answer is held.
func TestWithPipeliningIgnoredWithHTTPClient(t *testing.T) {
	f := newFake(true)
	url, conns := startCountingFake(t, f)
	c := New(url, WithHTTPClient(NewHTTPClient(8)), WithPipelining(1), WithMaxCalls(0))
	held := make(chan error, 1)
	go func() {
		_, err := c.Schedule(context.Background(), Message{Topic: "t", Body: []byte("held")})
		held <- err
	}()
	<-f.entered
	// Pipelined over one connection, this call would wait behind the
	// held one; it is answered on a second connection instead.
	if id, err := c.Schedule(context.Background(), Message{Topic: "t", Body: []byte("second")}); err != nil || id != "id:second" {
		t.Fatalf("second Schedule while the first is held: %q, %v", id, err)
	}
	close(f.hold)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}
