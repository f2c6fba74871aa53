package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	_ "google.golang.org/grpc/encoding/gzip" // gRPC clients may compress requests, as Connect clients may
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/internal/vtcodec"
)

// serviceName is the API's gRPC service, for health and logs.
const serviceName = "hourglass.v1.HourglassService"

// streamWorkers is how many goroutines of a GRPCServer serve calls: about
// the calls a loaded server has in flight (64 producers' Schedules).
const streamWorkers = 64

// GRPCServer returns a grpc-go server of the API, with the standard
// grpc.health.v1 service (SERVING once ready, NOT_SERVING before and while
// shutting down) and server reflection (grpcurl and buf curl need no
// .proto). Serve serves it on HTTP/2 connections; a program embedding the
// server may serve it on a listener of its own.
func (s *Server) GRPCServer() *grpc.Server {
	gs := grpc.NewServer(
		// The API's messages go through vtprotobuf's reflection-free code.
		grpc.ForceServerCodecV2(vtcodec.GRPC{}),
		grpc.MaxRecvMsgSize(s.opts.MaxRequestBytes),
		grpc.MaxSendMsgSize(max(s.opts.MaxRequestBytes, 64<<20)),
		grpc.ConnectionTimeout(s.opts.HeaderTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: s.opts.IdleTimeout}),
		// Clients may ping to keep a connection with a long poll alive.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// TLS is Serve's listener's; this hands its state to the calls.
		grpc.Creds(muxTLS{}),
		// Calls run on long-lived workers whose stacks have grown, not
		// on a goroutine per call that grows its stack anew (runtime
		// copystack was 8% of a cluster node's CPU under 64 clients'
		// single Schedules); a call finding every worker busy gets a
		// goroutine as before.
		grpc.NumStreamWorkers(streamWorkers),
		grpc.ChainUnaryInterceptor(s.metrics.rpcUnary(), s.grpcUnary),
		grpc.ChainStreamInterceptor(s.metrics.rpcStream(), s.grpcStream),
	)
	hourglassv1.RegisterHourglassServiceServer(gs, api{Server: s})
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	hs.SetServingStatus(serviceName, healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(gs, healthService{Server: hs, s: s})
	reflection.Register(gs)
	s.life.healthMu.Lock()
	s.life.healths = append(s.life.healths, hs)
	if s.life.shutting.Load() {
		hs.Shutdown()
	}
	s.life.healthMu.Unlock()
	go s.watchHealth(hs)
	return gs
}

// watchHealth makes the health service SERVING once the server is ready;
// BeginShutdown makes it NOT_SERVING for good (health.Server's Shutdown
// ignores every later change).
func (s *Server) watchHealth(hs *health.Server) {
	select {
	case <-s.eng.Ready():
		if !s.life.shutting.Load() {
			hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
			hs.SetServingStatus(serviceName, healthpb.HealthCheckResponse_SERVING)
		}
	case <-s.life.polls.Done():
	}
}

// healthService is grpc-go's health service whose Watch calls end once
// BeginShutdown is called, after a last NOT_SERVING: gRPC clients that
// check health keep a Watch open, and a graceful stop waits for every call.
type healthService struct {
	*health.Server
	s *Server
}

func (h healthService) Watch(in *healthpb.HealthCheckRequest, st healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(st.Context())
	defer cancel()
	stop := context.AfterFunc(h.s.life.polls, cancel)
	defer stop()
	err := h.Server.Watch(in, &watchStream{Health_WatchServer: st, ctx: ctx})
	if h.s.life.polls.Err() == nil || st.Context().Err() != nil {
		return err
	}
	if in.Service == "" || in.Service == serviceName {
		if err := st.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_NOT_SERVING}); err != nil {
			return err
		}
	}
	return status.Error(codes.Unavailable, "the server is shutting down: watch the health of another node or reconnect after it restarts")
}

// watchStream is a Watch call's stream with a context of its own.
type watchStream struct {
	healthpb.Health_WatchServer
	ctx context.Context
}

func (w *watchStream) Context() context.Context { return w.ctx }

// healthWatch is the health service's stream: a client holds it open, so
// it needs the token and counts against the stream limits.
const healthWatch = "/grpc.health.v1.Health/Watch"

// open reports whether a method needs no token: the health service's
// one-shot calls (probes) and reflection.
func open(method string) bool {
	if method == healthWatch {
		return false
	}
	return strings.HasPrefix(method, "/grpc.health.v1.") || strings.HasPrefix(method, "/grpc.reflection.")
}

