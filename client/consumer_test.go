package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/server"
)

type consumeServer = grpc.BidiStreamingServer[hourglassv1.ConsumeRequest, hourglassv1.ConsumeResponse]

// settleService serves Consume streams of topic "t" holding n messages
// in all: it pushes them while the stream has credits, answers settles
// in order (the very first only once release is closed), and checks that
// the client never returns more credits than it has settled messages.
type settleService struct {
	hourglassv1.UnimplementedHourglassServiceServer
	n       int
	release chan struct{}
	done    chan struct{} // closed once all n are settled and their credits returned

	mu         sync.Mutex
	cond       sync.Cond // on mu: credits changed
	prefetch   int32
	maxWindow  int // the most credits held and messages unsettled allowed; 0: prefetch
	most       int // the most credits held and messages unsettled seen
	pushed     int
	credits    int            // held by the stream
	settles    []int          // receipts per settle request, in order
	settled    map[string]int // receipt -> times settled
	returned   int            // credits returned
	overdrawn  []string       // what was wrong with the credits
	unary      map[string]int // receipt -> times acked by Ack (by ID)
	refused    int            // acks by Ack of messages settled already
	answers    int            // settles answered
	unanswered int            // the most settles unanswered when one came
	changed    chan struct{}  // closed and replaced when settles or answers change
}

func newSettleService(n int, hold bool) *settleService {
	s := &settleService{n: n, release: make(chan struct{}), done: make(chan struct{}), settled: map[string]int{}, unary: map[string]int{}, changed: make(chan struct{})}
	s.cond.L = &s.mu
	if !hold {
		close(s.release)
	}
	return s
}

func (s *settleService) Consume(st consumeServer) error {
	first, err := st.Recv()
	if err != nil {
		return err
	}
	open := first.GetOpen()
	if open == nil || open.Topic != "t" || open.Credits < 1 {
		return status.Errorf(codes.InvalidArgument, "bad open %v", first)
	}
	s.mu.Lock()
	s.prefetch, s.credits = open.Credits, int(open.Credits)
	s.mu.Unlock()

	var sendMu sync.Mutex
	send := func(r *hourglassv1.ConsumeResponse) error {
		sendMu.Lock()
		defer sendMu.Unlock()
		return st.Send(r)
	}
	ctx, cancel := context.WithCancel(st.Context())
	var wg sync.WaitGroup
	var nums pushNumbers
	sets := make(chan *hourglassv1.ConsumeSettle, s.n)
	// The pusher wakes on cancel; the answerer ends on cancel or when sets
	// is closed.
	wakePusher := context.AfterFunc(ctx, func() { s.mu.Lock(); s.cond.Broadcast(); s.mu.Unlock() })
	defer func() { close(sets); cancel(); wg.Wait(); wakePusher() }()
	// The pusher.
	wg.Go(func() {
		for {
			s.mu.Lock()
			for s.credits == 0 && ctx.Err() == nil {
				s.cond.Wait()
			}
			k := min(s.credits, int(open.MaxBatch), s.n-s.pushed)
			if ctx.Err() != nil || k == 0 {
				s.mu.Unlock()
				return
			}
			var msgs []*hourglassv1.Message
			for i := s.pushed; i < s.pushed+k; i++ {
				msgs = append(msgs, &hourglassv1.Message{Id: fakeID(fmt.Sprint("m", i)), Topic: "t", Body: fmt.Append(nil, "r", i), Receipt: fmt.Sprint("r", i)})
			}
			s.pushed += k
			s.credits -= k
			s.mu.Unlock()
			if send(nums.batch(msgs)) != nil {
				return
			}
		}
	})
	// The answerer: in order, the first once released.
	wg.Go(func() {
		for set := range sets {
			s.mu.Lock()
			first := s.answers == 0
			s.mu.Unlock()
			if first {
				select {
				case <-s.release:
				case <-ctx.Done():
					return
				}
			}
			out := &hourglassv1.ConsumeSettled{Ref: set.Ref}
			// Counted before it is sent: the client may have it, and send
			// another settle, before Send returns here.
			s.mu.Lock()
			s.answers++
			s.notify()
			s.mu.Unlock()
			if send(&hourglassv1.ConsumeResponse{Kind: &hourglassv1.ConsumeResponse_Settled{Settled: out}}) != nil {
				return
			}
		}
	})
	for {
		req, err := st.Recv()
		if err != nil {
			return nil
		}
		s.mu.Lock()
		switch k := req.Kind.(type) {
		case *hourglassv1.ConsumeRequest_Settle:
			acks := nums.ranges(k.Settle.Acks)
			s.settles = append(s.settles, len(acks)+len(k.Settle.Nacks))
			for _, r := range acks {
				s.settled[r]++
			}
			for _, nk := range k.Settle.Nacks {
				s.settled[nums.receipt(nk.Seq)]++
			}
			s.unanswered = max(s.unanswered, len(s.settles)-s.answers)
			s.notify()
			sets <- k.Settle
		case *hourglassv1.ConsumeRequest_Credit:
			s.credits += int(k.Credit.Credits)
			s.returned += int(k.Credit.Credits)
			window := cmp.Or(s.maxWindow, int(s.prefetch))
			if s.returned > len(s.settled)+window-int(s.prefetch) {
				s.overdrawn = append(s.overdrawn, fmt.Sprintf("%d credits returned for %d messages settled, opened with %d, window at most %d", s.returned, len(s.settled), s.prefetch, window))
			}
			held := s.credits + s.pushed - len(s.settled)
			if held > window {
				s.overdrawn = append(s.overdrawn, fmt.Sprintf("%d credits held and %d messages unsettled: more than the window's %d", s.credits, s.pushed-len(s.settled), window))
			}
			s.most = max(s.most, held)
			s.cond.Broadcast()
		}
		if len(s.settled) == s.n && s.returned >= s.n {
			select {
			case <-s.done:
			default:
				close(s.done)
			}
		}
		s.mu.Unlock()
	}
}

