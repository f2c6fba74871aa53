// Package client is the Go client of an Hourglass server.
//
// Producers: Schedule a Message (Delay, At or Level; Headers; an
// IdempotencyKey), ScheduleBatch, or Send through a batching asynchronous
// Producer on the ScheduleStream; Cancel, Reschedule and Get a message by
// its ID (a typed ID that carries its delivery time) or by its Key (topic
// and idempotency key); List what is pending, due, leased or
// dead-lettered.
//
// Operators: Topics lists the topics with their counts and policies;
// GetPolicy and SetPolicy (Pause, Resume) change how a topic delivers at
// run time; Redrive moves dead letters back; Purge and DeleteTopic
// remove what a topic holds.
//
// Recurring schedules: CreateSchedule a RecurringSchedule (a cron spec or
// interval in a time zone), UpdateSchedule, PauseSchedule, ResumeSchedule
// and DeleteSchedule it; GetSchedule and ListSchedules tell its next fire
// times. Each occurrence is an ordinary message of its topic.
//
// Consumers: a Worker consumes topics with Handlers (HandlerFunc) wrapped
// in Middleware (Recover, Logging, Hooks for metrics and tracing), with
// bounded concurrency per topic, leases extended while a handler runs,
// and a shutdown that lets running handlers finish within a deadline.
// A handler's result settles its message: nil acks it, Retry(after) and
// DeadLetter(reason) say what else to do, any other error nacks it.
// Consume is the short form for one topic; Receive, Ack, Nack (NackWith),
// Settle and Extend are the single calls underneath.
//
// It speaks native gRPC (grpc-go) over one HTTP/2 connection per Client,
// which carries every call and stream of all the goroutines that use it.
//
// # Errors
//
// An error the server answered is a gRPC status error wrapped with the
// name of the call ("client: Schedule: ..."); classify it with
// status.Code(err) (google.golang.org/grpc/status):
// codes.InvalidArgument for bad input (the message says what was wrong and
// what is allowed), codes.Unauthenticated for a missing or wrong token,
// codes.FailedPrecondition for an Ack or Nack of a message not leased,
// codes.Unavailable and codes.ResourceExhausted for conditions worth
// retrying later. Mistakes this package catches before sending (two
// delivery times in one Message, say) wrap ErrInvalidMessage. The
// recurring-schedule calls' codes.NotFound and codes.AlreadyExists are
// also ErrScheduleNotFound and ErrScheduleExists (errors.Is).
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/internal/vtcodec"
)

// DefaultAddr is where New connects when given an empty address: the
// address `hourglass serve` listens on by default.
const DefaultAddr = "http://127.0.0.1:7420"

// ErrInvalidMessage is wrapped by errors about a Message this package
// refuses before sending it.
var ErrInvalidMessage = errors.New("client: invalid message")

// maxMsgBytes bounds what the client sends and accepts in one message: far
// above the server's own request limit, which it says in its errors.
const maxMsgBytes = 1 << 30

// Client talks to one Hourglass server. It is safe for concurrent use by
// any number of goroutines; Close it when done.
type Client struct {
	conn  *grpc.ClientConn
	svc   hourglassv1.HourglassServiceClient
	merge *coalescer // nil: every Schedule is its own call
	ssm   *streamMux // the shared ScheduleStream of Producers
}

type config struct {
	token    string
	tls      *tls.Config
	maxCalls int
	dialOpts []grpc.DialOption
	md       metadata.MD
}

// Option configures New.
type Option func(*config)

// WithToken sends "Authorization: Bearer token" with every call, for a
// server started with --auth-token.
func WithToken(token string) Option { return func(c *config) { c.token = token } }

// WithTLS sets the TLS configuration of an https:// address (default: the
// system's roots, the address's host name).
func WithTLS(cfg *tls.Config) Option { return func(c *config) { c.tls = cfg } }

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

