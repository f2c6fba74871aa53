package client

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/server"
)

// TestProducerConcurrentSends: many goroutines Send through one Producer
// to a real server; every message gets its own ID, and the Results of
// one goroutine are done in the order of its Sends (the stream answers in
// order).
func TestProducerConcurrentSends(t *testing.T) {
	const senders, each = 8, 250
	rs := startServer(t, server.Options{})
	c := newClient(t, rs.addr)
	p := NewProducer(c, ProducerOptions{MaxBatch: 50, MaxInflight: 4, MaxPending: 100})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	ids := make([][]ID, senders)
	var wg sync.WaitGroup
	for g := range senders {
		wg.Go(func() {
			rs := make([]*Result, each)
			for i := range rs {
				rs[i] = p.Send(ctx, Message{Topic: "p", Body: fmt.Appendf(nil, "%d-%d", g, i)})
			}
			for i := len(rs) - 1; i >= 0; i-- {
				id, err := rs[i].Wait(ctx)
				if err != nil {
					t.Errorf("sender %d message %d: %v", g, i, err)
					return
				}
				ids[g] = append(ids[g], id)
				if i == len(rs)-1 {
					for j := range rs[:i] {
						select {
						case <-rs[j].Done():
						default:
							t.Errorf("sender %d: message %d is answered before message %d", g, i, j)
							return
						}
					}
				}
			}
		})
	}
	wg.Wait()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	distinct := map[ID]bool{}
	for _, s := range ids {
		for _, id := range s {
			if id.IsZero() || distinct[id] {
				t.Fatalf("ID %q: malformed or given twice", id)
			}
			distinct[id] = true
		}
	}
	if len(distinct) != senders*each {
		t.Fatalf("%d IDs for %d messages", len(distinct), senders*each)
	}
	if st := topicStats(t, c, "p"); st.Scheduled != senders*each {
		t.Errorf("server scheduled %d; want %d", st.Scheduled, senders*each)
	}
}

// TestProducerRefusedBatch: a batch the server refuses for one bad
// message is resent one by one, so that only that message fails; a
// refused batch of one is not resent.
func TestProducerRefusedBatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int // messages, sent as one batch; the bad one is the second
	}{
		{"batch_of_ten", 10},
		{"batch_of_one", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := startServer(t, server.Options{})
			c := newClient(t, rs.addr)
			p := NewProducer(c, ProducerOptions{MaxBatch: tc.n, Linger: time.Hour})
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			bad := min(1, tc.n-1)
			results := make([]*Result, tc.n)
			for i := range results {
				m := Message{Topic: "ok", Body: fmt.Appendf(nil, "%d", i)}
				if i == bad {
					m.Topic = "bad/topic"
				}
				results[i] = p.Send(ctx, m)
			}
			for i, r := range results {
				id, err := r.Wait(ctx)
				if i == bad {
					wantCode(t, "the bad message", err, codes.InvalidArgument)
					continue
				}
				if err != nil || id.IsZero() {
					t.Errorf("message %d: %q, %v; want an ID (only the bad message fails)", i, id, err)
				}
			}
			if st := topicStats(t, c, "ok"); st.Scheduled != int64(tc.n-1) {
				t.Errorf("server scheduled %d good messages; want %d", st.Scheduled, tc.n-1)
			}
		})
	}
}

type scheduleServer = grpc.BidiStreamingServer[hourglassv1.ScheduleStreamRequest, hourglassv1.ScheduleStreamResponse]

// breakingStream serves ScheduleStream: its first stream reads read
// requests, answers the first answer of them, and ends with end; later
// streams answer everything.
type breakingStream struct {
	hourglassv1.UnimplementedHourglassServiceServer
	read, answer int
	end          error

	mu      sync.Mutex
	streams int
}

func (s *breakingStream) ScheduleStream(st scheduleServer) error {
	s.mu.Lock()
	s.streams++
	n := s.streams
	s.mu.Unlock()
	answer := func(req *hourglassv1.ScheduleStreamRequest) error {
		res := &hourglassv1.ScheduleBatchResponse{}
		for _, m := range req.GetBatch().GetMessages() {
			res.Results = append(res.Results, &hourglassv1.ScheduleResponse{Id: fakeID(fmt.Sprintf("s%d-%s", n, m.Body))})
		}
		return st.Send(&hourglassv1.ScheduleStreamResponse{Kind: &hourglassv1.ScheduleStreamResponse_Batch{Batch: res}})
	}
	if n > 1 {
		for {
			req, err := st.Recv()
			if err != nil {
				return nil
			}
			if err := answer(req); err != nil {
				return err
			}
		}
	}
	var reqs []*hourglassv1.ScheduleStreamRequest
	for len(reqs) < s.read {
		req, err := st.Recv()
		if err != nil {
			return err
		}
		reqs = append(reqs, req)
	}
	for _, req := range reqs[:s.answer] {
		if err := answer(req); err != nil {
			return err
		}
	}
	return s.end
}

// TestProducerStreamBreaks: when the ScheduleStream ends with requests
// unanswered, exactly those fail, with the stream's error (or Unavailable
// when it ended without one: they may have been stored), and the next
// Send opens a new stream.
func TestProducerStreamBreaks(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  error
		want codes.Code
	}{
		{"ends", nil, codes.Unavailable},
		{"fails", status.Error(codes.ResourceExhausted, "too many streams"), codes.ResourceExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := &breakingStream{read: 5, answer: 2, end: tc.end}
			c := newClient(t, startFake(t, svc))
			p := NewProducer(c, ProducerOptions{MaxBatch: 1, MaxInflight: 8})
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			var rs []*Result
			for i := range svc.read {
				rs = append(rs, p.Send(ctx, Message{Topic: "t", Body: fmt.Appendf(nil, "%d", i)}))
			}
			for i, r := range rs {
				id, err := r.Wait(ctx)
				if i < svc.answer {
					if want := fakeID(fmt.Sprintf("s1-%d", i)); err != nil || id.String() != want {
						t.Errorf("answered message %d: %q, %v; want %s", i, id, err, want)
					}
					continue
				}
				wantCode(t, fmt.Sprintf("unanswered message %d", i), err, tc.want)
			}
			id, err := p.Send(ctx, Message{Topic: "t", Body: []byte("next")}).Wait(ctx)
			if err != nil || id.String() != fakeID("s2-next") {
				t.Fatalf("Send after the break: %q, %v; want s2-next from a new stream", id, err)
			}
		})
	}
}

// TestProducerAfterClientClose: a Producer of a closed Client fails its
// messages instead of hanging.
func TestProducerAfterClientClose(t *testing.T) {
	svc := &breakingStream{read: 0}
	c, err := New(startFake(t, svc))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	p := NewProducer(c, ProducerOptions{})
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := p.Send(ctx, Message{Topic: "t"}).Wait(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("Send through a closed client: %v; want an error at once", err)
	}
}
