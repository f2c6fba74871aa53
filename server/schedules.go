package server

// The recurring-schedule RPCs: CreateSchedule, UpdateSchedule,
// PauseSchedule, ResumeSchedule, DeleteSchedule, GetSchedule and
// ListSchedules, on package recur.

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hourglassmq/hourglass/engine"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/recur"
)

// schedules returns the recurring schedules (a cluster node's, forwarding
// to the owner of the schedule's partition unless the call was forwarded
// here), or Unimplemented.
func (s *Server) schedules(ctx context.Context, rpc string) (recur.Service, error) {
	var sch recur.Service = s.opts.Schedules
	if c := s.opts.Cluster; c != nil {
		sch = c.Schedules(infoOf(ctx).forwarded)
	}
	if sch == nil {
		return nil, status.Errorf(codes.Unimplemented, "%s: recurring schedules are not served here", rpc)
	}
	return sch, nil
}

// scheduleError maps recur's errors to status codes.
func recurError(err error) error {
	switch {
	case errors.Is(err, recur.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, recur.ErrExists):
		return status.Error(codes.AlreadyExists, err.Error())
	case errors.Is(err, recur.ErrInvalid), errors.Is(err, recur.ErrSpec):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, engine.ErrTooFar):
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return serverError(err)
}

// toDef checks a RecurringSchedule and turns it into recur's.
func (s *Server) toDef(m *hourglassv1.RecurringSchedule) (*recur.Def, error) {
	if m == nil {
		return nil, invalid("schedule is missing")
	}
	// Checked as a message is: an occurrence carries an idempotency key
	// (two headers) and the schedule's two headers.
	if len(m.Headers) > message.MaxHeaders-4 {
		return nil, invalid("schedule: %d headers; at most %d (an occurrence adds 4 of its own)", len(m.Headers), message.MaxHeaders-4)
	}
	var req engine.Request
	if err := s.request("schedule", &hourglassv1.ScheduleRequest{Topic: m.Topic, Body: m.Body, Headers: m.Headers, IdempotencyKey: m.Name},
		time.Now(), false, &req); err != nil {
		return nil, err
	}
	d := &recur.Def{Name: m.Name, Topic: m.Topic, Spec: m.Spec, Body: m.Body, TZ: m.TimeZone, Paused: m.Paused}
	for _, h := range req.Headers {
		d.Headers = append(d.Headers, [2]string{string(h.Key), string(h.Value)})
	}
	for _, t := range []struct {
		name string
		ts   *timestamppb.Timestamp
		ms   *int64
	}{{"start", m.Start, &d.StartMs}, {"end", m.End, &d.EndMs}} {
		if t.ts == nil {
			continue
		}
		if err := t.ts.CheckValid(); err != nil {
			return nil, invalid("%s: %v", t.name, err)
		}
		*t.ms = t.ts.AsTime().UnixMilli()
	}
	switch m.MisfirePolicy {
	case hourglassv1.MisfirePolicy_MISFIRE_POLICY_UNSPECIFIED, hourglassv1.MisfirePolicy_MISFIRE_POLICY_FIRE_LATEST:
		d.Misfire = recur.FireOnce
	case hourglassv1.MisfirePolicy_MISFIRE_POLICY_FIRE_ALL:
		d.Misfire = recur.FireAll
	case hourglassv1.MisfirePolicy_MISFIRE_POLICY_SKIP:
		d.Misfire = recur.Skip
	default:
		return nil, invalid("misfire_policy %v: want FIRE_LATEST (the default), FIRE_ALL or SKIP", m.MisfirePolicy)
	}
	if m.JitterMs < 0 || m.JitterMs > recur.MaxJitter.Milliseconds() {
		return nil, invalid("jitter_ms %d: from 0 to %d (7 days)", m.JitterMs, recur.MaxJitter.Milliseconds())
	}
	d.JitterMs = m.JitterMs
	switch m.OverlapPolicy {
	case hourglassv1.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED, hourglassv1.OverlapPolicy_OVERLAP_POLICY_ALLOW:
	case hourglassv1.OverlapPolicy_OVERLAP_POLICY_SKIP:
		d.Overlap = recur.SkipOverlap
	case hourglassv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE:
		d.Overlap = recur.BufferOne
	default:
		return nil, invalid("overlap_policy %v: want ALLOW (the default), SKIP or BUFFER_ONE", m.OverlapPolicy)
	}
	if d.Overlap != "" && s.opts.Cluster != nil {
		// Whether the previous occurrence is acked is the delivery
		// stream's consumers' to say, which a partition does not ask.
		return nil, status.Error(codes.Unimplemented, "overlap_policy: SKIP and BUFFER_ONE are not yet available in cluster mode")
	}
	switch m.CalendarPolicy {
	case hourglassv1.CalendarPolicy_CALENDAR_POLICY_UNSPECIFIED:
	case hourglassv1.CalendarPolicy_CALENDAR_POLICY_SKIP:
		d.CalendarPolicy = recur.CalendarSkip
	case hourglassv1.CalendarPolicy_CALENDAR_POLICY_SHIFT:
		d.CalendarPolicy = recur.CalendarShift
	default:
		return nil, invalid("calendar_policy %v: want SKIP (the default) or SHIFT", m.CalendarPolicy)
	}
	if d.Calendar = m.Calendar; d.Calendar != "" {
		if s.opts.Cluster != nil {
			return nil, status.Error(codes.Unimplemented, "calendar: calendars are not yet available in cluster mode")
		}
		if d.CalendarPolicy == "" {
			d.CalendarPolicy = recur.CalendarSkip
		}
	}
	return d, nil
}