// Ack takes the unary acks by ID of messages pushed on a stream, and
// refuses, as the server does, those settled already.
func (s *settleService) Ack(_ context.Context, req *hourglassv1.AckRequest) (*hourglassv1.AckResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := "r" + strings.TrimPrefix(fakeName(req.Id), "m")
	if s.settled[r]+s.unary[r] > 0 {
		s.refused++
		return nil, status.Error(codes.FailedPrecondition, "message not leased (unknown, already settled, or its lease expired)")
	}
	s.unary[r]++
	return &hourglassv1.AckResponse{}, nil
}

// notify wakes waitSettled; s.mu is held.
func (s *settleService) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitSettled waits until receipt was settled or unanswered settles are
// waiting for their answers.
func (s *settleService) waitSettled(ctx context.Context, receipt string, unanswered int) error {
	for {
		s.mu.Lock()
		ok := s.settled[receipt] > 0 || len(s.settles)-s.answers >= unanswered
		ch := s.changed
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TestConsumeSettlesOnTheStream checks the settling of the stream
// consumer against a server that checks the credits.
//
// held_first_answer is the test of batching: the server holds its answer
// to the first settle (and, answering in order, to all the others), and
// each handler call waits until the server has the settle of the message
// before it, or until maxUnanswered settles wait for answers. A client
// that sends a settle whenever an outcome is ready (as Consume once did)
// then sends one per message while none is answered; one that waits sends
// maxUnanswered, the handlers go on meanwhile, and what piled up goes in
// one or two settles once the answers come.
//
// few_credits checks that credits come back as messages are settled,
// never more than Prefetch outstanding, and that the stream runs on them
// alone.
func TestConsumeSettlesOnTheStream(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		n, prefetch, handlers int
		hold                  bool // hold the first answer, pace the handlers
		maxSettles            int  // most settle requests; 0: any number
	}{
		{"held_first_answer", 500, 500, 1, true, maxUnanswered + 3},
		{"few_credits", 300, 10, 3, false, 0},
		// Prefetch unset and quick handlers: the window grows past the
		// 100 it opens with, never past defaultMaxPrefetch.
		{"growing_window", 5000, 0, 1, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := newSettleService(tc.n, tc.hold)
			if tc.prefetch == 0 {
				svc.maxWindow = defaultMaxPrefetch
			}
			c := newClient(t, startFake(t, svc))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var running, most atomic.Int32
			handled := make(chan struct{}, tc.n)
			done := make(chan error, 1)
			go func() {
				done <- c.Consume(ctx, "t", func(ctx context.Context, d Delivery) error {
					r := running.Add(1)
					defer running.Add(-1)
					for m := most.Load(); r > m && !most.CompareAndSwap(m, r); m = most.Load() {
					}
					if k, _ := strconv.Atoi(strings.TrimPrefix(string(d.Body), "r")); tc.hold && k > 0 {
						if err := svc.waitSettled(ctx, fmt.Sprint("r", k-1), maxUnanswered); err != nil {
							return err
						}
					}
					handled <- struct{}{}
					return nil
				}, ConsumeOptions{Prefetch: tc.prefetch, Concurrency: tc.handlers, OnError: func(err error) { t.Errorf("OnError: %v", err) }})
			}()
			deadline := time.After(testTimeout)
			for i := range tc.n {
				select {
				case <-handled:
				case <-deadline:
					t.Fatalf("handled %d of %d messages (first answer held: %v)", i, tc.n, tc.hold)
				}
			}
			if tc.hold {
				svc.mu.Lock()
				answers := svc.answers
				svc.mu.Unlock()
				if answers != 0 {
					t.Fatalf("%d settles answered before the first was released", answers)
				}
				close(svc.release)
			}
			recv(t, "every message settled and its credit returned", svc.done)
			cancel()
			if err := recv(t, "Consume to return", done); err != nil {
				t.Fatalf("Consume: %v", err)
			}
			if m := most.Load(); m > int32(tc.handlers) {
				t.Errorf("%d handlers ran at once; Concurrency is %d", m, tc.handlers)
			}
			svc.mu.Lock()
			defer svc.mu.Unlock()
			if len(svc.overdrawn) > 0 {
				t.Errorf("credits: %v", svc.overdrawn)
			}
			if tc.prefetch == 0 && svc.most <= defaultPrefetch {
				t.Errorf("the window stayed at %d credits with handlers that keep up; want it grown past %d", svc.most, defaultPrefetch)
			}
			for r, k := range svc.settled {
				if k != 1 {
					t.Errorf("%s settled %d times", r, k)
				}
			}
			if svc.unanswered > maxUnanswered {
				t.Errorf("%d settles waited for answers at once; want at most %d", svc.unanswered, maxUnanswered)
			}
			if tc.maxSettles > 0 && len(svc.settles) > tc.maxSettles {
				t.Errorf("%d settle requests of %v receipts for %d messages: the settles that waited should go together", len(svc.settles), svc.settles, tc.n)
			}
		})
	}
}

