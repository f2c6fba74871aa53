package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/queue"
	"github.com/hourglassmq/hourglass/server"
)

// testTimeout bounds every wait of these tests: far beyond what any step
// needs, so that only a hang reaches it.
const testTimeout = 20 * time.Second

// startFake serves svc with grpc-go on a loopback port until the test
// ends, and returns its address as host:port.
func startFake(t *testing.T, svc hourglassv1.HourglassServiceServer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	hourglassv1.RegisterHourglassServiceServer(gs, svc)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return ln.Addr().String()
}

// realServer is a real Hourglass server in process.
type realServer struct {
	addr string // http://host:port
	srv  *server.Server
}

// startServer runs a server over a fresh engine and queue (fsync none) on
// a loopback port until the test ends. opts.Engine, Queue, Metrics,
// DataDir and SegmentDuration are filled in.
func startServer(t *testing.T, opts server.Options) *realServer {
	t.Helper()
	return startServerQueue(t, opts, queue.Options{})
}

// startServerQueue is startServer with a queue of qo (Dir and Fsync
// filled in).
func startServerQueue(t *testing.T, opts server.Options, qo queue.Options) *realServer {
	t.Helper()
	dir := t.TempDir()
	qo.Dir, qo.Fsync = server.QueueDir(dir), commitlog.SyncNone
	q, err := queue.Open(qo)
	if err != nil {
		t.Fatal(err)
	}
	m := server.NewMetrics()
	eng, err := engine.Open(engine.Options{Dir: dir, Fsync: commitlog.SyncNone, Sink: q, Observer: m, SegmentDuration: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	q.SetReschedule(eng.Schedule)
	opts.Engine, opts.Queue, opts.Metrics, opts.DataDir, opts.SegmentDuration = eng, q, m, dir, 2*time.Second
	srv, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve(ln, nil) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		<-served
		if err := eng.Close(); err != nil && !errors.Is(err, engine.ErrClosed) {
			t.Error(err)
		}
		if err := q.Close(); err != nil {
			t.Error(err)
		}
	})
	return &realServer{addr: "http://" + ln.Addr().String(), srv: srv}
}

// newClient returns a client of addr, closed when the test ends (before
// the servers started earlier in the test stop).
func newClient(t *testing.T, addr string, opts ...Option) *Client {
	t.Helper()
	c, err := New(addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitFor checks cond until it holds, and fails the test if it does not
// within testTimeout.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(testTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// recv waits for a value of ch, failing the test after testTimeout.
func recv[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// wantCode fails the test unless err is a gRPC status error of code.
func wantCode(t *testing.T, what string, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Errorf("%s: got %v, want code %v", what, err, code)
	}
}

// fakeID returns a well-formed ID text made from s, for fake servers:
// the same s always gives the same ID, different ones different IDs.
func fakeID(s string) string {
	sum := sha256.Sum256([]byte(s))
	sum[0] &= 0x7f // a delivery time that is not negative
	return hex.EncodeToString(sum[:16])
}

// mustParseID parses s or fails the test.
func mustParseID(t *testing.T, s string) ID {
	t.Helper()
	id, err := ParseID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// topicStats returns the server's statistics of topic (zero if none).
func topicStats(t *testing.T, c *Client, topic string) *hourglassv1.TopicStats {
	t.Helper()
	st, err := c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, ts := range st.Topics {
		if ts.Topic == topic {
			return ts
		}
	}
	return &hourglassv1.TopicStats{Topic: topic}
}
