package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/queue"
)

// consume serves Consume: it pushes due messages of the stream's topic in
// batches while the consumer has credits, numbering them on the stream,
// and settles and extends what the consumer names by those numbers.
func (s *Server) consume(ctx context.Context, st bidi[hourglassv1.ConsumeRequest, hourglassv1.ConsumeResponse]) error {
	first, err := st.Recv()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return invalid("Consume ended before its first request: send open first")
		}
		return err
	}
	op := first.GetOpen()
	if op == nil {
		return invalid("the first request of a Consume stream must be open (topic, credits, lease_ms)")
	}
	n, lease, err := receiveArgs(op.Topic, op.MaxBatch, DefaultStreamBatch, op.LeaseMs)
	if err == nil {
		err = s.receivable(op.Topic)
	}
	if err == nil && (op.Credits < 1 || op.Credits > MaxCredits) {
		err = invalid("open.credits %d: from 1 to %d", op.Credits, MaxCredits)
	}
	if err != nil {
		return err
	}
	release, err := s.limits.acquire(infoOf(ctx).conn, streamsWhat)
	if err != nil {
		return err
	}
	defer release()

	c := &consumer{s: s, st: st, topic: op.Topic, credits: int(op.Credits), held: heldSet{next: 1}}
	c.cond.L = &c.mu
	pctx, cancel := s.pollContext(ctx)
	defer cancel()
	stop := context.AfterFunc(pctx, c.end)
	defer stop()
	go c.read(ctx, cancel)
	err = c.push(pctx, n, lease)
	c.end()
	c.settling.Wait()
	if err == nil {
		err = c.readErr()
	}
	if err == nil && s.life.polls.Err() != nil && ctx.Err() == nil {
		err = status.Error(codes.Unavailable, "the server is shutting down: leases of unacked messages run out as usual; reconnect to another node or after it restarts")
	}
	return err
}

// consumer is the state of one Consume stream.
type consumer struct {
	s     *Server
	st    bidi[hourglassv1.ConsumeRequest, hourglassv1.ConsumeResponse]
	topic string
	held  heldSet

	sendMu sync.Mutex // serializes st.Send

	mu       sync.Mutex
	cond     sync.Cond // on mu: credits or ended changed
	credits  int       // guarded by mu
	ended    bool      // guarded by mu: no more pushes or settles
	failed   error     // guarded by mu: why the reading side ended the stream
	settling sync.WaitGroup
	slots    chan struct{}
}

func (c *consumer) send(r *hourglassv1.ConsumeResponse) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.st.Send(r)
}

func (c *consumer) end() {
	c.mu.Lock()
	c.ended = true
	c.cond.Broadcast()
	c.mu.Unlock()
}

func (c *consumer) readErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.failed
}

// push sends due messages while there are credits, until the stream ends.
func (c *consumer) push(ctx context.Context, maxBatch int, lease time.Duration) error {
	topicSent := false
	for {
		c.mu.Lock()
		for c.credits == 0 && !c.ended {
			c.cond.Wait()
		}
		if c.ended {
			c.mu.Unlock()
			return nil
		}
		n := min(c.credits, maxBatch)
		c.mu.Unlock()
		msgs, err := c.s.recv.Receive(ctx, c.topic, n, streamPoll, lease)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return serverError(err)
		}
		if len(msgs) == 0 {
			continue
		}
		c.mu.Lock()
		c.credits -= len(msgs)
		c.mu.Unlock()
		// A message leased here that fails to reach the consumer is handed
		// out again when its lease ends.
		c.s.traceDeliveries(ctx, c.topic, msgs)
		b := toBatch(msgs, c.held.add(msgs), c.s.opts.Cluster != nil)
		if !topicSent {
			b.Topic, topicSent = c.topic, true
		}
		if err := c.send(&hourglassv1.ConsumeResponse{Kind: &hourglassv1.ConsumeResponse_Batch{Batch: b}}); err != nil {
			return err
		}
	}
}

// read handles the consumer's credits, settles and extends until the
// stream ends; a bad request ends it with the request's error (cancel).
func (c *consumer) read(ctx context.Context, cancel func()) {
	c.slots = make(chan struct{}, maxSettling)
	fail := func(err error) {
		c.mu.Lock()
		if c.failed == nil {
			c.failed = err
		}
		c.mu.Unlock()
		c.end()
		cancel()
	}
	// async runs f in a settling slot and sends its answer.
	async := func(f func() *hourglassv1.ConsumeResponse) bool {
		c.mu.Lock()
		if c.ended {
			c.mu.Unlock()
			return false
		}
		c.settling.Add(1)
		c.mu.Unlock()
		c.slots <- struct{}{}
		go func() {
			defer func() { <-c.slots; c.settling.Done() }()
			if err := c.send(f()); err != nil {
				fail(err)
			}
		}()
		return true
	}
	for {
		req, err := c.st.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				fail(err)
				return
			}
			// The consumer is done: stop pushing; settles in progress finish.
			c.end()
			cancel()
			return
		}
		switch k := req.Kind.(type) {
		case *hourglassv1.ConsumeRequest_Credit:
			n := int(k.Credit.GetCredits())
			c.mu.Lock()
			held := c.credits
			if n < 1 || held+n > MaxCredits {
				c.mu.Unlock()
				fail(invalid("credit.credits %d with %d held: from 1 to %d in all", n, held, MaxCredits))
				return
			}
			c.credits += n
			c.cond.Broadcast()
			c.mu.Unlock()
		case *hourglassv1.ConsumeRequest_Settle:
			set := k.Settle
			acks, err := rangeCount("settle.acks", set.Acks)
			if err == nil && len(set.Nacks) > MaxAckBatch {
				err = invalid("settle of %d nacks: at most %d", len(set.Nacks), MaxAckBatch)
			}
			if err != nil {
				fail(err)
				return
			}
			if !async(func() *hourglassv1.ConsumeResponse { return c.settle(ctx, set, acks) }) {
				return
			}
		case *hourglassv1.ConsumeRequest_Extend:
			ext := k.Extend
			_, err := rangeCount("extend.seqs", ext.Seqs)
			if err == nil && (ext.LeaseMs < 1 || ext.LeaseMs > queue.DefaultMaxLease.Milliseconds()) {
				err = invalid("extend.lease_ms %d: from 1 to %d", ext.LeaseMs, queue.DefaultMaxLease.Milliseconds())
			}
			if err != nil {
				fail(err)
				return
			}
			if !async(func() *hourglassv1.ConsumeResponse { return c.extend(ctx, ext) }) {
				return
			}
		case *hourglassv1.ConsumeRequest_Open:
			fail(invalid("open is the first request of a Consume stream only; open another stream for another topic"))
			return
		default:
			fail(invalid("a Consume request holds none of open, credit, settle and extend: set one"))
			return
		}
	}
}

