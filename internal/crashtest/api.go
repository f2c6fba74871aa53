package crashtest

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// Protocols of the workload's calls, as counted in Summary.Ops.
const (
	protoConnect = "connect" // connect-go (Connect protocol, protobuf) on HTTP/1.1
	protoGRPC    = "grpc"    // grpc-go on HTTP/2: unary calls
	protoStream  = "stream"  // grpc-go on HTTP/2: ScheduleStream or Consume
)

// unary is one protocol's unary calls, with the protocol's wrapping taken
// off: what the workload needs of Connect over HTTP/1.1 and of native
// gRPC alike. Its methods are those of grpc-go's client, so that
// hourglassv1.HourglassServiceClient is one as it is; connectUnary adapts
// connect-go's. Both may be called from any goroutine.
type unary interface {
	Schedule(context.Context, *hourglassv1.ScheduleRequest, ...grpc.CallOption) (*hourglassv1.ScheduleResponse, error)
	ScheduleBatch(context.Context, *hourglassv1.ScheduleBatchRequest, ...grpc.CallOption) (*hourglassv1.ScheduleBatchResponse, error)
	Cancel(context.Context, *hourglassv1.CancelRequest, ...grpc.CallOption) (*hourglassv1.CancelResponse, error)
	Receive(context.Context, *hourglassv1.ReceiveRequest, ...grpc.CallOption) (*hourglassv1.ReceiveResponse, error)
	Ack(context.Context, *hourglassv1.AckRequest, ...grpc.CallOption) (*hourglassv1.AckResponse, error)
	Nack(context.Context, *hourglassv1.NackRequest, ...grpc.CallOption) (*hourglassv1.NackResponse, error)
	Time(context.Context, *hourglassv1.TimeRequest, ...grpc.CallOption) (*hourglassv1.TimeResponse, error)
	// Operating what the server holds: reschedule, edit, redrive, pause and
	// resume, recurring schedules.
	Reschedule(context.Context, *hourglassv1.RescheduleRequest, ...grpc.CallOption) (*hourglassv1.RescheduleResponse, error)
	Edit(context.Context, *hourglassv1.EditRequest, ...grpc.CallOption) (*hourglassv1.EditResponse, error)
	Redrive(context.Context, *hourglassv1.RedriveRequest, ...grpc.CallOption) (*hourglassv1.RedriveResponse, error)
	SetPolicy(context.Context, *hourglassv1.SetPolicyRequest, ...grpc.CallOption) (*hourglassv1.SetPolicyResponse, error)
	CreateSchedule(context.Context, *hourglassv1.CreateScheduleRequest, ...grpc.CallOption) (*hourglassv1.CreateScheduleResponse, error)
	UpdateSchedule(context.Context, *hourglassv1.UpdateScheduleRequest, ...grpc.CallOption) (*hourglassv1.UpdateScheduleResponse, error)
	DeleteSchedule(context.Context, *hourglassv1.DeleteScheduleRequest, ...grpc.CallOption) (*hourglassv1.DeleteScheduleResponse, error)
	CreateCalendar(context.Context, *hourglassv1.CreateCalendarRequest, ...grpc.CallOption) (*hourglassv1.CreateCalendarResponse, error)
}

// connectUnary is unary over connect-go. It takes no call options.
type connectUnary struct {
	c hourglassv1connect.HourglassServiceClient
}

func msgOf[T any](r *connect.Response[T], err error) (*T, error) {
	if err != nil {
		return nil, err
	}
	return r.Msg, nil
}

func (u connectUnary) Schedule(ctx context.Context, m *hourglassv1.ScheduleRequest, _ ...grpc.CallOption) (*hourglassv1.ScheduleResponse, error) {
	return msgOf(u.c.Schedule(ctx, connect.NewRequest(m)))
}

func (u connectUnary) ScheduleBatch(ctx context.Context, m *hourglassv1.ScheduleBatchRequest, _ ...grpc.CallOption) (*hourglassv1.ScheduleBatchResponse, error) {
	return msgOf(u.c.ScheduleBatch(ctx, connect.NewRequest(m)))
}

