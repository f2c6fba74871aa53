package client

import (
	"context"
	"fmt"
	"maps"
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
	// window is the stream's credits in all (held by the server or by
	// deliveries not yet settled); the settler's alone once the stream
	// is open.
	window int

	extMu   sync.Mutex
	extRef  uint64                                       // guarded by extMu: the last extend's ref
	extWait map[uint64]chan *hourglassv1.ConsumeExtended // guarded by extMu: extends not yet answered

	sentMu sync.Mutex
	sent   map[uint64][]outcome // guarded by sentMu: settle requests sent and not answered, by ref; nil once the responses have ended
}

// track records the outcomes of the settle request ref before it is sent,
// so that they can be sent again if no answer comes; false once the
// stream's responses have ended (settle them by unary calls instead).
func (s *cstream) track(ref uint64, os []outcome) bool {
	s.sentMu.Lock()
	defer s.sentMu.Unlock()
	if s.sent == nil {
		return false
	}
	s.sent[ref] = os
	return true
}

// untrack forgets the settle request ref (answered, or never sent) and
// returns its outcomes; false if it is not tracked (answered already, or
// taken by unansweredOutcomes).
func (s *cstream) untrack(ref uint64) ([]outcome, bool) {
	s.sentMu.Lock()
	defer s.sentMu.Unlock()
	os, ok := s.sent[ref]
	delete(s.sent, ref)
	return os, ok
}

// unansweredOutcomes ends the tracking, once the stream's responses have ended,
// and returns the outcomes of the settle requests that no answer came
// for: the server may have settled them or never read them.
func (s *cstream) unansweredOutcomes() []outcome {
	s.sentMu.Lock()
	defer s.sentMu.Unlock()
	var os []outcome
	for _, ref := range slices.Sorted(maps.Keys(s.sent)) {
		os = append(os, s.sent[ref]...)
	}
	s.sent = nil
	return os
}

// ended settles again, by unary calls, what s's settle requests that got
// no answer named, and then marks s done. The server refuses those it
// had settled (as not leased), and such refusals are not reported.
func (cs *consumeState) ended(s *cstream) {
	cs.settleUnary(s.unansweredOutcomes(), true)
	close(s.done)
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
	s := &cstream{st: st, cancel: cancel, unanswered: make(chan struct{}, maxUnanswered), done: make(chan struct{}),
		window: cs.prefetch, extWait: map[uint64]chan *hourglassv1.ConsumeExtended{}, sent: map[uint64][]outcome{}}
	if err := s.send(&hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Open{Open: &hourglassv1.ConsumeOpen{
		Topic: cs.topic, Credits: int32(cs.prefetch), LeaseMs: cs.lease.Milliseconds(), MaxBatch: int32(cs.maxBatch),
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
	var ds []Delivery // reused: a batch's deliveries are copied into work
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
				cs.ended(s)
				cancel()
				return rerr
			}
			if cs.answer(s, res) {
				continue
			}
			b := res.GetBatch()
			var err error
			if ds, err = batchDeliveries(ds[:0], cs.topic, b); err != nil {
				// Its messages come again when their leases end.
				cs.report(cs.wrap(err))
				continue
			}
			got := time.Now()
			for i, d := range ds {
				h := held{d: d, on: s, seq: b.FirstSeq + uint64(i), got: got}
				select {
				case work <- h:
				case <-ctx.Done():
					cs.giveBack(h)
				}
			}
			clear(ds) // let the response go once its deliveries are done
		}
	}
}

// answer takes an answer of the server to a settle or an extend; false
// for anything else.
func (cs *consumeState) answer(s *cstream, res *hourglassv1.ConsumeResponse) bool {
	if set := res.GetSettled(); set != nil {
		cs.answered(s, set)
		return true
	}
	if ext := res.GetExtended(); ext != nil {
		s.extMu.Lock()
		w := s.extWait[ext.Ref]
		delete(s.extWait, ext.Ref)
		s.extMu.Unlock()
		if w != nil {
			w <- ext
		}
		return true
	}
	return false
}