// WithDialOptions adds grpc-go dial options (interceptors, tracing,
// keepalive) to the client's connection.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *config) { c.dialOpts = append(c.dialOpts, opts...) }
}

// WithHeader sends the header key: value with every call (gRPC metadata).
func WithHeader(key, value string) Option {
	return func(c *config) {
		if c.md == nil {
			c.md = metadata.MD{}
		}
		c.md.Append(key, value)
	}
}

// New returns a client of the server at addr: "http://host:port" or
// "host:port" for plain text, "https://host:port" for TLS (the port of
// a URL defaults to 80 or 443); DefaultAddr when empty. It does not connect: the first call does, and the
// connection is made again by itself after the server restarts.
func New(addr string, opts ...Option) (*Client, error) {
	if addr == "" {
		addr = DefaultAddr
	}
	cfg := config{maxCalls: DefaultMaxCalls}
	for _, o := range opts {
		o(&cfg)
	}
	target, secure, err := parseAddr(addr)
	if err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if secure {
		tc := cfg.tls
		if tc == nil {
			tc = &tls.Config{}
		}
		creds = credentials.NewTLS(tc)
	}
	md := cfg.md.Copy()
	if cfg.token != "" {
		if md == nil {
			md = metadata.MD{}
		}
		md.Set("authorization", "Bearer "+cfg.token)
	}
	dopts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMsgBytes), grpc.MaxCallSendMsgSize(maxMsgBytes),
			grpc.ForceCodecV2(vtcodec.GRPCShared{})),
	}
	dopts = append(dopts, grpc.WithChainUnaryInterceptor(injectTrace))
	if len(md) > 0 {
		dopts = append(dopts, grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return invoker(withMD(ctx, md), method, req, reply, cc, opts...)
		}), grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(withMD(ctx, md), desc, cc, method, opts...)
		}))
	}
	conn, err := grpc.NewClient(target, append(dopts, cfg.dialOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("client: %s: %w", addr, err)
	}
	c := &Client{conn: conn, svc: hourglassv1.NewHourglassServiceClient(conn)}
	if cfg.maxCalls > 0 {
		c.merge = newCoalescer(c.svc, cfg.maxCalls)
	}
	c.ssm = newStreamMux(c.svc)
	return c, nil
}

// withMD adds md to ctx's outgoing metadata.
func withMD(ctx context.Context, md metadata.MD) context.Context {
	if old, ok := metadata.FromOutgoingContext(ctx); ok {
		return metadata.NewOutgoingContext(ctx, metadata.Join(old, md))
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// parseAddr turns an address into a gRPC target and whether it is TLS.
func parseAddr(addr string) (target string, secure bool, err error) {
	if !strings.Contains(addr, "://") {
		return addr, false, nil
	}
	u, err := url.Parse(addr)
	if err != nil {
		return "", false, fmt.Errorf("client: address %q: %w", addr, err)
	}
	if u.Path != "" && u.Path != "/" {
		return "", false, fmt.Errorf("client: address %q has a path: give http://host:port or https://host:port", addr)
	}
	var port string
	switch u.Scheme {
	case "http":
		port = "80"
	case "https":
		port, secure = "443", true
	default:
		return "", false, fmt.Errorf("client: address %q: scheme %q; want http:// or https://", addr, u.Scheme)
	}
	if u.Hostname() == "" {
		return "", false, fmt.Errorf("client: address %q has no host: give http://host:port or https://host:port", addr)
	}
	// Without a port gRPC would dial 443 whatever the scheme.
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), port), secure, nil
	}
	return u.Host, secure, nil
}

// Close closes the client's connection; calls in flight fail.
func (c *Client) Close() error {
	c.ssm.close()
	return c.conn.Close()
}

