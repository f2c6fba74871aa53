package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// fakeServer answers Schedule and ScheduleBatch with the ID "id:" + body,
// refuses the topic "bad" (a whole batch holding it, as the real server
// does), and can hold its first Schedule until released.
type fakeServer struct {
	hourglassv1connect.UnimplementedHourglassServiceHandler
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

func (f *fakeServer) check(m *hourglassv1.ScheduleRequest) error {
	if m.Topic == "bad" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New(`topic "bad" is not allowed`))
	}
	return nil
}

func (f *fakeServer) Schedule(_ context.Context, req *connect.Request[hourglassv1.ScheduleRequest]) (*connect.Response[hourglassv1.ScheduleResponse], error) {
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
	if err := f.check(req.Msg); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.stored[string(req.Msg.Body)]++
	f.mu.Unlock()
	return connect.NewResponse(&hourglassv1.ScheduleResponse{Id: "id:" + string(req.Msg.Body)}), nil
}

func (f *fakeServer) ScheduleBatch(_ context.Context, req *connect.Request[hourglassv1.ScheduleBatchRequest]) (*connect.Response[hourglassv1.ScheduleBatchResponse], error) {
	f.mu.Lock()
	f.batches = append(f.batches, len(req.Msg.Messages))
	f.mu.Unlock()
	if f.holdBatch != nil {
		close(f.batchIn)
		<-f.holdBatch
	}
	if f.batchErr != nil {
		return nil, f.batchErr
	}
	for _, m := range req.Msg.Messages {
		if err := f.check(m); err != nil {
			return nil, err
		}
	}
	out := &hourglassv1.ScheduleBatchResponse{}
	f.mu.Lock()
	for _, m := range req.Msg.Messages {
		f.stored[string(m.Body)]++
		out.Results = append(out.Results, &hourglassv1.ScheduleResponse{Id: "id:" + string(m.Body)})
	}
	f.mu.Unlock()
	return connect.NewResponse(out), nil
}

func startFake(t *testing.T, f *fakeServer) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(hourglassv1connect.NewHourglassServiceHandler(f))
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return hs.URL
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (c *Client) waitingCount() int {
	c.merge.mu.Lock()
	defer c.merge.mu.Unlock()
	return len(c.merge.waiting)
}

type answer struct {
	body, id string
	err      error
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
	<-f.entered
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
	c := New(startFake(t, f), WithMaxCalls(1))
	for i := range 3 {
		id, err := c.Schedule(context.Background(), Message{Topic: "t", Body: []byte(fmt.Sprint(i))})
		if err != nil || id != fmt.Sprintf("id:%d", i) {
			t.Fatalf("Schedule %d = %q, %v", i, id, err)
		}
	}
	if f.singles != 3 || len(f.batches) != 0 {
		t.Fatalf("server saw %d Schedule and %d ScheduleBatch calls; want 3 and 0 (one at a time is never merged)", f.singles, len(f.batches))
	}
}

func TestConcurrentSchedulesShareOneBatch(t *testing.T) {
	f := newFake(true)
	c := New(startFake(t, f), WithMaxCalls(1))
	topics := make([]string, 20)
	for i := range topics {
		topics[i] = "t"
	}
	for _, a := range scheduleWhileHeld(t, f, c, topics) {
		if a.err != nil || a.id != "id:"+a.body {
			t.Errorf("message %s: got %q, %v; want its own ID id:%s", a.body, a.id, a.err, a.body)
		}
	}
	if f.singles != 1 || len(f.batches) != 1 || f.batches[0] != 20 {
		t.Fatalf("server saw %d Schedule calls and batches %v; want 1 and [20]", f.singles, f.batches)
	}
	if calls, merged := c.ScheduleCalls(); calls != 2 || merged != 20 {
		t.Fatalf("ScheduleCalls = %d, %d; want 2, 20", calls, merged)
	}
}