func (u connectUnary) Cancel(ctx context.Context, m *hourglassv1.CancelRequest, _ ...grpc.CallOption) (*hourglassv1.CancelResponse, error) {
	return msgOf(u.c.Cancel(ctx, connect.NewRequest(m)))
}

func (u connectUnary) Receive(ctx context.Context, m *hourglassv1.ReceiveRequest, _ ...grpc.CallOption) (*hourglassv1.ReceiveResponse, error) {
	return msgOf(u.c.Receive(ctx, connect.NewRequest(m)))
}

func (u connectUnary) Ack(ctx context.Context, m *hourglassv1.AckRequest, _ ...grpc.CallOption) (*hourglassv1.AckResponse, error) {
	return msgOf(u.c.Ack(ctx, connect.NewRequest(m)))
}

func (u connectUnary) Nack(ctx context.Context, m *hourglassv1.NackRequest, _ ...grpc.CallOption) (*hourglassv1.NackResponse, error) {
	return msgOf(u.c.Nack(ctx, connect.NewRequest(m)))
}

func (u connectUnary) Time(ctx context.Context, m *hourglassv1.TimeRequest, _ ...grpc.CallOption) (*hourglassv1.TimeResponse, error) {
	return msgOf(u.c.Time(ctx, connect.NewRequest(m)))
}

func (u connectUnary) Reschedule(ctx context.Context, m *hourglassv1.RescheduleRequest, _ ...grpc.CallOption) (*hourglassv1.RescheduleResponse, error) {
	return msgOf(u.c.Reschedule(ctx, connect.NewRequest(m)))
}

func (u connectUnary) Edit(ctx context.Context, m *hourglassv1.EditRequest, _ ...grpc.CallOption) (*hourglassv1.EditResponse, error) {
	return msgOf(u.c.Edit(ctx, connect.NewRequest(m)))
}

func (u connectUnary) Redrive(ctx context.Context, m *hourglassv1.RedriveRequest, _ ...grpc.CallOption) (*hourglassv1.RedriveResponse, error) {
	return msgOf(u.c.Redrive(ctx, connect.NewRequest(m)))
}

func (u connectUnary) SetPolicy(ctx context.Context, m *hourglassv1.SetPolicyRequest, _ ...grpc.CallOption) (*hourglassv1.SetPolicyResponse, error) {
	return msgOf(u.c.SetPolicy(ctx, connect.NewRequest(m)))
}

func (u connectUnary) CreateSchedule(ctx context.Context, m *hourglassv1.CreateScheduleRequest, _ ...grpc.CallOption) (*hourglassv1.CreateScheduleResponse, error) {
	return msgOf(u.c.CreateSchedule(ctx, connect.NewRequest(m)))
}

func (u connectUnary) UpdateSchedule(ctx context.Context, m *hourglassv1.UpdateScheduleRequest, _ ...grpc.CallOption) (*hourglassv1.UpdateScheduleResponse, error) {
	return msgOf(u.c.UpdateSchedule(ctx, connect.NewRequest(m)))
}

func (u connectUnary) DeleteSchedule(ctx context.Context, m *hourglassv1.DeleteScheduleRequest, _ ...grpc.CallOption) (*hourglassv1.DeleteScheduleResponse, error) {
	return msgOf(u.c.DeleteSchedule(ctx, connect.NewRequest(m)))
}

func (u connectUnary) CreateCalendar(ctx context.Context, m *hourglassv1.CreateCalendarRequest, _ ...grpc.CallOption) (*hourglassv1.CreateCalendarResponse, error) {
	return msgOf(u.c.CreateCalendar(ctx, connect.NewRequest(m)))
}

// callTimeout bounds each unary call of the workload.
const callTimeout = 10 * time.Second

// call makes the unary call f(req) (a method of a unary), bounded by
// callTimeout.
func call[Req, Res any](ctx context.Context, f func(context.Context, *Req, ...grpc.CallOption) (*Res, error), req *Req) (*Res, error) {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return f(cctx, req)
}

