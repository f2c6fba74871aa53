package client

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

type consumeStream = grpc.BidiStreamingClient[hourglassv1.ConsumeRequest, hourglassv1.ConsumeResponse]

// Limits of the settling on a stream.
const (
	// maxUnanswered is how many settle requests of a stream may wait for
	// their answers; outcomes that come meanwhile wait and go together in
	// the next request, so a slow server gets fewer, larger settles.
	maxUnanswered = 4
)

// settleTimeout bounds the unary acks and nacks, and each wait of a
// stopping Consume for answers to its settles (a variable for tests).
var settleTimeout = 10 * time.Second

// cstream is one open Consume stream.
type cstream struct {
	st     consumeStream
	cancel context.CancelFunc
	sendMu sync.Mutex // serializes Send and CloseSend
	// unanswered holds a token per settle request sent and not yet
	// answered; the stream's reader takes one per answer.
	unanswered chan struct{}
	// done is closed when the stream's responses have ended (Recv
	// failed): no answer comes any more.
	done chan struct{}
}

func (s *cstream) send(r *hourglassv1.ConsumeRequest) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.st.Send(r)
}

func (s *cstream) closeSend() {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	s.st.CloseSend()
}

// receive opens streams and hands what they push to work until ctx ends.
func (cs *consumeState) receive(ctx context.Context, work chan<- held) error {
	const firstBackoff = 100 * time.Millisecond
	backoff := firstBackoff
	for ctx.Err() == nil {
		opened := time.Now()
		err := cs.stream(ctx, work)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(opened) > 10*time.Second {
			// The stream worked for a while: this break is news, not a
			// server that keeps failing.
			backoff = firstBackoff
		}
		if !transient(err) {
			return cs.wrap(err)
		}
		cs.report(cs.wrap(err))
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	return nil
}

// wrap names the call and the topic in an error of the stream.
func (cs *consumeState) wrap(err error) error {
	return fmt.Errorf("client: Consume of topic %q: %w", cs.topic, err)
}

// stream runs one Consume stream until it breaks or ctx ends. When ctx
// ends the stream stays open, for the settles of the last handlers, and
// what it still pushes is given back.
func (cs *consumeState) stream(ctx context.Context, work chan<- held) error {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	st, err := cs.c.svc.Consume(sctx)
	if err != nil {
		cancel()
		return err
	}
	s := &cstream{st: st, cancel: cancel, unanswered: make(chan struct{}, maxUnanswered), done: make(chan struct{})}
	if err := s.send(&hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Open{Open: &hourglassv1.ConsumeOpen{
		Topic: cs.topic, Credits: int32(cs.prefetch), LeaseMs: cs.lease.Milliseconds(), MaxBatch: int32(min(cs.prefetch, 1000)),
	}}}); err != nil {
		_, err = st.Recv() // the reason
		cancel()
		return err
	}
	if old := cs.swapCur(s); old != nil {
		old.cancel()
	}
	// The reader; in is read to its end, by this loop or by drain.
	in := make(chan *hourglassv1.ConsumeResponse)
	var rerr error // set before in is closed
	go func() {
		defer close(in)
		for {
			res, err := st.Recv()
			if err != nil {
				rerr = err
				return
			}
			in <- res
		}
	}()
	for {
		select {
		case <-ctx.Done():
			go cs.drain(s, in)
			return nil
		case res, ok := <-in:
			if !ok {
				cs.mu.Lock()
				if cs.cur == s {
					cs.cur = nil
				}
				cs.mu.Unlock()
				close(s.done)
				cancel()
				return rerr
			}
			if set := res.GetSettled(); set != nil {
				cs.answered(s, set)
				continue
			}
			for _, m := range res.GetMessages().GetMessages() {
				select {
				case work <- held{d: delivery(m), on: s, got: time.Now()}:
				case <-ctx.Done():
					cs.giveBack(delivery(m))
				}
			}
		}
	}
}

// drain reads what a stream of a stopping Consume still sends, until it
// ends: answers to settles, and messages, given back at once.
func (cs *consumeState) drain(s *cstream, in <-chan *hourglassv1.ConsumeResponse) {
	defer close(s.done)
	for res := range in {
		if set := res.GetSettled(); set != nil {
			cs.answered(s, set)
			continue
		}
		for _, m := range res.GetMessages().GetMessages() {
			cs.giveBack(delivery(m))
		}
	}
}

