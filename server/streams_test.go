package server

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
)

func streamMessage(m *hourglassv1.ScheduleRequest) *hourglassv1.ScheduleStreamRequest {
	return &hourglassv1.ScheduleStreamRequest{Kind: &hourglassv1.ScheduleStreamRequest_Message{Message: m}}
}

func streamBatch(ms ...*hourglassv1.ScheduleRequest) *hourglassv1.ScheduleStreamRequest {
	return &hourglassv1.ScheduleStreamRequest{Kind: &hourglassv1.ScheduleStreamRequest_Batch{Batch: &hourglassv1.ScheduleBatchRequest{Messages: ms}}}
}

// streamAnswer is what one ScheduleStream request must be answered with.
type streamAnswer struct {
	kind string      // "result", "batch" or "error"
	ats  []time.Time // delivery times of a result or a batch
	code codes.Code  // of an error
	msg  string      // in an error's message
}

// check compares a response with the answer.
func (a streamAnswer) check(t *testing.T, i int, res *hourglassv1.ScheduleStreamResponse) {
	t.Helper()
	var got []*hourglassv1.ScheduleResponse
	switch k := res.Kind.(type) {
	case *hourglassv1.ScheduleStreamResponse_Result:
		if a.kind != "result" {
			t.Fatalf("response %d: result %v, want %s", i, k.Result, a.kind)
		}
		got = []*hourglassv1.ScheduleResponse{k.Result}
	case *hourglassv1.ScheduleStreamResponse_Batch:
		if a.kind != "batch" {
			t.Fatalf("response %d: batch %v, want %s", i, k.Batch, a.kind)
		}
		got = k.Batch.Results
	case *hourglassv1.ScheduleStreamResponse_Error:
		if a.kind != "error" || codes.Code(k.Error.Code) != a.code || !strings.Contains(k.Error.Message, a.msg) {
			t.Fatalf("response %d: error %v, want %s (code %d, %q)", i, k.Error, a.kind, a.code, a.msg)
		}
		return
	default:
		t.Fatalf("response %d: %v", i, res)
	}
	if len(got) != len(a.ats) {
		t.Fatalf("response %d: %d results, want %d", i, len(got), len(a.ats))
	}
	for j, r := range got {
		if !r.DeliverAt.AsTime().Equal(a.ats[j]) || len(r.Id) != 32 {
			t.Fatalf("response %d result %d: %v, want one due at %v (answers out of order?)", i, j, r, a.ats[j])
		}
	}
}