// lanes are the ways the workload reaches one server during a cycle:
// unary calls over Connect (HTTP/1.1) or gRPC (HTTP/2), and the gRPC
// streams. In cluster mode each lane goes round-robin over the live nodes
// (rrClient). Workers pick a lane per call with their seeded generator.
type lanes struct {
	connect unary
	grpc    unary
	streams hourglassv1.HourglassServiceClient
	w       *workload // counts the calls by protocol
}

// lane is one protocol's unary calls.
type lane struct {
	unary
	proto string
}

// choose chooses Connect or gRPC for a unary call (counted when sent).
// It draws from rng whether or not there is a choice, so that the draws
// of a worker do not depend on what the lanes are.
func (l lanes) choose(rng *rand.Rand) lane {
	if rng.IntN(2) == 0 || l.grpc == nil {
		return lane{l.connect, protoConnect}
	}
	return lane{l.grpc, protoGRPC}
}

// pick chooses Connect or gRPC for one unary call of op, and counts it.
func (l lanes) pick(op string, rng *rand.Rand) unary {
	ln := l.choose(rng)
	l.w.count(op, ln.proto)
	return ln.unary
}

// dialLanes opens the gRPC connection of one group of workers (producers
// or consumers) to addr, "http://host:port". All their gRPC calls and
// streams share it, so that a kill lands with many streams and calls of
// one HTTP/2 connection in flight.
func (w *workload) dialLanes(addr string) (lanes, *grpc.ClientConn, error) {
	conn, err := grpc.NewClient(strings.TrimPrefix(addr, "http://"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return lanes{}, nil, err
	}
	g := hourglassv1.NewHourglassServiceClient(conn)
	return lanes{connect: connectUnary{w.client(addr)}, grpc: g, streams: g, w: w}, conn, nil
}

// classify turns an RPC error into an outcome: nil is OK; an error the
// server answered with a code that says the request had no effect
// (classifyCode), or a refused connection, is Rejected; anything else (a
// broken connection, a timeout, Unavailable, Internal) is InDoubt. It
// reads connect-go and grpc-go errors alike.
func classify(err error) Outcome {
	if err == nil {
		return OK
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return Rejected
	}
	if st, ok := status.FromError(err); ok {
		// grpc-go fails a call on a connection it could not (re)dial with
		// the dial's error: the call was never sent.
		if st.Code() == codes.Unavailable && strings.Contains(st.Message(), "connection refused") {
			return Rejected
		}
		return classifyCode(st.Code())
	}
	// connect-go's codes are gRPC's, number for number; an error that is
	// not a connect error is CodeUnknown.
	return classifyCode(codes.Code(connect.CodeOf(err)))
}

// classifyCode is classify for a status code the server answered with
// (also the code of a ScheduleStream response's error).
func classifyCode(c codes.Code) Outcome {
	switch c {
	case codes.OK:
		return OK
	case codes.InvalidArgument, codes.FailedPrecondition, codes.NotFound,
		codes.Unauthenticated, codes.PermissionDenied, codes.ResourceExhausted:
		return Rejected
	}
	return InDoubt
}

// codeOf is the status code of an error a server answered with
// (codes.Unknown for one that is not a status, codes.OK for nil).
func codeOf(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	return codes.Code(connect.CodeOf(err))
}

// opCounts counts the workload's calls by operation and protocol
// ("schedule/grpc"). Its methods may be called from any goroutine.
type opCounts struct {
	mu sync.Mutex
	n  map[string]int // guarded by mu
}

func (o *opCounts) add(key string, n int) {
	o.mu.Lock()
	if o.n == nil {
		o.n = map[string]int{}
	}
	o.n[key] += n
	o.mu.Unlock()
}

func (o *opCounts) snapshot() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := make(map[string]int, len(o.n))
	for k, v := range o.n {
		m[k] = v
	}
	return m
}
