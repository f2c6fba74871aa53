package serverbench

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/hourglassmq/hourglass/client"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/internal/vtcodec"
)

// scheduler is what the scheduling goroutines call on one server. Its
// methods may be called from any goroutine; each returns once the server
// answered (after the fsync that covers the messages).
type scheduler interface {
	// schedule sends m as a request of its own.
	schedule(ctx context.Context, m *hourglassv1.ScheduleRequest) error
	// scheduleBatch sends msgs as one request, stored all or none.
	scheduleBatch(ctx context.Context, msgs []*hourglassv1.ScheduleRequest) error
}

// poller is what measureSkew and the lateness consumers of grpc and
// connect call, as unary calls. Its methods may be called from any
// goroutine.
type poller interface {
	time(ctx context.Context) (time.Time, error)
	receive(ctx context.Context, req *hourglassv1.ReceiveRequest) ([]*hourglassv1.Message, error)
	ackBatch(ctx context.Context, req *hourglassv1.AckBatchRequest) ([]*hourglassv1.AckResult, error)
}

// grpcAPI makes unary gRPC calls with the generated grpc-go client.
type grpcAPI struct {
	svc hourglassv1.HourglassServiceClient
}

func (a grpcAPI) schedule(ctx context.Context, m *hourglassv1.ScheduleRequest) error {
	_, err := a.svc.Schedule(ctx, m)
	return err
}

func (a grpcAPI) scheduleBatch(ctx context.Context, msgs []*hourglassv1.ScheduleRequest) error {
	res, err := a.svc.ScheduleBatch(ctx, &hourglassv1.ScheduleBatchRequest{Messages: msgs})
	if err != nil {
		return err
	}
	return batchAnswered(len(res.Results), len(msgs))
}

func (a grpcAPI) time(ctx context.Context) (time.Time, error) {
	res, err := a.svc.Time(ctx, &hourglassv1.TimeRequest{})
	if err != nil {
		return time.Time{}, err
	}
	return res.Now.AsTime(), nil
}

func (a grpcAPI) receive(ctx context.Context, req *hourglassv1.ReceiveRequest) ([]*hourglassv1.Message, error) {
	res, err := a.svc.Receive(ctx, req)
	if err != nil {
		return nil, err
	}
	return res.Messages, nil
}

func (a grpcAPI) ackBatch(ctx context.Context, req *hourglassv1.AckBatchRequest) ([]*hourglassv1.AckResult, error) {
	res, err := a.svc.AckBatch(ctx, req)
	if err != nil {
		return nil, err
	}
	return res.Results, nil
}

// connectAPI makes Connect calls (binary protobuf over HTTP/1.1) with the
// generated connect-go client.
type connectAPI struct {
	svc hourglassv1connect.HourglassServiceClient
}

func (a connectAPI) schedule(ctx context.Context, m *hourglassv1.ScheduleRequest) error {
	_, err := a.svc.Schedule(ctx, connect.NewRequest(m))
	return err
}

func (a connectAPI) scheduleBatch(ctx context.Context, msgs []*hourglassv1.ScheduleRequest) error {
	res, err := a.svc.ScheduleBatch(ctx, connect.NewRequest(&hourglassv1.ScheduleBatchRequest{Messages: msgs}))
	if err != nil {
		return err
	}
	return batchAnswered(len(res.Msg.Results), len(msgs))
}

func (a connectAPI) time(ctx context.Context) (time.Time, error) {
	res, err := a.svc.Time(ctx, connect.NewRequest(&hourglassv1.TimeRequest{}))
	if err != nil {
		return time.Time{}, err
	}
	return res.Msg.Now.AsTime(), nil
}

