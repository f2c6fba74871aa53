// Package client is the Go client of an Hourglass server: Schedule and
// Cancel delayed messages, a batching asynchronous Producer, and Consume,
// a loop that receives due messages, calls a handler, and acks or nacks.
//
// It speaks Connect's protocol (binary protobuf) over HTTP/1.1, which every
// Hourglass listener answers; no HTTP/2 setup is needed. Schedule and
// ScheduleBatch, the calls producers make at high rates, are sent by this
// package itself (encoded by internal/wirecodec, POSTed with
// http.Client.Do) rather than through connect-go's client, with the same
// bytes on the wire and the same errors; every other call goes through
// connect-go. Any WithConnectOptions keeps connect-go for every call.
//
// # Errors
//
// An error the server answered is a *connect.Error wrapped with the name of
// the call ("client: Schedule: ..."); classify it with connect.CodeOf(err)
// or errors.As(err, &connectErr): connect.CodeInvalidArgument for bad input
// (the message says what was wrong and what is allowed),
// connect.CodeUnauthenticated for a missing or wrong token,
// connect.CodeFailedPrecondition for an Ack or Nack of a message not leased.
// Mistakes this package catches before sending (two delivery times in one
// Message, say) wrap ErrInvalidMessage.
package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/internal/wirecodec"
)

// DefaultAddr is where New connects when given an empty address: the
// address `hourglass serve` listens on by default.
const DefaultAddr = "http://127.0.0.1:7420"

// ErrInvalidMessage is wrapped by errors about a Message this package
// refuses before sending it.
var ErrInvalidMessage = errors.New("client: invalid message")

// Client talks to one Hourglass server. It is safe for concurrent use by
// any number of goroutines.
type Client struct {
	svc   hourglassv1connect.HourglassServiceClient
	merge *coalescer // nil: every Schedule is its own call
}

type config struct {
	token     string
	http      connect.HTTPClient
	connOpts  []connect.ClientOption
	maxCalls  int
	pipeConns int
}

// Option configures New.
type Option func(*config)

// WithToken sends "Authorization: Bearer token" with every call, for a
// server started with --auth-token.
func WithToken(token string) Option { return func(c *config) { c.token = token } }

// WithHTTPClient makes the client send its calls through hc instead of
// its own HTTP/1.1 client (for TLS settings, proxies or an h2c transport).
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.http = hc } }

// WithMaxCalls sets how many Schedule calls the client keeps in flight at
// once, default DefaultMaxCalls. A Schedule made while fewer are in
// flight is sent at once as its own Schedule call; Schedules made while n
// are in flight wait for one of them to end, and are then sent together
// as one ScheduleBatch. Each caller still gets its own ID or error, and a
// lone caller is never delayed; many concurrent callers get far more
// messages through, because one call carries many messages.
// n <= 0 turns merging off: every Schedule is its own call, however many
// are in flight.
//
// A message with an IdempotencyKey is never merged: a cluster
// (docs/CLUSTER.md) deduplicates keys per request, so that a retried
// Schedule with the same key must be sent as the same request.
//
// A merged call is atomic on the server. If it is refused as
// InvalidArgument (nothing stored), its messages are sent again one by
// one, so that only the faulty message's caller gets the error. Any
// other error reaches every caller of the call. A caller whose ctx ends
// while its message waits is answered with ctx.Err() and its message is
// not sent; once sent, the call goes on while any of its callers waits.
func WithMaxCalls(n int) Option { return func(c *config) { c.maxCalls = n } }