// TestScheduleStreamOrder: every request of a ScheduleStream, single or
// batch, sent all at once, is answered once and in order; refused ones
// get an error response (code 3), store nothing, and the stream goes on.
func TestScheduleStreamOrder(t *testing.T) {
	s := serveTest(t, Options{}, nil)
	st, err := s.grpcClient(t).ScheduleStream(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	var reqs []*hourglassv1.ScheduleStreamRequest
	var answers []streamAnswer
	stored := 0
	next := 0 // distinct delivery times, so that the answers show their order
	at := func() (*hourglassv1.ScheduleRequest, time.Time) {
		next++
		t := base.Add(time.Duration(next) * time.Millisecond)
		return &hourglassv1.ScheduleRequest{Topic: "stream", When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(t)}}, t
	}
	add := func(r *hourglassv1.ScheduleStreamRequest, a streamAnswer) {
		reqs, answers = append(reqs, r), append(answers, a)
		stored += len(a.ats)
	}
	for range 40 {
		m, t0 := at()
		add(streamMessage(m), streamAnswer{kind: "result", ats: []time.Time{t0}})
		m1, t1 := at()
		m2, t2 := at()
		add(streamBatch(m1, m2), streamAnswer{kind: "batch", ats: []time.Time{t1, t2}})
		add(streamMessage(&hourglassv1.ScheduleRequest{Topic: "bad/topic"}), streamAnswer{kind: "error", code: codes.InvalidArgument, msg: "topic"})
		add(streamBatch(), streamAnswer{kind: "error", code: codes.InvalidArgument, msg: "messages is empty"})
		m3, _ := at()
		add(streamBatch(m3, &hourglassv1.ScheduleRequest{Topic: ""}), streamAnswer{kind: "error", code: codes.InvalidArgument, msg: "messages[1]: topic"})
		add(&hourglassv1.ScheduleStreamRequest{}, streamAnswer{kind: "error", code: codes.InvalidArgument, msg: "neither message nor batch"})
		m4, t4 := at()
		add(streamMessage(m4), streamAnswer{kind: "result", ats: []time.Time{t4}})
	}
	sendErr := make(chan error, 1)
	go func() {
		for _, r := range reqs {
			if err := st.Send(r); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- st.CloseSend()
	}()
	for i, a := range answers {
		res, err := st.Recv()
		if err != nil {
			t.Fatalf("response %d of %d: %v", i, len(answers), err)
		}
		a.check(t, i, res)
	}
	if res, err := st.Recv(); err != io.EOF {
		t.Fatalf("after the last answer: %v, %v; want the stream's end", res, err)
	}
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
	if n := s.eng.Stats().Scheduled; n != int64(stored) {
		t.Errorf("scheduled %d messages, want %d (refused requests store nothing)", n, stored)
	}
}

// TestScheduleStreamInFlight: a ScheduleStream's requests go to the store
// together (those that arrive while its calls are in progress share the
// next call, at most streamCalls calls at once), and are still answered
// in request order when the calls finish in reverse; the requests of a
// call the store fails get its error (a full disk: code 8) and the rest
// go on.
func TestScheduleStreamInFlight(t *testing.T) {
	calls := make(chan *fakeCall)
	s := serveTest(t, Options{Cluster: newFakeCluster(true, calls), streamCalls: streamCalls}, nil)
	st, err := s.grpcClient(t).ScheduleStream(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	const n = 64
	base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	for i := range n {
		at := timestamppb.New(base.Add(time.Duration(i) * time.Millisecond))
		if err := st.Send(streamMessage(&hourglassv1.ScheduleRequest{Topic: "t", When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: at}})); err != nil {
			t.Fatal(err)
		}
	}
	// The first calls: at most streamCalls at once; they are answered in
	// reverse, the second of them failing.
	first := takeCalls(t, calls, streamCalls)
	failed := map[int64]bool{}
	for _, r := range first[1].reqs {
		failed[r.At.UnixMilli()] = true
	}
	for i := len(first) - 1; i >= 0; i-- {
		var err error
		if i == 1 {
			err = fmt.Errorf("append: %w", syscall.ENOSPC)
		}
		first[i].answer <- err
	}
	held := 0
	for _, c := range first {
		held += len(c.reqs)
	}
	// What waited meanwhile goes in few calls, answered as they come.
	callsMade := len(first)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for held < n {
			c := <-calls
			callsMade++
			held += len(c.reqs)
			c.answer <- nil
		}
	}()
	for i := range n {
		res, err := st.Recv()
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		at := base.Add(time.Duration(i) * time.Millisecond)
		want := streamAnswer{kind: "result", ats: []time.Time{at}}
		if failed[at.UnixMilli()] {
			want = streamAnswer{kind: "error", code: codes.ResourceExhausted, msg: "disk is full"}
		}
		want.check(t, i, res)
	}
	<-done
	if callsMade >= n {
		t.Errorf("%d store calls for %d requests: the requests that waited were not combined", callsMade, n)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != io.EOF {
		t.Fatalf("after CloseSend: %v, want the stream's end", err)
	}
}

// TestScheduleStreamClusterCalls: in cluster mode a stream's requests that
// waited go in calls of at most MaxBatch messages (a cluster stores a call
// as one intake message of at most 1,024), not streamCallMessages.
func TestScheduleStreamClusterCalls(t *testing.T) {
	calls := make(chan *fakeCall)
	srv, err := New(Options{Cluster: newFakeCluster(true, calls)})
	if err != nil {
		t.Fatal(err)
	}
	c := srv.newStreamCommit(testCtx(t))
	msg := &hourglassv1.ScheduleRequest{Topic: "t", When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(time.Now().Add(time.Hour))}}
	const batches, per = 25, 100
	answers := make(chan *hourglassv1.ScheduleStreamResponse, 1+batches)
	if c.maxCalls != 1 {
		t.Fatalf("%d calls in flight on a cluster's stream, want 1", c.maxCalls)
	}
	// A single message holds the one call slot ...
	c.add(streamMessage(msg), answers)
	first := takeCalls(t, calls, 1)
	// ... while 2,500 messages wait (add queues before it returns).
	ms := make([]*hourglassv1.ScheduleRequest, per)
	for i := range ms {
		ms[i] = msg
	}
	for range batches {
		c.add(streamBatch(ms...), answers)
	}
	for _, f := range first {
		f.answer <- nil
	}
	for held := 0; held < batches*per; {
		f := takeCalls(t, calls, 1)[0]
		if len(f.reqs) > MaxBatch {
			t.Fatalf("a call of %d messages in cluster mode; at most %d", len(f.reqs), MaxBatch)
		}
		held += len(f.reqs)
		f.answer <- nil
	}
	for i := range 1 + batches {
		if r := <-answers; r.GetError() != nil {
			t.Fatalf("answer %d: %v", i, r.GetError())
		}
	}
}

