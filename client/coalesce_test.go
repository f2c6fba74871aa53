package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// fakeServer answers Schedule and ScheduleBatch with the ID fakeID(body),
// refuses the topic "bad" (a whole batch holding it, as the real server
// does), and can hold its first Schedule until released.
type fakeServer struct {
	hourglassv1.UnimplementedHourglassServiceServer
	hold     chan struct{} // if non-nil, the first Schedule waits for it to close
	entered  chan struct{} // closed when the first Schedule arrives
	batchErr error         // if set, every ScheduleBatch fails with it
	// holdBatch, if non-nil, makes ScheduleBatch wait for it to close
	// after it closes batchIn.
	holdBatch, batchIn chan struct{}

	mu      sync.Mutex
	singles int
	batches []int          // sizes of the ScheduleBatch calls
	stored  map[string]int // body -> times stored
	first   bool
}

func newFake(hold bool) *fakeServer {
	f := &fakeServer{stored: map[string]int{}, entered: make(chan struct{})}
	if hold {
		f.hold = make(chan struct{})
	}
	return f
}

// seen is what the server has seen so far.
type seen struct {
	singles int
	batches []int
	stored  map[string]int
}

func (f *fakeServer) seen() seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return seen{f.singles, slices.Clone(f.batches), maps.Clone(f.stored)}
}

func (f *fakeServer) check(m *hourglassv1.ScheduleRequest) error {
	if m.Topic == "bad" {
		return status.Error(codes.InvalidArgument, `topic "bad" is not allowed`)
	}
	return nil
}

func (f *fakeServer) Schedule(_ context.Context, req *hourglassv1.ScheduleRequest) (*hourglassv1.ScheduleResponse, error) {
	f.mu.Lock()
	f.singles++
	first := !f.first
	f.first = true
	f.mu.Unlock()
	if first {
		close(f.entered)
		if f.hold != nil {
			<-f.hold
		}
	}
	if err := f.check(req); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.stored[string(req.Body)]++
	f.mu.Unlock()
	return &hourglassv1.ScheduleResponse{Id: fakeID(string(req.Body))}, nil
}

func (f *fakeServer) ScheduleBatch(_ context.Context, req *hourglassv1.ScheduleBatchRequest) (*hourglassv1.ScheduleBatchResponse, error) {
	f.mu.Lock()
	f.batches = append(f.batches, len(req.Messages))
	f.mu.Unlock()
	if f.holdBatch != nil {
		close(f.batchIn)
		<-f.holdBatch
	}
	if f.batchErr != nil {
		return nil, f.batchErr
	}
	for _, m := range req.Messages {
		if err := f.check(m); err != nil {
			return nil, err
		}
	}
	out := &hourglassv1.ScheduleBatchResponse{}
	f.mu.Lock()
	for _, m := range req.Messages {
		f.stored[string(m.Body)]++
		out.Results = append(out.Results, &hourglassv1.ScheduleResponse{Id: fakeID(string(m.Body))})
	}
	f.mu.Unlock()
	return out, nil
}

func (c *Client) waitingCount() int {
	c.merge.mu.Lock()
	defer c.merge.mu.Unlock()
	return len(c.merge.waiting)
}

type answer struct {
	body string
	id   ID
	err  error
}

// scheduleWhileHeld sends a first Schedule that the fake server holds, then
// the messages of topics (body "m<i>") from their own goroutines, waits
// until they all wait behind the first, releases it and returns every
// answer, the first one's last.
func scheduleWhileHeld(t *testing.T, f *fakeServer, c *Client, topics []string) []answer {
	t.Helper()
	out := make([]answer, len(topics)+1)
	var wg sync.WaitGroup
	wg.Go(func() {
		id, err := c.Schedule(context.Background(), Message{Topic: "t", Body: []byte("first")})
		out[len(topics)] = answer{"first", id, err}
	})
	recv(t, "the first Schedule at the server", f.entered)
	for i, topic := range topics {
		wg.Go(func() {
			body := fmt.Sprintf("m%d", i)
			id, err := c.Schedule(context.Background(), Message{Topic: topic, Body: []byte(body)})
			out[i] = answer{body, id, err}
		})
	}
	waitFor(t, "the callers to wait", func() bool { return c.waitingCount() == len(topics) })
	close(f.hold)
	wg.Wait()
	return out
}