// TestConsumeStopsWithoutAnswers: a Consume that stops while the server
// does not answer its settles waits for the answers settleTimeout at most,
// then acks the rest by unary calls (by ID) and returns.
func TestConsumeStopsWithoutAnswers(t *testing.T) {
	defer func(d time.Duration) { settleTimeout = d }(settleTimeout)
	settleTimeout = 100 * time.Millisecond
	const n = 20
	svc := newSettleService(n, true) // never released
	c := newClient(t, startFake(t, svc))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var handled atomic.Int32
	var reported atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- c.Consume(ctx, "t", func(_ context.Context, d Delivery) error {
			// Paced as in held_first_answer, so that maxUnanswered
			// settles wait and the last messages pile up behind them.
			if k, _ := strconv.Atoi(strings.TrimPrefix(string(d.Body), "r")); k > 0 {
				if err := svc.waitSettled(context.Background(), fmt.Sprint("r", k-1), maxUnanswered); err != nil {
					return err
				}
			}
			if handled.Add(1) == n {
				cancel()
			}
			return nil
		}, ConsumeOptions{Prefetch: n, OnError: func(err error) {
			if status.Code(err) == codes.FailedPrecondition {
				reported.Add(1)
			}
		}})
	}()
	if err := recv(t, "Consume to return", done); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	// The settles the server read and never answered are sent again by
	// Ack once the stream ends, and refused as settled already; the
	// refusals are expected and not reported.
	if svc.refused == 0 {
		t.Errorf("no Ack of a message settled already: the unanswered settles should have been sent again")
	}
	if k := reported.Load(); k > 0 {
		t.Errorf("%d refusals of acks sent again reported to OnError; want none", k)
	}
	for i := range n {
		r := fmt.Sprint("r", i)
		if svc.settled[r]+svc.unary[r] != 1 {
			t.Errorf("%s: settled %d times on the stream and acked %d times by Ack; want once in all", r, svc.settled[r], svc.unary[r])
		}
	}
	if len(svc.unary) == 0 {
		t.Errorf("nothing acked by Ack: with %d settles unanswered, the rest should have been", maxUnanswered)
	}
}