// TestScheduleStreamClusterKeyedAlone: in cluster mode a request with
// idempotency keys is a call of its own, as the caller sent it, because a
// cluster deduplicates a call whole: merged with what else waited, its
// resend after a lost answer would be another call and stored twice (a
// crashtest --cluster run found keyed stream messages delivered twice).
// Unkeyed requests still share calls.
func TestScheduleStreamClusterKeyedAlone(t *testing.T) {
	calls := make(chan *fakeCall)
	srv, err := New(Options{Cluster: newFakeCluster(true, calls)})
	if err != nil {
		t.Fatal(err)
	}
	c := srv.newStreamCommit(testCtx(t))
	at := timestamppb.New(time.Now().Add(time.Hour))
	plain := &hourglassv1.ScheduleRequest{Topic: "t", When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: at}}
	keyed := func(k string) *hourglassv1.ScheduleRequest {
		return &hourglassv1.ScheduleRequest{Topic: "t", IdempotencyKey: k, When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: at}}
	}
	answers := make(chan *hourglassv1.ScheduleStreamResponse, 16)
	c.add(streamMessage(plain), answers) // holds the one call slot
	first := takeCalls(t, calls, 1)
	// Waiting meanwhile: two plain, a keyed single, a keyed batch, two plain.
	c.add(streamMessage(plain), answers)
	c.add(streamMessage(plain), answers)
	c.add(streamMessage(keyed("a")), answers)
	c.add(streamBatch(keyed("b"), keyed("c")), answers)
	c.add(streamMessage(plain), answers)
	c.add(streamMessage(plain), answers)
	first[0].answer <- nil
	var got [][]string
	for held := 0; held < 7; {
		f := takeCalls(t, calls, 1)[0]
		var keys []string
		for _, r := range f.reqs {
			keys = append(keys, r.IdempotencyKey)
		}
		got = append(got, keys)
		held += len(f.reqs)
		f.answer <- nil
	}
	want := [][]string{{"", ""}, {"a"}, {"b", "c"}, {"", ""}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("calls by their messages' keys: %q; want %q", got, want)
	}
	for i := range 7 {
		if r := <-answers; r.GetError() != nil {
			t.Fatalf("answer %d: %v", i, r.GetError())
		}
	}
}

