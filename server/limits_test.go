package server

import (
	"context"
	"errors"
	"io"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
)

// longCall is a kind of call the limits count. open makes one on c and
// returns the error it ends with: a refusal, or the end of ctx (for a
// stream), or nil when it answered (a long poll of 1 ms, a ScheduleStream
// request).
type longCall struct {
	name string
	open func(ctx context.Context, c hourglassv1.HourglassServiceClient) error
}

var longCalls = []longCall{
	{"receive_stream", func(ctx context.Context, c hourglassv1.HourglassServiceClient) error {
		st, err := c.ReceiveStream(ctx, &hourglassv1.ReceiveStreamRequest{Topic: "idle"})
		if err != nil {
			return err
		}
		_, err = st.Recv()
		return err
	}},
	{"consume", func(ctx context.Context, c hourglassv1.HourglassServiceClient) error {
		st, err := c.Consume(ctx)
		if err == nil {
			err = st.Send(&hourglassv1.ConsumeRequest{Kind: &hourglassv1.ConsumeRequest_Open{Open: &hourglassv1.ConsumeOpen{Topic: "idle", Credits: 1}}})
		}
		if err == nil || err == io.EOF {
			_, err = st.Recv()
		}
		return err
	}},
	{"schedule_stream", func(ctx context.Context, c hourglassv1.HourglassServiceClient) error {
		st, err := c.ScheduleStream(ctx)
		if err == nil {
			err = st.Send(streamMessage(&hourglassv1.ScheduleRequest{Topic: "limits"}))
		}
		if err == nil || err == io.EOF { // io.EOF: the server ended the stream; Recv says why
			var res *hourglassv1.ScheduleStreamResponse
			if res, err = st.Recv(); err == nil && res.GetResult() == nil {
				return errNoResult
			}
		}
		return err
	}},
	{"long_poll", func(ctx context.Context, c hourglassv1.HourglassServiceClient) error {
		_, err := c.Receive(ctx, &hourglassv1.ReceiveRequest{Topic: "idle", WaitMs: 1})
		return err
	}},
}

var errNoResult = errors.New("ScheduleStream answered without a result")

// try opens lc on c and returns the error the server refuses it with, or
// nil once the server took it (it holds a slot, or it answered); then it
// ends the call and waits until its slot is free again.
func try(t *testing.T, s *served, lc longCall, c hourglassv1.HourglassServiceClient) error {
	t.Helper()
	before := s.srv.limits.open()
	ctx, cancel := context.WithCancel(testCtx(t))
	defer func() {
		cancel()
		waitFor(t, lc.name+" to end", func() bool { return s.srv.limits.open() == before })
	}()
	done := make(chan error, 1)
	go func() { done <- lc.open(ctx, c) }()
	var err error
	waitFor(t, lc.name+" to be refused or taken", func() bool {
		select {
		case err = <-done:
			return true
		default:
			return s.srv.limits.open() > before
		}
	})
	return err
}

// hold opens a ReceiveStream that holds a slot until the test ends or
// the returned func is called, and waits until the server counts it.
func hold(t *testing.T, s *served, c hourglassv1.HourglassServiceClient) (end func()) {
	t.Helper()
	before := s.srv.limits.open()
	ctx, cancel := context.WithCancel(testCtx(t))
	t.Cleanup(cancel)
	if _, err := c.ReceiveStream(ctx, &hourglassv1.ReceiveStreamRequest{Topic: "idle"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stream to take its slot", func() bool { return s.srv.limits.open() == before+1 })
	return cancel
}

// TestStreamLimits: long polls and streams beyond MaxStreamsPerConn on
// one connection, or beyond MaxStreams on the server, are refused with
// ResourceExhausted naming the limit and its flag; other connections (for
// the per-connection limit) still work, and a stream that ends frees its
// slot.
func TestStreamLimits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    Options
		msg     string
		perConn bool // the limit is per connection
	}{
		{"per_connection", Options{MaxStreamsPerConn: 2}, "limit per connection (serve --max-streams-per-conn 2)", true},
		{"server_wide", Options{MaxStreams: 2}, "its limit (serve --max-streams 2)", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := serveTest(t, tc.opts, nil)
			full := s.grpcClient(t) // the connection, or the server, at its limit
			end := hold(t, s, full)
			if tc.perConn {
				hold(t, s, full)
			} else {
				hold(t, s, s.grpcClient(t))
				full = s.grpcClient(t)
			}
			ctx := testCtx(t)
			for _, lc := range longCalls {
				wantStatus(t, lc.name+" beyond the limit", try(t, s, lc, full), codes.ResourceExhausted, tc.msg)
			}
			_, err := s.connectClient(t).Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{Topic: "idle", WaitMs: 1}))
			if tc.perConn {
				if err != nil {
					t.Errorf("Connect long poll on another connection: %v", err)
				}
				other := s.grpcClient(t)
				for _, lc := range longCalls {
					if err := try(t, s, lc, other); err != nil {
						t.Errorf("%s on another connection: %v", lc.name, err)
					}
				}
			} else {
				wantStatus(t, "Connect long poll beyond the limit", err, codes.ResourceExhausted, tc.msg)
			}
			// Unary calls that do not wait are not limited.
			if _, err := full.Receive(ctx, &hourglassv1.ReceiveRequest{Topic: "idle"}); err != nil {
				t.Errorf("Receive without a wait at the limit: %v", err)
			}

			end()
			waitFor(t, "the ended stream's slot freed", func() bool { return s.srv.limits.open() == 1 })
			for _, lc := range longCalls {
				if err := try(t, s, lc, full); err != nil {
					t.Errorf("%s once a slot is free: %v", lc.name, err)
				}
			}
		})
	}
}

// TestPollContextCancelTwice: the cancel of a poll context counts the
// poll out once, however often it is called.
func TestPollContextCancelTwice(t *testing.T) {
	s, err := New(Options{Cluster: newFakeCluster(true, nil)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := s.pollContext(testCtx(t))
	if n := s.life.pollsActive.Load(); n != 1 {
		t.Fatalf("%d polls active, want 1", n)
	}
	cancel()
	cancel()
	if n := s.life.pollsActive.Load(); n != 0 || ctx.Err() == nil {
		t.Errorf("after two cancels: %d polls active (want 0), context %v", n, ctx.Err())
	}
	ctx, cancel = s.pollContext(testCtx(t))
	defer cancel()
	s.BeginShutdown()
	<-ctx.Done() // BeginShutdown ends it
}
