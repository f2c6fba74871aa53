package server

import (
	"context"
	"errors"

	"connectrpc.com/connect"
	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Per-RPC metrics: go-grpc-middleware's Prometheus provider counts every
// call by method and status code and times it (grpc_server_started_total,
// grpc_server_handled_total, grpc_server_msg_received_total,
// grpc_server_msg_sent_total, grpc_server_handling_seconds), with a
// "protocol" label: grpc for grpc-go, connect or grpcweb for connect-go.
// connect-go has no Prometheus interceptor of its own, so connectMetrics
// hands each Connect call to the provider's gRPC interceptors: both
// protocols land in the same series, counted by the same code.

// rpcBuckets are grpc_server_handling_seconds' buckets: from a fast unary
// call to a long poll's 20 s and more.
var rpcBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

func newRPCMetrics() *grpcprom.ServerMetrics {
	return grpcprom.NewServerMetrics(
		grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramBuckets(rpcBuckets)),
		grpcprom.WithContextLabels("protocol"),
	)
}

type protocolKey struct{}

// protocolLabel is the provider's WithLabelsFromContext: the protocol
// connectMetrics put in the call's context, else grpc (grpc-go's calls).
func protocolLabel(ctx context.Context) prometheus.Labels {
	p, _ := ctx.Value(protocolKey{}).(string)
	if p == "" {
		p = connect.ProtocolGRPC
	}
	return prometheus.Labels{"protocol": p}
}

// rpcUnary and rpcStream are GRPCServer's outermost interceptors: they see
// every call, those refused for a missing token included.
func (m *Metrics) rpcUnary() grpc.UnaryServerInterceptor {
	return m.rpc.UnaryServerInterceptor(grpcprom.WithLabelsFromContext(protocolLabel))
}

func (m *Metrics) rpcStream() grpc.StreamServerInterceptor {
	return m.rpc.StreamServerInterceptor(grpcprom.WithLabelsFromContext(protocolLabel))
}

// connectMetrics is a connect interceptor that records each call into the
// per-RPC metrics through the provider's gRPC interceptors.
type connectMetrics struct {
	unary  grpc.UnaryServerInterceptor
	stream grpc.StreamServerInterceptor
}

func (m *Metrics) connectInterceptor() connectMetrics {
	return connectMetrics{unary: m.rpcUnary(), stream: m.rpcStream()}
}

func (c connectMetrics) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		var res connect.AnyResponse
		var err error
		ctx = context.WithValue(ctx, protocolKey{}, req.Peer().Protocol)
		c.unary(ctx, req.Any(), &grpc.UnaryServerInfo{FullMethod: req.Spec().Procedure}, func(ctx context.Context, _ any) (any, error) {
			res, err = next(ctx, req)
			if err != nil {
				return nil, grpcStatus(err)
			}
			return res.Any(), nil
		})
		return res, err
	}
}

func (c connectMetrics) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (c connectMetrics) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		spec := conn.Spec()
		info := &grpc.StreamServerInfo{
			FullMethod:     spec.Procedure,
			IsClientStream: spec.StreamType&connect.StreamTypeClient != 0,
			IsServerStream: spec.StreamType&connect.StreamTypeServer != 0,
		}
		ctx = context.WithValue(ctx, protocolKey{}, conn.Peer().Protocol)
		var err error
		c.stream(nil, &connStream{conn: conn, ctx: ctx}, info, func(_ any, ss grpc.ServerStream) error {
			err = next(ss.Context(), &countedConn{StreamingHandlerConn: conn, ss: ss})
			return grpcStatus(err)
		})
		return err
	}
}

// connStream is a connect stream as a grpc.ServerStream, for the
// provider's stream interceptor; headers and trailers stay connect's.
type connStream struct {
	conn connect.StreamingHandlerConn
	ctx  context.Context
}

func (s *connStream) SetHeader(metadata.MD) error  { return nil }
func (s *connStream) SendHeader(metadata.MD) error { return nil }
func (s *connStream) SetTrailer(metadata.MD)       {}
func (s *connStream) Context() context.Context     { return s.ctx }
func (s *connStream) SendMsg(m any) error          { return s.conn.Send(m) }
func (s *connStream) RecvMsg(m any) error          { return s.conn.Receive(m) }

// countedConn sends and receives through the interceptor's stream, which
// counts the messages and calls connStream.
type countedConn struct {
	connect.StreamingHandlerConn
	ss grpc.ServerStream
}

// Send counts m, not a send of the headers alone (m nil).
func (c *countedConn) Send(m any) error {
	if m == nil {
		return c.StreamingHandlerConn.Send(nil)
	}
	return c.ss.SendMsg(m)
}

func (c *countedConn) Receive(m any) error { return c.ss.RecvMsg(m) }

// grpcStatus is err as a gRPC status error of the same code, which the
// provider reads.
func grpcStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Code(connect.CodeOf(err)), err.Error())
}