func nextTime(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func (s api) CreateSchedule(ctx context.Context, m *hourglassv1.CreateScheduleRequest) (*hourglassv1.CreateScheduleResponse, error) {
	sch, err := s.schedules(ctx, "CreateSchedule")
	if err != nil {
		return nil, err
	}
	d, err := s.toDef(m.Schedule)
	if err != nil {
		return nil, err
	}
	// A calendar it keeps to is not deleted meanwhile.
	defer s.calendarsLocked(d.Calendar != "")()
	next, err := sch.Create(ctx, d)
	if err != nil {
		return nil, recurError(err)
	}
	return &hourglassv1.CreateScheduleResponse{Next: nextTime(next)}, nil
}

func (s api) UpdateSchedule(ctx context.Context, m *hourglassv1.UpdateScheduleRequest) (*hourglassv1.UpdateScheduleResponse, error) {
	sch, err := s.schedules(ctx, "UpdateSchedule")
	if err != nil {
		return nil, err
	}
	d, err := s.toDef(m.Schedule)
	if err != nil {
		return nil, err
	}
	defer s.calendarsLocked(d.Calendar != "")()
	next, err := sch.Update(ctx, d)
	if err != nil {
		return nil, recurError(err)
	}
	return &hourglassv1.UpdateScheduleResponse{Next: nextTime(next)}, nil
}

func (s api) PauseSchedule(ctx context.Context, m *hourglassv1.PauseScheduleRequest) (*hourglassv1.PauseScheduleResponse, error) {
	sch, err := s.schedules(ctx, "PauseSchedule")
	if err != nil {
		return nil, err
	}
	if err := sch.Pause(ctx, m.Name); err != nil {
		return nil, recurError(err)
	}
	return &hourglassv1.PauseScheduleResponse{}, nil
}

func (s api) ResumeSchedule(ctx context.Context, m *hourglassv1.ResumeScheduleRequest) (*hourglassv1.ResumeScheduleResponse, error) {
	sch, err := s.schedules(ctx, "ResumeSchedule")
	if err != nil {
		return nil, err
	}
	next, err := sch.Resume(ctx, m.Name)
	if err != nil {
		return nil, recurError(err)
	}
	return &hourglassv1.ResumeScheduleResponse{Next: nextTime(next)}, nil
}

func (s api) DeleteSchedule(ctx context.Context, m *hourglassv1.DeleteScheduleRequest) (*hourglassv1.DeleteScheduleResponse, error) {
	sch, err := s.schedules(ctx, "DeleteSchedule")
	if err != nil {
		return nil, err
	}
	if err := sch.Delete(ctx, m.Name); err != nil {
		return nil, recurError(err)
	}
	return &hourglassv1.DeleteScheduleResponse{}, nil
}

func (s api) BackfillSchedule(ctx context.Context, m *hourglassv1.BackfillScheduleRequest) (*hourglassv1.BackfillScheduleResponse, error) {
	sch, err := s.schedules(ctx, "BackfillSchedule")
	if err != nil {
		return nil, err
	}
	var from, to time.Time
	for _, t := range []struct {
		name string
		ts   *timestamppb.Timestamp
		to   *time.Time
	}{{"from", m.From, &from}, {"to", m.To, &to}} {
		if t.ts == nil {
			return nil, invalid("%s is missing: backfill the occurrences from one time up to (not including) another", t.name)
		}
		if err := t.ts.CheckValid(); err != nil {
			return nil, invalid("%s: %v", t.name, err)
		}
		*t.to = t.ts.AsTime()
	}
	b, err := sch.Backfill(ctx, m.Name, from, to)
	if err != nil {
		return nil, recurError(err)
	}
	return &hourglassv1.BackfillScheduleResponse{Stored: int32(b.Stored), Existing: int32(b.Existing)}, nil
}

// maxNextTimes bounds GetScheduleRequest.next_count.
const maxNextTimes = 100

func (s api) GetSchedule(ctx context.Context, m *hourglassv1.GetScheduleRequest) (*hourglassv1.GetScheduleResponse, error) {
	sch, err := s.schedules(ctx, "GetSchedule")
	if err != nil {
		return nil, err
	}
	n := int(m.NextCount)
	if n == 0 {
		n = 5
	}
	if n < 0 || n > maxNextTimes {
		return nil, invalid("next_count %d: from 0 to %d; 0 means 5", m.NextCount, maxNextTimes)
	}
	in, err := sch.Get(ctx, m.Name, n)
	if err != nil {
		return nil, recurError(err)
	}
	return scheduleInfo(in), nil
}

func (s api) ListSchedules(ctx context.Context, m *hourglassv1.ListSchedulesRequest) (*hourglassv1.ListSchedulesResponse, error) {
	sch, err := s.schedules(ctx, "ListSchedules")
	if err != nil {
		return nil, err
	}
	n := int(m.PageSize)
	if n == 0 {
		n = 100
	}
	if n < 1 || n > 1000 {
		return nil, invalid("page_size %d: from 1 to 1000; 0 means 100", m.PageSize)
	}
	if m.Topic != "" {
		if err := checkTopic("", m.Topic); err != nil {
			return nil, err
		}
	}
	ins, next, err := sch.List(ctx, m.PageToken, m.Topic, n, 3)
	if err != nil {
		return nil, recurError(err)
	}
	out := &hourglassv1.ListSchedulesResponse{NextPageToken: next}
	for _, in := range ins {
		out.Schedules = append(out.Schedules, scheduleInfo(in))
	}
	return out, nil
}

// scheduleInfo shows a schedule as the API does.
func scheduleInfo(in recur.Info) *hourglassv1.GetScheduleResponse {
	d := in.Def
	rs := &hourglassv1.RecurringSchedule{Name: d.Name, Topic: d.Topic, Spec: d.Spec, Body: d.Body, TimeZone: d.TZ, Paused: d.Paused}
	for _, h := range d.Headers {
		rs.Headers = append(rs.Headers, &hourglassv1.Header{Key: h[0], Value: h[1]})
	}
	if d.StartMs > 0 {
		rs.Start = timestamppb.New(time.UnixMilli(d.StartMs))
	}
	if d.EndMs > 0 {
		rs.End = timestamppb.New(time.UnixMilli(d.EndMs))
	}
	switch d.Misfire {
	case recur.FireAll:
		rs.MisfirePolicy = hourglassv1.MisfirePolicy_MISFIRE_POLICY_FIRE_ALL
	case recur.Skip:
		rs.MisfirePolicy = hourglassv1.MisfirePolicy_MISFIRE_POLICY_SKIP
	default:
		rs.MisfirePolicy = hourglassv1.MisfirePolicy_MISFIRE_POLICY_FIRE_LATEST
	}
	rs.JitterMs, rs.Calendar = d.JitterMs, d.Calendar
	switch d.Overlap {
	case recur.SkipOverlap:
		rs.OverlapPolicy = hourglassv1.OverlapPolicy_OVERLAP_POLICY_SKIP
	case recur.BufferOne:
		rs.OverlapPolicy = hourglassv1.OverlapPolicy_OVERLAP_POLICY_BUFFER_ONE
	default:
		rs.OverlapPolicy = hourglassv1.OverlapPolicy_OVERLAP_POLICY_ALLOW
	}
	switch {
	case d.Calendar == "":
	case d.CalendarPolicy == recur.CalendarShift:
		rs.CalendarPolicy = hourglassv1.CalendarPolicy_CALENDAR_POLICY_SHIFT
	default:
		rs.CalendarPolicy = hourglassv1.CalendarPolicy_CALENDAR_POLICY_SKIP
	}
	out := &hourglassv1.GetScheduleResponse{Schedule: rs, Fired: d.Fired, Skipped: d.Skipped}
	if d.BufferedMs != 0 {
		out.Buffered = timestamppb.New(time.UnixMilli(d.BufferedMs))
	}
	for _, t := range in.Next {
		out.Next = append(out.Next, timestamppb.New(t))
	}
	if !in.Armed.IsZero() {
		out.ArmedId = in.Armed.String()
	}
	return out
}