// TestScheduleStreamShutdown: Shutdown answers every request a
// ScheduleStream has read, then ends the stream with Unavailable.
func TestScheduleStreamShutdown(t *testing.T) {
	calls := make(chan *fakeCall)
	s := serveTest(t, Options{Cluster: newFakeCluster(true, calls), streamCalls: streamCalls}, nil)
	st, err := s.grpcClient(t).ScheduleStream(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	const n = streamCalls - 1 // each in a call of its own, or sharing one: all in progress
	for range n {
		if err := st.Send(streamMessage(&hourglassv1.ScheduleRequest{Topic: "t"})); err != nil {
			t.Fatal(err)
		}
	}
	inFlight := takeMessages(t, calls, n)
	shut := make(chan error, 1)
	go func() { shut <- s.shutdown() }()
	waitFor(t, "BeginShutdown", func() bool { return s.srv.life.polls.Err() != nil })
	for _, c := range inFlight {
		c.answer <- nil
	}
	for i := range n {
		res, err := st.Recv()
		if err != nil {
			t.Fatalf("response %d of %d: %v", i, n, err)
		}
		if res.GetResult() == nil {
			t.Fatalf("response %d: %v, want a result", i, res)
		}
	}
	_, err = st.Recv()
	wantStatus(t, "after the answers", err, codes.Unavailable, "shutting down", "every request read was answered")
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
}

// consumeOpen opens a Consume stream of topic on c.
func consumeOpen(t *testing.T, ctx context.Context, c hourglassv1.HourglassServiceClient, open *hourglassv1.ConsumeOpen) grpc.BidiStreamingClient[hourglassv1.ConsumeRequest, hourglassv1.ConsumeResponse] {
	t.Helper()
	st, err := c.Consume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Open{Open: open}}); err != nil {
		t.Fatal(err)
	}
	return st
}

func consumeCredit(n int32) *hourglassv1.ConsumeRequest {
	return &hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Credit{Credit: &hourglassv1.ConsumeCredit{Credits: n}}}
}

// pushedMsg is one message of a pushed ConsumeBatch, expanded.
type pushedMsg struct {
	Seq                                   uint64
	Id, OriginId                          string
	Attempt                               uint32
	Body                                  []byte
	Headers                               map[string]string
	DeliverAt, ReceivedAt, LeaseExpiresAt time.Time
	DeadLetter                            *hourglassv1.DeadLetter
}

// expandBatch expands b (whose topic the stream's first batch gave).
func expandBatch(t *testing.T, b *hourglassv1.ConsumeBatch) []pushedMsg {
	t.Helper()
	n := len(b.Bodies)
	if len(b.Ids) != 16*n || len(b.DeliverAtDeltas) != n || (b.Attempts != nil && len(b.Attempts) != n) ||
		(b.OriginIds != nil && len(b.OriginIds) != 16*n) || (b.HeaderCounts != nil && len(b.HeaderCounts) != n) ||
		len(b.HeaderKeys) != len(b.HeaderValues) || (b.DeadLetters != nil && len(b.DeadLetters) != n) {
		t.Fatalf("batch of %d bodies with fields of other lengths: %v", n, b)
	}
	out := make([]pushedMsg, n)
	h := 0
	for i := range out {
		id, err := message.IDFromBinary(b.Ids[16*i : 16*i+16])
		if err != nil {
			t.Fatal(err)
		}
		m := pushedMsg{Seq: b.FirstSeq + uint64(i), Id: id.String(), OriginId: id.String(), Body: b.Bodies[i],
			DeliverAt:  time.UnixMilli(b.DeliverAtMs + b.DeliverAtDeltas[i]),
			ReceivedAt: time.UnixMilli(b.ReceivedAtMs), LeaseExpiresAt: time.UnixMilli(b.LeaseExpiresAtMs)}
		if b.Attempts != nil {
			m.Attempt = b.Attempts[i]
		}
		if b.OriginIds != nil {
			if o := b.OriginIds[16*i : 16*i+16]; string(o) != string(make([]byte, 16)) {
				oid, err := message.IDFromBinary(o)
				if err != nil {
					t.Fatal(err)
				}
				m.OriginId = oid.String()
			}
		}
		if b.HeaderCounts != nil {
			for range b.HeaderCounts[i] {
				if m.Headers == nil {
					m.Headers = map[string]string{}
				}
				m.Headers[b.HeaderKeys[h]] = b.HeaderValues[h]
				h++
			}
		}
		if b.DeadLetters != nil && b.DeadLetters[i].Reason != "" {
			m.DeadLetter = b.DeadLetters[i]
		}
		out[i] = m
	}
	return out
}

