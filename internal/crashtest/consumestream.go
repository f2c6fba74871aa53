package crashtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
)

// Bounds of one Consume stream turn.
const (
	streamTurnMax   = 64                     // messages, then the stream is closed
	streamTurnGrace = 2 * time.Second        // from CloseSend to the server's end of the stream
	streamTurnSlack = 10 * time.Second       // the stream's deadline after its planned length
	deadTurn        = 150 * time.Millisecond // a dead-letter topic's turn: mostly empty
)

// creditLog is the credits a Consume stream granted, in order, so that
// each pushed message can be dated: the server leases the k-th message of
// a stream only once it has read credits adding up to k, so not before the
// grant that made them add up to k was sent. That is the Issued time of
// its Delivery (for a Receive, the time it was sent), what Check compares
// with the answer to an Ack of the same ID.
type creditLog struct {
	at  []time.Time // when each grant was sent
	cum []int       // the credits granted up to and including each
}

func (c *creditLog) grant(at time.Time, n int) {
	total := n
	if len(c.cum) > 0 {
		total += c.cum[len(c.cum)-1]
	}
	c.at, c.cum = append(c.at, at), append(c.cum, total)
}

// issued dates the k-th message pushed (from 1); ok is false when the
// stream never granted k credits (the server pushed more than it was
// allowed), and then the last grant is given.
func (c *creditLog) issued(k int) (time.Time, bool) {
	for i, n := range c.cum {
		if n >= k {
			return c.at[i], true
		}
	}
	return c.at[len(c.at)-1], false
}

// settleOutcome is the outcome of one ack or nack of a ConsumeSettle from
// its result: acked is OK (for an ack, durable); the receipt's lease not
// held, a malformed receipt, or a number the stream does not hold, is
// Rejected (the queue's errors for them);
// anything else (the whole settle failed: the server is shutting down, its
// storage failed) is in doubt.
func settleOutcome(r *hourglassv1.AckResult) Outcome {
	switch {
	case r.Acked:
		return OK
	case strings.Contains(r.Error, "not leased"), strings.Contains(r.Error, "malformed receipt"),
		strings.Contains(r.Error, "not held by this stream"):
		return Rejected
	}
	return InDoubt
}

// streamEvent is one Recv of a Consume stream.
type streamEvent struct {
	res *hourglassv1.ConsumeResponse
	err error
	at  time.Time
}

// pendingSettle is a ConsumeSettle sent and not answered yet.
type pendingSettle struct {
	acks, nacks       []Settle
	ackSeqs, nackSeqs []uint64 // the messages' numbers on the stream, parallel
}

