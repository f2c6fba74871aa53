package peers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hourglassmq/hourglass/client"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// hgCalls are the unary calls the Hourglass driver makes, over one
// protocol. Safe for concurrent use.
type hgCalls interface {
	// scheduleBatch stores ms (of one topic) atomically.
	scheduleBatch(ctx context.Context, ms []client.Message) error
	// receive long-polls topic for up to max due messages, each leased
	// for lease (0: the server's default).
	receive(ctx context.Context, topic string, max int, wait, lease time.Duration) ([]leased, error)
	// ackBatch acks receipts of topic; an error names the first that was
	// not acked.
	ackBatch(ctx context.Context, topic string, receipts []string) error
}

// leased is one received message.
type leased struct {
	body    []byte
	receipt string
}

// grpcCalls makes the calls with the Go client: unary gRPC over HTTP/2.
type grpcCalls struct{ c *client.Client }

func (g grpcCalls) scheduleBatch(ctx context.Context, ms []client.Message) error {
	_, err := g.c.ScheduleBatch(ctx, ms)
	return err
}

func (g grpcCalls) receive(ctx context.Context, topic string, max int, wait, lease time.Duration) ([]leased, error) {
	ds, err := g.c.Receive(ctx, topic, client.ReceiveOptions{MaxMessages: max, Wait: wait, Lease: lease})
	if err != nil {
		return nil, err
	}
	out := make([]leased, len(ds))
	for i, d := range ds {
		out[i] = leased{d.Body, d.Receipt}
	}
	return out, nil
}

func (g grpcCalls) ackBatch(ctx context.Context, topic string, receipts []string) error {
	ds := make([]client.Delivery, len(receipts))
	for i, r := range receipts {
		ds[i] = client.Delivery{Topic: topic, Receipt: r}
	}
	res, err := g.c.AckBatch(ctx, ds)
	if err != nil {
		return err
	}
	for _, err := range res {
		if err != nil {
			return err
		}
	}
	return nil
}

// connectCalls makes the calls with connect-go's generated client, in the
// Connect protocol with binary protobuf over HTTP/1.1.
type connectCalls struct {
	tr  *http.Transport
	svc hourglassv1connect.HourglassServiceClient
}

// connectIdleConns is how many idle HTTP/1.1 connections the driver
// keeps: more than the calls in flight at once (a producer or consumer
// makes one at a time), so that none is opened per call.
const connectIdleConns = 64

func newConnectCalls(addr string) connectCalls {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = connectIdleConns
	// HTTP/1.1 only: the server serves Connect there (docs/API.md).
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP1(true)
	return connectCalls{tr: tr, svc: hourglassv1connect.NewHourglassServiceClient(&http.Client{Transport: tr}, "http://"+addr)}
}

func (c connectCalls) close() error {
	c.tr.CloseIdleConnections()
	return nil
}

func (c connectCalls) scheduleBatch(ctx context.Context, ms []client.Message) error {
	req := &hourglassv1.ScheduleBatchRequest{Messages: make([]*hourglassv1.ScheduleRequest, len(ms))}
	for i, m := range ms {
		req.Messages[i] = &hourglassv1.ScheduleRequest{Topic: m.Topic, Body: m.Body, IdempotencyKey: m.IdempotencyKey,
			When: &hourglassv1.ScheduleRequest_DeliverAt{DeliverAt: timestamppb.New(m.At)}}
	}
	res, err := c.svc.ScheduleBatch(ctx, connect.NewRequest(req))
	if err != nil {
		return fmt.Errorf("connect: ScheduleBatch: %w", err)
	}
	if n := len(res.Msg.Results); n != len(ms) {
		return fmt.Errorf("connect: ScheduleBatch: %d results for %d messages", n, len(ms))
	}
	return nil
}

func (c connectCalls) receive(ctx context.Context, topic string, max int, wait, lease time.Duration) ([]leased, error) {
	res, err := c.svc.Receive(ctx, connect.NewRequest(&hourglassv1.ReceiveRequest{
		Topic: topic, MaxMessages: int32(max), WaitMs: wait.Milliseconds(), LeaseMs: lease.Milliseconds(),
	}))
	if err != nil {
		return nil, fmt.Errorf("connect: Receive: %w", err)
	}
	out := make([]leased, len(res.Msg.Messages))
	for i, m := range res.Msg.Messages {
		out[i] = leased{m.Body, m.Receipt}
	}
	return out, nil
}

func (c connectCalls) ackBatch(ctx context.Context, topic string, receipts []string) error {
	res, err := c.svc.AckBatch(ctx, connect.NewRequest(&hourglassv1.AckBatchRequest{Topic: topic, Receipts: receipts}))
	if err != nil {
		return fmt.Errorf("connect: AckBatch: %w", err)
	}
	if n := len(res.Msg.Results); n != len(receipts) {
		return fmt.Errorf("connect: AckBatch: %d results for %d receipts", n, len(receipts))
	}
	for i, r := range res.Msg.Results {
		if !r.Acked {
			return fmt.Errorf("connect: AckBatch: receipt %d of %d not acked: %s", i+1, len(receipts), r.Error)
		}
	}
	return nil
}

// hgPoller consumes with the unary calls: a long-poll Receive, then one
// AckBatch of what it returned.
type hgPoller struct{ h *Hourglass }

// pollRetry is how long a poller waits after a failed Receive (the server
// restarting, in W4) before it calls again.
const pollRetry = 100 * time.Millisecond

func (c hgPoller) Run(ctx context.Context, handle func([]byte), onErr func(error)) error {
	max := orDefault(c.h.ConsumeBatch, 100)
	receipts := make([]string, 0, max)
	for ctx.Err() == nil {
		ms, err := c.h.calls.receive(ctx, c.h.topic, max, receiveWait, c.h.Lease)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, context.Canceled) {
				break
			}
			onErr(err)
			sleepCtx(ctx, pollRetry)
			continue
		}
		if len(ms) == 0 {
			continue
		}
		receipts = receipts[:0]
		for _, m := range ms {
			handle(m.body)
			receipts = append(receipts, m.receipt)
		}
		// A failed ack is not retried: the message comes again after its
		// lease, as on the Consume stream.
		if err := c.h.calls.ackBatch(ctx, c.h.topic, receipts); err != nil && ctx.Err() == nil {
			onErr(err)
		}
	}
	return nil
}

func (hgPoller) Close() error { return nil }