func (a connectAPI) receive(ctx context.Context, req *hourglassv1.ReceiveRequest) ([]*hourglassv1.Message, error) {
	res, err := a.svc.Receive(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return res.Msg.Messages, nil
}

func (a connectAPI) ackBatch(ctx context.Context, req *hourglassv1.AckBatchRequest) ([]*hourglassv1.AckResult, error) {
	res, err := a.svc.AckBatch(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	return res.Msg.Results, nil
}

// mergingAPI schedules through the Go client, which merges concurrent
// Schedules into ScheduleBatch calls (client.WithMaxCalls).
type mergingAPI struct{ c *client.Client }

func (a mergingAPI) schedule(ctx context.Context, m *hourglassv1.ScheduleRequest) error {
	_, err := a.c.Schedule(ctx, clientMessage(m))
	return err
}

func (a mergingAPI) scheduleBatch(ctx context.Context, msgs []*hourglassv1.ScheduleRequest) error {
	ms := make([]client.Message, len(msgs))
	for i, m := range msgs {
		ms[i] = clientMessage(m)
	}
	_, err := a.c.ScheduleBatch(ctx, ms)
	return err
}

// clientMessage is m as package client takes it (the fields this package
// sets).
func clientMessage(m *hourglassv1.ScheduleRequest) client.Message {
	cm := client.Message{Topic: m.Topic, Body: m.Body}
	switch w := m.When.(type) {
	case *hourglassv1.ScheduleRequest_DelayMs:
		cm.Delay = time.Duration(w.DelayMs) * time.Millisecond
	case *hourglassv1.ScheduleRequest_DeliverAt:
		cm.At = w.DeliverAt.AsTime()
	}
	return cm
}

// batchAnswered checks that a batch of n messages got n results.
func batchAnswered(results, n int) error {
	if results != n {
		return fmt.Errorf("the server answered %d results for a batch of %d messages", results, n)
	}
	return nil
}

// maxMsgBytes bounds what the gRPC connections accept in one message: far
// above anything a run asks for.
const maxMsgBytes = 1 << 30

// dialGRPC returns a grpc-go connection to the server at addr (a URL that
// normalize checked): h2c for http://, TLS with the system's roots for
// https://. It connects on the first call.
func dialGRPC(addr, token string) (*grpc.ClientConn, error) {
	target, secure, err := grpcTarget(addr)
	if err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if secure {
		creds = credentials.NewTLS(&tls.Config{})
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// The Go client's codec (package client uses the same).
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgBytes), grpc.MaxCallSendMsgSize(maxMsgBytes), grpc.ForceCodecV2(vtcodec.GRPC{})),
	}
	if token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(bearerCreds(token)))
	}
	cc, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("--addr %s: %w", addr, err)
	}
	return cc, nil
}

// grpcTarget turns a URL into a gRPC target and whether it is TLS.
func grpcTarget(addr string) (target string, secure bool, err error) {
	u, err := url.Parse(addr)
	if err != nil {
		return "", false, fmt.Errorf("--addr %q: %w", addr, err)
	}
	if u.Path != "" && u.Path != "/" {
		return "", false, fmt.Errorf("--addr %q has a path; gRPC needs http://host:port or https://host:port", addr)
	}
	if u.Scheme == "https" && u.Port() == "" {
		return u.Host + ":443", true, nil
	}
	return u.Host, u.Scheme == "https", nil
}

// bearerCreds sends the token with every gRPC call, over plain text too
// (the server's --auth-token is checked on h2c).
type bearerCreds string

func (b bearerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearerCreds) RequireTransportSecurity() bool { return false }

// connectHTTPClient is the HTTP client of the connect protocol: Go's
// default transport, kept to HTTP/1.1 (the server serves Connect on
// HTTP/1.1 only), keeping up to idle connections alive per server so that
// each call in flight reuses one instead of dialing.
func connectHTTPClient(idle int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = idle
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP1(true)
	return &http.Client{Transport: tr}
}

type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// callCounter counts, with a unary interceptor on the Go client's
// connection, the Schedule and ScheduleBatch calls it sends and the
// messages in the ScheduleBatch calls (those it merged).
type callCounter struct{ calls, merged atomic.Int64 }

