package harness

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// rrClient sends each call to the next live hourglass node in turn; a node
// that refuses the connection (it is down) is skipped for the next. Its
// Connect methods (Schedule, ScheduleBatch, Cancel, Receive, Ack, Nack)
// are those of a Connect client; grpcLane is the same over gRPC. A Receive
// and the Ack or Nack of what it handed out go to different nodes unless
// only one is up: the receipt is JetStream's, settled by any node. Other
// methods are not used in cluster mode.
type rrClient struct {
	hourglassv1connect.HourglassServiceClient // nil: only the methods below are called
	w                                         *workload
	up                                        func() []string
	next                                      atomic.Uint64

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn // gRPC connections by node address; guarded by mu
}

// errNoNode: every node refused; nothing was sent (Rejected).
var errNoNode = fmt.Errorf("crashtest: no hourglass node up: %w", syscall.ECONNREFUSED)

// refused reports whether err says the call never reached a node (Connect
// or gRPC): the next node is tried.
func refused(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Unavailable && strings.Contains(st.Message(), "connection refused")
}

// each calls call on the live nodes in turn from the next one, until one
// does not refuse; call gets the node's address.
func each[T any](c *rrClient, call func(addr string) (T, error)) (T, error) {
	addrs := c.up()
	start := int(c.next.Add(1))
	var zero T
	for j := range addrs {
		res, err := call(addrs[(start+j)%len(addrs)])
		if err != nil && refused(err) {
			continue
		}
		return res, err
	}
	return zero, errNoNode
}

// eachConnect is each with a Connect client of the node.
func eachConnect[Req, Res any](c *rrClient, ctx context.Context, req *Req,
	f func(hourglassv1connect.HourglassServiceClient, context.Context, *connect.Request[Req]) (*connect.Response[Res], error)) (*connect.Response[Res], error) {
	return each(c, func(addr string) (*connect.Response[Res], error) {
		return f(c.w.client(addr), ctx, connect.NewRequest(req))
	})
}

func (c *rrClient) Schedule(ctx context.Context, req *connect.Request[hourglassv1.ScheduleRequest]) (*connect.Response[hourglassv1.ScheduleResponse], error) {
	return eachConnect(c, ctx, req.Msg, hourglassv1connect.HourglassServiceClient.Schedule)
}

func (c *rrClient) ScheduleBatch(ctx context.Context, req *connect.Request[hourglassv1.ScheduleBatchRequest]) (*connect.Response[hourglassv1.ScheduleBatchResponse], error) {
	return eachConnect(c, ctx, req.Msg, hourglassv1connect.HourglassServiceClient.ScheduleBatch)
}

func (c *rrClient) Cancel(ctx context.Context, req *connect.Request[hourglassv1.CancelRequest]) (*connect.Response[hourglassv1.CancelResponse], error) {
	return eachConnect(c, ctx, req.Msg, hourglassv1connect.HourglassServiceClient.Cancel)
}

func (c *rrClient) Receive(ctx context.Context, req *connect.Request[hourglassv1.ReceiveRequest]) (*connect.Response[hourglassv1.ReceiveResponse], error) {
	return eachConnect(c, ctx, req.Msg, hourglassv1connect.HourglassServiceClient.Receive)
}

func (c *rrClient) Ack(ctx context.Context, req *connect.Request[hourglassv1.AckRequest]) (*connect.Response[hourglassv1.AckResponse], error) {
	return eachConnect(c, ctx, req.Msg, hourglassv1connect.HourglassServiceClient.Ack)
}

func (c *rrClient) Nack(ctx context.Context, req *connect.Request[hourglassv1.NackRequest]) (*connect.Response[hourglassv1.NackResponse], error) {
	return eachConnect(c, ctx, req.Msg, hourglassv1connect.HourglassServiceClient.Nack)
}