func TestScheduleAloneIsItsOwnCall(t *testing.T) {
	f := newFake(false)
	c := newClient(t, startFake(t, f), WithMaxCalls(1))
	for i := range 3 {
		id, err := c.Schedule(context.Background(), Message{Topic: "t", Body: []byte(fmt.Sprint(i))})
		if err != nil || id.String() != fakeID(fmt.Sprint(i)) {
			t.Fatalf("Schedule %d = %q, %v", i, id, err)
		}
	}
	s := f.seen()
	if s.singles != 3 || len(s.batches) != 0 {
		t.Fatalf("server saw %d Schedule and %d ScheduleBatch calls; want 3 and 0 (one at a time is never merged)", s.singles, len(s.batches))
	}
}

func TestConcurrentSchedulesShareOneBatch(t *testing.T) {
	f := newFake(true)
	c := newClient(t, startFake(t, f), WithMaxCalls(1))
	topics := make([]string, 20)
	for i := range topics {
		topics[i] = "t"
	}
	for _, a := range scheduleWhileHeld(t, f, c, topics) {
		if a.err != nil || a.id.String() != fakeID(a.body) {
			t.Errorf("message %s: got %q, %v; want its own ID id:%s", a.body, a.id, a.err, a.body)
		}
	}
	s := f.seen()
	if s.singles != 1 || len(s.batches) != 1 || s.batches[0] != 20 {
		t.Fatalf("server saw %d Schedule calls and batches %v; want 1 and [20]", s.singles, s.batches)
	}
	if calls, merged := c.merge.calls.Load(), c.merge.merged.Load(); calls != 2 || merged != 20 {
		t.Fatalf("the coalescer counted %d calls and %d merged messages; want 2, 20", calls, merged)
	}
}

// TestKeyedSchedulesAreNotMerged: a message with an idempotency key goes
// alone even while another call is in flight, so that its retry is the
// same request (what a cluster deduplicates).
func TestKeyedSchedulesAreNotMerged(t *testing.T) {
	f := newFake(true)
	c := newClient(t, startFake(t, f), WithMaxCalls(1))
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := c.Schedule(context.Background(), Message{Topic: "t", Body: []byte("first")}); err != nil {
			t.Error(err)
		}
	})
	recv(t, "the first Schedule at the server", f.entered)
	// With the first call held on the server, a keyed Schedule must get
	// its answer on its own call; merged, it would wait for the first.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	id, err := c.Schedule(ctx, Message{Topic: "t", Body: []byte("keyed"), IdempotencyKey: "k1"})
	cancel()
	close(f.hold)
	wg.Wait()
	if err != nil || id.String() != fakeID("keyed") {
		t.Fatalf("keyed Schedule while another call is in flight = %q, %v; want its own call's answer", id, err)
	}
	s := f.seen()
	if s.singles != 2 || len(s.batches) != 0 {
		t.Fatalf("server saw %d Schedule calls and batches %v; want 2 and none", s.singles, s.batches)
	}
}

func TestMergedCallRefusedAnswersEachCaller(t *testing.T) {
	f := newFake(true)
	c := newClient(t, startFake(t, f), WithMaxCalls(1))
	answers := scheduleWhileHeld(t, f, c, []string{"t", "bad", "t", "t"})
	for _, a := range answers {
		if a.body == "m1" {
			if status.Code(a.err) != codes.InvalidArgument {
				t.Errorf("the bad message: %q, %v; want InvalidArgument", a.id, a.err)
			}
			continue
		}
		if a.err != nil || a.id.String() != fakeID(a.body) {
			t.Errorf("message %s: got %q, %v; want its own ID (only the bad message fails)", a.body, a.id, a.err)
		}
	}
	s := f.seen()
	for _, body := range []string{"first", "m0", "m2", "m3"} {
		if s.stored[body] != 1 {
			t.Errorf("message %s stored %d times, want once", body, s.stored[body])
		}
	}
	if s.stored["m1"] != 0 {
		t.Errorf("the bad message was stored")
	}
}