func (n *callCounter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	switch method {
	case hourglassv1.HourglassService_Schedule_FullMethodName:
		n.calls.Add(1)
	case hourglassv1.HourglassService_ScheduleBatch_FullMethodName:
		n.calls.Add(1)
		n.merged.Add(int64(len(req.(*hourglassv1.ScheduleBatchRequest).Messages)))
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// consumersPerConn is how many lateness consumers share one HTTP/2
// connection: each holds a long poll or a Consume stream open, and the
// server allows 100 per connection by default (serve
// --max-streams-per-conn).
const consumersPerConn = 64

// peers are the clients of one run. dial makes them; close closes them.
type peers struct {
	// scheds has one scheduler per address of Config.Addrs; scheduling
	// goroutine c uses scheds[c%len(scheds)].
	scheds []scheduler
	// polls makes unary calls: Time (polls[0], the first address), and
	// the Receive and AckBatch of lateness consumer i (grpc, connect),
	// which uses polls[consumerConn(i, len(polls))].
	polls []poller
	// consumers are the Go clients whose Consume streams lateness
	// consumer i uses (stream): consumers[consumerConn(i, len(consumers))].
	consumers []*client.Client
	// multi is set against several addresses (a cluster's nodes): the
	// lateness consumers then go round robin over them.
	multi bool
	// counter counts the calls of the merging Go clients (MaxCalls).
	counter *callCounter

	conns   []*grpc.ClientConn
	clients []*client.Client
	streams []*streamSender
	hc      *http.Client
}

// dial makes the clients cfg (normalized) asks for. Nothing connects
// until the first call.
func dial(cfg Config) (_ *peers, err error) {
	p := &peers{}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	addrs := cfg.Addrs()
	p.multi = len(addrs) > 1
	lateness := cfg.Scenario == Lateness || cfg.Scenario == Drain // they receive
	groups := (cfg.Consumers + consumersPerConn - 1) / consumersPerConn
	if cfg.Protocol == ProtocolConnect {
		p.hc = connectHTTPClient(cfg.Clients + cfg.Consumers*(ackers+1))
		var opts []connect.ClientOption
		if cfg.Token != "" {
			opts = append(opts, connect.WithInterceptors(bearer(cfg.Token)))
		}
		for _, a := range addrs {
			p.scheds = append(p.scheds, connectAPI{hourglassv1connect.NewHourglassServiceClient(p.hc, a, opts...)})
		}
		p.polls = []poller{p.scheds[0].(connectAPI)}
		return p, nil
	}
	// grpc and stream: one connection per address for the scheduling
	// goroutines (and Time); stream opens its ScheduleStreams on them.
	for _, a := range addrs {
		cc, err := dialGRPC(a, cfg.Token)
		if err != nil {
			return nil, err
		}
		p.conns = append(p.conns, cc)
		if cfg.Protocol == ProtocolGRPC {
			p.scheds = append(p.scheds, grpcAPI{hourglassv1.NewHourglassServiceClient(cc)})
		}
	}
	p.polls = []poller{grpcAPI{hourglassv1.NewHourglassServiceClient(p.conns[0])}}
	switch {
	case cfg.MaxCalls > 0:
		p.counter = &callCounter{}
		p.scheds = p.scheds[:0]
		for _, a := range addrs {
			cl, err := client.New(a, client.WithToken(cfg.Token), client.WithMaxCalls(cfg.MaxCalls),
				client.WithDialOptions(grpc.WithChainUnaryInterceptor(p.counter.intercept)))
			if err != nil {
				return nil, err
			}
			p.clients = append(p.clients, cl)
			p.scheds = append(p.scheds, mergingAPI{cl})
		}
	case lateness && cfg.Protocol == ProtocolGRPC:
		// The first consumers share the scheduling connection. With
		// several addresses (the nodes of a cluster) each node gets a
		// connection and consumers: consumer i polls connection
		// i mod the connections.
		for g := 1; g < max(groups, len(addrs)); g++ {
			cc, err := dialGRPC(addrs[g%len(addrs)], cfg.Token)
			if err != nil {
				return nil, err
			}
			p.conns = append(p.conns, cc)
			p.polls = append(p.polls, grpcAPI{hourglassv1.NewHourglassServiceClient(cc)})
		}
	case lateness && cfg.Protocol == ProtocolStream:
		for g := range max(groups, len(addrs)) {
			cl, err := client.New(addrs[g%len(addrs)], client.WithToken(cfg.Token))
			if err != nil {
				return nil, err
			}
			p.clients = append(p.clients, cl)
			p.consumers = append(p.consumers, cl)
		}
	}
	return p, nil
}

// openStreams opens, for ProtocolStream, one ScheduleStream per address,
// shared by the scheduling goroutines; they last until ctx ends or close.
func (p *peers) openStreams(ctx context.Context, cfg Config) error {
	addrs := cfg.Addrs()
	for i, cc := range p.conns[:len(addrs)] {
		// Goroutine c sends on stream c%len(addrs): at most this many each.
		s, err := openStream(ctx, hourglassv1.NewHourglassServiceClient(cc), cfg.Clients/len(addrs)+1)
		if err != nil {
			return fmt.Errorf("opening a ScheduleStream to %s: %w", addrs[i], err)
		}
		p.streams = append(p.streams, s)
		p.scheds = append(p.scheds, s)
	}
	return nil
}

// consumerConn is the connection (of conns) that consumer ci uses: the
// consumers in order share one up to consumersPerConn each; against
// several addresses they go round robin over the nodes.
func (p *peers) consumerConn(ci, conns int) int {
	if p.multi {
		return ci % conns
	}
	return ci / consumersPerConn % conns
}

func (p *peers) close() {
	for _, s := range p.streams {
		s.close()
	}
	for _, cl := range p.clients {
		cl.Close()
	}
	for _, cc := range p.conns {
		cc.Close()
	}
	if p.hc != nil {
		p.hc.CloseIdleConnections()
	}
}