// rangeCount checks ranges and returns how many messages they name.
func rangeCount(what string, rs []*hourglassv1.SeqRange) (int, error) {
	n := 0
	for _, r := range rs {
		if r.Count < 1 || r.Count > MaxAckBatch || r.First == 0 {
			return 0, invalid("%s: range of %d from %d: count 1 to %d, first from 1", what, r.Count, r.First, MaxAckBatch)
		}
		n += int(r.Count)
	}
	if n > MaxAckBatch {
		return 0, invalid("%s: %d messages: at most %d", what, n, MaxAckBatch)
	}
	return n, nil
}

// notHeld is why a sequence number names no message of the stream.
func notHeld(seq uint64) string {
	return fmt.Sprintf("message %d is not held by this stream: never pushed, settled already, or long past its lease", seq)
}

// settle acks and nacks what one settle request names (acks messages in
// all).
func (c *consumer) settle(ctx context.Context, set *hourglassv1.ConsumeSettle, acks int) *hourglassv1.ConsumeResponse {
	out := &hourglassv1.ConsumeSettled{Ref: set.Ref}
	fail := func(seq uint64, msg string) {
		out.Failed = append(out.Failed, seq)
		out.Errors = append(out.Errors, c.s.paths.text(msg))
	}
	if acks > 0 {
		seqs := make([]uint64, 0, acks)
		receipts := make([]string, 0, acks)
		for _, r := range set.Acks {
			for seq := r.First; seq < r.First+uint64(r.Count); seq++ {
				rc, ok := c.held.take(seq)
				if !ok {
					fail(seq, notHeld(seq))
					continue
				}
				seqs, receipts = append(seqs, seq), append(receipts, rc)
			}
		}
		if len(receipts) > 0 {
			res, err := c.s.recv.AckBatch(ctx, c.topic, receipts)
			for i, seq := range seqs {
				switch {
				case err != nil:
					fail(seq, status.Convert(serverError(err)).Message())
				case res[i] != nil:
					fail(seq, trimPkg(res[i].Error()))
				}
			}
		}
	}
	for _, nk := range set.Nacks {
		o, err := c.s.nackOptions(nk.DelayMs, nk.Reason, nk.DeadLetter, nk.Release)
		if err != nil {
			fail(nk.Seq, status.Convert(err).Message())
			continue
		}
		rc, ok := c.held.take(nk.Seq)
		if !ok {
			fail(nk.Seq, notHeld(nk.Seq))
			continue
		}
		if err := c.s.recv.NackReceipt(ctx, c.topic, rc, o); err != nil {
			fail(nk.Seq, status.Convert(serverError(err)).Message())
		}
	}
	return &hourglassv1.ConsumeResponse{Kind: &hourglassv1.ConsumeResponse_Settled{Settled: out}}
}

// extend gives the messages one extend request names new leases.
func (c *consumer) extend(ctx context.Context, ext *hourglassv1.ConsumeExtend) *hourglassv1.ConsumeResponse {
	out := &hourglassv1.ConsumeExtended{Ref: ext.Ref}
	d := time.Duration(ext.LeaseMs) * time.Millisecond
	for _, r := range ext.Seqs {
		for seq := r.First; seq < r.First+uint64(r.Count); seq++ {
			rc, ok := c.held.get(seq)
			var err error
			var until time.Time
			if !ok {
				err = errors.New(notHeld(seq))
			} else if until, err = c.s.extendReceipt(ctx, c.topic, rc, d); err != nil {
				err = errors.New(status.Convert(serverError(err)).Message())
			}
			if err != nil {
				out.Failed = append(out.Failed, seq)
				out.Errors = append(out.Errors, c.s.paths.text(err.Error()))
				continue
			}
			out.LeaseExpiresAtMs = max(out.LeaseExpiresAtMs, until.UnixMilli())
		}
	}
	return &hourglassv1.ConsumeResponse{Kind: &hourglassv1.ConsumeResponse_Extended{Extended: out}}
}
