package crashtest

import (
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

func TestClassify(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		name string
		err  error
		want Outcome
	}{
		{"nil", nil, OK},
		{"connect_invalid_argument", connect.NewError(connect.CodeInvalidArgument, errors.New("topic")), Rejected},
		{"connect_not_leased", connect.NewError(connect.CodeFailedPrecondition, errors.New("not leased")), Rejected},
		{"connect_unavailable", connect.NewError(connect.CodeUnavailable, errors.New("shutting down")), InDoubt},
		{"connect_refused", connect.NewError(connect.CodeUnavailable, refused), Rejected},
		{"connect_broken", connect.NewError(connect.CodeUnavailable, io.ErrUnexpectedEOF), InDoubt},
		{"grpc_invalid_argument", status.Error(codes.InvalidArgument, "delay_ms -1"), Rejected},
		{"grpc_resource_exhausted", status.Error(codes.ResourceExhausted, "streams"), Rejected},
		{"grpc_refused", status.Error(codes.Unavailable,
			`connection error: desc = "transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused"`), Rejected},
		{"grpc_broken", status.Error(codes.Unavailable, "error reading from server: EOF"), InDoubt},
		{"grpc_internal", status.Error(codes.Internal, "fsync"), InDoubt},
		{"grpc_deadline", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), InDoubt},
		{"grpc_wrapped", fmt.Errorf("call: %w", status.Error(codes.NotFound, "x")), Rejected},
		{"plain", io.EOF, InDoubt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify(tc.err); got != tc.want {
				t.Errorf("classify(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// burst is three requests: a message, a batch of two, a message.
func burst() []burstReq {
	one := func(k string) *hourglassv1.ScheduleRequest {
		return &hourglassv1.ScheduleRequest{Topic: "t", IdempotencyKey: k}
	}
	return []burstReq{
		{single: one("a"), recs: []Schedule{{Key: "a"}}},
		{batch: &hourglassv1.ScheduleBatchRequest{Messages: []*hourglassv1.ScheduleRequest{one("b"), one("c")}}, recs: []Schedule{{Key: "b"}, {Key: "c"}}},
		{single: one("d"), recs: []Schedule{{Key: "d"}}},
	}
}

func result(id string) *hourglassv1.ScheduleStreamResponse {
	return &hourglassv1.ScheduleStreamResponse{Kind: &hourglassv1.ScheduleStreamResponse_Result{Result: &hourglassv1.ScheduleResponse{Id: id}}}
}

func batchResult(ids ...string) *hourglassv1.ScheduleStreamResponse {
	b := &hourglassv1.ScheduleBatchResponse{}
	for _, id := range ids {
		b.Results = append(b.Results, &hourglassv1.ScheduleResponse{Id: id})
	}
	return &hourglassv1.ScheduleStreamResponse{Kind: &hourglassv1.ScheduleStreamResponse_Batch{Batch: b}}
}

func errorAnswer(c codes.Code) *hourglassv1.ScheduleStreamResponse {
	return &hourglassv1.ScheduleStreamResponse{Kind: &hourglassv1.ScheduleStreamResponse_Error{Error: &hourglassv1.Status{Code: int32(c), Message: "no"}}}
}

func TestBurstOutcomes(t *testing.T) {
	broken := status.Error(codes.Unavailable, "error reading from server: EOF")
	refused := status.Error(codes.Unavailable, "connection error: desc = \"transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused\"")
	for _, tc := range []struct {
		name  string
		got   []*hourglassv1.ScheduleStreamResponse
		tried int
		end   error
		want  []Outcome
		ids   [][]string // of the OK ones
	}{
		{"all_answered", []*hourglassv1.ScheduleStreamResponse{result("1"), batchResult("2", "3"), result("4")}, 3, io.EOF,
			[]Outcome{OK, OK, OK}, [][]string{{"1"}, {"2", "3"}, {"4"}}},
		{"broke_after_one", []*hourglassv1.ScheduleStreamResponse{result("1")}, 3, broken,
			[]Outcome{OK, InDoubt, InDoubt}, [][]string{{"1"}}},
		{"broke_before_any", nil, 3, broken, []Outcome{InDoubt, InDoubt, InDoubt}, nil},
		{"ended_cleanly_short", []*hourglassv1.ScheduleStreamResponse{result("1")}, 3, io.EOF,
			[]Outcome{OK, InDoubt, InDoubt}, [][]string{{"1"}}},
		{"refused_connection", nil, 3, refused, []Outcome{Rejected, Rejected, Rejected}, nil},
		{"stream_limit", nil, 3, status.Error(codes.ResourceExhausted, "streams"), []Outcome{Rejected, Rejected, Rejected}, nil},
		{"refused_after_an_answer", []*hourglassv1.ScheduleStreamResponse{result("1")}, 3, status.Error(codes.ResourceExhausted, "x"),
			[]Outcome{OK, InDoubt, InDoubt}, [][]string{{"1"}}},
		{"never_opened", nil, 0, refused, []Outcome{Rejected, Rejected, Rejected}, nil},
		{"send_failed", nil, 1, broken, []Outcome{InDoubt, Rejected, Rejected}, nil},
		{"error_answers", []*hourglassv1.ScheduleStreamResponse{errorAnswer(codes.InvalidArgument), errorAnswer(codes.Unavailable), errorAnswer(codes.OK)}, 3, io.EOF,
			[]Outcome{Rejected, InDoubt, InDoubt}, nil},
		{"wrong_kinds", []*hourglassv1.ScheduleStreamResponse{batchResult("1"), result("2"), {}}, 3, io.EOF,
			[]Outcome{InDoubt, InDoubt, InDoubt}, nil},
		{"batch_short", []*hourglassv1.ScheduleStreamResponse{result("1"), batchResult("2")}, 3, broken,
			[]Outcome{OK, InDoubt, InDoubt}, [][]string{{"1"}}},
		{"more_answers_than_sent", []*hourglassv1.ScheduleStreamResponse{result("1"), batchResult("2", "3")}, 1, io.EOF,
			[]Outcome{InDoubt, InDoubt, InDoubt}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ats := make([]time.Time, len(tc.got))
			for i := range ats {
				ats[i] = at(i)
			}
			out := burstOutcomes(burst(), tc.got, ats, tc.tried, tc.end, at(100))
			var got []Outcome
			var ids [][]string
			for i, a := range out {
				got = append(got, a.out)
				if a.out == OK {
					ids = append(ids, a.ids)
					if !a.at.Equal(at(i)) {
						t.Errorf("request %d answered at %v, want its answer's time %v", i, a.at, at(i))
					}
				} else if i >= len(tc.got) && !a.at.Equal(at(100)) {
					t.Errorf("request %d: at %v, want the stream's end %v", i, a.at, at(100))
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("outcomes %v, want %v", got, tc.want)
			}
			if !slices.EqualFunc(ids, tc.ids, slices.Equal) {
				t.Errorf("ids %v, want %v", ids, tc.ids)
			}
		})
	}
}

func TestCreditLogIssued(t *testing.T) {
	var c creditLog
	c.grant(at(0), 3)
	c.grant(at(10), 2)
	c.grant(at(20), 1)
	for _, tc := range []struct {
		name string
		k    int
		want time.Time
		ok   bool
	}{
		{"first", 1, at(0), true},
		{"last_of_open", 3, at(0), true},
		{"first_of_second_grant", 4, at(10), true},
		{"last_granted", 6, at(20), true},
		{"over_credit", 7, at(20), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := c.issued(tc.k)
			if !got.Equal(tc.want) || ok != tc.ok {
				t.Errorf("issued(%d) = %v, %v; want %v, %v", tc.k, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestSettleOutcome(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    *hourglassv1.AckResult
		want Outcome
	}{
		{"acked", &hourglassv1.AckResult{Acked: true}, OK},
		{"not_leased", &hourglassv1.AckResult{Error: "message not leased (unknown, already settled, or its lease expired)"}, Rejected},
		{"malformed", &hourglassv1.AckResult{Error: `invalid argument: malformed receipt "x": want <32 hex digits>.<hex serial>`}, Rejected},
		{"shutting_down", &hourglassv1.AckResult{Error: "the server is shutting down: retry on another node or after it restarts"}, InDoubt},
		{"storage", &hourglassv1.AckResult{Error: "write ack log: input/output error"}, InDoubt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := settleOutcome(tc.r); got != tc.want {
				t.Errorf("settleOutcome(%v) = %v, want %v", tc.r, got, tc.want)
			}
		})
	}
}
