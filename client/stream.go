package client

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// errClosed is the error of a stream request after Client.Close.
var errClosed = status.Error(codes.Canceled, "client: closed")

type scheduleStream = grpc.BidiStreamingClient[hourglassv1.ScheduleStreamRequest, hourglassv1.ScheduleStreamResponse]

// streamMux carries requests of many goroutines on one ScheduleStream,
// opened when first needed and again after it breaks. The server answers
// in request order, so each answer goes to the oldest request waiting.
// Its methods may be called from any goroutine.
type streamMux struct {
	svc hourglassv1.HourglassServiceClient

	mu     sync.Mutex // serializes Sends, so that waiting is in send order
	cur    *sstream   // guarded by mu; nil when none is open
	closed bool       // guarded by mu
}

// sstream is one open ScheduleStream.
type sstream struct {
	st     scheduleStream
	cancel context.CancelFunc

	mu      sync.Mutex
	waiting []func(*hourglassv1.ScheduleStreamResponse, error) // guarded by mu
	broken  error                                              // guarded by mu
}

func newStreamMux(svc hourglassv1.HourglassServiceClient) *streamMux {
	return &streamMux{svc: svc}
}

// do sends req and calls done with its answer, or with the error that
// broke the stream before it came (the request may then have been
// stored: the same doubt as a unary call whose answer was lost). done is
// called once, from another goroutine or (on an immediate failure) from
// do itself, and must not block for long.
func (m *streamMux) do(req *hourglassv1.ScheduleStreamRequest, done func(*hourglassv1.ScheduleStreamResponse, error)) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		done(nil, errClosed)
		return
	}
	s := m.cur
	if s == nil || s.err() != nil {
		ctx, cancel := context.WithCancel(context.Background())
		st, err := m.svc.ScheduleStream(ctx)
		if err != nil {
			cancel()
			m.mu.Unlock()
			done(nil, err)
			return
		}
		s = &sstream{st: st, cancel: cancel}
		m.cur = s
		go s.receive()
	}
	if !s.wait(done) {
		m.mu.Unlock()
		done(nil, s.err())
		return
	}
	err := s.st.Send(req)
	m.mu.Unlock()
	if err != nil {
		// The stream is over; receive learns why and fails what waits.
		s.cancel()
	}
}

func (m *streamMux) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	if m.cur != nil {
		m.cur.st.CloseSend()
	}
}

func (s *sstream) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.broken
}

// wait queues done for the next answer; false if the stream is broken.
func (s *sstream) wait(done func(*hourglassv1.ScheduleStreamResponse, error)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return false
	}
	s.waiting = append(s.waiting, done)
	return true
}

// receive hands each answer to the oldest request waiting, until the
// stream ends; then it fails the requests left.
func (s *sstream) receive() {
	defer s.cancel()
	for {
		res, err := s.st.Recv()
		s.mu.Lock()
		if err != nil {
			if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
				err = status.Error(codes.Unavailable, "client: the ScheduleStream broke before this request was answered: it may have been stored")
			}
			s.broken = err
			left := s.waiting
			s.waiting = nil
			s.mu.Unlock()
			for _, done := range left {
				done(nil, err)
			}
			return
		}
		if len(s.waiting) == 0 {
			s.broken = status.Error(codes.Internal, "client: the server answered a ScheduleStream request that was never sent")
			s.mu.Unlock()
			return
		}
		done := s.waiting[0]
		s.waiting[0] = nil
		s.waiting = s.waiting[1:]
		s.mu.Unlock()
		done(res, nil)
	}
}

// streamResultErr is the error of an answer that holds one.
func streamResultErr(res *hourglassv1.ScheduleStreamResponse) error {
	if e := res.GetError(); e != nil {
		return status.Error(codes.Code(e.Code), e.Message)
	}
	return nil
}