// drain reads what a stream of a stopping Consume still sends, until it
// ends: answers to settles, and messages, given back at once.
func (cs *consumeState) drain(s *cstream, in <-chan *hourglassv1.ConsumeResponse) {
	defer cs.ended(s)
	var ds []Delivery
	for res := range in {
		if cs.answer(s, res) {
			continue
		}
		b := res.GetBatch()
		var err error
		if ds, err = batchDeliveries(ds[:0], cs.topic, b); err != nil {
			cs.report(cs.wrap(err))
			continue
		}
		for i, d := range ds {
			cs.giveBack(held{d: d, on: s, seq: b.FirstSeq + uint64(i)})
		}
	}
}

// answered takes the answer to a settle request of s.
func (cs *consumeState) answered(s *cstream, set *hourglassv1.ConsumeSettled) {
	select {
	case <-s.unanswered:
	default: // an answer to nothing sent: nothing waits for it
	}
	s.untrack(set.Ref)
	for i, seq := range set.Failed {
		why := "refused"
		if i < len(set.Errors) {
			why = set.Errors[i]
		}
		cs.report(fmt.Errorf("client: Consume of topic %q: settle of message %d on its stream: %s", cs.topic, seq, why))
	}
}

// giveBack releases h (a nack without delay), for a loop that stops.
func (cs *consumeState) giveBack(h held) {
	cs.settleUnary([]outcome{release(h)}, false)
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
		cs.settleUnary(other, false)
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
		sent := slices.Clone(batch[:n])
		batch = slices.Delete(batch, 0, n)
		if !cur.track(ref, sent) {
			// Its responses ended after the token was taken.
			cs.settleUnary(sent, false)
			continue
		}
		// A settle that the stream's end leaves unanswered is sent again
		// by unary calls then (cs.ended).
		err := cur.send(&hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Settle{Settle: settleOf(ref, sent)}})
		again := err == nil // the settle went out: it may be settled
		if credits := cs.credits(cur, n); err == nil && ctx.Err() == nil && credits > 0 {
			err = cur.send(&hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Credit{Credit: &hourglassv1.ConsumeCredit{Credits: int32(credits)}}})
		}
		if err != nil {
			// The stream broke: settle them by unary calls, unless its end
			// took them already.
			if os, ok := cur.untrack(ref); ok {
				cs.settleUnary(os, again)
			}
		}
	}
}

// Bounds of a delivery's wait for a handler that move a stream's window.
const (
	// growBelow: while every delivery found a handler within it, the
	// handlers keep up and the window grows.
	growBelow = 100 * time.Millisecond
	// shrinkAbove: a delivery that waited longer shrinks the window back
	// towards prefetch, so that deliveries wait little beside their
	// leases and a slow consumer holds few messages other consumers
	// could take.
	shrinkAbove = time.Second
)

// credits returns the credits to give s back for n settled messages, and
// moves its window: while handlers keep up it grows by up to n a round
// (doubling a round trip, up to maxPrefetch), and shrinks by up to n once
// deliveries wait long for a handler (down to prefetch). A round in which
// no handler started says nothing of the waits (a slow handler's settle
// comes before the next delivery starts), so it holds the window. With a
// fixed Prefetch (maxPrefetch == prefetch) it is n.
func (cs *consumeState) credits(s *cstream, n int) int {
	w := cs.waited.Swap(0)
	if w == 0 {
		return n
	}
	waited := time.Duration(w - 1)
	switch {
	case waited < growBelow && s.window < cs.maxPrefetch:
		k := min(n, cs.maxPrefetch-s.window)
		s.window += k
		return n + k
	case waited > shrinkAbove && s.window > cs.prefetch:
		k := min(n, s.window-cs.prefetch)
		s.window -= k
		return n - k
	}
	return n
}

