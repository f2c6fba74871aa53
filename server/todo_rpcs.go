package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

func (s *Server) reschedule(ctx context.Context, m *hourglassv1.RescheduleRequest) (*hourglassv1.RescheduleResponse, error) {
	return nil, status.Error(codes.Unimplemented, "Reschedule is not implemented yet")
}

func (s *Server) redrive(ctx context.Context, m *hourglassv1.RedriveRequest) (*hourglassv1.RedriveResponse, error) {
	return nil, status.Error(codes.Unimplemented, "Redrive is not implemented yet")
}

func (s *Server) purge(ctx context.Context, m *hourglassv1.PurgeRequest) (*hourglassv1.PurgeResponse, error) {
	return nil, status.Error(codes.Unimplemented, "Purge is not implemented yet")
}

func (s *Server) deleteTopic(ctx context.Context, m *hourglassv1.DeleteTopicRequest) (*hourglassv1.DeleteTopicResponse, error) {
	return nil, status.Error(codes.Unimplemented, "DeleteTopic is not implemented yet")
}

func (s *Server) topics(ctx context.Context, m *hourglassv1.TopicsRequest) (*hourglassv1.TopicsResponse, error) {
	return nil, status.Error(codes.Unimplemented, "Topics is not implemented yet")
}

func (s *Server) getPolicy(ctx context.Context, m *hourglassv1.GetPolicyRequest) (*hourglassv1.GetPolicyResponse, error) {
	return nil, status.Error(codes.Unimplemented, "GetPolicy is not implemented yet")
}

func (s *Server) setPolicy(ctx context.Context, m *hourglassv1.SetPolicyRequest) (*hourglassv1.SetPolicyResponse, error) {
	return nil, status.Error(codes.Unimplemented, "SetPolicy is not implemented yet")
}

func (s *Server) createSchedule(ctx context.Context, m *hourglassv1.CreateScheduleRequest) (*hourglassv1.CreateScheduleResponse, error) {
	return nil, status.Error(codes.Unimplemented, "CreateSchedule is not implemented yet")
}

func (s *Server) updateSchedule(ctx context.Context, m *hourglassv1.UpdateScheduleRequest) (*hourglassv1.UpdateScheduleResponse, error) {
	return nil, status.Error(codes.Unimplemented, "UpdateSchedule is not implemented yet")
}

func (s *Server) pauseSchedule(ctx context.Context, m *hourglassv1.PauseScheduleRequest) (*hourglassv1.PauseScheduleResponse, error) {
	return nil, status.Error(codes.Unimplemented, "PauseSchedule is not implemented yet")
}

func (s *Server) resumeSchedule(ctx context.Context, m *hourglassv1.ResumeScheduleRequest) (*hourglassv1.ResumeScheduleResponse, error) {
	return nil, status.Error(codes.Unimplemented, "ResumeSchedule is not implemented yet")
}

func (s *Server) deleteSchedule(ctx context.Context, m *hourglassv1.DeleteScheduleRequest) (*hourglassv1.DeleteScheduleResponse, error) {
	return nil, status.Error(codes.Unimplemented, "DeleteSchedule is not implemented yet")
}

func (s *Server) getSchedule(ctx context.Context, m *hourglassv1.GetScheduleRequest) (*hourglassv1.GetScheduleResponse, error) {
	return nil, status.Error(codes.Unimplemented, "GetSchedule is not implemented yet")
}

func (s *Server) listSchedules(ctx context.Context, m *hourglassv1.ListSchedulesRequest) (*hourglassv1.ListSchedulesResponse, error) {
	return nil, status.Error(codes.Unimplemented, "ListSchedules is not implemented yet")
}

func (s *Server) extend(ctx context.Context, m *hourglassv1.ExtendRequest) (*hourglassv1.ExtendResponse, error) {
	return nil, status.Error(codes.Unimplemented, "Extend is not implemented yet")
}