// breakService pushes n messages on its first Consume stream and then
// fails it; later streams push nothing. It records the unary acks and
// nacks.
type breakService struct {
	hourglassv1.UnimplementedHourglassServiceServer
	n        int
	reopened chan struct{} // closed when the second stream opens

	mu       sync.Mutex
	streams  int
	acked    map[string]int   // message name -> times acked
	nacked   map[string]int64 // message name -> delay_ms
	streamed int              // settles received on streams
	settled  chan struct{}    // closed once n-1 are acked and one nacked
}

func newBreakService(n int) *breakService {
	return &breakService{n: n, reopened: make(chan struct{}), acked: map[string]int{}, nacked: map[string]int64{}, settled: make(chan struct{})}
}

func (s *breakService) Consume(st consumeServer) error {
	if _, err := st.Recv(); err != nil {
		return err
	}
	s.mu.Lock()
	s.streams++
	n := s.streams
	s.mu.Unlock()
	if n > 1 {
		if n == 2 {
			close(s.reopened)
		}
		for {
			req, err := st.Recv()
			if err != nil {
				return nil
			}
			if req.GetSettle() != nil {
				s.mu.Lock()
				s.streamed++
				s.mu.Unlock()
			}
		}
	}
	var nums pushNumbers
	for i := 0; i < s.n; i += 1000 {
		var msgs []*hourglassv1.Message
		for j := i; j < min(i+1000, s.n); j++ {
			msgs = append(msgs, &hourglassv1.Message{Id: fakeID(fmt.Sprint("m", j)), Topic: "t", Body: fmt.Append(nil, "m", j)})
		}
		if err := st.Send(nums.batch(msgs)); err != nil {
			return err
		}
	}
	return status.Error(codes.Unavailable, "node going away")
}

// check closes settled once everything is settled; s.mu is held.
func (s *breakService) check() {
	if len(s.acked) == s.n-1 && len(s.nacked) == 1 {
		close(s.settled)
	}
}

func (s *breakService) Ack(_ context.Context, req *hourglassv1.AckRequest) (*hourglassv1.AckResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.Receipt != "" {
		return nil, status.Error(codes.InvalidArgument, "want an ack by id")
	}
	s.acked[fakeName(req.Id)]++
	s.check()
	return &hourglassv1.AckResponse{}, nil
}

func (s *breakService) Nack(_ context.Context, req *hourglassv1.NackRequest) (*hourglassv1.NackResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.Receipt != "" {
		return nil, status.Error(codes.InvalidArgument, "want a nack by id")
	}
	s.nacked[fakeName(req.Id)] = req.DelayMs
	s.check()
	return &hourglassv1.NackResponse{}, nil
}

