package harness

import (
	"context"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// operateUnary is the unary calls that operate what the server holds
// (reschedule, redrive, pause and resume, recurring schedules), over
// either protocol.
type operateUnary interface {
	Reschedule(context.Context, *hourglassv1.RescheduleRequest, ...grpc.CallOption) (*hourglassv1.RescheduleResponse, error)
	Redrive(context.Context, *hourglassv1.RedriveRequest, ...grpc.CallOption) (*hourglassv1.RedriveResponse, error)
	SetPolicy(context.Context, *hourglassv1.SetPolicyRequest, ...grpc.CallOption) (*hourglassv1.SetPolicyResponse, error)
	CreateSchedule(context.Context, *hourglassv1.CreateScheduleRequest, ...grpc.CallOption) (*hourglassv1.CreateScheduleResponse, error)
	UpdateSchedule(context.Context, *hourglassv1.UpdateScheduleRequest, ...grpc.CallOption) (*hourglassv1.UpdateScheduleResponse, error)
	DeleteSchedule(context.Context, *hourglassv1.DeleteScheduleRequest, ...grpc.CallOption) (*hourglassv1.DeleteScheduleResponse, error)
}

func (u connectUnary) Reschedule(ctx context.Context, m *hourglassv1.RescheduleRequest, _ ...grpc.CallOption) (*hourglassv1.RescheduleResponse, error) {
	return msgOf(u.c.Reschedule(ctx, connect.NewRequest(m)))
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
