package client

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// ackService hands out one Receive of n messages, then empty long polls;
// its first Ack or AckBatch waits for release.
type ackService struct {
	hourglassv1connect.HourglassServiceClient // nil: other calls panic
	n                                         int
	release                                   chan struct{}

	mu       sync.Mutex
	received bool
	batches  []int
	acked    int
	allAcked chan struct{}
}

func (s *ackService) Receive(ctx context.Context, _ *connect.Request[hourglassv1.ReceiveRequest]) (*connect.Response[hourglassv1.ReceiveResponse], error) {
	s.mu.Lock()
	first := !s.received
	s.received = true
	s.mu.Unlock()
	if !first {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	res := &hourglassv1.ReceiveResponse{}
	for i := range s.n {
		id := fmt.Sprint(i)
		res.Messages = append(res.Messages, &hourglassv1.Message{Id: id, Topic: "t", Receipt: "r" + id})
	}
	return connect.NewResponse(res), nil
}

// ack records a call acking k messages; the first waits for release.
func (s *ackService) ack(k int) {
	s.mu.Lock()
	first := len(s.batches) == 0
	s.batches = append(s.batches, k)
	s.mu.Unlock()
	if first {
		<-s.release
	}
	s.mu.Lock()
	s.acked += k
	if s.acked == s.n {
		close(s.allAcked)
	}
	s.mu.Unlock()
}

// Ack is what Consume sends for a batch of one.
func (s *ackService) Ack(context.Context, *connect.Request[hourglassv1.AckRequest]) (*connect.Response[hourglassv1.AckResponse], error) {
	s.ack(1)
	return connect.NewResponse(&hourglassv1.AckResponse{}), nil
}

func (s *ackService) AckBatch(_ context.Context, req *connect.Request[hourglassv1.AckBatchRequest]) (*connect.Response[hourglassv1.AckBatchResponse], error) {
	s.ack(len(req.Msg.Receipts))
	res := &hourglassv1.AckBatchResponse{}
	for range req.Msg.Receipts {
		res.Results = append(res.Results, &hourglassv1.AckResult{Acked: true})
	}
	return connect.NewResponse(res), nil
}

// TestConsumeAcksWhileAckBatchWaits checks that handlers go on while an
// AckBatch is in flight and that the acks that piled up meanwhile go in
// one call: Consume once had room for two waiting acks, so handlers
// stalled behind every AckBatch and each call carried a few acks.
func TestConsumeAcksWhileAckBatchWaits(t *testing.T) {
	const n = 200
	svc := &ackService{n: n, release: make(chan struct{}), allAcked: make(chan struct{})}
	c := &Client{svc: svc}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	handled := make(chan struct{}, n)
	done := make(chan error, 1)
	go func() {
		done <- c.Consume(ctx, "t", func(context.Context, Delivery) error {
			handled <- struct{}{}
			return nil
		}, ConsumeOptions{MaxMessages: n})
	}()
	deadline := time.After(10 * time.Second)
	for i := range n {
		select {
		case <-handled:
		case <-deadline:
			close(svc.release)
			t.Fatalf("handled %d of %d messages while the first AckBatch waited", i, n)
		}
	}
	close(svc.release)
	select {
	case <-svc.allAcked:
	case <-deadline:
		t.Fatal("not every message was acked")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Consume: %v", err)
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if len(svc.batches) > 3 {
		t.Errorf("%d AckBatch calls of %v receipts for %d messages: the acks that waited should go together", len(svc.batches), svc.batches, n)
	}
}
