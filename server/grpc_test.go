package server

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// unaryAPI is the API's unary RPCs as one protocol's client calls them.
type unaryAPI struct {
	schedule      func(context.Context, *hourglassv1.ScheduleRequest) (*hourglassv1.ScheduleResponse, error)
	scheduleBatch func(context.Context, *hourglassv1.ScheduleBatchRequest) (*hourglassv1.ScheduleBatchResponse, error)
	cancel        func(context.Context, *hourglassv1.CancelRequest) (*hourglassv1.CancelResponse, error)
	receive       func(context.Context, *hourglassv1.ReceiveRequest) (*hourglassv1.ReceiveResponse, error)
	ack           func(context.Context, *hourglassv1.AckRequest) (*hourglassv1.AckResponse, error)
	ackBatch      func(context.Context, *hourglassv1.AckBatchRequest) (*hourglassv1.AckBatchResponse, error)
	nack          func(context.Context, *hourglassv1.NackRequest) (*hourglassv1.NackResponse, error)
	stats         func(context.Context, *hourglassv1.StatsRequest) (*hourglassv1.StatsResponse, error)
	time          func(context.Context, *hourglassv1.TimeRequest) (*hourglassv1.TimeResponse, error)
}

func viaConnect[Req, Res any](f func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error)) func(context.Context, *Req) (*Res, error) {
	return func(ctx context.Context, r *Req) (*Res, error) {
		res, err := f(ctx, connect.NewRequest(r))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
}

func viaGRPC[Req, Res any](f func(context.Context, *Req, ...grpc.CallOption) (*Res, error)) func(context.Context, *Req) (*Res, error) {
	return func(ctx context.Context, r *Req) (*Res, error) { return f(ctx, r) }
}

func connectUnary(c hourglassv1connect.HourglassServiceClient) unaryAPI {
	return unaryAPI{
		schedule: viaConnect(c.Schedule), scheduleBatch: viaConnect(c.ScheduleBatch), cancel: viaConnect(c.Cancel),
		receive: viaConnect(c.Receive), ack: viaConnect(c.Ack), ackBatch: viaConnect(c.AckBatch), nack: viaConnect(c.Nack),
		stats: viaConnect(c.Stats), time: viaConnect(c.Time),
	}
}

func grpcUnary(c hourglassv1.HourglassServiceClient) unaryAPI {
	return unaryAPI{
		schedule: viaGRPC(c.Schedule), scheduleBatch: viaGRPC(c.ScheduleBatch), cancel: viaGRPC(c.Cancel),
		receive: viaGRPC(c.Receive), ack: viaGRPC(c.Ack), ackBatch: viaGRPC(c.AckBatch), nack: viaGRPC(c.Nack),
		stats: viaGRPC(c.Stats), time: viaGRPC(c.Time),
	}
}

// protocols returns the clients of every protocol Serve serves on its one
// address: native gRPC on HTTP/2, and Connect, Connect-JSON and gRPC-Web
// on HTTP/1.1.
func protocols(t *testing.T, s *served) []struct {
	name string
	api  unaryAPI
} {
	return []struct {
		name string
		api  unaryAPI
	}{
		{"grpc", grpcUnary(s.grpcClient(t))},
		{"connect", connectUnary(s.connectClient(t))},
		{"connect-json", connectUnary(s.connectClient(t, connect.WithProtoJSON()))},
		{"grpc-web", connectUnary(s.connectClient(t, connect.WithGRPCWeb()))},
	}
}

// receiveN schedules n messages due now on topic and receives them.
func receiveN(t *testing.T, a unaryAPI, topic string, n int) []*hourglassv1.Message {
	t.Helper()
	ctx := testCtx(t)
	for i := range n {
		if _, err := a.schedule(ctx, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	var got []*hourglassv1.Message
	for len(got) < n {
		res, err := a.receive(ctx, &hourglassv1.ReceiveRequest{Topic: topic, MaxMessages: int32(n - len(got)), WaitMs: 5000})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Messages) == 0 {
			t.Fatalf("received %d of %d messages", len(got), n)
		}
		got = append(got, res.Messages...)
	}
	return got
}

// TestUnaryEveryProtocol runs each unary RPC over every protocol of the
// one port: each answers alike, with the same code and message for bad
// input.
func TestUnaryEveryProtocol(t *testing.T) {
	s := serveTest(t, Options{MaxBody: 1024}, nil)
	protos := protocols(t, s)
	ctx := testCtx(t)
	base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	at := func(d time.Duration) *hourglassv1.ScheduleRequest_DeliverAt {
		return &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(base.Add(d))}
	}
	for _, tc := range []struct {
		name string
		// run makes the calls of the case on topic, checks the answers
		// that succeed, and returns the error of the call under test.
		run  func(t *testing.T, a unaryAPI, topic string) error
		code codes.Code
		msg  string // in the error
	}{
		{name: "schedule", run: func(t *testing.T, a unaryAPI, topic string) error {
			res, err := a.schedule(ctx, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("b"), When: at(0)})
			if err == nil && (len(res.Id) != 32 || !res.DeliverAt.AsTime().Equal(base)) {
				t.Errorf("Schedule = %v, want a 32-digit ID due at %v", res, base)
			}
			return err
		}},
		{name: "schedule_bad_topic", code: codes.InvalidArgument, msg: "topic", run: func(t *testing.T, a unaryAPI, _ string) error {
			_, err := a.schedule(ctx, &hourglassv1.ScheduleRequest{Topic: "a/b"})
			return err
		}},
		{name: "schedule_body_too_big", code: codes.InvalidArgument, msg: "1025 bytes; at most 1024", run: func(t *testing.T, a unaryAPI, topic string) error {
			_, err := a.schedule(ctx, &hourglassv1.ScheduleRequest{Topic: topic, Body: make([]byte, 1025)})
			return err
		}},
		{name: "schedule_negative_delay", code: codes.InvalidArgument, msg: "delay_ms -1", run: func(t *testing.T, a unaryAPI, topic string) error {
			_, err := a.schedule(ctx, &hourglassv1.ScheduleRequest{Topic: topic, When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: -1}})
			return err
		}},
		{name: "schedule_batch", run: func(t *testing.T, a unaryAPI, topic string) error {
			res, err := a.scheduleBatch(ctx, &hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{
				{Topic: topic, When: at(time.Second)}, {Topic: topic, When: at(2 * time.Second)}}})
			if err == nil && (len(res.Results) != 2 || !res.Results[1].DeliverAt.AsTime().Equal(base.Add(2*time.Second))) {
				t.Errorf("ScheduleBatch = %v", res)
			}
			return err
		}},
		{name: "schedule_batch_empty", code: codes.InvalidArgument, msg: "messages is empty", run: func(t *testing.T, a unaryAPI, _ string) error {
			_, err := a.scheduleBatch(ctx, &hourglassv1.ScheduleBatchRequest{})
			return err
		}},
		{name: "schedule_batch_one_bad", code: codes.InvalidArgument, msg: "messages[1]: topic", run: func(t *testing.T, a unaryAPI, topic string) error {
			_, err := a.scheduleBatch(ctx, &hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{{Topic: topic}, {Topic: ""}}})
			return err
		}},
		{name: "cancel", run: func(t *testing.T, a unaryAPI, topic string) error {
			res, err := a.schedule(ctx, &hourglassv1.ScheduleRequest{Topic: topic, When: at(0)})
			if err != nil {
				t.Fatal(err)
			}
			c, err := a.cancel(ctx, &hourglassv1.CancelRequest{Id: res.Id})
			if err == nil && c.Result != hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED {
				t.Errorf("Cancel = %v, want CANCELLED", c.Result)
			}
			return err
		}},
		{name: "cancel_unknown", run: func(t *testing.T, a unaryAPI, _ string) error {
			c, err := a.cancel(ctx, &hourglassv1.CancelRequest{Id: strings.Repeat("0", 31) + "1"})
			if err == nil && c.Result == hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED {
				t.Errorf("Cancel of a message never scheduled = %v", c.Result)
			}
			return err
		}},
		{name: "cancel_bad_id", code: codes.InvalidArgument, msg: "32 hex digits", run: func(t *testing.T, a unaryAPI, _ string) error {
			_, err := a.cancel(ctx, &hourglassv1.CancelRequest{Id: "xyz"})
			return err
		}},
		{name: "receive_ack", run: func(t *testing.T, a unaryAPI, topic string) error {
			m := receiveN(t, a, topic, 1)[0]
			if m.Topic != topic || m.Attempt != 0 || m.Receipt == "" {
				t.Errorf("received %v", m)
			}
			if _, err := a.ack(ctx, &hourglassv1.AckRequest{Topic: topic, Receipt: m.Receipt}); err != nil {
				return err
			}
			res, err := a.receive(ctx, &hourglassv1.ReceiveRequest{Topic: topic})
			if err == nil && len(res.Messages) != 0 {
				t.Errorf("an acked message came again: %v", res.Messages)
			}
			return err
		}},
		{name: "ack_twice", code: codes.FailedPrecondition, msg: "not leased", run: func(t *testing.T, a unaryAPI, topic string) error {
			m := receiveN(t, a, topic, 1)[0]
			if _, err := a.ack(ctx, &hourglassv1.AckRequest{Topic: topic, Id: m.Id}); err != nil {
				t.Fatal(err)
			}
			_, err := a.ack(ctx, &hourglassv1.AckRequest{Topic: topic, Id: m.Id})
			return err
		}},
		{name: "ack_id_and_receipt", code: codes.InvalidArgument, msg: "both id and receipt", run: func(t *testing.T, a unaryAPI, topic string) error {
			_, err := a.ack(ctx, &hourglassv1.AckRequest{Topic: topic, Id: strings.Repeat("0", 32), Receipt: "r"})
			return err
		}},
		{name: "receive_nack", run: func(t *testing.T, a unaryAPI, topic string) error {
			m := receiveN(t, a, topic, 1)[0]
			if _, err := a.nack(ctx, &hourglassv1.NackRequest{Topic: topic, Receipt: m.Receipt}); err != nil {
				return err
			}
			res, err := a.receive(ctx, &hourglassv1.ReceiveRequest{Topic: topic, WaitMs: 5000})
			if err != nil {
				return err
			}
			if len(res.Messages) != 1 || res.Messages[0].Id != m.Id || res.Messages[0].Attempt != 1 {
				t.Errorf("after a nack received %v, want %s again at attempt 1", res.Messages, m.Id)
			}
			return nil
		}},
		{name: "nack_negative_delay", code: codes.InvalidArgument, msg: "delay_ms -5", run: func(t *testing.T, a unaryAPI, topic string) error {
			_, err := a.nack(ctx, &hourglassv1.NackRequest{Topic: topic, Id: strings.Repeat("0", 32), DelayMs: -5})
			return err
		}},
		{name: "ack_batch", run: func(t *testing.T, a unaryAPI, topic string) error {
			msgs := receiveN(t, a, topic, 2)
			res, err := a.ackBatch(ctx, &hourglassv1.AckBatchRequest{Topic: topic, Receipts: []string{msgs[0].Receipt, msgs[1].Receipt, msgs[0].Receipt}})
			if err == nil && (len(res.Results) != 3 || !res.Results[0].Acked || !res.Results[1].Acked || res.Results[2].Acked || res.Results[2].Error == "") {
				t.Errorf("AckBatch = %v, want acked, acked, refused", res.Results)
			}
			return err
		}},
		{name: "ack_batch_empty", code: codes.InvalidArgument, msg: "0 receipts", run: func(t *testing.T, a unaryAPI, topic string) error {
			_, err := a.ackBatch(ctx, &hourglassv1.AckBatchRequest{Topic: topic})
			return err
		}},
		{name: "ack_batch_too_big", code: codes.InvalidArgument, msg: "1001 receipts: send 1 to 1000", run: func(t *testing.T, a unaryAPI, topic string) error {
			_, err := a.ackBatch(ctx, &hourglassv1.AckBatchRequest{Topic: topic, Receipts: make([]string, MaxAckBatch+1)})
			return err
		}},
		{name: "receive_empty", run: func(t *testing.T, a unaryAPI, topic string) error {
			res, err := a.receive(ctx, &hourglassv1.ReceiveRequest{Topic: topic})
			if err == nil && len(res.Messages) != 0 {
				t.Errorf("Receive of an empty topic = %v", res.Messages)
			}
			return err
		}},
		{name: "receive_too_many", code: codes.InvalidArgument, msg: "max_messages 1001", run: func(t *testing.T, a unaryAPI, topic string) error {
			_, err := a.receive(ctx, &hourglassv1.ReceiveRequest{Topic: topic, MaxMessages: 1001})
			return err
		}},
		{name: "receive_long_wait", code: codes.InvalidArgument, msg: "wait_ms 600000", run: func(t *testing.T, a unaryAPI, topic string) error {
			_, err := a.receive(ctx, &hourglassv1.ReceiveRequest{Topic: topic, WaitMs: 600_000})
			return err
		}},
		{name: "stats", run: func(t *testing.T, a unaryAPI, topic string) error {
			receiveN(t, a, topic, 1)
			res, err := a.stats(ctx, &hourglassv1.StatsRequest{})
			if err != nil {
				return err
			}
			i := slices.IndexFunc(res.Topics, func(ts *hourglassv1.TopicStats) bool { return ts.Topic == topic })
			if res.Engine == nil || res.Engine.Scheduled == 0 || i < 0 || res.Topics[i].Leased != 1 || res.ServerTime.AsTime().IsZero() {
				t.Errorf("Stats = %v, want engine counts and %s with 1 leased", res, topic)
			}
			return nil
		}},
		{name: "time", run: func(t *testing.T, a unaryAPI, _ string) error {
			before := time.Now()
			res, err := a.time(ctx, &hourglassv1.TimeRequest{})
			if err == nil && (res.Now.AsTime().Before(before.Truncate(time.Millisecond)) || res.Now.AsTime().After(time.Now())) {
				t.Errorf("Time = %v, not between %v and now", res.Now.AsTime(), before)
			}
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msgs := map[string]string{}
			for _, p := range protos {
				err := tc.run(t, p.api, tc.name+"."+p.name)
				if got := codeOf(err); got != tc.code {
					t.Errorf("%s: code %v (%v), want %v", p.name, got, err, tc.code)
					continue
				}
				msgs[messageOf(err)] = p.name
				if tc.msg != "" && !strings.Contains(messageOf(err), tc.msg) {
					t.Errorf("%s: message %q lacks %q", p.name, messageOf(err), tc.msg)
				}
			}
			if tc.code != codes.OK && len(msgs) > 1 {
				t.Errorf("the protocols answer with different messages: %v", msgs)
			}
		})
	}
	if n := s.eng.Stats().Scheduled; n == 0 {
		t.Error("nothing was scheduled")
	}
}