// TestConsumeSettlesByUnaryAfterTheStreamBroke: messages of a stream that
// broke are settled by Ack and Nack by ID, since a new stream cannot
// settle them by their numbers on the old one; the
// break is told to OnError, and Consume opens a new stream.
func TestConsumeSettlesByUnaryAfterTheStreamBroke(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int // messages of the stream that breaks; r1 fails
	}{
		{"three", 3},
		{"more_than_an_ack_batch", 2500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := newBreakService(tc.n)
			c := newClient(t, startFake(t, svc))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			broke := make(chan struct{})
			var once sync.Once
			done := make(chan error, 1)
			go func() {
				done <- c.Consume(ctx, "t", func(ctx context.Context, d Delivery) error {
					// Settle only once the client knows the stream broke.
					select {
					case <-broke:
					case <-ctx.Done():
					}
					if string(d.Body) == "m1" {
						return errors.New("cannot handle m1")
					}
					return nil
				}, ConsumeOptions{
					Concurrency: 3,
					Prefetch:    max(10, tc.n),
					RetryDelay:  func(failures int) time.Duration { return time.Duration(failures) * 7 * time.Second },
					OnError: func(err error) {
						if status.Code(err) == codes.Unavailable {
							once.Do(func() { close(broke) })
							return
						}
						t.Errorf("OnError: %v", err)
					},
				})
			}()
			recv(t, "OnError to hear of the broken stream", broke)
			recv(t, "the unary acks and nack", svc.settled)
			recv(t, "a second stream", svc.reopened)
			cancel()
			if err := recv(t, "Consume to return", done); err != nil {
				t.Fatalf("Consume: %v", err)
			}
			svc.mu.Lock()
			defer svc.mu.Unlock()
			for r, k := range svc.acked {
				if k != 1 || r == "m1" {
					t.Errorf("%s acked %d times", r, k)
				}
			}
			if len(svc.nacked) != 1 || svc.nacked["m1"] != 7000 {
				t.Errorf("nacks %v; want m1 nacked with 7000 ms", svc.nacked)
			}
			if svc.streamed != 0 {
				t.Errorf("%d settles of the broken stream's messages went on the new stream", svc.streamed)
			}
		})
	}
}

// loseService pushes n messages on its first Consume stream, reads one
// settle request and then fails the stream without answering it, having
// applied it or not (applied); later streams push nothing. Its unary
// Ack refuses, as the server does, messages settled already.
type loseService struct {
	hourglassv1.UnimplementedHourglassServiceServer
	n       int
	applied bool

	mu       sync.Mutex
	streams  int
	onStream map[string]bool // message name -> settled by the lost settle
	acked    map[string]int  // message name -> times acked by Ack
	refused  int             // acks by Ack of messages settled already
	all      chan struct{}   // closed once every message is settled
}

func (s *loseService) Consume(st consumeServer) error {
	if _, err := st.Recv(); err != nil {
		return err
	}
	s.mu.Lock()
	s.streams++
	first := s.streams == 1
	s.mu.Unlock()
	if !first {
		<-st.Context().Done()
		return nil
	}
	var nums pushNumbers
	var msgs []*hourglassv1.Message
	for i := range s.n {
		msgs = append(msgs, &hourglassv1.Message{Id: fakeID(fmt.Sprint("m", i)), Topic: "t", Body: fmt.Append(nil, "m", i), Receipt: fmt.Sprint("m", i)})
	}
	if err := st.Send(nums.batch(msgs)); err != nil {
		return err
	}
	for {
		req, err := st.Recv()
		if err != nil {
			return err
		}
		if set := req.GetSettle(); set != nil {
			s.mu.Lock()
			if s.applied {
				for _, m := range nums.ranges(set.Acks) {
					s.onStream[m] = true
				}
				s.check()
			}
			s.mu.Unlock()
			return status.Error(codes.Unavailable, "node going away")
		}
	}
}

// check closes all once every message is settled; s.mu is held.
func (s *loseService) check() {
	if len(s.onStream)+len(s.acked) == s.n {
		close(s.all)
	}
}

func (s *loseService) Ack(_ context.Context, req *hourglassv1.AckRequest) (*hourglassv1.AckResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := fakeName(req.Id)
	if s.onStream[m] || s.acked[m] > 0 {
		s.refused++
		return nil, status.Error(codes.FailedPrecondition, "message not leased (unknown, already settled, or its lease expired)")
	}
	s.acked[m]++
	s.check()
	return &hourglassv1.AckResponse{}, nil
}

