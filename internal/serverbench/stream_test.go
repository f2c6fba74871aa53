package serverbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// fakeStreams serves ScheduleStream by answer: the i-th request read gets
// answer(i, req); an error ends the stream with it.
type fakeStreams struct {
	hourglassv1.UnimplementedHourglassServiceServer
	answer func(i int, req *hourglassv1.ScheduleStreamRequest) (*hourglassv1.ScheduleStreamResponse, error)
}

func (f *fakeStreams) ScheduleStream(st grpc.BidiStreamingServer[hourglassv1.ScheduleStreamRequest, hourglassv1.ScheduleStreamResponse]) error {
	for i := 0; ; i++ {
		req, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		res, err := f.answer(i, req)
		if err != nil {
			return err
		}
		if err := st.Send(res); err != nil {
			return err
		}
	}
}

// openFake opens a streamSender for senders goroutines on a ScheduleStream
// that f serves in this process.
func openFake(t *testing.T, f *fakeStreams, senders int) *streamSender {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	hourglassv1.RegisterHourglassServiceServer(srv, f)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	cc, err := grpc.NewClient("passthrough:///fake",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	s, err := openStream(ctx, hourglassv1.NewHourglassServiceClient(cc), senders)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func message(i int) *hourglassv1.ScheduleRequest {
	return &hourglassv1.ScheduleRequest{Topic: "t", Body: fmt.Appendf(nil, "m%d", i)}
}

func result(id string) *hourglassv1.ScheduleStreamResponse {
	return &hourglassv1.ScheduleStreamResponse{Kind: &hourglassv1.ScheduleStreamResponse_Result{Result: &hourglassv1.ScheduleResponse{Id: id}}}
}

// sendAll sends message(i) for i in [0, n) from n goroutines at once and
// returns each one's answer and error, failing the test if they do not
// all return within 10s.
func sendAll(t *testing.T, s *streamSender, n int) ([]*hourglassv1.ScheduleStreamResponse, []error) {
	t.Helper()
	res := make([]*hourglassv1.ScheduleStreamResponse, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res[i], errs[i] = s.do(&hourglassv1.ScheduleStreamRequest{Kind: &hourglassv1.ScheduleStreamRequest_Message{Message: message(i)}})
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the senders did not all return within 10s")
	}
	return res, errs
}

func TestStreamSenderAnswersInOrder(t *testing.T) {
	// The fake answers each message with its body as the ID: every
	// goroutine must get the answer to its own request.
	s := openFake(t, &fakeStreams{answer: func(_ int, req *hourglassv1.ScheduleStreamRequest) (*hourglassv1.ScheduleStreamResponse, error) {
		return result(string(req.GetMessage().Body)), nil
	}}, 64)
	res, errs := sendAll(t, s, 64)
	for i := range res {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if want := fmt.Sprintf("m%d", i); res[i].GetResult().GetId() != want {
			t.Errorf("request %d got the answer %q, want %q", i, res[i].GetResult().GetId(), want)
		}
	}
	s.close() // the server ends the stream after the half-close: returns
}

func TestStreamSenderBroken(t *testing.T) {
	// Three requests are answered, then the server ends the stream with
	// Unavailable: the other senders, in flight or later, get an error.
	const answered = 3
	s := openFake(t, &fakeStreams{answer: func(i int, _ *hourglassv1.ScheduleStreamRequest) (*hourglassv1.ScheduleStreamResponse, error) {
		if i == answered {
			return nil, status.Error(codes.Unavailable, "going away")
		}
		return result("id"), nil
	}}, 16)
	_, errs := sendAll(t, s, 16)
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
		}
	}
	if ok != answered {
		t.Errorf("%d requests answered, want %d (errors %v)", ok, answered, errs)
	}
	if err := s.schedule(context.Background(), message(99)); err == nil {
		t.Error("a Schedule after the stream broke: no error")
	}
	s.close()
}

func TestStreamSenderAnswerErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer *hourglassv1.ScheduleStreamResponse
		batch  bool
		code   codes.Code // codes.OK: any error
	}{
		{"error_status", &hourglassv1.ScheduleStreamResponse{Kind: &hourglassv1.ScheduleStreamResponse_Error{
			Error: &hourglassv1.Status{Code: int32(codes.InvalidArgument), Message: "bad topic"}}}, false, codes.InvalidArgument},
		{"batch_for_message", &hourglassv1.ScheduleStreamResponse{Kind: &hourglassv1.ScheduleStreamResponse_Batch{Batch: &hourglassv1.ScheduleBatchResponse{}}}, false, codes.OK},
		{"result_for_batch", result("id"), true, codes.OK},
		{"short_batch", &hourglassv1.ScheduleStreamResponse{Kind: &hourglassv1.ScheduleStreamResponse_Batch{Batch: &hourglassv1.ScheduleBatchResponse{
			Results: []*hourglassv1.ScheduleResponse{{Id: "a"}}}}}, true, codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openFake(t, &fakeStreams{answer: func(int, *hourglassv1.ScheduleStreamRequest) (*hourglassv1.ScheduleStreamResponse, error) {
				return tc.answer, nil
			}}, 1)
			defer s.close()
			var err error
			if tc.batch {
				err = s.scheduleBatch(context.Background(), []*hourglassv1.ScheduleRequest{message(0), message(1)})
			} else {
				err = s.schedule(context.Background(), message(0))
			}
			if err == nil {
				t.Fatal("no error")
			}
			if tc.code != codes.OK && status.Code(err) != tc.code {
				t.Errorf("error %v, want code %v", err, tc.code)
			}
		})
	}
}