// WithPipelining sends Schedule and ScheduleBatch calls pipelined over at
// most conns HTTP/1.1 connections per server, instead of one connection
// per call in flight. Use it when many goroutines make single calls at
// once: 64 goroutines calling Schedule then share, say, 4 or 8
// connections, and the calls queued on a connection while a write is
// under way leave together in one write, which saves most of the system
// calls of the client and of the server (docs/BENCHMARKS.md). Each call
// is still its own request with its own answer, answered in the order
// sent; nothing is merged (merging messages into ScheduleBatch calls is
// WithMaxCalls, which may be combined with this). A connection carries at
// most 64 calls at once; a call that finds every connection full waits.
//
// A call whose ctx ends returns ctx's error at once; if its request was
// already queued it is still sent and its answer is dropped, and the
// calls sharing its connection go on. When a connection ends while calls
// on it wait for answers (the server restarted, say): a call whose
// request was not yet written goes on another connection; a call sent
// with an Idempotency-Key header is sent again once; any other call fails
// with an error saying it was sent and may have been processed, and is
// never sent twice (a Schedule may have been stored). A connection with
// no call waiting is closed after 90 s.
//
// conns <= 0 (the default) turns pipelining off. It applies to the HTTP
// client New builds; with WithHTTPClient it is ignored: give that option
// a client from NewPipelinedHTTPClient instead. Calls other than Schedule
// and ScheduleBatch, and any call made through connect-go (with
// WithConnectOptions), are not pipelined.
func WithPipelining(conns int) Option { return func(c *config) { c.pipeConns = conns } }

// WithConnectOptions adds connect-go client options, such as interceptors
// or connect.WithGRPC() (which needs an HTTP/2 capable WithHTTPClient).
// With any of them, Schedule and ScheduleBatch also go through connect-go,
// so that the options apply to them.
func WithConnectOptions(opts ...connect.ClientOption) Option {
	return func(c *config) { c.connOpts = append(c.connOpts, opts...) }
}

// New returns a client of the server at addr ("http://host:port" or
// "https://host:port"; DefaultAddr when empty). It does not connect: the
// first call does.
func New(addr string, opts ...Option) *Client {
	if addr == "" {
		addr = DefaultAddr
	}
	cfg := config{maxCalls: DefaultMaxCalls}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.http == nil {
		// Producers and consumers keep several calls in flight; the
		// default of 2 idle connections per host would churn.
		cfg.http = NewPipelinedHTTPClient(64, cfg.pipeConns)
	}
	// The codec decodes ScheduleBatch answers with a few allocations per
	// batch instead of three per message; options given after it win.
	copts := append([]connect.ClientOption{connect.WithCodec(wirecodec.Codec{})}, cfg.connOpts...)
	if cfg.token != "" {
		copts = append([]connect.ClientOption{connect.WithInterceptors(bearer(cfg.token))}, copts...)
	}
	c := &Client{svc: hourglassv1connect.NewHourglassServiceClient(cfg.http, addr, copts...)}
	// Without options of the caller's, connect-go would speak the default
	// protocol with no interceptor but the token's: the direct path sends
	// the hot calls exactly so, at a fraction of the CPU.
	if len(cfg.connOpts) == 0 {
		if d := newDirect(c.svc, cfg.http, addr, cfg.token); d != nil {
			c.svc = d
		}
	}
	if cfg.maxCalls > 0 {
		c.merge = newCoalescer(c.svc, cfg.maxCalls)
	}
	return c
}

// bearer adds the token to every unary and streaming call.
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

// Service returns the service client the Client uses, for the calls this
// package does not wrap (ReceiveStream, Time): connect-go's generated
// client, whose Schedule and ScheduleBatch are this package's own unless
// connect options were given (see the package doc).
func (c *Client) Service() hourglassv1connect.HourglassServiceClient { return c.svc }

// Message is one message to schedule. At most one of Delay, At and Level
// is set; none means deliver now.
type Message struct {
	Topic   string
	Body    []byte
	Headers map[string]string
	// Delay is counted from the server's clock when the request arrives,
	// rounded up to whole milliseconds (never early).
	Delay time.Duration
	// At is an absolute delivery time; a time in the past is due at once.
	At time.Time
	// Level is a RocketMQ-style delay level, 1-based, mapped by the
	// server's --delay-levels (level 3 is 10s by default).
	Level int
	// IdempotencyKey, if set (at most 200 bytes), lets Schedule be retried
	// safely: within the server's --idempotency-window a second Schedule
	// of the same topic and key returns the first message's ID and stores
	// nothing, even if the server crashed in between.
	IdempotencyKey string
}