// grpcCtx authenticates the call and puts its caller and info into ctx.
func (s *Server) grpcCtx(ctx context.Context, method string) (context.Context, string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	addr := ""
	var tlsState *tls.ConnectionState
	if p, ok := peer.FromContext(ctx); ok {
		if p.Addr != nil {
			addr = p.Addr.String()
		}
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			tlsState = &ti.State
		}
	}
	if !open(method) {
		auth := ""
		if v := md.Get("authorization"); len(v) > 0 {
			auth = v[0]
		}
		c, err := s.authenticate(auth, tlsState)
		if err != nil {
			return ctx, addr, status.Error(codes.Unauthenticated, err.Error())
		}
		ctx = context.WithValue(ctx, callerKey{}, c)
	}
	ci := callInfo{conn: addr, forwarded: len(md.Get(ForwardedHeader)) > 0}
	if v := md.Get("traceparent"); len(v) > 0 {
		ci.traceparent = v[0]
		if v := md.Get("tracestate"); len(v) > 0 {
			ci.tracestate = v[0]
		}
	}
	return withInfo(ctx, ci), addr, nil
}

// isAPI reports whether method is one of the API's (not health's or
// reflection's): those are checked against the access rules.
func isAPI(method string) bool { return strings.HasPrefix(method, svc) }

func (s *Server) grpcUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	start := time.Now()
	ctx, addr, err := s.grpcCtx(ctx, info.FullMethod)
	if err == nil && isAPI(info.FullMethod) {
		m, _ := req.(proto.Message)
		err = s.checkAccess(ctx, callerOf(ctx), info.FullMethod, addr, m, false)
	}
	if err == nil {
		func() {
			defer s.recoverGRPC(info.FullMethod, &err)
			resp, err = handler(ctx, req)
		}()
		s.auditCall(ctx, info.FullMethod, addr, req, resp, err)
	}
	s.report(ctx, info.FullMethod, addr, start, uint32(status.Code(err)), err)
	return resp, s.paths.grpcErr(err)
}

func (s *Server) grpcStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	start := time.Now()
	ctx, addr, err := s.grpcCtx(ss.Context(), info.FullMethod)
	if err == nil && !strings.HasPrefix(info.FullMethod, "/"+serviceName+"/") {
		// The health Watch and reflection streams count against the
		// limits as the API's streams do (those take their slot in their
		// handlers, once the request is checked).
		var release func()
		if release, err = s.limits.acquire(addr, streamsWhat); err == nil {
			defer release()
		}
	}
	var st grpc.ServerStream = &ctxStream{ServerStream: ss, ctx: ctx}
	if err == nil && isAPI(info.FullMethod) {
		err = s.checkAccess(ctx, callerOf(ctx), info.FullMethod, addr, nil, true)
		st = accessStream{ServerStream: st, s: s, c: callerOf(ctx), proc: info.FullMethod, peer: addr}
	}
	if err == nil {
		defer s.recoverGRPC(info.FullMethod, &err)
		err = handler(srv, st)
	}
	s.report(ctx, info.FullMethod, addr, start, uint32(status.Code(err)), err)
	return s.paths.grpcErr(err)
}

// recoverGRPC turns a panic in a handler into Internal, as connect-go's
// WithRecover does for the other protocols.
func (s *Server) recoverGRPC(method string, err *error) {
	if p := recover(); p != nil {
		s.log.Error("server: panic in handler", "procedure", method, "panic", fmt.Sprint(p))
		*err = status.Error(codes.Internal, "internal error")
	}
}

// ctxStream is a grpc.ServerStream with the call's info in its context.
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (c *ctxStream) Context() context.Context { return c.ctx }

// api's streams on grpc-go, which hands each its own stream type. Its
// unary methods (rpc.go, manage.go, operate.go, schedules.go) take what
// grpc-go decodes as it is.

func (a api) ReceiveStream(r *hourglassv1.ReceiveStreamRequest, st grpc.ServerStreamingServer[hourglassv1.ReceiveStreamResponse]) error {
	return a.receiveStream(st.Context(), r, func(m *hourglassv1.ReceiveStreamResponse) error {
		if m == nil {
			return st.SendHeader(nil)
		}
		return st.Send(m)
	})
}

func (a api) ScheduleStream(st grpc.BidiStreamingServer[hourglassv1.ScheduleStreamRequest, hourglassv1.ScheduleStreamResponse]) error {
	return a.scheduleStream(st.Context(), st)
}

func (a api) Consume(st grpc.BidiStreamingServer[hourglassv1.ConsumeRequest, hourglassv1.ConsumeResponse]) error {
	return a.consume(st.Context(), st)
}
