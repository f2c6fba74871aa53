package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/engine"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
	"github.com/hourglassmq/hourglass/recur"
)

// served is a Server running Serve on a TCP port of the loopback
// interface: native gRPC and every HTTP/1.1 protocol on one address.
type served struct {
	srv  *Server
	eng  *engine.Engine // nil when serving a Cluster
	addr string         // host:port

	serveErr     chan error // Serve's result
	shutdownOnce sync.Once
	shutdownErr  error
}

// serveTest serves opts through Serve on 127.0.0.1:0. Without
// opts.Cluster it opens an engine and queue as newBackend does (clock now,
// nil for the real one). The server is shut down when the test ends.
func serveTest(t testing.TB, opts Options, now func() time.Time) *served {
	t.Helper()
	return serveTestTLS(t, opts, now, nil)
}

// serveTestTLS is serveTest with Serve's tlsConfig.
func serveTestTLS(t testing.TB, opts Options, now func() time.Time, tlsConfig *tls.Config) *served {
	t.Helper()
	var eng *engine.Engine
	if opts.Cluster == nil {
		eng = newBackend(t, &opts, now)
	}
	srv, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &served{srv: srv, eng: eng, addr: ln.Addr().String(), serveErr: make(chan error, 1)}
	go func() { s.serveErr <- srv.Serve(ln, tlsConfig) }()
	t.Cleanup(func() {
		if err := s.shutdown(); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return s
}

// shutdown calls Shutdown once and waits for Serve to return
// http.ErrServerClosed.
func (s *served) shutdown() error {
	s.shutdownOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.shutdownErr = s.srv.Shutdown(ctx)
		select {
		case err := <-s.serveErr:
			if !errors.Is(err, http.ErrServerClosed) && s.shutdownErr == nil {
				s.shutdownErr = errors.New("Serve returned " + err.Error() + ", want http.ErrServerClosed")
			}
		case <-time.After(5 * time.Second):
			if s.shutdownErr == nil {
				s.shutdownErr = errors.New("Serve did not return after Shutdown")
			}
		}
	})
	return s.shutdownErr
}

// grpcConn returns a new gRPC client connection (one HTTP/2 connection)
// to the server, closed when the test ends.
func (s *served) grpcConn(t testing.TB, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(s.addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// grpcClient is a native gRPC client of the API on a new connection.
func (s *served) grpcClient(t testing.TB, opts ...grpc.DialOption) hourglassv1.HourglassServiceClient {
	return hourglassv1.NewHourglassServiceClient(s.grpcConn(t, opts...))
}

// connectClient is a connect-go client (Connect by default; gRPC-Web or
// JSON by its options) over HTTP/1.1 connections of its own.
func (s *served) connectClient(t testing.TB, opts ...connect.ClientOption) hourglassv1connect.HourglassServiceClient {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return hourglassv1connect.NewHourglassServiceClient(&http.Client{Transport: tr}, "http://"+s.addr, opts...)
}

// testCtx is a context that ends when the test does, or after a
// deadline: a call the server never answers fails the test instead of
// hanging it.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds, failing the test after a deadline.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// codeOf is the gRPC code of a connect or a grpc-go error.
func codeOf(err error) codes.Code {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return codes.Code(ce.Code())
	}
	return status.Code(err)
}

// messageOf is the message of a connect or a grpc-go error, without
// connect's code prefix.
func messageOf(err error) string {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce.Message()
	}
	return status.Convert(err).Message()
}

// wantStatus checks err's code and that its message holds each of msgs.
func wantStatus(t testing.TB, what string, err error, code codes.Code, msgs ...string) {
	t.Helper()
	if got := codeOf(err); got != code {
		t.Errorf("%s: got %v (%v), want code %v", what, got, err, code)
		return
	}
	for _, m := range msgs {
		if !strings.Contains(messageOf(err), m) {
			t.Errorf("%s: error %q lacks %q", what, messageOf(err), m)
		}
	}
}

// fakeCluster is a Cluster whose readiness and ScheduleBatch calls a test
// controls. With calls set, each ScheduleBatch waits until the test
// answers it on calls; otherwise it is answered at once.
type fakeCluster struct {
	*fakeReceiver
	ready chan struct{}
	calls chan *fakeCall
	seq   atomic.Uint64

	mmu sync.Mutex
	// manage records the management calls that reached the node, as
	// "Get <id> <forwarded>", "Reschedule <id> <at ms> <forwarded>",
	// "Lookup <topic> <key> <forwarded>", "Cancel <id> <forwarded>".
	// Guarded by mmu.
	manage []string
	// policies are the topics' policies as set; guarded by mmu.
	policies map[string]queue.Policy
}

func (f *fakeCluster) note(format string, args ...any) {
	f.mmu.Lock()
	f.manage = append(f.manage, fmt.Sprintf(format, args...))
	f.mmu.Unlock()
}

// fakeKeyed is the one message the fake cluster holds by key: topic t,
// key k.
var fakeKeyed = message.ID{DeliverAt: 1 << 41, Seq: 7}