// Message is one message to schedule. At most one of Delay, At and Level
// is set; none means deliver now.
type Message struct {
	Topic string
	Body  []byte
	// Headers are delivered with the message. Names beginning with
	// "hourglass-" (any case) are the server's own and a Schedule that sets
	// one is refused (InvalidArgument); use IdempotencyKey for the key.
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
	// nothing, even if the server crashed in between. Key{Topic, key}
	// names the message for Cancel, Get and Reschedule.
	IdempotencyKey string
	// Working, if set, is the delivery time in the working time of a
	// calendar (CreateCalendar): the server computes it when it stores
	// the message (ID.Time says what it found); a later change of the
	// calendar does not move it. Set none of Delay, At and Level with it.
	Working *WorkingTime
	// FlowKey, if set (at most 200 bytes), is the key the topic's flow
	// policy counts the message under (PolicyChange's Flow fields): a
	// tenant, a customer, an account. Many messages share one; it is not
	// the IdempotencyKey. It is delivered as the header
	// "hourglass-flow-key".
	FlowKey string
	// ExpireAt, or TTL after its delivery time, is when the message
	// expires: from then on it is never handed to a consumer (the queue
	// dead-letters it with reason "expired"). At most one of them; neither:
	// it never expires.
	ExpireAt time.Time
	TTL      time.Duration
}

// request checks m and builds its protobuf form.
func (m *Message) request() (*hourglassv1.ScheduleRequest, error) {
	set := 0
	for _, b := range []bool{m.Delay != 0, !m.At.IsZero(), m.Level != 0, m.Working != nil} {
		if b {
			set++
		}
	}
	if set > 1 {
		return nil, fmt.Errorf("%w: Delay %v, At %v, Level %d and Working: set at most one of them", ErrInvalidMessage, m.Delay, m.At, m.Level)
	}
	r := &hourglassv1.ScheduleRequest{Topic: m.Topic, Body: m.Body, IdempotencyKey: m.IdempotencyKey, FlowKey: m.FlowKey, Headers: headersProto(m.Headers)}
	switch {
	case !m.ExpireAt.IsZero() && m.TTL != 0:
		return nil, fmt.Errorf("%w: ExpireAt %v and TTL %v: set at most one of them", ErrInvalidMessage, m.ExpireAt, m.TTL)
	case !m.ExpireAt.IsZero():
		r.Expiry = &hourglassv1.ScheduleRequest_ExpireAt{ExpireAt: timestamppb.New(m.ExpireAt)}
	case m.TTL < 0:
		return nil, fmt.Errorf("%w: TTL %v: a TTL is more than 0", ErrInvalidMessage, m.TTL)
	case m.TTL > 0:
		r.Expiry = &hourglassv1.ScheduleRequest_TtlMs{TtlMs: int64((m.TTL + time.Millisecond - 1) / time.Millisecond)}
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
	case m.Working != nil:
		w, err := m.Working.proto()
		if err != nil {
			return nil, err
		}
		r.When = &hourglassv1.ScheduleRequest_Working{Working: w}
	}
	return r, nil
}

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("client: %s: %w", op, err)
}

// Schedule stores one message and returns its ID once the server has made
// it durable under its fsync policy (ID.Time is when it will be
// delivered). Concurrent Schedules beyond WithMaxCalls share
// ScheduleBatch calls (see there).
func (c *Client) Schedule(ctx context.Context, m Message) (ID, error) {
	req, err := m.request()
	if err != nil {
		return ID{}, err
	}
	// A message with an idempotency key goes in its own call: in cluster
	// mode a key is deduplicated only against a resend of the same
	// request, so a retry of this Schedule must be the same request.
	var id string
	// A call with a span goes alone: a merged batch carries one trace
	// context, the batch's.
	if c.merge != nil && m.IdempotencyKey == "" && !trace.SpanContextFromContext(ctx).IsValid() {
		id, err = c.merge.schedule(ctx, req)
	} else {
		var res *hourglassv1.ScheduleResponse
		if res, err = c.svc.Schedule(ctx, req); err == nil {
			id = res.Id
		}
	}
	if err != nil {
		return ID{}, wrap("Schedule", err)
	}
	return idOf("Schedule", id)
}

