package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/internal/vtcodec"
)

// connectAPI serves the API on connect-go: Connect (binary and JSON) and
// gRPC-Web over HTTP/1.1 and HTTP/2 (and gRPC, on an HTTP/2 connection
// that a Connect call opened; listen.go). Every method decodes nothing itself and decides
// nothing: it hands the request to api's method of the same name (or its
// stream method) and turns the answer back.
type connectAPI struct{ api api }

var _ hourglassv1connect.HourglassServiceHandler = connectAPI{}

// connectHandler returns the path and handler of the connect-go service.
func (s *Server) connectHandler() (string, http.Handler) {
	return hourglassv1connect.NewHourglassServiceHandler(connectAPI{api{Server: s}},
		s.authGate(),
		connect.WithInterceptors(s.metrics.connectInterceptor(), connectLog{s}, accessConnect{s}),
		connect.WithReadMaxBytes(s.opts.MaxRequestBytes),
		// Binary protobuf through vtprotobuf's reflection-free code.
		connect.WithCodec(vtcodec.Connect{}),
		// JSON that names a field the schema does not have is refused:
		// a misspelt time field ("delayMS") must not mean "deliver now".
		connect.WithCodec(strictJSON{name: "json"}),
		connect.WithCodec(strictJSON{name: "json; charset=utf-8"}),
		connect.WithCompressMinBytes(compressMinBytes),
		connect.WithRecover(func(ctx context.Context, spec connect.Spec, _ http.Header, p any) error {
			s.log.Error("server: panic in handler", "procedure", spec.Procedure, "panic", fmt.Sprint(p))
			return connect.NewError(connect.CodeInternal, errors.New("internal error"))
		}),
	)
}

// strictJSON is connect-go's JSON codec with unknown fields refused.
type strictJSON struct{ name string }

func (c strictJSON) Name() string { return c.name }

func (c strictJSON) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return protojson.MarshalOptions{}.Marshal(pm)
}

func (c strictJSON) Unmarshal(b []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", m)
	}
	if len(b) == 0 {
		// Connect sends an empty body for a message of all defaults.
		return nil
	}
	if err := (protojson.UnmarshalOptions{}).Unmarshal(b, pm); err != nil {
		return fmt.Errorf("%w; the fields are those of %s in proto/hourglass/v1/hourglass.proto, in lowerCamelCase or as written there",
			err, pm.ProtoReflect().Descriptor().Name())
	}
	return nil
}

// toConnect turns the neutral methods' gRPC status errors into connect's.
func toConnect(err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok {
		return connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
	}
	return err
}

// connectCtx is ctx with what the neutral methods need of a connect call.
func connectCtx(ctx context.Context, peer connect.Peer, h http.Header) context.Context {
	return withInfo(ctx, callInfo{conn: peer.Addr, forwarded: h.Get(ForwardedHeader) != "",
		traceparent: h.Get("traceparent"), tracestate: h.Get("tracestate")})
}

// unary serves one unary call through f.
func unary[Req, Res any](ctx context.Context, req *connect.Request[Req], f func(context.Context, *Req) (*Res, error)) (*connect.Response[Res], error) {
	res, err := f(connectCtx(ctx, req.Peer(), req.Header()), req.Msg)
	if err != nil {
		return nil, toConnect(err)
	}
	return connect.NewResponse(res), nil
}

func (a connectAPI) Schedule(ctx context.Context, r *connect.Request[hourglassv1.ScheduleRequest]) (*connect.Response[hourglassv1.ScheduleResponse], error) {
	return unary(ctx, r, a.api.Schedule)
}

func (a connectAPI) ScheduleBatch(ctx context.Context, r *connect.Request[hourglassv1.ScheduleBatchRequest]) (*connect.Response[hourglassv1.ScheduleBatchResponse], error) {
	return unary(ctx, r, a.api.ScheduleBatch)
}

func (a connectAPI) Cancel(ctx context.Context, r *connect.Request[hourglassv1.CancelRequest]) (*connect.Response[hourglassv1.CancelResponse], error) {
	return unary(ctx, r, a.api.Cancel)
}

func (a connectAPI) Receive(ctx context.Context, r *connect.Request[hourglassv1.ReceiveRequest]) (*connect.Response[hourglassv1.ReceiveResponse], error) {
	return unary(ctx, r, a.api.Receive)
}

func (a connectAPI) Ack(ctx context.Context, r *connect.Request[hourglassv1.AckRequest]) (*connect.Response[hourglassv1.AckResponse], error) {
	return unary(ctx, r, a.api.Ack)
}

func (a connectAPI) AckBatch(ctx context.Context, r *connect.Request[hourglassv1.AckBatchRequest]) (*connect.Response[hourglassv1.AckBatchResponse], error) {
	return unary(ctx, r, a.api.AckBatch)
}

func (a connectAPI) Nack(ctx context.Context, r *connect.Request[hourglassv1.NackRequest]) (*connect.Response[hourglassv1.NackResponse], error) {
	return unary(ctx, r, a.api.Nack)
}