func (f *fakeCluster) Get(_ context.Context, id message.ID, fw bool) (engine.Found, message.ID, error) {
	f.note("Get %v %v", id, fw)
	switch id {
	case fakeKeyed:
		return engine.Found{ID: id, State: engine.StatePending, Message: message.Message{DeliverAt: id.DeliverAt, Topic: []byte("t"), Body: []byte("b")}}, message.ID{}, nil
	case message.ID{DeliverAt: 1 << 41, Seq: 8}:
		return engine.Found{ID: id, State: engine.StateRescheduled}, fakeKeyed, nil
	}
	return engine.Found{ID: id}, message.ID{}, nil
}

func (f *fakeCluster) Reschedule(_ context.Context, id message.ID, at time.Time, fw bool) (engine.RescheduleResult, message.ID, error) {
	f.note("Reschedule %v %d %v", id, at.UnixMilli(), fw)
	if id != fakeKeyed {
		return engine.RescheduleUnknown, message.ID{}, nil
	}
	return engine.Rescheduled, message.ID{DeliverAt: at.UnixMilli(), Seq: 9}, nil
}

func (f *fakeCluster) Lookup(_ context.Context, topic, key string, fw bool) (message.ID, bool, error) {
	f.note("Lookup %s %s %v", topic, key, fw)
	return fakeKeyed, topic == "t" && key == "k", nil
}

// fakeCall is one ScheduleBatch waiting for its answer.
type fakeCall struct {
	reqs   []engine.Request
	answer chan error // nil: store them
}

func newFakeCluster(ready bool, calls chan *fakeCall) *fakeCluster {
	f := &fakeCluster{ready: make(chan struct{}), calls: calls, fakeReceiver: newFakeReceiver()}
	if ready {
		close(f.ready)
	}
	return f
}

// Schedules records the calls as "<op> <name> <forwarded>" (fakeSchedules).
func (f *fakeCluster) Schedules(forwarded bool) recur.Service {
	return fakeSchedules{f: f, forwarded: forwarded}
}

func (f *fakeCluster) ScheduleBatch(ctx context.Context, reqs []engine.Request) ([]message.ID, error) {
	if f.calls != nil {
		c := &fakeCall{reqs: reqs, answer: make(chan error, 1)}
		select {
		case f.calls <- c:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		select {
		case err := <-c.answer:
			if err != nil {
				return nil, err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	ids := make([]message.ID, len(reqs))
	for i, r := range reqs {
		at := r.At
		if at.IsZero() {
			at = f.Now().Add(r.Delay)
		}
		ids[i] = message.ID{DeliverAt: at.UnixMilli(), Seq: f.seq.Add(1)}
	}
	return ids, nil
}

func (f *fakeCluster) Cancel(_ context.Context, id message.ID, fw bool) (engine.CancelResult, error) {
	f.note("Cancel %v %v", id, fw)
	if id == fakeKeyed {
		return engine.Cancelled, nil
	}
	return engine.Unknown, nil
}

// List answers topic t's pages: fakeKeyed, then (token "next") nothing;
// the token "bad" is refused as the cluster refuses a malformed one.
func (f *fakeCluster) List(_ context.Context, req engine.ListRequest, token string, fw bool) ([]engine.Found, string, error) {
	f.note("List %s %d %q %v", req.Topic, req.Limit, token, fw)
	switch {
	case token == "bad":
		return nil, "", status.Error(codes.InvalidArgument, "page_token \"bad\": not a token a cluster's List returned")
	case token == "" && req.Topic == "t":
		return []engine.Found{{ID: fakeKeyed, State: engine.StatePending,
			Message: message.Message{DeliverAt: fakeKeyed.DeliverAt, Topic: []byte("t"), Body: []byte("b")}}}, "next", nil
	}
	return nil, "", nil
}

func (f *fakeCluster) Now() time.Time         { return time.Now() }
func (f *fakeCluster) Ready() <-chan struct{} { return f.ready }
func (f *fakeCluster) Stats() engine.Stats    { return engine.Stats{} }
func (f *fakeCluster) Health() error          { return nil }

// takeCalls receives n ScheduleBatch calls of a fakeCluster.
// takeMessages takes ScheduleBatch calls in progress until they hold n
// messages in all.
func takeMessages(t testing.TB, calls chan *fakeCall, n int) []*fakeCall {
	t.Helper()
	var out []*fakeCall
	held := 0
	timeout := time.After(5 * time.Second)
	for held < n {
		select {
		case c := <-calls:
			out = append(out, c)
			held += len(c.reqs)
		case <-timeout:
			t.Fatalf("%d messages in %d ScheduleBatch calls in progress, want %d", held, len(out), n)
		}
	}
	return out
}

func takeCalls(t testing.TB, calls chan *fakeCall, n int) []*fakeCall {
	t.Helper()
	out := make([]*fakeCall, 0, n)
	timeout := time.After(5 * time.Second)
	for len(out) < n {
		select {
		case c := <-calls:
			out = append(out, c)
		case <-timeout:
			t.Fatalf("%d ScheduleBatch calls in progress, want %d", len(out), n)
		}
	}
	return out
}
