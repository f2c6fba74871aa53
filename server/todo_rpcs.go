package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

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