// request checks m and builds its protobuf form.
func (m *Message) request() (*hourglassv1.ScheduleRequest, error) {
	set := 0
	for _, b := range []bool{m.Delay != 0, !m.At.IsZero(), m.Level != 0} {
		if b {
			set++
		}
	}
	if set > 1 {
		return nil, fmt.Errorf("%w: Delay %v, At %v and Level %d: set at most one of them", ErrInvalidMessage, m.Delay, m.At, m.Level)
	}
	r := &hourglassv1.ScheduleRequest{Topic: m.Topic, Body: m.Body, IdempotencyKey: m.IdempotencyKey}
	for k, v := range m.Headers {
		r.Headers = append(r.Headers, &hourglassv1.Header{Key: k, Value: v})
	}
	switch {
	case m.Delay < 0:
		return nil, fmt.Errorf("%w: Delay %v is negative; use 0 (or nothing) for now", ErrInvalidMessage, m.Delay)
	case m.Delay > 0:
		r.When = &hourglassv1.ScheduleRequest_DelayMs{DelayMs: int64((m.Delay + time.Millisecond - 1) / time.Millisecond)}
	case !m.At.IsZero():
		r.When = &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(m.At)}
	case m.Level < 0:
		return nil, fmt.Errorf("%w: Level %d: levels start at 1", ErrInvalidMessage, m.Level)
	case m.Level > 0:
		r.When = &hourglassv1.ScheduleRequest_DelayLevel{DelayLevel: int32(m.Level)}
	}
	return r, nil
}

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("client: %s: %w", op, err)
}

// Schedule stores one message and returns its ID (32 hex digits) once the
// server has made it durable under its fsync policy. Concurrent Schedules
// beyond WithMaxCalls share ScheduleBatch calls (see there).
func (c *Client) Schedule(ctx context.Context, m Message) (string, error) {
	req, err := m.request()
	if err != nil {
		return "", err
	}
	// A message with an idempotency key goes in its own call: in cluster
	// mode a key is deduplicated only against a resend of the same
	// request, so a retry of this Schedule must be the same request.
	if c.merge != nil && m.IdempotencyKey == "" {
		id, err := c.merge.schedule(ctx, req)
		return id, wrap("Schedule", err)
	}
	res, err := c.svc.Schedule(ctx, connect.NewRequest(req))
	if err != nil {
		return "", wrap("Schedule", err)
	}
	return res.Msg.Id, nil
}

// ScheduleCalls reports how many Schedule and ScheduleBatch calls
// Schedule has sent, and how many of its messages went in merged
// ScheduleBatch calls (0 and 0 with merging off).
func (c *Client) ScheduleCalls() (calls, merged int64) {
	if c.merge == nil {
		return 0, 0
	}
	return c.merge.calls.Load(), c.merge.merged.Load()
}

// CancelResult is what Cancel did; its string form is what
// `hourglass cancel` prints.
type CancelResult string

const (
	// Cancelled: the message will never be delivered.
	Cancelled CancelResult = "cancelled"
	// AlreadyDelivered: the message was delivered (or is being delivered),
	// or was cancelled before.
	AlreadyDelivered CancelResult = "already-delivered"
	// Unknown: no such message is pending on this server.
	Unknown CancelResult = "unknown"
)

// Cancel makes sure the message with this ID is never delivered, if it is
// not too late; the answer says which.
func (c *Client) Cancel(ctx context.Context, id string) (CancelResult, error) {
	res, err := c.svc.Cancel(ctx, connect.NewRequest(&hourglassv1.CancelRequest{Id: id}))
	if err != nil {
		return "", wrap("Cancel", err)
	}
	switch res.Msg.Result {
	case hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED:
		return Cancelled, nil
	case hourglassv1.CancelResult_CANCEL_RESULT_ALREADY_DELIVERED:
		return AlreadyDelivered, nil
	case hourglassv1.CancelResult_CANCEL_RESULT_UNKNOWN:
		return Unknown, nil
	}
	return "", fmt.Errorf("client: Cancel: the server answered %v, which this client does not know", res.Msg.Result)
}

// Stats returns the server's counters, pending buckets and lateness.
func (c *Client) Stats(ctx context.Context) (*hourglassv1.StatsResponse, error) {
	res, err := c.svc.Stats(ctx, connect.NewRequest(&hourglassv1.StatsRequest{}))
	if err != nil {
		return nil, wrap("Stats", err)
	}
	return res.Msg, nil
}