// settleOf is the settle request of batch: its acks as ranges of
// consecutive numbers, its nacks one by one.
func settleOf(ref uint64, batch []outcome) *hourglassv1.ConsumeSettle {
	set := &hourglassv1.ConsumeSettle{Ref: ref}
	var acks []uint64
	for _, o := range batch {
		if o.nack {
			set.Nacks = append(set.Nacks, &hourglassv1.ConsumeNack{Seq: o.seq, DelayMs: o.delay.Milliseconds(), Reason: o.reason, DeadLetter: o.deadLetter, Release: o.release})
		} else {
			acks = append(acks, o.seq)
		}
	}
	slices.Sort(acks)
	for _, seq := range acks {
		if k := len(set.Acks); k > 0 && set.Acks[k-1].First+uint64(set.Acks[k-1].Count) == seq {
			set.Acks[k-1].Count++
			continue
		}
		set.Acks = append(set.Acks, &hourglassv1.SeqRange{First: seq, Count: 1})
	}
	return set
}

// extendLease extends the lease of r's delivery: on its stream while that is
// open, by a unary call otherwise.
func (cs *consumeState) extendLease(ctx context.Context, r *running, lease time.Duration) error {
	s := r.on
	if s == nil || r.seq == 0 {
		_, err := cs.c.Extend(ctx, r.d, lease)
		return err
	}
	w := make(chan *hourglassv1.ConsumeExtended, 1)
	s.extMu.Lock()
	s.extRef++
	ref := s.extRef
	s.extWait[ref] = w
	s.extMu.Unlock()
	forget := func() {
		s.extMu.Lock()
		delete(s.extWait, ref)
		s.extMu.Unlock()
	}
	err := s.send(&hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Extend{Extend: &hourglassv1.ConsumeExtend{
		Ref: ref, Seqs: []*hourglassv1.SeqRange{{First: r.seq, Count: 1}}, LeaseMs: lease.Milliseconds()}}})
	if err != nil {
		forget()
		return status.Errorf(codes.Unavailable, "client: Extend on the Consume stream of topic %q: %v", cs.topic, err)
	}
	select {
	case ext := <-w:
		if len(ext.Failed) > 0 {
			why := "refused"
			if len(ext.Errors) > 0 {
				why = ext.Errors[0]
			}
			return status.Errorf(codes.FailedPrecondition, "client: Extend on the Consume stream of topic %q: %s", cs.topic, why)
		}
		return nil
	case <-s.done:
		forget()
		return status.Errorf(codes.Unavailable, "client: Extend on the Consume stream of topic %q: the stream ended", cs.topic)
	case <-ctx.Done():
		forget()
		return status.FromContextError(ctx.Err()).Err()
	}
}

// settleUnary acks and nacks by unary calls. again says the batch may
// have been settled already (a settle request that got no answer): then
// the server's refusal of a message as not leased is not reported, nor
// any refusal of a receipt by AckBatch.
func (cs *consumeState) settleUnary(batch []outcome, again bool) {
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	report := func(err error) {
		if again && status.Code(err) == codes.FailedPrecondition {
			return
		}
		cs.report(err)
	}
	var acks []Delivery
	for _, o := range batch {
		switch {
		case o.nack:
			report(cs.c.nack(ctx, o.d, o.delay, o.reason, o.deadLetter, o.release))
		case o.d.Receipt == "":
			// Pushed on a stream (that has ended): by ID.
			report(cs.c.Ack(ctx, o.d))
		default:
			acks = append(acks, o.d)
		}
	}
	for chunk := range slices.Chunk(acks, maxAckBatch) {
		res, err := cs.c.AckBatch(ctx, chunk)
		report(err)
		if again {
			// A receipt's refusal carries no code: settled already is
			// the expected one, and any other (its lease ended) also
			// means the message comes again.
			continue
		}
		for _, e := range res {
			report(e)
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
