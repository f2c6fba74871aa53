package server

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/engine"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// bidi is a bidirectional stream as the neutral stream methods take it:
// grpc-go's streams are one as they are, connect-go's through connectBidi.
// Recv is called from one goroutine, Send from one at a time.
type bidi[Req, Res any] interface {
	Recv() (*Req, error)
	Send(*Res) error
}

// Limits of the streams (the schema's comments state them).
const (
	// MaxStreamInflight is how many requests of one ScheduleStream may be
	// in progress (read, not yet answered) at once; the stream reads no
	// more until the oldest is answered.
	MaxStreamInflight = 1024
	// MaxCredits is the most credits a Consume stream may hold.
	MaxCredits = 10_000
	// maxSettling is how many settle requests of one Consume stream are
	// carried out at once.
	maxSettling = 16
)

const streamsWhat = "long polls and streams"

// scheduleStream serves ScheduleStream: requests are checked as they
// arrive and scheduled by the stream's committer (streamCommit), and
// answered in the order they came.
func (s *Server) scheduleStream(ctx context.Context, st bidi[hourglassv1.ScheduleStreamRequest, hourglassv1.ScheduleStreamResponse]) error {
	release, err := s.limits.acquire(infoOf(ctx).conn, streamsWhat)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	o := &ordered{}
	o.cond.L = &o.mu
	stop := context.AfterFunc(s.life.polls, o.close) // shutting down: answer what was read, then end
	defer stop()
	stopCtx := context.AfterFunc(ctx, o.close)
	defer stopCtx()

	c := s.newStreamCommit(ctx)
	go func() {
		defer o.close()
		for {
			req, err := st.Recv()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					o.fail(err)
				}
				return
			}
			done, ok := o.push()
			if !ok {
				return
			}
			// The answer is always sent to done, so that every request
			// read is answered (or the stream fails).
			c.add(req, done)
		}
	}()
	for {
		done, ok := o.pop()
		if !ok {
			break
		}
		if err := st.Send(<-done); err != nil {
			return err
		}
	}
	if err := o.err(); err != nil {
		return err
	}
	if s.life.polls.Err() != nil && ctx.Err() == nil {
		return status.Error(codes.Unavailable, "the server is shutting down: every request read was answered; send the rest to another node or after it restarts")
	}
	return nil
}

// Limits of a stream's committer.
const (
	// streamCalls is how many engine calls one ScheduleStream keeps in
	// flight: one can append while another waits for its fsync.
	streamCalls = 4
	// clusterStreamCalls is streamCalls in cluster mode (newStreamCommit).
	clusterStreamCalls = 1
	// streamCallMessages bounds the messages of one engine call.
	streamCallMessages = 4 * MaxBatch
)

// streamCommit schedules the requests of one ScheduleStream: the requests
// that arrive while its engine calls are in flight go together in the
// next call, so that a stream of single messages costs one engine call
// per group commit, not one per message. Each request keeps its own
// answer: if a call is refused (nothing of it stored), its requests are
// scheduled again one by one, so that only a faulty request fails. Its
// methods may be called from any goroutine.
type streamCommit struct {
	s           *Server
	ctx         context.Context
	maxMessages int  // of one call: streamCallMessages, or MaxBatch in cluster mode
	maxCalls    int  // in flight: streamCalls, or 1 in cluster mode
	keyedAlone  bool // cluster mode: a request with idempotency keys is a call of its own

	mu      sync.Mutex
	pending []streamItem // guarded by mu: checked, not yet in a call
	running int          // guarded by mu: engine calls in flight
}

// streamItem is one checked request and where its answer goes.
type streamItem struct {
	reqs  []engine.Request
	batch bool
	keyed bool // some message has an idempotency key
	done  chan<- *hourglassv1.ScheduleStreamResponse
}

// add checks req and queues it for the next engine call, starting one if
// fewer than streamCalls are in flight. A request that fails its check is
// answered at once.
func (c *streamCommit) add(req *hourglassv1.ScheduleStreamRequest, done chan<- *hourglassv1.ScheduleStreamResponse) {
	it := streamItem{done: done}
	var err error
	switch k := req.Kind.(type) {
	case *hourglassv1.ScheduleStreamRequest_Message:
		it.reqs = make([]engine.Request, 1)
		err = c.s.request("", k.Message, c.s.eng.Now(), false, &it.reqs[0])
	case *hourglassv1.ScheduleStreamRequest_Batch:
		it.batch = true
		it.reqs, err = c.s.batchRequests(k.Batch, c.s.eng.Now())
	default:
		err = invalid("a ScheduleStream request holds neither message nor batch: set one")
	}
	if err != nil {
		done <- c.s.streamError(err)
		return
	}
	it.keyed = slices.ContainsFunc(it.reqs, func(r engine.Request) bool { return r.IdempotencyKey != "" })
	c.mu.Lock()
	c.pending = append(c.pending, it)
	if c.running >= c.maxCalls {
		c.mu.Unlock()
		return
	}
	c.running++
	items := c.take()
	c.mu.Unlock()
	go c.run(items)
}