func (a connectAPI) Stats(ctx context.Context, r *connect.Request[hourglassv1.StatsRequest]) (*connect.Response[hourglassv1.StatsResponse], error) {
	return unary(ctx, r, a.api.Stats)
}

func (a connectAPI) Time(ctx context.Context, r *connect.Request[hourglassv1.TimeRequest]) (*connect.Response[hourglassv1.TimeResponse], error) {
	return unary(ctx, r, a.api.Time)
}

func (a connectAPI) Get(ctx context.Context, r *connect.Request[hourglassv1.GetRequest]) (*connect.Response[hourglassv1.GetResponse], error) {
	return unary(ctx, r, a.api.Get)
}

func (a connectAPI) List(ctx context.Context, r *connect.Request[hourglassv1.ListRequest]) (*connect.Response[hourglassv1.ListResponse], error) {
	return unary(ctx, r, a.api.List)
}

func (a connectAPI) Edit(ctx context.Context, r *connect.Request[hourglassv1.EditRequest]) (*connect.Response[hourglassv1.EditResponse], error) {
	return unary(ctx, r, a.api.Edit)
}

func (a connectAPI) FreezeMessage(ctx context.Context, r *connect.Request[hourglassv1.FreezeMessageRequest]) (*connect.Response[hourglassv1.FreezeMessageResponse], error) {
	return unary(ctx, r, a.api.FreezeMessage)
}

func (a connectAPI) ThawMessage(ctx context.Context, r *connect.Request[hourglassv1.ThawMessageRequest]) (*connect.Response[hourglassv1.ThawMessageResponse], error) {
	return unary(ctx, r, a.api.ThawMessage)
}

func (a connectAPI) Reschedule(ctx context.Context, r *connect.Request[hourglassv1.RescheduleRequest]) (*connect.Response[hourglassv1.RescheduleResponse], error) {
	return unary(ctx, r, a.api.Reschedule)
}

func (a connectAPI) Redrive(ctx context.Context, r *connect.Request[hourglassv1.RedriveRequest]) (*connect.Response[hourglassv1.RedriveResponse], error) {
	return unary(ctx, r, a.api.Redrive)
}

func (a connectAPI) Purge(ctx context.Context, r *connect.Request[hourglassv1.PurgeRequest]) (*connect.Response[hourglassv1.PurgeResponse], error) {
	return unary(ctx, r, a.api.Purge)
}

func (a connectAPI) DeleteTopic(ctx context.Context, r *connect.Request[hourglassv1.DeleteTopicRequest]) (*connect.Response[hourglassv1.DeleteTopicResponse], error) {
	return unary(ctx, r, a.api.DeleteTopic)
}

func (a connectAPI) Topics(ctx context.Context, r *connect.Request[hourglassv1.TopicsRequest]) (*connect.Response[hourglassv1.TopicsResponse], error) {
	return unary(ctx, r, a.api.Topics)
}

func (a connectAPI) GetPolicy(ctx context.Context, r *connect.Request[hourglassv1.GetPolicyRequest]) (*connect.Response[hourglassv1.GetPolicyResponse], error) {
	return unary(ctx, r, a.api.GetPolicy)
}

func (a connectAPI) SetPolicy(ctx context.Context, r *connect.Request[hourglassv1.SetPolicyRequest]) (*connect.Response[hourglassv1.SetPolicyResponse], error) {
	return unary(ctx, r, a.api.SetPolicy)
}

func (a connectAPI) CreateSchedule(ctx context.Context, r *connect.Request[hourglassv1.CreateScheduleRequest]) (*connect.Response[hourglassv1.CreateScheduleResponse], error) {
	return unary(ctx, r, a.api.CreateSchedule)
}

func (a connectAPI) UpdateSchedule(ctx context.Context, r *connect.Request[hourglassv1.UpdateScheduleRequest]) (*connect.Response[hourglassv1.UpdateScheduleResponse], error) {
	return unary(ctx, r, a.api.UpdateSchedule)
}

func (a connectAPI) PauseSchedule(ctx context.Context, r *connect.Request[hourglassv1.PauseScheduleRequest]) (*connect.Response[hourglassv1.PauseScheduleResponse], error) {
	return unary(ctx, r, a.api.PauseSchedule)
}

func (a connectAPI) ResumeSchedule(ctx context.Context, r *connect.Request[hourglassv1.ResumeScheduleRequest]) (*connect.Response[hourglassv1.ResumeScheduleResponse], error) {
	return unary(ctx, r, a.api.ResumeSchedule)
}

func (a connectAPI) DeleteSchedule(ctx context.Context, r *connect.Request[hourglassv1.DeleteScheduleRequest]) (*connect.Response[hourglassv1.DeleteScheduleResponse], error) {
	return unary(ctx, r, a.api.DeleteSchedule)
}

func (a connectAPI) GetSchedule(ctx context.Context, r *connect.Request[hourglassv1.GetScheduleRequest]) (*connect.Response[hourglassv1.GetScheduleResponse], error) {
	return unary(ctx, r, a.api.GetSchedule)
}

