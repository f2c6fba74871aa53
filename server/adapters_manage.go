package server

// The adapters of the management and recurring-schedule RPCs: each hands
// the request to the Server's protocol-neutral method, as connect.go and
// grpc.go do for the rest.

import (
	"context"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

func (a connectAPI) Reschedule(ctx context.Context, r *connect.Request[hourglassv1.RescheduleRequest]) (*connect.Response[hourglassv1.RescheduleResponse], error) {
	return unary(ctx, r, a.s.reschedule)
}

func (a grpcAPI) Reschedule(ctx context.Context, r *hourglassv1.RescheduleRequest) (*hourglassv1.RescheduleResponse, error) {
	return a.s.reschedule(ctx, r)
}

func (a connectAPI) Redrive(ctx context.Context, r *connect.Request[hourglassv1.RedriveRequest]) (*connect.Response[hourglassv1.RedriveResponse], error) {
	return unary(ctx, r, a.s.redrive)
}

func (a grpcAPI) Redrive(ctx context.Context, r *hourglassv1.RedriveRequest) (*hourglassv1.RedriveResponse, error) {
	return a.s.redrive(ctx, r)
}

func (a connectAPI) Purge(ctx context.Context, r *connect.Request[hourglassv1.PurgeRequest]) (*connect.Response[hourglassv1.PurgeResponse], error) {
	return unary(ctx, r, a.s.purge)
}

func (a grpcAPI) Purge(ctx context.Context, r *hourglassv1.PurgeRequest) (*hourglassv1.PurgeResponse, error) {
	return a.s.purge(ctx, r)
}

func (a connectAPI) DeleteTopic(ctx context.Context, r *connect.Request[hourglassv1.DeleteTopicRequest]) (*connect.Response[hourglassv1.DeleteTopicResponse], error) {
	return unary(ctx, r, a.s.deleteTopic)
}

func (a grpcAPI) DeleteTopic(ctx context.Context, r *hourglassv1.DeleteTopicRequest) (*hourglassv1.DeleteTopicResponse, error) {
	return a.s.deleteTopic(ctx, r)
}

func (a connectAPI) Topics(ctx context.Context, r *connect.Request[hourglassv1.TopicsRequest]) (*connect.Response[hourglassv1.TopicsResponse], error) {
	return unary(ctx, r, a.s.topics)
}

func (a grpcAPI) Topics(ctx context.Context, r *hourglassv1.TopicsRequest) (*hourglassv1.TopicsResponse, error) {
	return a.s.topics(ctx, r)
}

func (a connectAPI) GetPolicy(ctx context.Context, r *connect.Request[hourglassv1.GetPolicyRequest]) (*connect.Response[hourglassv1.GetPolicyResponse], error) {
	return unary(ctx, r, a.s.getPolicy)
}

func (a grpcAPI) GetPolicy(ctx context.Context, r *hourglassv1.GetPolicyRequest) (*hourglassv1.GetPolicyResponse, error) {
	return a.s.getPolicy(ctx, r)
}

func (a connectAPI) SetPolicy(ctx context.Context, r *connect.Request[hourglassv1.SetPolicyRequest]) (*connect.Response[hourglassv1.SetPolicyResponse], error) {
	return unary(ctx, r, a.s.setPolicy)
}

func (a grpcAPI) SetPolicy(ctx context.Context, r *hourglassv1.SetPolicyRequest) (*hourglassv1.SetPolicyResponse, error) {
	return a.s.setPolicy(ctx, r)
}

func (a connectAPI) CreateSchedule(ctx context.Context, r *connect.Request[hourglassv1.CreateScheduleRequest]) (*connect.Response[hourglassv1.CreateScheduleResponse], error) {
	return unary(ctx, r, a.s.createSchedule)
}

func (a grpcAPI) CreateSchedule(ctx context.Context, r *hourglassv1.CreateScheduleRequest) (*hourglassv1.CreateScheduleResponse, error) {
	return a.s.createSchedule(ctx, r)
}

func (a connectAPI) UpdateSchedule(ctx context.Context, r *connect.Request[hourglassv1.UpdateScheduleRequest]) (*connect.Response[hourglassv1.UpdateScheduleResponse], error) {
	return unary(ctx, r, a.s.updateSchedule)
}

func (a grpcAPI) UpdateSchedule(ctx context.Context, r *hourglassv1.UpdateScheduleRequest) (*hourglassv1.UpdateScheduleResponse, error) {
	return a.s.updateSchedule(ctx, r)
}

func (a connectAPI) PauseSchedule(ctx context.Context, r *connect.Request[hourglassv1.PauseScheduleRequest]) (*connect.Response[hourglassv1.PauseScheduleResponse], error) {
	return unary(ctx, r, a.s.pauseSchedule)
}

func (a grpcAPI) PauseSchedule(ctx context.Context, r *hourglassv1.PauseScheduleRequest) (*hourglassv1.PauseScheduleResponse, error) {
	return a.s.pauseSchedule(ctx, r)
}

func (a connectAPI) ResumeSchedule(ctx context.Context, r *connect.Request[hourglassv1.ResumeScheduleRequest]) (*connect.Response[hourglassv1.ResumeScheduleResponse], error) {
	return unary(ctx, r, a.s.resumeSchedule)
}

func (a grpcAPI) ResumeSchedule(ctx context.Context, r *hourglassv1.ResumeScheduleRequest) (*hourglassv1.ResumeScheduleResponse, error) {
	return a.s.resumeSchedule(ctx, r)
}

func (a connectAPI) DeleteSchedule(ctx context.Context, r *connect.Request[hourglassv1.DeleteScheduleRequest]) (*connect.Response[hourglassv1.DeleteScheduleResponse], error) {
	return unary(ctx, r, a.s.deleteSchedule)
}

func (a grpcAPI) DeleteSchedule(ctx context.Context, r *hourglassv1.DeleteScheduleRequest) (*hourglassv1.DeleteScheduleResponse, error) {
	return a.s.deleteSchedule(ctx, r)
}

func (a connectAPI) GetSchedule(ctx context.Context, r *connect.Request[hourglassv1.GetScheduleRequest]) (*connect.Response[hourglassv1.GetScheduleResponse], error) {
	return unary(ctx, r, a.s.getSchedule)
}

func (a grpcAPI) GetSchedule(ctx context.Context, r *hourglassv1.GetScheduleRequest) (*hourglassv1.GetScheduleResponse, error) {
	return a.s.getSchedule(ctx, r)
}

func (a connectAPI) ListSchedules(ctx context.Context, r *connect.Request[hourglassv1.ListSchedulesRequest]) (*connect.Response[hourglassv1.ListSchedulesResponse], error) {
	return unary(ctx, r, a.s.listSchedules)
}

func (a grpcAPI) ListSchedules(ctx context.Context, r *hourglassv1.ListSchedulesRequest) (*hourglassv1.ListSchedulesResponse, error) {
	return a.s.listSchedules(ctx, r)
}

func (a connectAPI) Extend(ctx context.Context, r *connect.Request[hourglassv1.ExtendRequest]) (*connect.Response[hourglassv1.ExtendResponse], error) {
	return unary(ctx, r, a.s.extend)
}

func (a grpcAPI) Extend(ctx context.Context, r *hourglassv1.ExtendRequest) (*hourglassv1.ExtendResponse, error) {
	return a.s.extend(ctx, r)
}