// newStreamCommit returns the group commit of one ScheduleStream.
func (s *Server) newStreamCommit(ctx context.Context) *streamCommit {
	c := &streamCommit{s: s, ctx: ctx, maxMessages: streamCallMessages, maxCalls: streamCalls}
	if s.opts.Cluster != nil {
		// A cluster stores one call as one intake message of at most
		// 1,024 messages; a larger call would be refused and then go
		// request by request. And one call at a time gathers the most:
		// an intake publish to a replicated stream costs the NATS servers
		// about a millisecond of CPU whatever it holds, so with 4 calls
		// in flight a stream of single Schedules from 64 callers made
		// 11,490/s and with one 15,980/s, side by side (docs/BENCHMARKS.md
		// "Cluster mode"), each waiting up to one publish longer.
		c.maxMessages, c.maxCalls = MaxBatch, clusterStreamCalls
		// And a cluster deduplicates a call as a whole (its intake
		// message's Nats-Msg-Id names every key in order, CLUSTER.md): a
		// keyed request merged with others would, resent after a lost
		// answer, meet other company and be stored twice.
		c.keyedAlone = true
	}
	if s.opts.streamCalls > 0 {
		c.maxCalls = s.opts.streamCalls
	}
	return c
}

// take removes the next call's items from pending: at least one, then as
// many as fit in c.maxMessages (with keyedAlone, a keyed item goes alone).
// c.mu is held.
func (c *streamCommit) take() []streamItem {
	n, msgs := 0, 0
	for n < len(c.pending) && (n == 0 || msgs+len(c.pending[n].reqs) <= c.maxMessages) {
		if n > 0 && c.keyedAlone && (c.pending[0].keyed || c.pending[n].keyed) {
			break
		}
		msgs += len(c.pending[n].reqs)
		n++
	}
	items := slices.Clone(c.pending[:n])
	rest := copy(c.pending, c.pending[n:])
	clear(c.pending[rest:])
	c.pending = c.pending[:rest]
	return items
}

// run schedules items, then what has come meanwhile, until nothing waits.
func (c *streamCommit) run(items []streamItem) {
	for {
		c.commit(items)
		c.mu.Lock()
		if len(c.pending) == 0 {
			c.running--
			c.mu.Unlock()
			return
		}
		items = c.take()
		c.mu.Unlock()
	}
}

// commit schedules items in one engine call and answers each.
func (c *streamCommit) commit(items []streamItem) {
	reqs := items[0].reqs
	if len(items) > 1 {
		n := 0
		for _, it := range items {
			n += len(it.reqs)
		}
		reqs = make([]engine.Request, 0, n)
		for _, it := range items {
			reqs = append(reqs, it.reqs...)
		}
	}
	end := c.s.traceSchedule(c.ctx, reqs)
	ids, err := c.s.schedule(c.ctx, reqs)
	end(ids, err)
	if err != nil && len(items) > 1 && (status.Code(err) == codes.InvalidArgument || status.Code(err) == codes.ResourceExhausted) {
		// Refused whole, nothing stored: let each request answer for
		// itself (the engine checks times against its own clock, a moment
		// after the server did; a quota may hold some of them).
		for _, it := range items {
			c.commit([]streamItem{it})
		}
		return
	}
	for _, it := range items {
		if err != nil {
			it.done <- c.s.streamError(err)
			continue
		}
		mine := ids[:len(it.reqs):len(it.reqs)]
		ids = ids[len(it.reqs):]
		if it.batch {
			it.done <- &hourglassv1.ScheduleStreamResponse{Kind: &hourglassv1.ScheduleStreamResponse_Batch{Batch: scheduleBatchResponse(mine)}}
		} else {
			it.done <- &hourglassv1.ScheduleStreamResponse{Kind: &hourglassv1.ScheduleStreamResponse_Result{Result: scheduleResponse(mine[0])}}
		}
	}
}

// streamError is the answer of a ScheduleStream request that failed.
func (s *Server) streamError(err error) *hourglassv1.ScheduleStreamResponse {
	st := status.Convert(err)
	return &hourglassv1.ScheduleStreamResponse{Kind: &hourglassv1.ScheduleStreamResponse_Error{
		Error: &hourglassv1.Status{Code: int32(st.Code()), Message: s.paths.text(st.Message())}}}
}

// ordered is the queue of a ScheduleStream's requests in progress, in the
// order they were read. Its methods may be called from any goroutine.
type ordered struct {
	mu     sync.Mutex
	cond   sync.Cond // on mu
	q      []chan *hourglassv1.ScheduleStreamResponse
	closed bool  // no more pushes
	failed error // the reading side's error
}

// push adds a request in progress, waiting while MaxStreamInflight are;
// false once closed.
func (o *ordered) push() (chan *hourglassv1.ScheduleStreamResponse, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(o.q) >= MaxStreamInflight && !o.closed {
		o.cond.Wait()
	}
	if o.closed {
		return nil, false
	}
	done := make(chan *hourglassv1.ScheduleStreamResponse, 1)
	o.q = append(o.q, done)
	o.cond.Broadcast()
	return done, true
}

// pop takes the oldest request in progress, waiting for one; false once
// closed and empty.
func (o *ordered) pop() (chan *hourglassv1.ScheduleStreamResponse, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(o.q) == 0 && !o.closed {
		o.cond.Wait()
	}
	if len(o.q) == 0 {
		return nil, false
	}
	done := o.q[0]
	o.q[0] = nil
	o.q = o.q[1:]
	o.cond.Broadcast()
	return done, true
}

func (o *ordered) close() {
	o.mu.Lock()
	o.closed = true
	o.cond.Broadcast()
	o.mu.Unlock()
}

func (o *ordered) fail(err error) {
	o.mu.Lock()
	if o.failed == nil {
		o.failed = err
	}
	o.mu.Unlock()
}

func (o *ordered) err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.failed
}