// recvMessages receives pushed messages until it has n, failing on a
// response that would make more.
func recvMessages(t *testing.T, st grpc.BidiStreamingClient[hourglassv1.ConsumeRequest, hourglassv1.ConsumeResponse], n int) []pushedMsg {
	t.Helper()
	var got []pushedMsg
	for len(got) < n {
		res, err := st.Recv()
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", len(got), n, err)
		}
		b := res.GetBatch()
		if b == nil || len(b.Bodies) == 0 {
			t.Fatalf("after %d of %d messages: %v, want messages", len(got), n, res)
		}
		got = append(got, expandBatch(t, b)...)
	}
	if len(got) > n {
		t.Fatalf("pushed %d messages, want %d: beyond the credits", len(got), n)
	}
	return got
}

// TestConsume: a Consume stream pushes due messages only while it has
// credits; settles are answered with their ref and a result per ack and
// nack; a nack with a delay brings the message back once the delay has
// passed.
func TestConsume(t *testing.T) {
	s := serveTest(t, Options{}, nil)
	c := s.grpcClient(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	const topic = "consume"
	batch := &hourglassv1.ScheduleBatchRequest{}
	for i := range 10 {
		batch.Messages = append(batch.Messages, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte{byte(i)}})
	}
	if _, err := c.ScheduleBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	stats := func() (backlog int64, leased int) {
		ts := s.srv.q.Stats()[topic]
		return ts.Backlog, ts.Leased
	}
	waitFor(t, "10 messages due in the queue", func() bool { b, _ := stats(); return b == 10 })

	st := consumeOpen(t, ctx, c, &hourglassv1.ConsumeOpen{Topic: topic, Credits: 3, LeaseMs: 60_000})
	// All 10 are due; 3 credits let 3 come.
	got := recvMessages(t, st, 3)
	if b, l := stats(); b != 7 || l != 3 {
		t.Fatalf("with 3 credits used: %d ready and %d leased, want 7 and 3", b, l)
	}
	if err := st.Send(consumeCredit(4)); err != nil {
		t.Fatal(err)
	}
	got = append(got, recvMessages(t, st, 4)...)
	if b, l := stats(); b != 3 || l != 7 {
		t.Fatalf("with 7 credits used: %d ready and %d leased, want 3 and 7", b, l)
	}

	for i, m := range got {
		if m.Seq != uint64(i+1) {
			t.Fatalf("message %d pushed as number %d, want %d", i, m.Seq, i+1)
		}
	}

	// Settle: a range of two acks and a number never pushed, a nack now
	// and one in 300 ms.
	nackedAt := time.Now()
	if err := st.Send(&hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Settle{Settle: &hourglassv1.ConsumeSettle{
		Ref:   42,
		Acks:  []*hourglassv1.SeqRange{{First: got[0].Seq, Count: 2}, {First: 1000, Count: 1}},
		Nacks: []*hourglassv1.ConsumeNack{{Seq: got[2].Seq}, {Seq: got[3].Seq, DelayMs: 300}},
	}}}); err != nil {
		t.Fatal(err)
	}
	res, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	set := res.GetSettled()
	if set == nil || set.Ref != 42 || !slices.Equal(set.Failed, []uint64{1000}) || len(set.Errors) != 1 ||
		!strings.Contains(set.Errors[0], "message 1000 is not held by this stream") {
		t.Fatalf("settled %v: want ref 42, only number 1000 failed", res)
	}
	// A second ack of a settled message fails.
	if err := st.Send(&hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Settle{Settle: &hourglassv1.ConsumeSettle{
		Ref: 43, Acks: []*hourglassv1.SeqRange{{First: got[1].Seq, Count: 1}}}}}); err != nil {
		t.Fatal(err)
	}
	if res, err := st.Recv(); err != nil || !slices.Equal(res.GetSettled().GetFailed(), []uint64{got[1].Seq}) {
		t.Fatalf("acked again: %v, %v; want number %d failed", res, err, got[1].Seq)
	}
	// Extend one held and one settled.
	if err := st.Send(&hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Extend{Extend: &hourglassv1.ConsumeExtend{
		Ref: 44, Seqs: []*hourglassv1.SeqRange{{First: got[0].Seq, Count: 1}, {First: got[4].Seq, Count: 1}}, LeaseMs: 3_600_000}}}); err != nil {
		t.Fatal(err)
	}
	if res, err := st.Recv(); err != nil || res.GetExtended().GetRef() != 44 || !slices.Equal(res.GetExtended().GetFailed(), []uint64{got[0].Seq}) ||
		time.UnixMilli(res.GetExtended().GetLeaseExpiresAtMs()).Before(time.Now().Add(59*time.Minute)) {
		t.Fatalf("extended: %v, %v; want number %d failed, the other's lease an hour ahead", res, err, got[0].Seq)
	}

	// More credits: the 3 left, the one nacked without delay, and, once
	// its delay has passed, the one nacked with it.
	if err := st.Send(consumeCredit(100)); err != nil {
		t.Fatal(err)
	}
	again := recvMessages(t, st, 5)
	var first []string // IDs of the first attempts
	for _, m := range again {
		first = append(first, m.OriginId)
		if m.OriginId == got[3].Id {
			if m.Attempt != 1 || m.DeliverAt.Before(nackedAt.Add(300*time.Millisecond).Truncate(time.Millisecond)) || m.ReceivedAt.Before(m.DeliverAt) {
				t.Errorf("nacked with 300 ms: came back as %v, nacked at %v", m, nackedAt)
			}
		}
	}
	for i, m := range got {
		if nacked := i == 2 || i == 3; slices.Contains(first, m.Id) != nacked {
			t.Errorf("message %d (%s, nacked %v) came again: %v", i, m.Id, nacked, slices.Contains(first, m.Id))
		}
	}
	slices.Sort(first)
	if len(slices.Compact(first)) != 5 {
		t.Errorf("the last 5 pushed are not 5 messages: %v", first)
	}
	if b, l := stats(); b != 0 || l != 8 {
		t.Errorf("after all: %d ready and %d leased, want 0 and 8 (3 unsettled, 5 pushed again)", b, l)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if res, err := st.Recv(); err != io.EOF {
		t.Errorf("after CloseSend: %v, %v; want the stream's end", res, err)
	}
}

