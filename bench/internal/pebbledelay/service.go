package pebbledelay

import (
	"context"
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
	r := s.q.nack(&hourglassv1.ConsumeNack{Receipt: req.Receipt, DelayMs: req.DelayMs, Reason: req.Reason,
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
					send(&hourglassv1.ConsumeResponse{Kind: &hourglassv1.ConsumeResponse_Settled{Settled: s.settle(k.Settle)}})
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
				err := send(&hourglassv1.ConsumeResponse{Kind: &hourglassv1.ConsumeResponse_Messages{
					Messages: &hourglassv1.ReceiveResponse{Messages: ms}}})
				if err != nil {
					return err
				}
			}
		}
	}
}

func checkSettle(set *hourglassv1.ConsumeSettle) error {
	if len(set.Acks) > 1000 || len(set.Nacks) > 1000 {
		return status.Errorf(codes.InvalidArgument, "pebbledelay: Consume: a settle of %d acks and %d nacks; at most 1000 each", len(set.Acks), len(set.Nacks))
	}
	return nil
}

// settle acks (one write for all) and nacks what set names.
func (s *Service) settle(set *hourglassv1.ConsumeSettle) *hourglassv1.ConsumeSettled {
	now := time.Now()
	out := &hourglassv1.ConsumeSettled{Ref: set.Ref}
	if len(set.Acks) > 0 {
		out.Acks = s.q.ack(set.Acks, now)
	}
	for _, n := range set.Nacks {
		out.Nacks = append(out.Nacks, s.q.nack(n, now))
	}
	return out
}
