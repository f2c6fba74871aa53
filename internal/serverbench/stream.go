package serverbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// streamSender carries the requests of many goroutines on one
// ScheduleStream, each goroutine waiting for its own answer: as many
// requests in flight as goroutines sending, one message or one batch
// each, as asked (package client's Producer would gather single messages
// into batches). The server answers in request order, so each answer goes
// to the oldest request waiting. Its methods may be called from any
// goroutine, each with at most one request in flight.
type streamSender struct {
	st     grpc.BidiStreamingClient[hourglassv1.ScheduleStreamRequest, hourglassv1.ScheduleStreamResponse]
	cancel context.CancelFunc
	done   chan struct{} // closed when receive returns

	mu sync.Mutex // serializes Send, so that waiting is in send order
	// waiting holds the reply channels of the requests sent and not yet
	// answered, oldest first; pushed to under mu, taken from by receive.
	// Its capacity is the goroutines that may send, so a push never
	// blocks.
	waiting chan chan streamReply
	broken  error // guarded by mu: why no more requests can be sent
}

type streamReply struct {
	res *hourglassv1.ScheduleStreamResponse
	err error
}

// openStream opens a ScheduleStream for up to senders goroutines; it lasts
// until ctx ends or close.
func openStream(ctx context.Context, svc hourglassv1.HourglassServiceClient, senders int) (*streamSender, error) {
	ctx, cancel := context.WithCancel(ctx)
	st, err := svc.ScheduleStream(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	s := &streamSender{st: st, cancel: cancel, done: make(chan struct{}), waiting: make(chan chan streamReply, senders)}
	go s.receive()
	return s, nil
}

// do sends req and returns its answer, or the error that broke the stream
// before it came. The stream's context, not the caller's, bounds the wait.
func (s *streamSender) do(req *hourglassv1.ScheduleStreamRequest) (*hourglassv1.ScheduleStreamResponse, error) {
	reply := make(chan streamReply, 1)
	s.mu.Lock()
	if s.broken != nil {
		err := s.broken
		s.mu.Unlock()
		return nil, err
	}
	s.waiting <- reply
	if err := s.st.Send(req); err != nil {
		// The stream is over (or req could not be sent, and the answers
		// would no longer match): end it; receive learns why from Recv
		// and answers every request waiting.
		s.cancel()
	}
	s.mu.Unlock()
	r := <-reply
	return r.res, r.err
}

// receive hands each answer to the oldest request waiting until the
// stream ends, then fails the requests left and those sent later.
func (s *streamSender) receive() {
	defer close(s.done)
	defer s.cancel()
	var err error
	for err == nil {
		var res *hourglassv1.ScheduleStreamResponse
		if res, err = s.st.Recv(); err != nil {
			break
		}
		select {
		case reply := <-s.waiting:
			reply <- streamReply{res: res}
		default:
			err = errors.New("the server answered a ScheduleStream request that was never sent")
		}
	}
	if errors.Is(err, io.EOF) {
		err = errors.New("the server ended the ScheduleStream before answering every request")
	}
	s.mu.Lock()
	s.broken = err
	s.mu.Unlock()
	for {
		select {
		case reply := <-s.waiting:
			reply <- streamReply{err: err}
		default:
			return
		}
	}
}

// close half-closes the stream and waits until the server ended it (it
// answers what it read first) or the stream's context ended.
func (s *streamSender) close() {
	s.mu.Lock()
	if s.broken == nil {
		s.st.CloseSend()
	}
	s.mu.Unlock()
	<-s.done
}

func (s *streamSender) schedule(_ context.Context, m *hourglassv1.ScheduleRequest) error {
	res, err := s.do(&hourglassv1.ScheduleStreamRequest{Kind: &hourglassv1.ScheduleStreamRequest_Message{Message: m}})
	if err != nil {
		return err
	}
	if err := streamErr(res); err != nil {
		return err
	}
	if res.GetResult() == nil {
		return fmt.Errorf("the server answered a ScheduleStream message with %T, not a result", res.Kind)
	}
	return nil
}

func (s *streamSender) scheduleBatch(_ context.Context, msgs []*hourglassv1.ScheduleRequest) error {
	res, err := s.do(&hourglassv1.ScheduleStreamRequest{Kind: &hourglassv1.ScheduleStreamRequest_Batch{Batch: &hourglassv1.ScheduleBatchRequest{Messages: msgs}}})
	if err != nil {
		return err
	}
	if err := streamErr(res); err != nil {
		return err
	}
	if res.GetBatch() == nil {
		return fmt.Errorf("the server answered a ScheduleStream batch with %T, not a batch", res.Kind)
	}
	return batchAnswered(len(res.GetBatch().Results), len(msgs))
}

// streamErr is the error an answer holds, as a gRPC status error.
func streamErr(res *hourglassv1.ScheduleStreamResponse) error {
	if e := res.GetError(); e != nil {
		return status.Error(codes.Code(e.Code), e.Message)
	}
	return nil
}