// answered takes the answer to a settle request of s.
func (cs *consumeState) answered(s *cstream, set *hourglassv1.ConsumeSettled) {
	select {
	case <-s.unanswered:
	default: // an answer to nothing sent: nothing waits for it
	}
	for _, r := range append(set.Acks, set.Nacks...) {
		if !r.Acked {
			cs.report(fmt.Errorf("client: Consume of topic %q: settle: %s", cs.topic, r.Error))
		}
	}
}

// giveBack releases d (a nack without delay), for a loop that stops.
func (cs *consumeState) giveBack(d Delivery) {
	cs.settleUnary([]outcome{release(held{d: d})})
}

// settler sends outcomes back: on the stream they came on while it is
// the open one, as settle requests of up to maxAckBatch outcomes, each
// followed by as many credits (none once ctx has ended: nothing more is
// wanted), at most maxUnanswered of them waiting for answers; by unary
// calls otherwise. While it waits it gathers what comes, so that handlers
// never wait for it.
func (cs *consumeState) settler(ctx context.Context, outcomes <-chan outcome) {
	var ref uint64
	var batch []outcome
	in := outcomes // nil once closed
	// Once ctx has ended, answers are waited for settleTimeout at most;
	// after that (unary) everything goes by unary calls.
	stopped := ctx.Done()
	var giveUp <-chan time.Time
	unary := false
	for in != nil || len(batch) > 0 {
		if len(batch) == 0 {
			o, ok := <-in
			if !ok {
				in = nil
				continue
			}
			batch = append(batch, o)
		}
	gather:
		for in != nil {
			select {
			case o, ok := <-in:
				if !ok {
					in = nil
					break gather
				}
				batch = append(batch, o)
			default:
				break gather
			}
		}
		cs.mu.Lock()
		cur := cs.cur
		cs.mu.Unlock()
		var other []outcome
		batch = slices.DeleteFunc(batch, func(o outcome) bool {
			if cur == nil || unary || o.on != cur {
				other = append(other, o)
				return true
			}
			return false
		})
		cs.settleUnary(other)
		if len(batch) == 0 {
			continue
		}
		select {
		case cur.unanswered <- struct{}{}:
		case o, ok := <-in: // in is nil once closed: never ready
			if !ok {
				in = nil
			} else {
				batch = append(batch, o)
			}
			continue
		case <-cur.done:
			continue // the stream ended: the next round settles by unary calls
		case <-stopped:
			stopped, giveUp = nil, time.After(settleTimeout)
			continue
		case <-giveUp:
			unary = true // the server does not answer
			continue
		}
		n := min(len(batch), maxAckBatch)
		ref++
		set := &hourglassv1.ConsumeSettle{Ref: ref}
		for _, o := range batch[:n] {
			if o.nack {
				set.Nacks = append(set.Nacks, &hourglassv1.ConsumeNack{Receipt: o.d.Receipt, DelayMs: o.delay.Milliseconds(), Reason: o.reason, DeadLetter: o.deadLetter, Release: o.release})
			} else {
				set.Acks = append(set.Acks, o.d.Receipt)
			}
		}
		err := cur.send(&hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Settle{Settle: set}})
		if err == nil && ctx.Err() == nil {
			err = cur.send(&hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Credit{Credit: &hourglassv1.ConsumeCredit{Credits: int32(n)}}})
		}
		if err != nil {
			// The stream broke: settle them by unary calls. One sent
			// just before may be settled twice; the second is refused.
			cs.settleUnary(batch[:n])
		}
		// A settle sent on a stream that then breaks is not answered:
		// its messages come back after their leases if it was lost.
		// TODO: resend those by unary calls when the stream breaks.
		batch = slices.Delete(batch, 0, n)
	}
}

// settleUnary acks and nacks by unary calls.
func (cs *consumeState) settleUnary(batch []outcome) {
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	var acks []Delivery
	for _, o := range batch {
		if o.nack {
			cs.report(cs.c.nack(ctx, o.d, o.delay, o.reason, o.deadLetter, o.release))
		} else {
			acks = append(acks, o.d)
		}
	}
	for chunk := range slices.Chunk(acks, maxAckBatch) {
		res, err := cs.c.AckBatch(ctx, chunk)
		cs.report(err)
		for _, e := range res {
			cs.report(e)
		}
	}
}

// transient reports whether a failed call may succeed when retried.
func transient(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return true // a network error
	}
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted,
		codes.Aborted, codes.Internal, codes.Unknown, codes.Canceled:
		return true
	}
	return false
}
