package pebbledelay

import (
	"context"
	"encoding/hex"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// Service serves a Queue as hourglass.v1.HourglassService: Schedule,
// ScheduleBatch, Consume, Ack, AckBatch and Nack, with their meaning in
// Hourglass's API; every other call answers Unimplemented. Its methods are
// called by grpc-go.
type Service struct {
	hourglassv1.UnimplementedHourglassServiceServer
	q *Queue
}

// NewService serves q.
func NewService(q *Queue) *Service { return &Service{q: q} }

// Register registers the service with s.
func (s *Service) Register(r grpc.ServiceRegistrar) { hourglassv1.RegisterHourglassServiceServer(r, s) }

// scheduleError is err as a status: a request's mistake or a store that
// refuses writes.
func scheduleError(err error) error {
	var inv *invalidError
	if errors.As(err, &inv) {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return status.Error(codes.Unavailable, err.Error())
}

// Schedule stores one message.
func (s *Service) Schedule(_ context.Context, req *hourglassv1.ScheduleRequest) (*hourglassv1.ScheduleResponse, error) {
	res, err := s.q.Schedule([]*hourglassv1.ScheduleRequest{req}, time.Now())
	if err != nil {
		return nil, scheduleError(err)
	}
	return res[0], nil
}

// ScheduleBatch stores 1 to 1000 messages, all or none.
func (s *Service) ScheduleBatch(_ context.Context, req *hourglassv1.ScheduleBatchRequest) (*hourglassv1.ScheduleBatchResponse, error) {
	if n := len(req.Messages); n < 1 || n > 1000 {
		return nil, status.Errorf(codes.InvalidArgument, "pebbledelay: a batch of %d messages; want 1 to 1000", n)
	}
	res, err := s.q.Schedule(req.Messages, time.Now())
	if err != nil {
		return nil, scheduleError(err)
	}
	return &hourglassv1.ScheduleBatchResponse{Results: res}, nil
}

// Ack deletes one leased message by its receipt.
func (s *Service) Ack(_ context.Context, req *hourglassv1.AckRequest) (*hourglassv1.AckResponse, error) {
	if req.Receipt == "" {
		return nil, status.Error(codes.InvalidArgument, "pebbledelay: Ack by receipt only")
	}
	r := s.q.ack([]string{req.Receipt}, time.Now())[0]
	if !r.Acked {
		return nil, status.Error(codes.FailedPrecondition, r.Error)
	}
	return &hourglassv1.AckResponse{}, nil
}

// AckBatch deletes 1 to 1000 leased messages by receipt, with one write.
func (s *Service) AckBatch(_ context.Context, req *hourglassv1.AckBatchRequest) (*hourglassv1.AckBatchResponse, error) {
	if n := len(req.Receipts); n < 1 || n > 1000 {
		return nil, status.Errorf(codes.InvalidArgument, "pebbledelay: AckBatch of %d receipts; want 1 to 1000", n)
	}
	return &hourglassv1.AckBatchResponse{Results: s.q.ack(req.Receipts, time.Now())}, nil
}

// Nack gives a leased message back by its receipt.
func (s *Service) Nack(_ context.Context, req *hourglassv1.NackRequest) (*hourglassv1.NackResponse, error) {
	if req.Receipt == "" {
		return nil, status.Error(codes.InvalidArgument, "pebbledelay: Nack by receipt only")
	}
	r := s.q.nack(req.Receipt, &hourglassv1.ConsumeNack{DelayMs: req.DelayMs, Reason: req.Reason,
		DeadLetter: req.DeadLetter, Release: req.Release}, time.Now())
	if !r.Acked {
		return nil, status.Error(codes.FailedPrecondition, r.Error)
	}
	return &hourglassv1.NackResponse{}, nil
}

// Consume pushes due messages of the opened topic while the stream has
// credits, and answers each settle request with its outcomes.
func (s *Service) Consume(st grpc.BidiStreamingServer[hourglassv1.ConsumeRequest, hourglassv1.ConsumeResponse]) error {
	first, err := st.Recv()
	if err != nil {
		return err
	}
	open := first.GetOpen()
	switch {
	case open == nil:
		return status.Error(codes.InvalidArgument, "pebbledelay: Consume: the first request must be open")
	case len(open.Topic) < 1 || len(open.Topic) > 200:
		return status.Errorf(codes.InvalidArgument, "pebbledelay: Consume: topic of %d bytes; want 1 to 200", len(open.Topic))
	case open.Credits < 1 || open.Credits > maxCredits:
		return status.Errorf(codes.InvalidArgument, "pebbledelay: Consume: %d credits; want 1 to %d", open.Credits, maxCredits)
	case open.MaxBatch < 0 || open.MaxBatch > 1000:
		return status.Errorf(codes.InvalidArgument, "pebbledelay: Consume: max_batch %d; want 0 (100) to 1000", open.MaxBatch)
	case open.LeaseMs < 0 || open.LeaseMs > (12*time.Hour).Milliseconds():
		return status.Errorf(codes.InvalidArgument, "pebbledelay: Consume: lease_ms %d; want 0 (the default) to 12h", open.LeaseMs)
	}
	maxBatch := int(open.MaxBatch)
	if maxBatch == 0 {
		maxBatch = 100
	}
	c := s.q.addConsumer(open.Topic, int(open.Credits), maxBatch, time.Duration(open.LeaseMs)*time.Millisecond)
	defer s.q.removeConsumer(c)
	h := &held{receipts: map[uint64]string{}, next: 1}

	var sendMu sync.Mutex // grpc-go allows one Send at a time
	send := func(r *hourglassv1.ConsumeResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return st.Send(r)
	}
	// Settles run on their own goroutines, so that those of several
	// streams (and of one stream) share fsyncs; all end before return.
	var settles sync.WaitGroup
	defer settles.Wait()
	ended := make(chan error, 1)
	go func() {
		for {
			req, err := st.Recv()
			if err != nil {
				ended <- err
				return
			}
			switch k := req.Kind.(type) {
			case *hourglassv1.ConsumeRequest_Credit:
				if n := k.Credit.GetCredits(); n < 1 || n > maxCredits {
					ended <- status.Errorf(codes.InvalidArgument, "pebbledelay: Consume: %d credits; want 1 to %d", n, maxCredits)
					return
				}
				s.q.credit(c, int(k.Credit.Credits))
			case *hourglassv1.ConsumeRequest_Settle:
				if err := checkSettle(k.Settle); err != nil {
					ended <- err
					return
				}
				settles.Add(1)
				go func() {
					defer settles.Done()
					send(&hourglassv1.ConsumeResponse{Kind: &hourglassv1.ConsumeResponse_Settled{Settled: s.settle(h, k.Settle)}})
				}()
			default:
				ended <- status.Error(codes.InvalidArgument, "pebbledelay: Consume: open is the first request only")
				return
			}
		}
	}()
	for {
		select {
		case err := <-ended:
			if errors.Is(err, io.EOF) {
				return nil // the consumer is done; its settles are answered
			}
			return err
		case <-st.Context().Done():
			return st.Context().Err()
		case <-c.wake:
			for {
				ms := s.q.take(c, time.Now())
				if len(ms) == 0 {
					break
				}
				// A failed send leaves its messages leased: they come
				// back when the lease ends.
				err := send(&hourglassv1.ConsumeResponse{Kind: &hourglassv1.ConsumeResponse_Batch{Batch: h.batch(ms)}})
				if err != nil {
					return err
				}
			}
		}
	}
}

func checkSettle(set *hourglassv1.ConsumeSettle) error {
	n := 0
	for _, r := range set.Acks {
		n += int(r.Count)
	}
	if n > 1000 || len(set.Nacks) > 1000 {
		return status.Errorf(codes.InvalidArgument, "pebbledelay: Consume: a settle of %d acks and %d nacks; at most 1000 each", n, len(set.Nacks))
	}
	return nil
}

// held is what a stream's numbers name: the receipt of each message
// pushed and not settled. Its methods may be called from any goroutine.
type held struct {
	mu       sync.Mutex
	receipts map[uint64]string // guarded by mu
	next     uint64            // guarded by mu
}

// batch numbers ms and builds the batch that pushes them.
func (h *held) batch(ms []*hourglassv1.Message) *hourglassv1.ConsumeBatch {
	h.mu.Lock()
	first := h.next
	for _, m := range ms {
		h.receipts[h.next] = m.Receipt
		h.next++
	}
	h.mu.Unlock()
	b := &hourglassv1.ConsumeBatch{FirstSeq: first, ReceivedAtMs: ms[0].ReceivedAt.AsTime().UnixMilli(),
		LeaseExpiresAtMs: ms[0].LeaseExpiresAt.AsTime().UnixMilli(), DeliverAtMs: ms[0].DeliverAt.AsTime().UnixMilli()}
	for i, m := range ms {
		id, _ := hex.DecodeString(m.Id)
		b.Ids = append(b.Ids, id...)
		b.Bodies = append(b.Bodies, m.Body)
		b.DeliverAtDeltas = append(b.DeliverAtDeltas, m.DeliverAt.AsTime().UnixMilli()-b.DeliverAtMs)
		if m.Attempt != 0 && b.Attempts == nil {
			b.Attempts = make([]uint32, len(ms))
		}
		if b.Attempts != nil {
			b.Attempts[i] = m.Attempt
		}
		if len(m.Headers) > 0 && b.HeaderCounts == nil {
			b.HeaderCounts = make([]uint32, len(ms))
		}
		for _, hd := range m.Headers {
			b.HeaderCounts[i]++
			b.HeaderKeys, b.HeaderValues = append(b.HeaderKeys, hd.Key), append(b.HeaderValues, hd.Value)
		}
	}
	return b
}

// take returns the receipt of message seq and forgets it.
func (h *held) take(seq uint64) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.receipts[seq]
	delete(h.receipts, seq)
	return r, ok
}

// settle acks (one write for all) and nacks what set names.
func (s *Service) settle(h *held, set *hourglassv1.ConsumeSettle) *hourglassv1.ConsumeSettled {
	now := time.Now()
	out := &hourglassv1.ConsumeSettled{Ref: set.Ref}
	fail := func(seq uint64, why string) {
		out.Failed, out.Errors = append(out.Failed, seq), append(out.Errors, why)
	}
	var seqs []uint64
	var receipts []string
	for _, r := range set.Acks {
		for seq := r.First; seq < r.First+uint64(r.Count); seq++ {
			if rc, ok := h.take(seq); ok {
				seqs, receipts = append(seqs, seq), append(receipts, rc)
			} else {
				fail(seq, "pebbledelay: no such message on this stream")
			}
		}
	}
	if len(receipts) > 0 {
		for i, r := range s.q.ack(receipts, now) {
			if !r.Acked {
				fail(seqs[i], r.Error)
			}
		}
	}
	for _, n := range set.Nacks {
		rc, ok := h.take(n.Seq)
		if !ok {
			fail(n.Seq, "pebbledelay: no such message on this stream")
			continue
		}
		if r := s.q.nack(rc, n, now); !r.Acked {
			fail(n.Seq, r.Error)
		}
	}
	return out
}