func TestMergedCallErrorReachesEveryCaller(t *testing.T) {
	f := newFake(true)
	f.batchErr = status.Error(codes.Unavailable, "shutting down")
	c := newClient(t, startFake(t, f), WithMaxCalls(1))
	for _, a := range scheduleWhileHeld(t, f, c, []string{"t", "t", "t"}) {
		if a.body == "first" {
			continue
		}
		if status.Code(a.err) != codes.Unavailable {
			t.Errorf("message %s: %q, %v; want Unavailable", a.body, a.id, a.err)
		}
	}
	s := f.seen()
	if s.singles != 1 {
		t.Errorf("server saw %d Schedule calls; want 1 (an error other than InvalidArgument is not retried one by one)", s.singles)
	}
}

func TestWaitingCallerThatGivesUpIsNotSent(t *testing.T) {
	f := newFake(true)
	c := newClient(t, startFake(t, f), WithMaxCalls(1))
	var wg sync.WaitGroup
	wg.Go(func() { c.Schedule(context.Background(), Message{Topic: "t", Body: []byte("first")}) })
	recv(t, "the first Schedule at the server", f.entered)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Schedule(ctx, Message{Topic: "t", Body: []byte("quitter")})
		errc <- err
	}()
	wg.Go(func() { c.Schedule(context.Background(), Message{Topic: "t", Body: []byte("stayer")}) })
	waitFor(t, "two callers to wait", func() bool { return c.waitingCount() == 2 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that gave up got %v, want context.Canceled", err)
	}
	close(f.hold)
	wg.Wait()
	s := f.seen()
	if s.stored["quitter"] != 0 || s.stored["stayer"] != 1 {
		t.Fatalf("stored %v: want stayer once and quitter never", s.stored)
	}
}

func TestMaxCallsOffSendsEachAlone(t *testing.T) {
	f := newFake(true)
	c := newClient(t, startFake(t, f), WithMaxCalls(0))
	var wg sync.WaitGroup
	wg.Go(func() { c.Schedule(context.Background(), Message{Topic: "t", Body: []byte("first")}) })
	recv(t, "the first Schedule at the server", f.entered)
	for i := range 5 {
		wg.Go(func() { c.Schedule(context.Background(), Message{Topic: "t", Body: []byte(fmt.Sprint(i))}) })
	}
	// With merging off nothing waits in the client: the five reach the
	// server while the first is held.
	waitFor(t, "five more Schedule calls", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.stored) == 5
	})
	close(f.hold)
	wg.Wait()
	s := f.seen()
	if s.singles != 6 || len(s.batches) != 0 {
		t.Fatalf("server saw %d Schedule and %d ScheduleBatch calls; want 6 and 0", s.singles, len(s.batches))
	}
}

// TestMergedCallOutlivesOneCaller checks that a merged call goes on while
// one of its callers still waits, though another gave up.
func TestMergedCallOutlivesOneCaller(t *testing.T) {
	f := newFake(true)
	f.holdBatch, f.batchIn = make(chan struct{}), make(chan struct{})
	c := newClient(t, startFake(t, f), WithMaxCalls(1))
	var wg sync.WaitGroup
	wg.Go(func() { c.Schedule(context.Background(), Message{Topic: "t", Body: []byte("first")}) })
	recv(t, "the first Schedule at the server", f.entered)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Schedule(ctx, Message{Topic: "t", Body: []byte("quitter")})
		errc <- err
	}()
	var id ID
	var err error
	wg.Go(func() {
		id, err = c.Schedule(context.Background(), Message{Topic: "t", Body: []byte("stayer")})
	})
	waitFor(t, "two callers to wait", func() bool { return c.waitingCount() == 2 })
	close(f.hold)
	<-f.batchIn // the merged call of both is at the server
	cancel()
	if qerr := <-errc; !errors.Is(qerr, context.Canceled) {
		t.Fatalf("the caller that gave up got %v, want context.Canceled", qerr)
	}
	close(f.holdBatch)
	wg.Wait()
	if err != nil || id.String() != fakeID("stayer") {
		t.Fatalf("the caller that stayed got %q, %v; want its ID (the call must go on for it)", id, err)
	}
	s := f.seen()
	if len(s.batches) != 1 || s.batches[0] != 2 {
		t.Fatalf("batches %v, want one of 2", s.batches)
	}
}
