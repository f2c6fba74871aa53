package crashtest

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
// Connect methods (those of unary but Time) are those of a Connect client;
// grpcLane is the same over gRPC, and rrStreams opens each stream on the
// next node. A Receive and the Ack or Nack of what it handed out go to
// different nodes unless only one is up: the receipt is JetStream's,
// settled by any node. A Cancel or Reschedule goes to any node, which
// forwards it to the owner of the message's partition; so do the
// recurring-schedule calls. Other methods are not used in cluster mode.
type rrClient struct {
	hourglassv1connect.HourglassServiceClient // nil: only the methods below are called
	w                                         *workload
	up                                        func() []string
	next                                      atomic.Uint64

	mu      sync.Mutex
	conns   map[string]*grpc.ClientConn // gRPC connections by node address; guarded by mu
	consume map[string]int              // Consume streams open by node address; guarded by mu
}

// consuming is how many Consume streams are open on the node at addr
// (opened, not yet ended as the harness reads them).
func (c *rrClient) consuming(addr string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.consume[addr]
}

// trackedConsume is a Consume stream of one node that counts itself in
// rrClient.consume from its opening until its first failed Recv (the
// workload reads every stream until then).
type trackedConsume struct {
	grpc.BidiStreamingClient[hourglassv1.ConsumeRequest, hourglassv1.ConsumeResponse]
	c    *rrClient
	addr string
	once sync.Once
}