// TestConsumeResendsUnansweredSettles: a settle request that the stream's
// break leaves unanswered is sent again by Ack (by ID), whether the server
// lost it (the messages are acked then, not handed out again after their
// leases) or applied it (the acks are refused as settled already, and the
// refusals are not reported).
func TestConsumeResendsUnansweredSettles(t *testing.T) {
	for _, applied := range []bool{false, true} {
		t.Run(fmt.Sprintf("applied=%v", applied), func(t *testing.T) {
			const n = 50
			svc := &loseService{n: n, applied: applied, onStream: map[string]bool{}, acked: map[string]int{}, all: make(chan struct{})}
			c := newClient(t, startFake(t, svc))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var refusals atomic.Int32
			done := make(chan error, 1)
			go func() {
				done <- c.Consume(ctx, "t", func(context.Context, Delivery) error { return nil }, ConsumeOptions{
					Prefetch: n, Concurrency: 4,
					OnError: func(err error) {
						if status.Code(err) != codes.Unavailable {
							refusals.Add(1)
							t.Errorf("OnError: %v", err)
						}
					},
				})
			}()
			recv(t, "every message settled", svc.all)
			cancel()
			if err := recv(t, "Consume to return", done); err != nil {
				t.Fatalf("Consume: %v", err)
			}
			svc.mu.Lock()
			defer svc.mu.Unlock()
			for m, k := range svc.acked {
				if k != 1 || svc.onStream[m] {
					t.Errorf("%s acked %d times by Ack, settled on the stream: %v", m, k, svc.onStream[m])
				}
			}
			if applied && (len(svc.onStream) == 0 || svc.refused == 0) {
				t.Errorf("%d settled on the stream, %d acks refused: want the lost settle applied and sent again", len(svc.onStream), svc.refused)
			}
			if !applied && svc.refused != 0 {
				t.Errorf("%d acks refused; want none (nothing was settled on the stream)", svc.refused)
			}
		})
	}
}

// TestConsumeAcksEachMessageOnce runs Consume with several handlers
// against a real server: every message is handled once and acked, none
// comes back.
func TestConsumeAcksEachMessageOnce(t *testing.T) {
	const n = 300
	rs := startServer(t, server.Options{})
	c := newClient(t, rs.addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	scheduleN(t, c, "orders", n)

	var mu sync.Mutex
	seen := map[ID]int{}
	all := make(chan struct{})
	var running, most atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- c.Consume(ctx, "orders", func(_ context.Context, d Delivery) error {
			r := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); r > m && !most.CompareAndSwap(m, r); m = most.Load() {
			}
			mu.Lock()
			defer mu.Unlock()
			seen[d.ID]++
			if len(seen) == n {
				close(all)
			}
			return nil
		}, ConsumeOptions{Concurrency: 4, Prefetch: 16, Lease: time.Minute, OnError: func(err error) { t.Errorf("OnError: %v", err) }})
	}()
	recv(t, "every message handled", all)
	cancel()
	if err := recv(t, "Consume to return", done); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	mu.Lock()
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s handled %d times", id, k)
		}
	}
	mu.Unlock()
	if m := most.Load(); m > 4 {
		t.Errorf("%d handlers ran at once; Concurrency is 4", m)
	}
	// Consume returned after its settles were answered: the counts are
	// final.
	st := topicStats(t, c, "orders")
	if st.Acked != n || st.Redelivered != 0 || st.Leased != 0 || st.Nacked != 0 || st.Ready != 0 {
		t.Errorf("stats %v; want %d acked and nothing leased, ready, nacked or redelivered", st, n)
	}
}