// grpcClient is a gRPC client of addr, one connection per address for the
// run (a restarted node gets a new address).
func (c *rrClient) grpcClient(addr string) (hourglassv1.HourglassServiceClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conns == nil {
		c.conns = map[string]*grpc.ClientConn{}
	}
	conn := c.conns[addr]
	if conn == nil {
		var err error
		conn, err = grpc.NewClient(strings.TrimPrefix(addr, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		c.conns[addr] = conn
	}
	return hourglassv1.NewHourglassServiceClient(conn), nil
}

// close closes the gRPC connections.
func (c *rrClient) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

// grpcLane is rrClient over gRPC: a unary whose cluster-mode methods go
// round-robin over the live nodes.
type grpcLane struct {
	unary // nil: only the methods below are called
	c     *rrClient
}

func eachGRPC[Req, Res any](l grpcLane, ctx context.Context, req *Req,
	f func(hourglassv1.HourglassServiceClient, context.Context, *Req, ...grpc.CallOption) (*Res, error)) (*Res, error) {
	return each(l.c, func(addr string) (*Res, error) {
		g, err := l.c.grpcClient(addr)
		if err != nil {
			return nil, err
		}
		return f(g, ctx, req)
	})
}

func (l grpcLane) Schedule(ctx context.Context, m *hourglassv1.ScheduleRequest, _ ...grpc.CallOption) (*hourglassv1.ScheduleResponse, error) {
	return eachGRPC(l, ctx, m, hourglassv1.HourglassServiceClient.Schedule)
}

func (l grpcLane) ScheduleBatch(ctx context.Context, m *hourglassv1.ScheduleBatchRequest, _ ...grpc.CallOption) (*hourglassv1.ScheduleBatchResponse, error) {
	return eachGRPC(l, ctx, m, hourglassv1.HourglassServiceClient.ScheduleBatch)
}

func (l grpcLane) Cancel(ctx context.Context, m *hourglassv1.CancelRequest, _ ...grpc.CallOption) (*hourglassv1.CancelResponse, error) {
	return eachGRPC(l, ctx, m, hourglassv1.HourglassServiceClient.Cancel)
}

func (l grpcLane) Receive(ctx context.Context, m *hourglassv1.ReceiveRequest, _ ...grpc.CallOption) (*hourglassv1.ReceiveResponse, error) {
	return eachGRPC(l, ctx, m, hourglassv1.HourglassServiceClient.Receive)
}

func (l grpcLane) Ack(ctx context.Context, m *hourglassv1.AckRequest, _ ...grpc.CallOption) (*hourglassv1.AckResponse, error) {
	return eachGRPC(l, ctx, m, hourglassv1.HourglassServiceClient.Ack)
}

func (l grpcLane) Nack(ctx context.Context, m *hourglassv1.NackRequest, _ ...grpc.CallOption) (*hourglassv1.NackResponse, error) {
	return eachGRPC(l, ctx, m, hourglassv1.HourglassServiceClient.Nack)
}

// lanes are the cluster run's unary lanes: Connect and gRPC, each
// round-robin over the live nodes (no streams).
func (c *rrClient) lanes() lanes {
	return lanes{connect: connectUnary{c}, grpc: grpcLane{c: c}, w: c.w}
}

// receiptSeq is the delivery stream's sequence in a cluster receipt:
// "<ms>/<ack subject>", the subject $JS.ACK.<stream>.<consumer>.<delivered>.
// <stream seq>.<consumer seq>.<time>.<pending> (or with a domain and an
// account hash after ACK, and maybe a token more). 0 if it is not one.
func receiptSeq(receipt string) uint64 {
	_, subj, ok := strings.Cut(receipt, "/")
	if !ok {
		return 0
	}
	toks := strings.Split(subj, ".")
	i := 5 // $JS ACK stream consumer delivered SSEQ
	if len(toks) >= 11 {
		i = 7 // $JS ACK domain acchash stream consumer delivered SSEQ
	}
	if len(toks) < 9 || toks[0] != "$JS" || toks[1] != "ACK" {
		return 0
	}
	n, err := strconv.ParseUint(toks[i], 10, 64)
	if err != nil {
		return 0
	}
	return n
}