func (t *trackedConsume) Recv() (*hourglassv1.ConsumeResponse, error) {
	res, err := t.BidiStreamingClient.Recv()
	if err != nil {
		t.once.Do(func() {
			t.c.mu.Lock()
			t.c.consume[t.addr]--
			t.c.mu.Unlock()
		})
	}
	return res, err
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

func (c *rrClient) Reschedule(ctx context.Context, req *connect.Request[hourglassv1.RescheduleRequest]) (*connect.Response[hourglassv1.RescheduleResponse], error) {
	return eachConnect(c, ctx, req.Msg, hourglassv1connect.HourglassServiceClient.Reschedule)
}

// Redrive, SetPolicy and the recurring-schedule calls: any node serves
// them (a schedule call is forwarded to the owner of its name's partition).

func (c *rrClient) Redrive(ctx context.Context, req *connect.Request[hourglassv1.RedriveRequest]) (*connect.Response[hourglassv1.RedriveResponse], error) {
	return eachConnect(c, ctx, req.Msg, hourglassv1connect.HourglassServiceClient.Redrive)
}

func (c *rrClient) SetPolicy(ctx context.Context, req *connect.Request[hourglassv1.SetPolicyRequest]) (*connect.Response[hourglassv1.SetPolicyResponse], error) {
	return eachConnect(c, ctx, req.Msg, hourglassv1connect.HourglassServiceClient.SetPolicy)
}

func (c *rrClient) CreateSchedule(ctx context.Context, req *connect.Request[hourglassv1.CreateScheduleRequest]) (*connect.Response[hourglassv1.CreateScheduleResponse], error) {
	return eachConnect(c, ctx, req.Msg, hourglassv1connect.HourglassServiceClient.CreateSchedule)
}

func (c *rrClient) UpdateSchedule(ctx context.Context, req *connect.Request[hourglassv1.UpdateScheduleRequest]) (*connect.Response[hourglassv1.UpdateScheduleResponse], error) {
	return eachConnect(c, ctx, req.Msg, hourglassv1connect.HourglassServiceClient.UpdateSchedule)
}

func (c *rrClient) DeleteSchedule(ctx context.Context, req *connect.Request[hourglassv1.DeleteScheduleRequest]) (*connect.Response[hourglassv1.DeleteScheduleResponse], error) {
	return eachConnect(c, ctx, req.Msg, hourglassv1connect.HourglassServiceClient.DeleteSchedule)
}

func (c *rrClient) CreateCalendar(ctx context.Context, req *connect.Request[hourglassv1.CreateCalendarRequest]) (*connect.Response[hourglassv1.CreateCalendarResponse], error) {
	return eachConnect(c, ctx, req.Msg, hourglassv1connect.HourglassServiceClient.CreateCalendar)
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

func (l grpcLane) Reschedule(ctx context.Context, m *hourglassv1.RescheduleRequest, _ ...grpc.CallOption) (*hourglassv1.RescheduleResponse, error) {
	return eachGRPC(l, ctx, m, hourglassv1.HourglassServiceClient.Reschedule)
}

func (l grpcLane) Redrive(ctx context.Context, m *hourglassv1.RedriveRequest, _ ...grpc.CallOption) (*hourglassv1.RedriveResponse, error) {
	return eachGRPC(l, ctx, m, hourglassv1.HourglassServiceClient.Redrive)
}

func (l grpcLane) SetPolicy(ctx context.Context, m *hourglassv1.SetPolicyRequest, _ ...grpc.CallOption) (*hourglassv1.SetPolicyResponse, error) {
	return eachGRPC(l, ctx, m, hourglassv1.HourglassServiceClient.SetPolicy)
}

func (l grpcLane) CreateSchedule(ctx context.Context, m *hourglassv1.CreateScheduleRequest, _ ...grpc.CallOption) (*hourglassv1.CreateScheduleResponse, error) {
	return eachGRPC(l, ctx, m, hourglassv1.HourglassServiceClient.CreateSchedule)
}

func (l grpcLane) UpdateSchedule(ctx context.Context, m *hourglassv1.UpdateScheduleRequest, _ ...grpc.CallOption) (*hourglassv1.UpdateScheduleResponse, error) {
	return eachGRPC(l, ctx, m, hourglassv1.HourglassServiceClient.UpdateSchedule)
}

func (l grpcLane) DeleteSchedule(ctx context.Context, m *hourglassv1.DeleteScheduleRequest, _ ...grpc.CallOption) (*hourglassv1.DeleteScheduleResponse, error) {
	return eachGRPC(l, ctx, m, hourglassv1.HourglassServiceClient.DeleteSchedule)
}

func (l grpcLane) CreateCalendar(ctx context.Context, m *hourglassv1.CreateCalendarRequest, _ ...grpc.CallOption) (*hourglassv1.CreateCalendarResponse, error) {
	return eachGRPC(l, ctx, m, hourglassv1.HourglassServiceClient.CreateCalendar)
}

// rrStreams opens each ScheduleStream or Consume stream on the next live
// node, over its gRPC connection (rrClient.grpcClient); the stream stays
// on that node, so a kill of it breaks the streams it serves. Its other
// methods are not used.
type rrStreams struct {
	hourglassv1.HourglassServiceClient // nil: only the methods below are called
	c                                  *rrClient
}

func (s rrStreams) ScheduleStream(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[hourglassv1.ScheduleStreamRequest, hourglassv1.ScheduleStreamResponse], error) {
	return each(s.c, func(addr string) (grpc.BidiStreamingClient[hourglassv1.ScheduleStreamRequest, hourglassv1.ScheduleStreamResponse], error) {
		g, err := s.c.grpcClient(addr)
		if err != nil {
			return nil, err
		}
		return g.ScheduleStream(ctx, opts...)
	})
}

func (s rrStreams) Consume(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[hourglassv1.ConsumeRequest, hourglassv1.ConsumeResponse], error) {
	return each(s.c, func(addr string) (grpc.BidiStreamingClient[hourglassv1.ConsumeRequest, hourglassv1.ConsumeResponse], error) {
		g, err := s.c.grpcClient(addr)
		if err != nil {
			return nil, err
		}
		st, err := g.Consume(ctx, opts...)
		if err != nil {
			return nil, err
		}
		s.c.mu.Lock()
		if s.c.consume == nil {
			s.c.consume = map[string]int{}
		}
		s.c.consume[addr]++
		s.c.mu.Unlock()
		return &trackedConsume{BidiStreamingClient: st, c: s.c, addr: addr}, nil
	})
}

// lanes are the cluster run's lanes: unary Connect and gRPC, each
// round-robin over the live nodes, and streams each opened on the next
// live node.
func (c *rrClient) lanes() lanes {
	return lanes{connect: connectUnary{c}, grpc: grpcLane{c: c}, streams: rrStreams{c: c}, w: c.w}
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