// TestConsumeNacksWithRetryDelay: a handler's error nacks the message
// with RetryDelay, and it comes back as attempt 1 of the same origin.
func TestConsumeNacksWithRetryDelay(t *testing.T) {
	rs := startServer(t, server.Options{})
	c := newClient(t, rs.addr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	id, err := c.Schedule(ctx, Message{Topic: "retry", Body: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan Delivery, 2)
	var failures []int
	done := make(chan error, 1)
	go func() {
		done <- c.Consume(ctx, "retry", func(_ context.Context, d Delivery) error {
			got <- d
			if d.Attempt == 0 {
				return errors.New("not yet")
			}
			return nil
		}, ConsumeOptions{
			RetryDelay: func(f int) time.Duration { failures = append(failures, f); return 20 * time.Millisecond },
			OnError:    func(err error) { t.Errorf("OnError: %v", err) },
		})
	}()
	first := recv(t, "the first delivery", got)
	again := recv(t, "the retry", got)
	cancel()
	if err := recv(t, "Consume to return", done); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	if first.ID != id || first.Attempt != 0 {
		t.Errorf("first delivery %s attempt %d; want %s attempt 0", first.ID, first.Attempt, id)
	}
	if again.Attempt != 1 || again.OriginID != id || again.ID == id || string(again.Body) != "x" {
		t.Errorf("retry %s of %s attempt %d body %q; want a new ID of origin %s, attempt 1, body x", again.ID, again.OriginID, again.Attempt, again.Body, id)
	}
	if len(failures) != 1 || failures[0] != 1 {
		t.Errorf("RetryDelay called with %v; want [1]", failures)
	}
	if st := topicStats(t, c, "retry"); st.Nacked != 1 || st.Acked != 1 || st.Leased != 0 {
		t.Errorf("stats %v; want 1 nacked, 1 acked, none leased", st)
	}
}

// TestConsumeStops: Consume returns nil soon after ctx ends (not after
// the server's minute-long poll), calls no handler after that, and gives
// back at once the messages it received and did not handle, so that they
// need not wait for their leases.
func TestConsumeStops(t *testing.T) {
	for _, tc := range []struct {
		name string
		// ready is how many messages are due when Consume starts; the
		// first handler call ends ctx. With none, one message is
		// scheduled and handled, and ctx ends while the stream waits.
		ready int
	}{
		{"idle", 0},
		{"with_prefetched_messages", 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := startServer(t, server.Options{})
			c := newClient(t, rs.addr)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			scheduleN(t, c, "stop", tc.ready)
			var handled atomic.Int32
			done := make(chan error, 1)
			go func() {
				done <- c.Consume(ctx, "stop", func(context.Context, Delivery) error {
					handled.Add(1)
					if tc.ready > 0 {
						cancel()
					}
					return nil
				}, ConsumeOptions{Prefetch: 50, Lease: 10 * time.Minute, OnError: func(err error) { t.Errorf("OnError: %v", err) }})
			}()
			if tc.ready == 0 {
				scheduleN(t, c, "stop", 1)
				waitFor(t, "the message to be acked", func() bool { return topicStats(t, c, "stop").Acked == 1 })
				cancel()
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Consume: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Consume still runs 10s after its ctx ended")
			}
			if n := handled.Load(); n != 1 {
				t.Errorf("%d handler calls; want 1 (none after ctx ended)", n)
			}
			st := topicStats(t, c, "stop")
			if want := int64(max(tc.ready, 1) - 1); st.Leased != 0 || st.Acked != 1 || st.Ready != want {
				t.Errorf("stats %v; want 1 acked, %d ready and none leased", st, want)
			}
		})
	}
}

// TestConsumeFailsAtOnce: an error that retrying cannot fix ends Consume
// at once.
func TestConsumeFailsAtOnce(t *testing.T) {
	rs := startServer(t, server.Options{})
	c := newClient(t, rs.addr)
	for _, tc := range []struct {
		name, topic string
		o           ConsumeOptions
	}{
		{"bad_topic", "no/slash", ConsumeOptions{}},
		{"too_many_credits", "t", ConsumeOptions{Prefetch: server.MaxCredits + 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			err := c.Consume(ctx, tc.topic, func(context.Context, Delivery) error {
				t.Error("handler called")
				return nil
			}, tc.o)
			if ctx.Err() != nil {
				t.Fatal("Consume ran until the test's deadline")
			}
			wantCode(t, "Consume", err, codes.InvalidArgument)
		})
	}
}

// scheduleN schedules n messages of topic, due now.
func scheduleN(t *testing.T, c *Client, topic string, n int) {
	t.Helper()
	for i := 0; i < n; i += 100 {
		ms := make([]Message, min(100, n-i))
		for j := range ms {
			ms[j] = Message{Topic: topic, Body: fmt.Appendf(nil, "%d", i+j)}
		}
		if _, err := c.ScheduleBatch(context.Background(), ms); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDefaultCredits checks the credits a stream opens with when the
// options leave them unset: at least defaultPrefetch (a hot second drained
// 2.4 times slower with 10), twice Concurrency above that, and what the
// caller asked for otherwise; a Worker's topics get the same.
func TestDefaultCredits(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    ConsumeOptions
		want int32
	}{
		{"zero_options", ConsumeOptions{}, defaultPrefetch},
		{"many_handlers", ConsumeOptions{Concurrency: 80}, 160},
		{"asked", ConsumeOptions{Prefetch: 7}, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := newSettleService(1, false)
			c := newClient(t, startFake(t, svc))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			handled := make(chan struct{}, 1)
			done := make(chan error, 1)
			go func() {
				done <- c.Consume(ctx, "t", func(context.Context, Delivery) error { handled <- struct{}{}; return nil }, tc.o)
			}()
			recv(t, "the message handled", handled)
			cancel()
			if err := recv(t, "Consume to return", done); err != nil {
				t.Fatalf("Consume: %v", err)
			}
			svc.mu.Lock()
			defer svc.mu.Unlock()
			if svc.prefetch != tc.want {
				t.Errorf("stream opened with %d credits; want %d", svc.prefetch, tc.want)
			}
		})
	}
	w := NewWorker(nil, WorkerOptions{Concurrency: 3, Topics: map[string]TopicOptions{"big": {Concurrency: 200}}})
	if got := w.config("t", nil).prefetch; got != defaultPrefetch {
		t.Errorf("worker topic with Concurrency 3: prefetch %d; want %d", got, defaultPrefetch)
	}
	if got := w.config("big", nil).prefetch; got != 400 {
		t.Errorf("worker topic with Concurrency 200: prefetch %d; want 400", got)
	}
	if got := w.config("t", nil).maxPrefetch; got != defaultMaxPrefetch {
		t.Errorf("worker topic without Prefetch: grows to %d credits; want %d", got, defaultMaxPrefetch)
	}
	if cfg := NewWorker(nil, WorkerOptions{Prefetch: 50}).config("t", nil); cfg.prefetch != 50 || cfg.maxPrefetch != 50 || cfg.maxBatch != 50 {
		t.Errorf("worker with Prefetch 50: %d credits growing to %d, pushes of %d; want 50, fixed, 50", cfg.prefetch, cfg.maxPrefetch, cfg.maxBatch)
	}
}

// TestCreditsWindow checks how a stream's window moves with how long
// deliveries waited for a handler.
func TestCreditsWindow(t *testing.T) {
	cs := newConsumeState(nil, loopConfig{prefetch: 100, maxPrefetch: 1000})
	s := &cstream{window: 100}
	step := func(waited time.Duration, n, want, window int) {
		t.Helper()
		cs.waited.Store(int64(waited) + 1) // a handler started, after waiting waited
		if got := cs.credits(s, n); got != want || s.window != window {
			t.Fatalf("waited %v, %d settled: %d credits, window %d; want %d, %d", waited, n, got, s.window, want, window)
		}
		if cs.waited.Load() != 0 {
			t.Fatalf("the longest wait was not taken")
		}
	}
	step(time.Millisecond, 100, 200, 200) // keeping up: grows by what was settled
	step(50*time.Millisecond, 300, 600, 500)
	step(0, 900, 1400, 1000) // up to maxPrefetch
	step(0, 50, 50, 1000)
	step(500*time.Millisecond, 70, 70, 1000) // between: held
	step(2*time.Second, 300, 0, 700)         // waiting long: shrinks by what was settled
	step(2*time.Second, 1000, 400, 100)      // down to prefetch
	step(2*time.Second, 10, 10, 100)
	// A round in which no handler started holds the window: a slow
	// handler's settle comes before the next delivery's wait is known.
	step(0, 50, 100, 150)
	if got := cs.credits(s, 30); got != 30 || s.window != 150 {
		t.Fatalf("no handler started since the last settle: %d credits, window %d; want 30, 150", got, s.window)
	}
	fixed := newConsumeState(nil, loopConfig{prefetch: 10, maxPrefetch: 10})
	fs := &cstream{window: 10}
	for _, w := range []time.Duration{0, 2 * time.Second} {
		fixed.waited.Store(int64(w) + 1)
		if got := fixed.credits(fs, 7); got != 7 || fs.window != 10 {
			t.Errorf("fixed Prefetch, waited %v: %d credits, window %d; want 7, 10", w, got, fs.window)
		}
	}
}
