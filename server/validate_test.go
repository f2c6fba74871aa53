package server

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hourglassmq/hourglass/engine"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
	"github.com/hourglassmq/hourglass/recur"
)

// TestServerError: errors the caller did not cause get the code that
// tells a client what to do, however deeply they are wrapped: retry later
// (a full disk, too many open files, failing storage, shutting down), fix
// the request, look at the state; Internal is left for the rest.
func TestServerError(t *testing.T) {
	pathErr := func(op string, err error) error {
		return &fs.PathError{Op: op, Path: "/data/commitlog/00000000000000000000.log", Err: err}
	}
	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
		msg  string // in the message
	}{
		{"enospc", fmt.Errorf("commitlog: append: %w", pathErr("write", syscall.ENOSPC)), codes.ResourceExhausted, "disk is full"},
		{"edquot", pathErr("write", syscall.EDQUOT), codes.ResourceExhausted, "disk is full"},
		{"emfile", fmt.Errorf("queue: topic t: %w", pathErr("open", syscall.EMFILE)), codes.ResourceExhausted, "too many open files"},
		{"enfile", &os.SyscallError{Syscall: "accept", Err: syscall.ENFILE}, codes.ResourceExhausted, "too many open files"},
		{"eio", fmt.Errorf("schedulelog: %w", pathErr("read", syscall.EIO)), codes.Unavailable, "storage is failing"},
		{"erofs", pathErr("open", syscall.EROFS), codes.Unavailable, "storage is failing"},
		{"engine_closed", fmt.Errorf("schedule: %w", engine.ErrClosed), codes.Unavailable, "shutting down"},
		{"queue_closed", fmt.Errorf("ack: %w", queue.ErrClosed), codes.Unavailable, "shutting down"},
		{"canceled", fmt.Errorf("wait: %w", context.Canceled), codes.Canceled, ""},
		{"deadline", context.DeadlineExceeded, codes.DeadlineExceeded, ""},
		{"queue_invalid", fmt.Errorf("%w: lease 13h", queue.ErrInvalid), codes.InvalidArgument, "lease 13h"},
		{"not_leased", fmt.Errorf("ack x: %w", queue.ErrNotLeased), codes.FailedPrecondition, ""},
		{"status_kept", status.Error(codes.NotFound, "no such thing"), codes.NotFound, "no such thing"},
		{"other_errno", pathErr("write", syscall.EBADF), codes.Internal, "bad file descriptor"},
		{"other", errors.New("boom"), codes.Internal, "boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := serverError(tc.err)
			wantStatus(t, tc.err.Error(), err, tc.code, tc.msg)
			// An operating system's error stays in the message, for the
			// operator.
			var errno syscall.Errno
			if s := status.Convert(err).Message(); errors.As(tc.err, &errno) && !strings.Contains(s, tc.err.Error()) {
				t.Errorf("message %q lacks the cause %q", s, tc.err)
			}
		})
	}
}

// TestRequestRejectsNonUTF8: the strings a Schedule keeps are text. The
// vtprotobuf decoder (internal/vtcodec) does not check UTF-8 as the
// protobuf library does, so the server checks the strings it stores.
func TestRequestRejectsNonUTF8(t *testing.T) {
	ts := newTestServer(t, Options{})
	now := time.Now()
	for _, tc := range []struct {
		name string
		m    *hourglassv1.ScheduleRequest
		want string
	}{
		{"header_key", &hourglassv1.ScheduleRequest{Topic: "t", Headers: []*hourglassv1.Header{{Key: "k\xff", Value: "v"}}}, "headers[0] is not valid UTF-8"},
		{"header_value", &hourglassv1.ScheduleRequest{Topic: "t", Headers: []*hourglassv1.Header{{Key: "k", Value: "\xc3"}}}, "headers[0] is not valid UTF-8"},
		{"idempotency_key", &hourglassv1.ScheduleRequest{Topic: "t", IdempotencyKey: "a\x80"}, "idempotency_key is not valid UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r engine.Request
			err := ts.srv.request("", tc.m, now, false, &r)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("request: %v; want InvalidArgument containing %q", err, tc.want)
			}
		})
	}
}

// TestReservedHeaderNames: every header the server gives a meaning to
// has the reserved prefix, so that request refuses it from a client.
func TestReservedHeaderNames(t *testing.T) {
	for _, k := range []string{engine.IdempotencyHeader, engine.IdempotencyTimeHeader, recur.ScheduleHeader, recur.OccurrenceHeader,
		queue.DeadLetterOriginHeader, queue.DeadLetterReasonHeader, queue.DeadLetterErrorHeader, queue.DeadLetterAtHeader, queue.LastErrorHeader} {
		if !message.Reserved(k) {
			t.Errorf("header %q lacks the reserved prefix %q", k, message.ReservedPrefix)
		}
	}
	ts := newTestServer(t, Options{})
	var r engine.Request
	err := ts.srv.request("", &hourglassv1.ScheduleRequest{Topic: "t", Headers: []*hourglassv1.Header{{Key: "a", Value: "1"}, {Key: "HOURGLASS-IDEMPOTENCY-KEY", Value: "k"}}}, time.Now(), false, &r)
	wantStatus(t, "a reserved header", err, codes.InvalidArgument, `headers[1] "HOURGLASS-IDEMPOTENCY-KEY"`, "reserved", "set idempotency_key")
}
