package crashtest

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// burstReq is one request of a ScheduleStream burst: a single message
// (batch nil) or a batch, and the records of its messages.
type burstReq struct {
	single *hourglassv1.ScheduleRequest
	batch  *hourglassv1.ScheduleBatchRequest
	recs   []Schedule
}

func (b *burstReq) wire() *hourglassv1.ScheduleStreamRequest {
	if b.batch != nil {
		return &hourglassv1.ScheduleStreamRequest{Kind: &hourglassv1.ScheduleStreamRequest_Batch{Batch: b.batch}}
	}
	return &hourglassv1.ScheduleStreamRequest{Kind: &hourglassv1.ScheduleStreamRequest_Message{Message: b.single}}
}

// burstAnswer is what became of one request of a burst on the stream.
type burstAnswer struct {
	out Outcome
	ids []string  // with OK: one per message
	at  time.Time // when it was answered (or the stream ended)
}

// burstReqs makes 2 to 8 requests for a burst: single messages and
// batches of 2 to 4 in any order, of producer id, all sent at sent.
func (w *workload) burstReqs(cycle, id int, n *int, sent time.Time, rng *rand.Rand) []burstReq {
	seg := w.cfg.SegmentDuration
	reqs := make([]burstReq, 2+rng.IntN(7))
	for i := range reqs {
		b := &reqs[i]
		if rng.IntN(3) > 0 {
			req, s := w.message(cycle, id, n, sent, seg, rng)
			b.single, b.recs = req, []Schedule{s}
			continue
		}
		b.batch = &hourglassv1.ScheduleBatchRequest{}
		for range 2 + rng.IntN(3) {
			req, s := w.message(cycle, id, n, sent, seg, rng)
			b.batch.Messages, b.recs = append(b.batch.Messages, req), append(b.recs, s)
		}
	}
	return reqs
}

// streamBurst sends a burst (burstReqs) on one ScheduleStream of the
// producers' shared HTTP/2 connection, every request before reading the
// first answer, so that a kill may land with several requests of one
// stream in flight. Each message is recorded on its own (a batch's share
// their outcome). A request whose answer did not come before the stream
// ended is in doubt (burstOutcomes) and is then retried as a unary
// Schedule or ScheduleBatch with the same idempotency keys while in
// doubt, as a unary call would be.
func (w *workload) streamBurst(ctx context.Context, l lanes, cycle, id int, n *int, rng *rand.Rand) {
	sent := time.Now()
	reqs := w.burstReqs(cycle, id, n, sent, rng)
	w.count("stream-burst", protoStream)
	w.ops.add("stream-request/"+protoStream, len(reqs))
	// Each request's lane for retries, chosen whether or not it is needed
	// (the producer's draws do not depend on what the stream answers).
	retry := make([]lane, len(reqs))
	for i := range retry {
		retry[i] = l.choose(rng)
	}
	answers := w.sendBurst(ctx, l, reqs, 0, nil)
	for i := range reqs {
		b, a := &reqs[i], answers[i]
		if a.out == OK {
			w.recordBurst(b, a, sent)
			continue
		}
		// Rejected: nothing of it was stored; in doubt: retried as unary
		// calls while in doubt.
		if b.batch != nil {
			w.scheduleBatch(ctx, retry[i], b.batch, b.recs, sent, a.out)
		} else {
			w.scheduleOne(ctx, retry[i], b.single, b.recs[0], sent, a.out)
		}
	}
}

// killBurst is a burst that stops the server in its middle: it sends the
// first 0 to 2 requests and waits for their answers, then sends the rest
// back to back and at once or up to 1 ms later calls stopServer (SIGKILL or
// SIGTERM), then reads what answers still come. So the stop lands with
// several requests of one stream in flight: read or not, stored or not,
// answered or not. Nothing is retried (the server is gone); what was not
// answered stays in doubt. stopServer is called once, whatever happens to
// the stream.
func (w *workload) killBurst(ctx context.Context, l lanes, cycle, id int, rng *rand.Rand, stopServer func()) {
	sent := time.Now()
	n := 0
	reqs := w.burstReqs(cycle, id, &n, sent, rng)
	hold := rng.IntN(min(3, len(reqs)))
	var pause time.Duration // half the time none: the stop lands before the server has read them
	if rng.IntN(2) == 0 {
		pause = time.Duration(rng.IntN(1000)) * time.Microsecond
	}
	w.count("kill-burst", protoStream)
	w.ops.add("stream-request/"+protoStream, len(reqs))
	answers := w.sendBurst(ctx, l, reqs, hold, func() {
		time.Sleep(pause) // not sleep(ctx): the stop must happen
		stopServer()
	})
	for i := range reqs {
		a := answers[i]
		w.ops.add("kill-burst-"+a.out.String()+"/"+protoStream, 1)
		w.recordBurst(&reqs[i], a, sent)
	}
}