// TestConsumeBadRequests: a Consume stream whose requests break its rules
// ends with InvalidArgument naming what was wrong.
func TestConsumeBadRequests(t *testing.T) {
	s := serveTest(t, Options{}, nil)
	c := s.grpcClient(t)
	open := func(o *hourglassv1.ConsumeOpen) *hourglassv1.ConsumeRequest {
		return &hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Open{Open: o}}
	}
	ok := open(&hourglassv1.ConsumeOpen{Topic: "idle", Credits: 1})
	for _, tc := range []struct {
		name string
		reqs []*hourglassv1.ConsumeRequest // then CloseSend
		msg  string
	}{
		{"nothing", nil, "ended before its first request"},
		{"credit_first", []*hourglassv1.ConsumeRequest{consumeCredit(1)}, "first request of a Consume stream must be open"},
		{"settle_first", []*hourglassv1.ConsumeRequest{{Kind: &hourglassv1.ConsumeRequest_Settle{Settle: &hourglassv1.ConsumeSettle{}}}}, "must be open"},
		{"open_no_credits", []*hourglassv1.ConsumeRequest{open(&hourglassv1.ConsumeOpen{Topic: "t"})}, "open.credits 0: from 1 to 10000"},
		{"open_beyond_max_credits", []*hourglassv1.ConsumeRequest{open(&hourglassv1.ConsumeOpen{Topic: "t", Credits: MaxCredits + 1})}, "open.credits 10001"},
		{"open_bad_topic", []*hourglassv1.ConsumeRequest{open(&hourglassv1.ConsumeOpen{Topic: "a/b", Credits: 1})}, "topic"},
		{"open_bad_lease", []*hourglassv1.ConsumeRequest{open(&hourglassv1.ConsumeOpen{Topic: "t", Credits: 1, LeaseMs: -1})}, "lease_ms -1"},
		{"open_big_batch", []*hourglassv1.ConsumeRequest{open(&hourglassv1.ConsumeOpen{Topic: "t", Credits: 1, MaxBatch: 1001})}, "max_messages 1001"},
		{"credits_beyond_max", []*hourglassv1.ConsumeRequest{open(&hourglassv1.ConsumeOpen{Topic: "idle", Credits: MaxCredits}), consumeCredit(1)}, "credit.credits 1 with 10000 held"},
		{"credit_zero", []*hourglassv1.ConsumeRequest{ok, consumeCredit(0)}, "credit.credits 0"},
		{"second_open", []*hourglassv1.ConsumeRequest{ok, ok}, "open is the first request of a Consume stream only"},
		{"empty_request", []*hourglassv1.ConsumeRequest{ok, {}}, "none of open, credit, settle and extend"},
		{"settle_too_big", []*hourglassv1.ConsumeRequest{ok, {Kind: &hourglassv1.ConsumeRequest_Settle{Settle: &hourglassv1.ConsumeSettle{
			Acks: []*hourglassv1.SeqRange{{First: 1, Count: 1000}, {First: 2000, Count: 1}}}}}}, "settle.acks: 1001 messages: at most 1000"},
		{"settle_empty_range", []*hourglassv1.ConsumeRequest{ok, {Kind: &hourglassv1.ConsumeRequest_Settle{Settle: &hourglassv1.ConsumeSettle{
			Acks: []*hourglassv1.SeqRange{{First: 1}}}}}}, "settle.acks: range of 0 from 1"},
		{"extend_bad_lease", []*hourglassv1.ConsumeRequest{ok, {Kind: &hourglassv1.ConsumeRequest_Extend{Extend: &hourglassv1.ConsumeExtend{
			Seqs: []*hourglassv1.SeqRange{{First: 1, Count: 1}}}}}}, "extend.lease_ms 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(testCtx(t), 5*time.Second)
			defer cancel()
			st, err := c.Consume(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range tc.reqs {
				if err := st.Send(r); err != nil {
					t.Fatal(err)
				}
			}
			// The stream must end by itself: a bad request after an open is
			// answered without the end of the sending side.
			if len(tc.reqs) <= 1 {
				st.CloseSend()
			}
			_, err = st.Recv()
			wantStatus(t, "the stream's end", err, codes.InvalidArgument, tc.msg)
		})
	}
	waitFor(t, "the streams' slots freed", func() bool { return s.srv.limits.open() == 0 })
}