// TestGRPCAuth: with a token, native gRPC calls and streams need it;
// health and reflection do not.
func TestGRPCAuth(t *testing.T) {
	s := serveTest(t, Options{AuthToken: "s3cret"}, nil)
	cc := s.grpcConn(t)
	c := hourglassv1.NewHourglassServiceClient(cc)
	for _, tc := range []struct {
		name string
		auth string // the authorization metadata; "" for none
		code codes.Code
		msg  string
	}{
		{"no_token", "", codes.Unauthenticated, "Authorization: Bearer"},
		{"wrong_token", "Bearer wrong", codes.Unauthenticated, "wrong bearer token"},
		{"not_bearer", "Basic czNjcmV0", codes.Unauthenticated, "not a bearer token"},
		{"right_token", "Bearer s3cret", codes.OK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			if tc.auth != "" {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", tc.auth)
			}
			_, err := c.Time(ctx, &hourglassv1.TimeRequest{})
			wantStatus(t, "Time", err, tc.code, tc.msg)
			_, err = c.Schedule(ctx, &hourglassv1.ScheduleRequest{Topic: "auth"})
			wantStatus(t, "Schedule", err, tc.code, tc.msg)

			sctx, cancel := context.WithCancel(ctx)
			defer cancel()
			st, err := c.ScheduleStream(sctx)
			if err == nil {
				err = st.Send(&hourglassv1.ScheduleStreamRequest{Kind: &hourglassv1.ScheduleStreamRequest_Message{Message: &hourglassv1.ScheduleRequest{Topic: "auth"}}})
			}
			if err == nil || err == io.EOF {
				_, err = st.Recv()
			}
			wantStatus(t, "ScheduleStream", err, tc.code, tc.msg)
		})
	}
	if n := s.eng.Stats().Scheduled; n != 2 {
		t.Errorf("scheduled %d messages, want the 2 sent with the right token", n)
	}

	// Health's Check and reflection are open; the Watch stream needs the
	// token. Schedules are taken before the engine is ready, so health may
	// still say NOT_SERVING here: a Watch with the token waits for SERVING.
	ctx := testCtx(t)
	wctx, stopWatch := context.WithCancel(ctx)
	hw, err := healthpb.NewHealthClient(cc).Watch(wctx, &healthpb.HealthCheckRequest{Service: serviceName})
	if err == nil {
		_, err = hw.Recv()
	}
	wantStatus(t, "health watch without token", err, codes.Unauthenticated)
	hw, err = healthpb.NewHealthClient(cc).Watch(metadata.AppendToOutgoingContext(wctx, "authorization", "Bearer s3cret"), &healthpb.HealthCheckRequest{Service: serviceName})
	for err == nil {
		var hres *healthpb.HealthCheckResponse
		if hres, err = hw.Recv(); err == nil && hres.Status == healthpb.HealthCheckResponse_SERVING {
			break
		}
	}
	if err != nil {
		t.Errorf("health watch with the token: %v", err)
	}
	stopWatch()
	hres, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: serviceName})
	if err != nil || hres.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health without token: %v, %v", hres, err)
	}
	services := listServices(t, cc)
	for _, want := range []string{serviceName, "grpc.health.v1.Health"} {
		if !slices.Contains(services, want) {
			t.Errorf("reflection lists %v, without %s", services, want)
		}
	}
}