func (a connectAPI) ListSchedules(ctx context.Context, r *connect.Request[hourglassv1.ListSchedulesRequest]) (*connect.Response[hourglassv1.ListSchedulesResponse], error) {
	return unary(ctx, r, a.api.ListSchedules)
}

func (a connectAPI) BackfillSchedule(ctx context.Context, r *connect.Request[hourglassv1.BackfillScheduleRequest]) (*connect.Response[hourglassv1.BackfillScheduleResponse], error) {
	return unary(ctx, r, a.api.BackfillSchedule)
}

func (a connectAPI) CreateCalendar(ctx context.Context, r *connect.Request[hourglassv1.CreateCalendarRequest]) (*connect.Response[hourglassv1.CreateCalendarResponse], error) {
	return unary(ctx, r, a.api.CreateCalendar)
}

func (a connectAPI) UpdateCalendar(ctx context.Context, r *connect.Request[hourglassv1.UpdateCalendarRequest]) (*connect.Response[hourglassv1.UpdateCalendarResponse], error) {
	return unary(ctx, r, a.api.UpdateCalendar)
}

func (a connectAPI) DeleteCalendar(ctx context.Context, r *connect.Request[hourglassv1.DeleteCalendarRequest]) (*connect.Response[hourglassv1.DeleteCalendarResponse], error) {
	return unary(ctx, r, a.api.DeleteCalendar)
}

func (a connectAPI) GetCalendar(ctx context.Context, r *connect.Request[hourglassv1.GetCalendarRequest]) (*connect.Response[hourglassv1.GetCalendarResponse], error) {
	return unary(ctx, r, a.api.GetCalendar)
}

func (a connectAPI) ListCalendars(ctx context.Context, r *connect.Request[hourglassv1.ListCalendarsRequest]) (*connect.Response[hourglassv1.ListCalendarsResponse], error) {
	return unary(ctx, r, a.api.ListCalendars)
}

func (a connectAPI) Extend(ctx context.Context, r *connect.Request[hourglassv1.ExtendRequest]) (*connect.Response[hourglassv1.ExtendResponse], error) {
	return unary(ctx, r, a.api.Extend)
}

func (a connectAPI) WhoAmI(ctx context.Context, r *connect.Request[hourglassv1.WhoAmIRequest]) (*connect.Response[hourglassv1.WhoAmIResponse], error) {
	return unary(ctx, r, a.api.WhoAmI)
}

func (a connectAPI) ListAudit(ctx context.Context, r *connect.Request[hourglassv1.ListAuditRequest]) (*connect.Response[hourglassv1.ListAuditResponse], error) {
	return unary(ctx, r, a.api.ListAudit)
}

func (a connectAPI) ReceiveStream(ctx context.Context, r *connect.Request[hourglassv1.ReceiveStreamRequest], st *connect.ServerStream[hourglassv1.ReceiveStreamResponse]) error {
	return toConnect(a.api.receiveStream(connectCtx(ctx, r.Peer(), r.Header()), r.Msg, st.Send))
}

// connectBidi is a connect bidirectional stream as the neutral methods
// take it.
type connectBidi[Req, Res any] struct{ st *connect.BidiStream[Req, Res] }

func (b connectBidi[Req, Res]) Recv() (*Req, error) { return b.st.Receive() }
func (b connectBidi[Req, Res]) Send(m *Res) error   { return b.st.Send(m) }

func (a connectAPI) ScheduleStream(ctx context.Context, st *connect.BidiStream[hourglassv1.ScheduleStreamRequest, hourglassv1.ScheduleStreamResponse]) error {
	return toConnect(a.api.scheduleStream(connectCtx(ctx, st.Peer(), st.RequestHeader()), connectBidi[hourglassv1.ScheduleStreamRequest, hourglassv1.ScheduleStreamResponse]{st}))
}

func (a connectAPI) Consume(ctx context.Context, st *connect.BidiStream[hourglassv1.ConsumeRequest, hourglassv1.ConsumeResponse]) error {
	return toConnect(a.api.consume(connectCtx(ctx, st.Peer(), st.RequestHeader()), connectBidi[hourglassv1.ConsumeRequest, hourglassv1.ConsumeResponse]{st}))
}

// connectLog logs failed calls as GRPCServer's interceptors do.
type connectLog struct{ s *Server }

func (l connectLog) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		start := time.Now()
		resp, err := next(ctx, req)
		l.s.report(ctx, req.Spec().Procedure, req.Peer().Addr, start, connectCode(err), err)
		return resp, l.s.paths.connectErr(err)
	}
}

func (l connectLog) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (l connectLog) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		start := time.Now()
		err := next(ctx, conn)
		l.s.report(ctx, conn.Spec().Procedure, conn.Peer().Addr, start, connectCode(err), err)
		return l.s.paths.connectErr(err)
	}
}

func connectCode(err error) uint32 {
	if err == nil {
		return 0
	}
	return uint32(connect.CodeOf(err))
}
