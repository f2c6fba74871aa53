package peers

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"time"

	"github.com/hourglassmq/hourglass/client"
)

// Protocol is how the Hourglass driver talks to the server: the server,
// its flags and the workload are the same for every one, only the client
// side differs.
type Protocol string

const (
	// ProtoDefault is the `hourglass` rows as they have always been:
	// unary gRPC ScheduleBatch to produce, the Consume stream to consume.
	ProtoDefault Protocol = ""
	// ProtoUnary is unary gRPC only: ScheduleBatch, a long-poll Receive
	// and AckBatch.
	ProtoUnary Protocol = "unary"
	// ProtoStream is the gRPC streams only: a client.Producer on the
	// ScheduleStream, client.Consume on the Consume stream.
	ProtoStream Protocol = "stream"
	// ProtoConnect is the Connect protocol over HTTP/1.1 (connect-go's
	// generated client on net/http): ScheduleBatch, a long-poll Receive
	// and AckBatch.
	ProtoConnect Protocol = "connect"
)

// Protocols are the Hourglass driver's protocols, in the order of the
// report's rows.
var Protocols = []Protocol{ProtoDefault, ProtoUnary, ProtoStream, ProtoConnect}

// SystemName is the --systems name of Hourglass driven over p:
// "hourglass", "hourglass-unary", ...
func (p Protocol) SystemName() string {
	if p == ProtoDefault {
		return "hourglass"
	}
	return "hourglass-" + string(p)
}

// receiveWait is how long a long-poll Receive waits for a first due
// message; the server answers as soon as one is due, so it bounds only
// how often an idle consumer calls.
const receiveWait = 5 * time.Second

// consumeCredits says what client.Consume's credits are for a
// Config.ConsumeBatch of n.
func consumeCredits(n int) string {
	if n == 0 {
		return "the client's default credits (a window of 100 growing to 1,000 while the handler keeps up)"
	}
	return fmt.Sprintf("%d credits", n)
}

// notes says, for a report's row, what the driver does over p.
func (p Protocol) notes(cfg Config) string {
	batch := orDefault(cfg.ConsumeBatch, 100)
	consume := "consumers run client.Consume on the Consume stream with " + consumeCredits(cfg.ConsumeBatch) +
		" (lease = the redelivery timeout), one handler goroutine, and the acks that wait go back on the stream in one settle (one fsync)"
	poll := fmt.Sprintf("consumers long-poll Receive for up to %d messages (wait %v, lease = the redelivery timeout), hand each body on, then ack them all with one AckBatch (one fsync)", batch, receiveWait)
	switch p {
	case ProtoUnary:
		return "protocol: unary gRPC calls only, over HTTP/2 (the Go client: one connection for the driver's producers and consumers). " +
			"Producers send a batch as one ScheduleBatch with absolute deliver_at and the message's ID as idempotency_key; " + poll
	case ProtoStream:
		return "protocol: gRPC streams only, over HTTP/2 (the Go client: one connection for the driver's producers and consumers). " +
			"Each producer Sends the messages of a batch to its own client.Producer (MaxBatch 1000) and Flushes, so a batch goes as one request on the client's one shared ScheduleStream, " +
			"absolute deliver_at, the message's ID as idempotency_key, and waits for every Result; " + consume
	case ProtoConnect:
		return "protocol: Connect (binary protobuf, connect-go's default codec) over HTTP/1.1: connect-go's generated client on net/http, one kept-alive connection per call in flight. " +
			"Producers send a batch as one ScheduleBatch with absolute deliver_at and the message's ID as idempotency_key; " + poll
	}
	return "producers send a batch as one gRPC ScheduleBatch with absolute deliver_at and the message's ID as idempotency_key; " + consume +
		"; the Go client (gRPC over HTTP/2) as a user gets it"
}

func hourglassSystem(cfg Config, fsync string, proto Protocol) System {
	dur := "fsync per write (--fsync always: the answer waits for the group-commit fsync that covers it)"
	if fsync == "interval" {
		dur = "fsync every 10 ms (--fsync interval)"
	}
	return System{
		Name: proto.SystemName(), Variant: "--fsync " + fsync, Durability: dur,
		Delivery: "at least once (Receive with a lease, then Ack)",
		Notes:    proto.notes(cfg),
		newServer: func(dir string, port int) *Server {
			s := &Server{Dir: dir, Port: port, Log: dir + ".log"}
			s.command = func() *exec.Cmd {
				return exec.Command(cfg.HourglassBin, "serve", "--data-dir", dir, "--listen", s.Addr(), "--fsync", fsync)
			}
			s.ready = func(ctx context.Context) error {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.Addr()+"/readyz", nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("readyz: %s", resp.Status)
				}
				return nil
			}
			return s
		},
		newDriver: func(s *Server) (Driver, error) { return hourglassDriver(cfg, s, proto) },
	}
}

// hourglassDriver is the Hourglass driver on s over proto, set up by cfg:
// for Hourglass and for the servers that speak its API (pebbledelay).
func hourglassDriver(cfg Config, s *Server, proto Protocol) (Driver, error) {
	h, err := NewHourglass(s.Addr(), proto)
	if err != nil {
		return nil, err
	}
	h.Lease, h.ConsumeBatch = cfg.Redeliver, cfg.ConsumeBatch
	h.FlowKeys, h.FlowFair, h.NoKeys = cfg.FlowKeys, cfg.FlowFair, cfg.NoKeys
	return h, nil
}