// ScheduleBatch stores up to 1000 messages atomically, all or none, and
// returns their IDs in order.
func (c *Client) ScheduleBatch(ctx context.Context, ms []Message) ([]ID, error) {
	req := &hourglassv1.ScheduleBatchRequest{Messages: make([]*hourglassv1.ScheduleRequest, len(ms))}
	for i := range ms {
		r, err := ms[i].request()
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %w", i, err)
		}
		req.Messages[i] = r
	}
	res, err := c.svc.ScheduleBatch(ctx, req)
	if err != nil {
		return nil, wrap("ScheduleBatch", err)
	}
	if len(res.Results) != len(ms) {
		return nil, fmt.Errorf("client: ScheduleBatch: the server answered %d results for %d messages", len(res.Results), len(ms))
	}
	ids := make([]ID, len(ms))
	for i, r := range res.Results {
		if ids[i], err = idOf("ScheduleBatch", r.Id); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// CancelResult is what Cancel did; its string form is what
// `hourglass cancel` prints.
type CancelResult string

const (
	// Cancelled: the message will never be delivered.
	Cancelled CancelResult = "cancelled"
	// AlreadyDelivered: the message was delivered (or is being delivered,
	// or was dead-lettered).
	AlreadyDelivered CancelResult = "already-delivered"
	// AlreadyCancelled: an earlier Cancel cancelled the message; it will
	// never be delivered.
	AlreadyCancelled CancelResult = "already-cancelled"
	// Unknown: no such message is pending on this server.
	Unknown CancelResult = "unknown"
)

// Cancel makes sure the message ref names (its ID, or its Key) is never
// delivered, if it is not too late; the answer says which.
func (c *Client) Cancel(ctx context.Context, ref Ref) (CancelResult, error) {
	id, topic, key := ref.ref()
	res, err := c.svc.Cancel(ctx, &hourglassv1.CancelRequest{Id: id, Topic: topic, Key: key})
	if err != nil {
		return "", wrap("Cancel", err)
	}
	switch res.Result {
	case hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED:
		return Cancelled, nil
	case hourglassv1.CancelResult_CANCEL_RESULT_ALREADY_DELIVERED:
		return AlreadyDelivered, nil
	case hourglassv1.CancelResult_CANCEL_RESULT_ALREADY_CANCELLED:
		return AlreadyCancelled, nil
	case hourglassv1.CancelResult_CANCEL_RESULT_UNKNOWN:
		return Unknown, nil
	}
	return "", fmt.Errorf("client: Cancel: the server answered %v, which this client does not know", res.Result)
}

// Stats returns the server's counters, pending buckets and lateness.
func (c *Client) Stats(ctx context.Context) (*hourglassv1.StatsResponse, error) {
	res, err := c.svc.Stats(ctx, &hourglassv1.StatsRequest{})
	return res, wrap("Stats", err)
}

// Time returns the server's clock.
func (c *Client) Time(ctx context.Context) (time.Time, error) {
	res, err := c.svc.Time(ctx, &hourglassv1.TimeRequest{})
	if err != nil {
		return time.Time{}, wrap("Time", err)
	}
	return res.Now.AsTime(), nil
}

// headersProto is headers in the API's form.
func headersProto(headers map[string]string) []*hourglassv1.Header {
	var out []*hourglassv1.Header
	for k, v := range headers {
		out = append(out, &hourglassv1.Header{Key: k, Value: v})
	}
	return out
}

// headersOf is the map of the API's headers; nil for none.
func headersOf(hs []*hourglassv1.Header) map[string]string {
	if len(hs) == 0 {
		return nil
	}
	m := make(map[string]string, len(hs))
	for _, h := range hs {
		m[h.Key] = h.Value
	}
	return m
}