// recordBurst records the messages of b as a says, sent at sent.
func (w *workload) recordBurst(b *burstReq, a burstAnswer, sent time.Time) {
	for j := range b.recs {
		b.recs[j].Sent, b.recs[j].Answered, b.recs[j].Outcome = sent, a.at, a.out
		if a.out == OK {
			b.recs[j].ID = a.ids[j]
		}
		w.hist.AddSchedule(b.recs[j])
	}
}

// sendBurst sends reqs on one new ScheduleStream, closes its sending
// side, reads the answers until the stream ends, and judges each request
// (burstOutcomes). With stop set it sends only the first hold requests,
// reads their answers, sends the rest, then calls stop; stop is called
// once in any case.
func (w *workload) sendBurst(ctx context.Context, l lanes, reqs []burstReq, hold int, stop func()) []burstAnswer {
	if stop != nil {
		stop = sync.OnceFunc(stop)
		defer stop() // if the stream failed before
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := l.streams.ScheduleStream(sctx)
	if err != nil {
		return burstOutcomes(reqs, nil, nil, 0, err, time.Now())
	}
	var got []*hourglassv1.ScheduleStreamResponse
	var ats []time.Time
	var end error
	recv := func(until int) {
		for end == nil && len(got) < until {
			res, err := st.Recv()
			if err != nil {
				end = err
				return
			}
			got, ats = append(got, res), append(ats, time.Now())
		}
	}
	tried, broken := 0, false
	send := func(upto int) {
		for !broken && tried < upto {
			tried++
			if st.Send(reqs[tried-1].wire()) != nil {
				broken = true // the stream is over; Recv says why
			}
		}
	}
	if stop != nil {
		send(hold)
		recv(hold)
	}
	send(len(reqs))
	if stop != nil {
		stop()
	}
	st.CloseSend()
	recv(len(reqs) + 1) // until the stream ends
	return burstOutcomes(reqs, got, ats, tried, end, time.Now())
}

// burstOutcomes judges each request of a burst from the stream's answers,
// in request order: got[i] (received at ats[i]) answers reqs[i]. tried is
// how many requests were handed to Send (the rest were never sent: they
// had no effect); end is the error that ended the stream (io.EOF when the
// server ended it cleanly, which it does only once every request it read
// is answered), at the time ended.
//
//   - An answer with its result (a batch's with one result per message)
//     is OK; one with an error status is what its code says
//     (classifyCode); any other answer is in doubt.
//   - A request sent but not answered is in doubt, never OK: the stream
//     broke while it was in flight, and the server may have stored it. The
//     exception is a stream that ended, before any answer, with an error
//     saying it was never served (a refused connection, a limit on
//     streams): then nothing of it was stored.
//   - Answers beyond the requests sent mean the stream is not what the
//     API says: everything is in doubt.
func burstOutcomes(reqs []burstReq, got []*hourglassv1.ScheduleStreamResponse, ats []time.Time, tried int, end error, ended time.Time) []burstAnswer {
	out := make([]burstAnswer, len(reqs))
	if len(got) > tried {
		for i := range out {
			out[i] = burstAnswer{out: InDoubt, at: ended}
		}
		return out
	}
	unanswered := InDoubt
	if len(got) == 0 && end != nil && !errors.Is(end, io.EOF) && classify(end) == Rejected {
		unanswered = Rejected
	}
	for i := range reqs {
		switch {
		case i < len(got):
			out[i] = judgeAnswer(&reqs[i], got[i], ats[i])
		case i < tried:
			out[i] = burstAnswer{out: unanswered, at: ended}
		default:
			out[i] = burstAnswer{out: Rejected, at: ended}
		}
	}
	return out
}

// judgeAnswer judges res, the answer to b received at at.
func judgeAnswer(b *burstReq, res *hourglassv1.ScheduleStreamResponse, at time.Time) burstAnswer {
	a := burstAnswer{out: InDoubt, at: at}
	if e := res.GetError(); e != nil {
		a.out = classifyCode(codes.Code(e.Code))
		if a.out == OK {
			a.out = InDoubt // an error with code OK: take nothing for granted
		}
		return a
	}
	switch {
	case b.batch == nil && res.GetResult() != nil:
		a.out, a.ids = OK, []string{res.GetResult().Id}
	case b.batch != nil && res.GetBatch() != nil && len(res.GetBatch().Results) == len(b.recs):
		a.out = OK
		for _, r := range res.GetBatch().Results {
			a.ids = append(a.ids, r.Id)
		}
	}
	return a
}