// consumeStream is one turn t on a Consume stream of the consumers' shared
// HTTP/2 connection: it opens t.topic with 1 to 16 credits and batches of
// at most 1 to 8, records each pushed message as a Delivery, decides about
// each as a unary consumer would (decide), sends the acks and nacks of a
// pushed batch as one settle, and grants as many credits as the batch
// used. After its planned length (or streamTurnMax messages, or when ctx
// ends) it closes its sending side and reads on until the server ends the
// stream (or streamTurnGrace passes); messages pushed meanwhile are
// settled with unary calls.
//
// An ack whose Settled result says acked is a durable ack; a settle whose
// answer did not come is in doubt. A stream that breaks may have leased
// messages it never showed (pushed, not yet received): like a Receive that
// failed in doubt, it is recorded as a ReceiveFail of its topic. A stream
// the server ended cleanly showed everything it leased (on one node; in
// cluster mode it is recorded as a ReceiveFail too).
func (w *workload) consumeStream(ctx context.Context, l lanes, t turn, rng *rand.Rand) {
	credits := 1 + rng.IntN(16)
	maxBatch := 1 + rng.IntN(8)
	length := deadTurn
	if !t.dead {
		length = 300*time.Millisecond + time.Duration(rng.Int64N(int64(1200*time.Millisecond)))
	}
	w.count("consume-stream", protoStream)
	// Not ended by ctx: when ctx ends the stream is closed, not dropped
	// (bounded by the grace and this deadline).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), length+streamTurnSlack)
	defer cancel()
	st, err := l.streams.Consume(sctx)
	if err != nil {
		sleep(ctx, 20*time.Millisecond) // nothing was sent
		return
	}
	var cl creditLog
	opened := time.Now()
	cl.grant(opened, credits)
	st.Send(&hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Open{Open: &hourglassv1.ConsumeOpen{
		Topic: t.topic, Credits: int32(credits), LeaseMs: t.lease.Milliseconds(), MaxBatch: int32(maxBatch)}}})
	// A failed Send ends the stream; the next Recv says why.

	events := make(chan streamEvent, 16)
	go func() {
		for {
			res, err := st.Recv()
			events <- streamEvent{res, err, time.Now()}
			if err != nil {
				return
			}
		}
	}()

	turnEnd := time.NewTimer(length)
	defer turnEnd.Stop()
	turnC, done := turnEnd.C, ctx.Done()
	var grace <-chan time.Time
	closing := false
	closeSend := func() {
		if !closing {
			closing = true
			st.CloseSend()
			turnC, done, grace = nil, nil, time.After(streamTurnGrace)
		}
	}
	pending := map[uint64]*pendingSettle{}
	var ref uint64
	pushed := 0
	var end error
	for end == nil {
		var ev streamEvent
		select {
		case ev = <-events:
		case <-turnC:
			closeSend()
			continue
		case <-done:
			closeSend()
			continue
		case <-grace:
			grace = nil
			cancel() // Recv fails: the reader's last event
			continue
		}
		if ev.err != nil {
			end = ev.err
			break
		}
		if s := ev.res.GetSettled(); s != nil {
			if p := pending[s.Ref]; p != nil {
				delete(pending, s.Ref)
				w.settled(p, s, ev.at)
			}
			continue
		}
		msgs, seqs, err := batchMessages(ev.res.GetBatch(), t.topic)
		if err != nil {
			w.count("consume-bad-batch", protoStream) // a server bug; the table shows it
			continue
		}
		set := &hourglassv1.ConsumeSettle{}
		p := &pendingSettle{}
		for i, m := range msgs {
			pushed++
			issued, ok := cl.issued(pushed)
			if !ok {
				w.count("consume-over-credit", protoStream) // a server bug; the table shows it
			}
			w.hist.AddDelivery(w.delivery(m, t.cycle, issued, ev.at))
			kind, delay, settle := w.decide(t, m, rng)
			switch {
			case !settle:
			case closing:
				// No more requests on this stream: by a unary call (by ID
				// on one node, where the push has no receipt).
				if ctx.Err() == nil {
					w.settle(ctx, l, t.cycle, m, kind, delay, rng)
				}
			case kind == Ack:
				set.Acks = append(set.Acks, &hourglassv1.SeqRange{First: seqs[i], Count: 1})
				p.acks, p.ackSeqs = append(p.acks, w.settleOf(m, Ack, 0, t.cycle)), append(p.ackSeqs, seqs[i])
			default:
				set.Nacks = append(set.Nacks, &hourglassv1.ConsumeNack{Seq: seqs[i], DelayMs: delay.Milliseconds()})
				p.nacks, p.nackSeqs = append(p.nacks, w.settleOf(m, Nack, delay, t.cycle)), append(p.nackSeqs, seqs[i])
			}
		}
		if closing {
			continue
		}
		if len(set.Acks)+len(set.Nacks) > 0 {
			ref++
			set.Ref = ref
			sentAt := time.Now()
			for i := range p.acks {
				p.acks[i].Sent = sentAt
			}
			for i := range p.nacks {
				p.nacks[i].Sent = sentAt
			}
			pending[ref] = p
			w.count("settle", protoStream)
			w.ops.add("ack/"+protoStream, len(p.acks))
			w.ops.add("nack/"+protoStream, len(p.nacks))
			st.Send(&hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Settle{Settle: set}})
		}
		if pushed >= streamTurnMax {
			closeSend()
			continue
		}
		if len(msgs) > 0 {
			cl.grant(time.Now(), len(msgs))
			st.Send(&hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Credit{Credit: &hourglassv1.ConsumeCredit{Credits: int32(len(msgs))}}})
		}
	}
	now := time.Now()
	// Settles the server did not answer: in doubt (a stream the server
	// ended cleanly answered every settle it read).
	for _, p := range pending {
		for _, recs := range [][]Settle{p.acks, p.nacks} {
			for _, x := range recs {
				x.Answered, x.Outcome = now, InDoubt
				w.hist.AddSettle(x)
			}
		}
	}
	broke := !errors.Is(end, io.EOF)
	if broke {
		w.count("consume-stream-broken", protoStream)
	}
	// In cluster mode a stream that ends cleanly may have leased messages
	// unseen too: the node's pull for the next batch, in flight when the
	// stream ended, is dropped with what it fetched, whose leases then run
	// out (JetStream counted the deliveries).
	if (broke && (pushed > 0 || classify(end) != Rejected)) || w.cfg.Cluster {
		w.hist.AddReceiveFail(ReceiveFail{Topic: t.topic, Cycle: t.cycle, Issued: opened, Failed: now})
	}
	if broke && ctx.Err() == nil {
		sleep(ctx, 20*time.Millisecond) // the server is down or restarting
	}
}