// Hourglass drives an Hourglass server over one Protocol, set up as a
// user would: the Go client (client.New, ScheduleBatch, Producer,
// Consume, Receive, AckBatch), or connect-go's generated client.
type Hourglass struct {
	proto Protocol
	c     *client.Client // every protocol but ProtoConnect
	calls hgCalls        // ScheduleBatch, Receive, AckBatch over proto
	topic string
	// Lease of each received message (0: the server's default).
	Lease time.Duration
	// ConsumeBatch is the Consume stream's credits (0: the client's
	// default window), or the most messages of one Receive (0: 100).
	ConsumeBatch int
	// FlowKeys, if not 0, gives each message the flow key "k<ID mod
	// FlowKeys>"; FlowFair sets the topic's flow_fair policy in Setup.
	FlowKeys int
	FlowFair bool
	// NoKeys sends messages without an idempotency key.
	NoKeys bool
}

// NewHourglass returns a driver on addr over proto with a topic of its own.
func NewHourglass(addr string, proto Protocol) (*Hourglass, error) {
	h := &Hourglass{proto: proto, topic: uniqueName("hg")}
	switch proto {
	case ProtoDefault, ProtoUnary, ProtoStream:
		c, err := client.New("http://" + addr)
		if err != nil {
			return nil, err
		}
		h.c, h.calls = c, grpcCalls{c}
	case ProtoConnect:
		h.calls = newConnectCalls(addr)
	default:
		return nil, fmt.Errorf("peers: unknown Hourglass protocol %q", proto)
	}
	return h, nil
}

// Setup sets the topic's fair flow policy if asked (FlowFair); a topic
// exists once used.
func (h *Hourglass) Setup(ctx context.Context) error {
	if !h.FlowFair {
		return nil
	}
	if h.c == nil {
		return fmt.Errorf("peers: a flow policy over %s: set it over gRPC (the default protocol)", h.proto)
	}
	_, err := h.c.SetPolicy(ctx, h.topic, client.Policy{FlowFair: new(true)})
	return err
}

// Close closes the client.
func (h *Hourglass) Close() error {
	if h.c != nil {
		return h.c.Close()
	}
	return h.calls.(connectCalls).close()
}

// NewProducer shares the client (over ProtoStream, its ScheduleStream).
func (h *Hourglass) NewProducer(context.Context) (Producer, error) {
	if h.proto == ProtoStream {
		return hgStreamProducer{h, client.NewProducer(h.c, client.ProducerOptions{MaxBatch: 1000})}, nil
	}
	return hgProducer{h}, nil
}

// NewConsumer shares the client.
func (h *Hourglass) NewConsumer(context.Context) (Consumer, error) {
	if h.proto == ProtoUnary || h.proto == ProtoConnect {
		return hgPoller{h}, nil
	}
	return hgConsumer{h}, nil
}

// message is m as an Hourglass message of the driver's topic.
func (h *Hourglass) message(m Msg) client.Message {
	cm := client.Message{
		Topic: h.topic, Body: m.Body, At: m.DeliverAt,
		// The message's ID as its key, as Redis and PostgreSQL use it:
		// a retried batch is not stored twice.
		IdempotencyKey: strconv.FormatUint(m.ID, 10),
	}
	if h.NoKeys {
		cm.IdempotencyKey = ""
	}
	if h.FlowKeys > 0 {
		cm.FlowKey = "k" + strconv.FormatUint(m.ID%uint64(h.FlowKeys), 10)
	}
	return cm
}

// hgProducer sends each batch as one unary ScheduleBatch.
type hgProducer struct{ h *Hourglass }

func (p hgProducer) Produce(ctx context.Context, msgs []Msg) error {
	ms := make([]client.Message, len(msgs))
	for i, m := range msgs {
		ms[i] = p.h.message(m)
	}
	return p.h.calls.scheduleBatch(ctx, ms)
}

func (hgProducer) Close() error { return nil }

// hgStreamProducer sends each batch through a client.Producer, on the
// client's ScheduleStream.
type hgStreamProducer struct {
	h *Hourglass
	p *client.Producer
}

func (p hgStreamProducer) Produce(ctx context.Context, msgs []Msg) error {
	rs := make([]*client.Result, len(msgs))
	for i, m := range msgs {
		rs[i] = p.p.Send(ctx, p.h.message(m))
	}
	// Flush sends the batch without waiting for the Linger and returns
	// once every Result is in.
	if err := p.p.Flush(ctx); err != nil {
		return err
	}
	for _, r := range rs {
		if _, err := r.Wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (p hgStreamProducer) Close() error { return p.p.Close() }

// hgConsumer runs client.Consume on the Consume stream.
type hgConsumer struct{ h *Hourglass }

func (c hgConsumer) Run(ctx context.Context, handle func([]byte), onErr func(error)) error {
	err := c.h.c.Consume(ctx, c.h.topic, func(_ context.Context, d client.Delivery) error {
		handle(d.Body)
		return nil
	}, client.ConsumeOptions{
		Prefetch: c.h.ConsumeBatch, Lease: c.h.Lease, // 0: the client's default window
		OnError: func(err error) {
			if ctx.Err() == nil {
				onErr(err)
			}
		},
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (hgConsumer) Close() error { return nil }