// TestConsumeBrokenStream: the messages a Consume stream held when it
// broke are handed out again when their leases end, not before.
func TestConsumeBrokenStream(t *testing.T) {
	s := serveTest(t, Options{}, nil)
	c := s.grpcClient(t)
	if _, err := c.Schedule(testCtx(t), &hourglassv1.ScheduleRequest{Topic: "broken", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	st := consumeOpen(t, ctx, c, &hourglassv1.ConsumeOpen{Topic: "broken", Credits: 1, LeaseMs: 300})
	m := recvMessages(t, st, 1)[0]
	cancel()
	if _, err := st.Recv(); codeOf(err) != codes.Canceled {
		t.Fatalf("after the client broke the stream: %v", err)
	}
	waitFor(t, "the stream's slot freed", func() bool { return s.srv.limits.open() == 0 })
	res, err := c.Receive(testCtx(t), &hourglassv1.ReceiveRequest{Topic: "broken", WaitMs: 5000})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Messages) != 1 {
		t.Fatalf("received %v after the lease ended, want the message again", res.Messages)
	}
	again := res.Messages[0]
	if again.Id != m.Id || again.Attempt != 1 || again.ReceivedAt.AsTime().Before(m.LeaseExpiresAt) {
		t.Errorf("received %v again; first %v, leased until %v", again, m.Id, m.LeaseExpiresAt)
	}
}

// TestReceiveStream: on every protocol, ReceiveStream opens at once (its
// response headers come before any message is due), then delivers each
// message as it becomes due, leased.
func TestReceiveStream(t *testing.T) {
	s := serveTest(t, Options{}, nil)
	g := s.grpcClient(t)
	type opened struct {
		recv func() ([]*hourglassv1.Message, error)
	}
	for _, p := range []struct {
		name string
		open func(ctx context.Context, topic string) (opened, error)
	}{
		{"grpc", func(ctx context.Context, topic string) (opened, error) {
			st, err := g.ReceiveStream(ctx, &hourglassv1.ReceiveStreamRequest{Topic: topic})
			if err == nil {
				_, err = st.Header() // waits for the headers
			}
			return opened{func() ([]*hourglassv1.Message, error) {
				res, err := st.Recv()
				return res.GetMessages(), err
			}}, err
		}},
		{"connect", func(ctx context.Context, topic string) (opened, error) {
			st, err := s.connectClient(t).ReceiveStream(ctx, connect.NewRequest(&hourglassv1.ReceiveStreamRequest{Topic: topic}))
			return opened{func() ([]*hourglassv1.Message, error) {
				if !st.Receive() {
					return nil, st.Err()
				}
				return st.Msg().Messages, nil
			}}, err
		}},
		{"grpc-web", func(ctx context.Context, topic string) (opened, error) {
			st, err := s.connectClient(t, connect.WithGRPCWeb()).ReceiveStream(ctx, connect.NewRequest(&hourglassv1.ReceiveStreamRequest{Topic: topic}))
			return opened{func() ([]*hourglassv1.Message, error) {
				if !st.Receive() {
					return nil, st.Err()
				}
				return st.Msg().Messages, nil
			}}, err
		}},
	} {
		t.Run(p.name, func(t *testing.T) {
			ctx := testCtx(t)
			topic := "receive-stream." + p.name
			st, err := p.open(ctx, topic)
			if err != nil {
				t.Fatalf("opening the stream of an idle topic: %v", err)
			}
			for i := range 3 {
				if _, err := g.Schedule(ctx, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte{byte(i)}}); err != nil {
					t.Fatal(err)
				}
			}
			var got []*hourglassv1.Message
			for len(got) < 3 {
				ms, err := st.recv()
				if err != nil {
					t.Fatalf("after %d messages: %v", len(got), err)
				}
				got = append(got, ms...)
			}
			if l := s.srv.q.Stats()[topic].Leased; len(got) != 3 || l != 3 {
				t.Errorf("received %d messages, %d leased; want 3 and 3", len(got), l)
			}
		})
	}
}