// settled records the acks and nacks of p as s, received at at, answers
// them.
func (w *workload) settled(p *pendingSettle, s *hourglassv1.ConsumeSettled, at time.Time) {
	failed := map[uint64]string{}
	for i, seq := range s.Failed {
		failed[seq] = "" // in doubt without its reason
		if i < len(s.Errors) {
			failed[seq] = s.Errors[i]
		}
	}
	for _, part := range []struct {
		recs []Settle
		seqs []uint64
	}{{p.acks, p.ackSeqs}, {p.nacks, p.nackSeqs}} {
		for i, x := range part.recs {
			x.Answered, x.Outcome = at, OK
			if why, ok := failed[part.seqs[i]]; ok {
				x.Outcome = settleOutcome(&hourglassv1.AckResult{Error: why})
			}
			w.hist.AddSettle(x)
		}
	}
}

// batchMessages expands a pushed batch of topic into the messages Receive
// would have answered, and their numbers on the stream.
func batchMessages(b *hourglassv1.ConsumeBatch, topic string) ([]*hourglassv1.Message, []uint64, error) {
	n := len(b.GetBodies())
	if n == 0 || len(b.Ids) != 16*n || len(b.DeliverAtDeltas) != n || (len(b.Attempts) != 0 && len(b.Attempts) != n) ||
		(len(b.OriginIds) != 0 && len(b.OriginIds) != 16*n) || (len(b.HeaderCounts) != 0 && len(b.HeaderCounts) != n) ||
		len(b.HeaderKeys) != len(b.HeaderValues) || (len(b.Receipts) != 0 && len(b.Receipts) != n) {
		return nil, nil, fmt.Errorf("a pushed batch whose fields disagree: %v", b)
	}
	msgs, seqs := make([]*hourglassv1.Message, n), make([]uint64, n)
	h := 0
	for i := range n {
		id, err := message.IDFromBinary(b.Ids[16*i : 16*i+16])
		if err != nil {
			return nil, nil, err
		}
		m := &hourglassv1.Message{Id: id.String(), OriginId: id.String(), Topic: topic, Body: b.Bodies[i],
			DeliverAt:  timestamppb.New(time.UnixMilli(b.DeliverAtMs + b.DeliverAtDeltas[i])),
			ReceivedAt: timestamppb.New(time.UnixMilli(b.ReceivedAtMs)), LeaseExpiresAt: timestamppb.New(time.UnixMilli(b.LeaseExpiresAtMs))}
		if len(b.Attempts) != 0 {
			m.Attempt = b.Attempts[i]
		}
		if len(b.Receipts) != 0 {
			m.Receipt = b.Receipts[i]
		}
		if len(b.OriginIds) != 0 && string(b.OriginIds[16*i:16*i+16]) != string(make([]byte, 16)) {
			o, err := message.IDFromBinary(b.OriginIds[16*i : 16*i+16])
			if err != nil {
				return nil, nil, err
			}
			m.OriginId = o.String()
		}
		if len(b.HeaderCounts) != 0 {
			for range b.HeaderCounts[i] {
				if h >= len(b.HeaderKeys) {
					return nil, nil, fmt.Errorf("a pushed batch with more header counts than headers")
				}
				m.Headers = append(m.Headers, &hourglassv1.Header{Key: b.HeaderKeys[h], Value: b.HeaderValues[h]})
				h++
			}
		}
		msgs[i], seqs[i] = m, b.FirstSeq+uint64(i)
	}
	return msgs, seqs, nil
}
