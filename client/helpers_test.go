package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/commitlog"
	"github.com/hourglassmq/hourglass/engine"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
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
	id := hex.EncodeToString(sum[:16])
	fakeNames.Store(id, s)
	return id
}

// fakeNames maps the IDs fakeID made to what they were made of.
var fakeNames sync.Map

// fakeName is what fakeID made id of.
func fakeName(id string) string {
	s, _ := fakeNames.Load(id)
	name, _ := s.(string)
	return name
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

// pushNumbers numbers what a fake Consume service pushes, as the server
// does, and names the numbers of settles and extends by the receipts of
// the fake messages pushed.
type pushNumbers struct {
	mu       sync.Mutex
	receipts []string // guarded by mu: of message number i+1
}

// batch is the response that pushes msgs: server messages as Receive
// answers them, with receipts for the test to name them by.
func (p *pushNumbers) batch(msgs []*hourglassv1.Message) *hourglassv1.ConsumeResponse {
	p.mu.Lock()
	first := uint64(len(p.receipts) + 1)
	for _, m := range msgs {
		p.receipts = append(p.receipts, m.Receipt)
	}
	p.mu.Unlock()
	b := &hourglassv1.ConsumeBatch{FirstSeq: first, Topic: "t"}
	if m := msgs[0]; m.ReceivedAt != nil {
		b.ReceivedAtMs, b.LeaseExpiresAtMs = m.ReceivedAt.AsTime().UnixMilli(), m.LeaseExpiresAt.AsTime().UnixMilli()
	}
	for i, m := range msgs {
		id, err := message.ParseID(m.Id)
		if err != nil {
			panic(err)
		}
		b.Ids = id.AppendBinary(b.Ids)
		b.Bodies = append(b.Bodies, m.Body)
		b.DeliverAtDeltas = append(b.DeliverAtDeltas, m.DeliverAt.AsTime().UnixMilli())
		b.Attempts = append(b.Attempts, m.Attempt)
		o := make([]byte, 16)
		if m.OriginId != "" && m.OriginId != m.Id {
			oid, err := message.ParseID(m.OriginId)
			if err != nil {
				panic(err)
			}
			oid.AppendBinary(o[:0])
		}
		b.OriginIds = append(b.OriginIds, o...)
		b.HeaderCounts = append(b.HeaderCounts, uint32(len(m.Headers)))
		for _, h := range m.Headers {
			b.HeaderKeys, b.HeaderValues = append(b.HeaderKeys, h.Key), append(b.HeaderValues, h.Value)
		}
		if m.DeadLetter != nil {
			if b.DeadLetters == nil {
				b.DeadLetters = make([]*hourglassv1.DeadLetter, len(msgs))
				for j := range b.DeadLetters {
					b.DeadLetters[j] = &hourglassv1.DeadLetter{}
				}
			}
			b.DeadLetters[i] = m.DeadLetter
		}
	}
	return &hourglassv1.ConsumeResponse{Kind: &hourglassv1.ConsumeResponse_Batch{Batch: b}}
}

// receipt is the receipt of the message pushed as number seq.
func (p *pushNumbers) receipt(seq uint64) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if seq == 0 || seq > uint64(len(p.receipts)) {
		return fmt.Sprint("no message ", seq)
	}
	return p.receipts[seq-1]
}

// ranges are the receipts of the messages rs name.
func (p *pushNumbers) ranges(rs []*hourglassv1.SeqRange) []string {
	var out []string
	for _, r := range rs {
		for seq := r.First; seq < r.First+uint64(r.Count); seq++ {
			out = append(out, p.receipt(seq))
		}
	}
	return out
}