// listServices asks server reflection for the services.
func listServices(t *testing.T, cc *grpc.ClientConn) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	st, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	res, err := st.Recv()
	if err != nil {
		t.Fatalf("reflection: %v", err)
	}
	var out []string
	for _, s := range res.GetListServicesResponse().GetService() {
		out = append(out, s.Name)
	}
	// The schema is served too: a client needs no .proto.
	if err := st.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: serviceName}}); err != nil {
		t.Fatal(err)
	}
	if res, err = st.Recv(); err != nil || len(res.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Errorf("reflection of %s: %v, %v", serviceName, res, err)
	}
	return out
}

// TestGRPCHealth: grpc.health.v1 says NOT_SERVING until the node is
// ready, SERVING then, and NOT_SERVING again from BeginShutdown on, for
// the server ("") and for the API's service.
func TestGRPCHealth(t *testing.T) {
	fc := newFakeCluster(false, nil)
	s := serveTest(t, Options{Cluster: fc}, nil)
	hc := healthpb.NewHealthClient(s.grpcConn(t))
	ctx := testCtx(t)
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: serviceName})
	if err != nil {
		t.Fatal(err)
	}
	next := func() healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		r, err := w.Recv()
		if err != nil {
			t.Fatalf("Watch: %v", err)
		}
		return r.Status
	}
	check := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for _, svc := range []string{"", serviceName} {
			r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || r.Status != want {
				t.Errorf("Check(%q) = %v, %v; want %v", svc, r, err, want)
			}
		}
	}
	if st := next(); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("before ready: %v, want NOT_SERVING", st)
	}
	check(healthpb.HealthCheckResponse_NOT_SERVING)
	close(fc.ready)
	if st := next(); st != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("once ready: %v, want SERVING", st)
	}
	check(healthpb.HealthCheckResponse_SERVING)
	s.srv.BeginShutdown()
	if st := next(); st != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("after BeginShutdown: %v, want NOT_SERVING", st)
	}
	check(healthpb.HealthCheckResponse_NOT_SERVING)
	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "no.such.Service"})
	wantStatus(t, "Check of an unknown service", err, codes.NotFound)
}

// TestUnaryResponsesEqual: a response is the same message on every
// protocol (here Time's, from a fixed clock).
func TestUnaryResponsesEqual(t *testing.T) {
	fixed := time.Date(2031, 5, 6, 7, 8, 9, 123_000_000, time.UTC)
	s := serveTest(t, Options{}, func() time.Time { return fixed })
	var first *hourglassv1.TimeResponse
	for _, p := range protocols(t, s) {
		res, err := p.api.time(testCtx(t), &hourglassv1.TimeRequest{})
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		if !res.Now.AsTime().Equal(fixed) {
			t.Errorf("%s: Time = %v, want the engine's clock %v", p.name, res.Now.AsTime(), fixed)
		}
		if first == nil {
			first = res
		} else if !proto.Equal(first, res) {
			t.Errorf("%s: %v, grpc: %v", p.name, res, first)
		}
	}
}