// TestKeyedSchedulesAreNotMerged: a message with an idempotency key goes
// alone even while another call is in flight, so that its retry is the
// same request (what a cluster deduplicates).
func TestKeyedSchedulesAreNotMerged(t *testing.T) {
	f := newFake(true)
	c := New(startFake(t, f), WithMaxCalls(1))
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := c.Schedule(context.Background(), Message{Topic: "t", Body: []byte("first")}); err != nil {
			t.Error(err)
		}
	})
	<-f.entered
	// With the first call held on the server, a keyed Schedule must get
	// its answer on its own call; merged, it would wait for the first.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	id, err := c.Schedule(ctx, Message{Topic: "t", Body: []byte("keyed"), IdempotencyKey: "k1"})
	cancel()
	close(f.hold)
	wg.Wait()
	if err != nil || id != "id:keyed" {
		t.Fatalf("keyed Schedule while another call is in flight = %q, %v; want its own call's answer", id, err)
	}
	if f.singles != 2 || len(f.batches) != 0 {
		t.Fatalf("server saw %d Schedule calls and batches %v; want 2 and none", f.singles, f.batches)
	}
}

func TestMergedCallRefusedAnswersEachCaller(t *testing.T) {
	f := newFake(true)
	c := New(startFake(t, f), WithMaxCalls(1))
	answers := scheduleWhileHeld(t, f, c, []string{"t", "bad", "t", "t"})
	for _, a := range answers {
		if a.body == "m1" {
			if connect.CodeOf(a.err) != connect.CodeInvalidArgument {
				t.Errorf("the bad message: %q, %v; want InvalidArgument", a.id, a.err)
			}
			continue
		}
		if a.err != nil || a.id != "id:"+a.body {
			t.Errorf("message %s: got %q, %v; want its own ID (only the bad message fails)", a.body, a.id, a.err)
		}
	}
	for _, body := range []string{"first", "m0", "m2", "m3"} {
		if f.stored[body] != 1 {
			t.Errorf("message %s stored %d times, want once", body, f.stored[body])
		}
	}
	if f.stored["m1"] != 0 {
		t.Errorf("the bad message was stored")
	}
}

func TestMergedCallErrorReachesEveryCaller(t *testing.T) {
	f := newFake(true)
	f.batchErr = connect.NewError(connect.CodeUnavailable, errors.New("shutting down"))
	c := New(startFake(t, f), WithMaxCalls(1))
	for _, a := range scheduleWhileHeld(t, f, c, []string{"t", "t", "t"}) {
		if a.body == "first" {
			continue
		}
		if connect.CodeOf(a.err) != connect.CodeUnavailable {
			t.Errorf("message %s: %q, %v; want Unavailable", a.body, a.id, a.err)
		}
	}
	if f.singles != 1 {
		t.Errorf("server saw %d Schedule calls; want 1 (an error other than InvalidArgument is not retried one by one)", f.singles)
	}
}

func TestWaitingCallerThatGivesUpIsNotSent(t *testing.T) {
	f := newFake(true)
	c := New(startFake(t, f), WithMaxCalls(1))
	var wg sync.WaitGroup
	wg.Go(func() { c.Schedule(context.Background(), Message{Topic: "t", Body: []byte("first")}) })
	<-f.entered
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
	if f.stored["quitter"] != 0 || f.stored["stayer"] != 1 {
		t.Fatalf("stored %v: want stayer once and quitter never", f.stored)
	}
}

func TestMaxCallsOffSendsEachAlone(t *testing.T) {
	f := newFake(true)
	c := New(startFake(t, f), WithMaxCalls(0))
	var wg sync.WaitGroup
	wg.Go(func() { c.Schedule(context.Background(), Message{Topic: "t", Body: []byte("first")}) })
	<-f.entered
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
	if f.singles != 6 || len(f.batches) != 0 {
		t.Fatalf("server saw %d Schedule and %d ScheduleBatch calls; want 6 and 0", f.singles, len(f.batches))
	}
}

// TestMergedCallOutlivesOneCaller checks that a merged call goes on while
// one of its callers still waits, though another gave up.
func TestMergedCallOutlivesOneCaller(t *testing.T) {
	f := newFake(true)
	f.holdBatch, f.batchIn = make(chan struct{}), make(chan struct{})
	c := New(startFake(t, f), WithMaxCalls(1))
	var wg sync.WaitGroup
	wg.Go(func() { c.Schedule(context.Background(), Message{Topic: "t", Body: []byte("first")}) })
	<-f.entered
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Schedule(ctx, Message{Topic: "t", Body: []byte("quitter")})
		errc <- err
	}()
	var id string
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
	if err != nil || id != "id:stayer" {
		t.Fatalf("the caller that stayed got %q, %v; want its ID (the call must go on for it)", id, err)
	}
	if len(f.batches) != 1 || f.batches[0] != 2 {
		t.Fatalf("batches %v, want one of 2", f.batches)
	}
}
