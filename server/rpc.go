package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hourglassmq/hourglass/engine"
	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/internal/units"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
)

// api is the API's unary methods, protocol-neutral: each takes the
// decoded request and answers with the response or a gRPC status error.
// grpc-go serves api as it is (GRPCServer, which adds the streams);
// connectAPI (connect.go) hands each call to the method of the same name
// and turns its answer into connect-go's. What a call needs of its
// transport (the peer, the forwarded mark) is in its context (callInfo).
// Its methods may be called from any goroutine.
type api struct {
	hourglassv1.UnimplementedHourglassServiceServer
	*Server
}

// Schedule serves the Schedule RPC.
func (s api) Schedule(ctx context.Context, m *hourglassv1.ScheduleRequest) (*hourglassv1.ScheduleResponse, error) {
	var r engine.Request
	if err := s.request("", m, s.eng.Now(), false, &r); err != nil {
		return nil, err
	}
	reqs := []engine.Request{r}
	end := s.traceSchedule(ctx, reqs)
	ids, err := s.schedule(ctx, reqs)
	end(ids, err)
	if err != nil {
		return nil, err
	}
	return scheduleResponse(ids[0]), nil
}

// ScheduleBatch serves the ScheduleBatch RPC.
func (s api) ScheduleBatch(ctx context.Context, m *hourglassv1.ScheduleBatchRequest) (*hourglassv1.ScheduleBatchResponse, error) {
	reqs, err := s.batchRequests(m, s.eng.Now())
	if err != nil {
		return nil, err
	}
	end := s.traceSchedule(ctx, reqs)
	ids, err := s.schedule(ctx, reqs)
	end(ids, err)
	if err != nil {
		return nil, err
	}
	return scheduleBatchResponse(ids), nil
}

// batchRequests checks a ScheduleBatch and turns it into engine requests.
func (s *Server) batchRequests(m *hourglassv1.ScheduleBatchRequest, now time.Time) ([]engine.Request, error) {
	msgs := m.Messages
	if len(msgs) == 0 {
		return nil, invalid("messages is empty: send 1 to %d messages", MaxBatch)
	}
	if len(msgs) > MaxBatch {
		return nil, invalid("batch of %d messages; at most %d per ScheduleBatch (split it)", len(msgs), MaxBatch)
	}
	return s.requests(make([]engine.Request, 0, len(msgs)), msgs, now)
}

// scheduleBatchResponse answers a batch with a few allocations instead of
// three per message: the results, their times and their ID texts each
// come from one slice.
func scheduleBatchResponse(ids []message.ID) *hourglassv1.ScheduleBatchResponse {
	out := &hourglassv1.ScheduleBatchResponse{Results: make([]*hourglassv1.ScheduleResponse, len(ids))}
	results := make([]hourglassv1.ScheduleResponse, len(ids))
	times := make([]timestamppb.Timestamp, len(ids))
	text := make([]byte, 0, len(ids)*message.IDTextLen)
	for i, id := range ids {
		start := len(text)
		text = id.AppendText(text)
		ms := id.DeliverAt
		times[i].Seconds, times[i].Nanos = floorDiv(ms, 1000), int32(floorMod(ms, 1000))*1_000_000
		results[i].Id = unsafe.String(&text[start], len(text)-start)
		results[i].DeliverAt = &times[i]
		out.Results[i] = &results[i]
	}
	return out
}

// floorDiv and floorMod split a count of milliseconds into seconds and a
// non-negative remainder, as timestamppb.New(time.UnixMilli(ms)) does.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

func floorMod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// schedule hands checked requests to the engine, all or none.
func (s *Server) schedule(ctx context.Context, reqs []engine.Request) ([]message.ID, error) {
	if err := s.checkQuotas(ctx, reqs); err != nil {
		return nil, err
	}
	start := time.Now()
	ids, err := s.eng.ScheduleBatch(ctx, reqs)
	if err != nil {
		return nil, scheduleError(err)
	}
	s.metrics.scheduleLatency.Observe(time.Since(start).Seconds())
	for i := range reqs {
		// Batches are usually of one topic: count runs, not messages.
		if i == 0 || reqs[i].Topic != reqs[i-1].Topic {
			n := 1
			for j := i + 1; j < len(reqs) && reqs[j].Topic == reqs[i].Topic; j++ {
				n++
			}
			s.metrics.scheduled.add(reqs[i].Topic, n)
		}
	}
	return ids, nil
}

func scheduleResponse(id message.ID) *hourglassv1.ScheduleResponse {
	return &hourglassv1.ScheduleResponse{Id: id.String(), DeliverAt: timestamppb.New(id.Time())}
}

// Cancel serves the Cancel RPC.
func (s api) Cancel(ctx context.Context, m *hourglassv1.CancelRequest) (*hourglassv1.CancelResponse, error) {
	id, found, err := s.target(ctx, "Cancel", m.Id, m.Topic, m.Key)
	if err != nil {
		return nil, err
	}
	if !found {
		return &hourglassv1.CancelResponse{Result: hourglassv1.CancelResult_CANCEL_RESULT_UNKNOWN}, nil
	}
	res, err := s.eng.Cancel(ctx, id, infoOf(ctx).forwarded)
	if err != nil {
		return nil, serverError(err)
	}
	out := &hourglassv1.CancelResponse{}
	switch res {
	case engine.Cancelled:
		s.metrics.cancelled.Add(1)
		out.Result = hourglassv1.CancelResult_CANCEL_RESULT_CANCELLED
	case engine.AlreadyDone:
		out.Result = hourglassv1.CancelResult_CANCEL_RESULT_ALREADY_DELIVERED
	case engine.AlreadyCancelled:
		out.Result = hourglassv1.CancelResult_CANCEL_RESULT_ALREADY_CANCELLED
	default:
		out.Result = hourglassv1.CancelResult_CANCEL_RESULT_UNKNOWN
		if s.opts.Cluster == nil && s.retiredDelivered(ctx, id) {
			out.Result = hourglassv1.CancelResult_CANCEL_RESULT_ALREADY_DELIVERED
		}
	}
	return out, nil
}

// receiveArgs checks the common arguments of Receive and ReceiveStream.
func receiveArgs(topic string, maxMessages int32, defMax int, leaseMs int64) (int, time.Duration, error) {
	if err := checkTopic("", topic); err != nil {
		return 0, 0, err
	}
	n := int(maxMessages)
	if n == 0 {
		n = defMax
	}
	if n < 1 || n > MaxReceive {
		return 0, 0, invalid("max_messages %d: from 1 to %d (0 means %d)", maxMessages, MaxReceive, defMax)
	}
	if leaseMs < 0 || leaseMs > queue.DefaultMaxLease.Milliseconds() {
		return 0, 0, invalid("lease_ms %d: from 1 to %d (%s); 0 means the server's default", leaseMs, queue.DefaultMaxLease.Milliseconds(), units.FormatDuration(queue.DefaultMaxLease))
	}
	return n, time.Duration(leaseMs) * time.Millisecond, nil
}

// Receive serves the Receive RPC.
func (s api) Receive(ctx context.Context, m *hourglassv1.ReceiveRequest) (*hourglassv1.ReceiveResponse, error) {
	n, lease, cerr := receiveArgs(m.Topic, m.MaxMessages, 1, m.LeaseMs)
	if cerr == nil {
		cerr = s.receivable(m.Topic)
	}
	if cerr != nil {
		return nil, cerr
	}
	if m.WaitMs < 0 || m.WaitMs > MaxWait.Milliseconds() {
		return nil, invalid("wait_ms %d: from 0 to %d (%s)", m.WaitMs, MaxWait.Milliseconds(), MaxWait)
	}
	wait := time.Duration(m.WaitMs) * time.Millisecond
	if wait > 0 {
		// Only a call that waits is a long poll, counted against the limits.
		release, err := s.limits.acquire(infoOf(ctx).conn, "long polls and streams")
		if err != nil {
			return nil, err
		}
		defer release()
	}
	pctx, cancel := s.pollContext(ctx)
	defer cancel()
	msgs, err := s.recv.Receive(pctx, m.Topic, n, wait, lease)
	if err != nil {
		if ctx.Err() == nil && s.life.polls.Err() != nil && len(msgs) == 0 {
			// Shutting down: the poll ends empty, as if its wait had passed.
			return &hourglassv1.ReceiveResponse{}, nil
		}
		return nil, serverError(err)
	}
	s.traceDeliveries(ctx, m.Topic, msgs)
	return &hourglassv1.ReceiveResponse{Messages: toMessages(msgs)}, nil
}

// receivable refuses Receive of a topic the queue never gets messages of:
// with an external sink only dead-letter topics (in cluster mode every
// topic: its consumer reads the delivery stream).
func (s *Server) receivable(topic string) error {
	if s.opts.ExternalSink == "" || s.opts.Cluster != nil || strings.HasSuffix(topic, queue.DLQSuffix) {
		return nil
	}
	return status.Error(codes.FailedPrecondition, fmt.Sprintf(
		"topic %q: this server delivers due messages to its %s sink (serve --sink %s), not to Receive; only dead-letter topics (%s%s) can be received",
		topic, s.opts.ExternalSink, s.opts.ExternalSink, topic, queue.DLQSuffix))
}

// noQueue refuses, in cluster mode, the built-in queue's RPCs that
// JetStream's consumers do not serve.
func (s *Server) noQueue() error {
	if s.q != nil {
		return nil
	}
	return status.Error(codes.FailedPrecondition,
		"this server runs in cluster mode (serve --cluster): there is no built-in queue; Receive, ReceiveStream, Consume, Ack, AckBatch, Nack and Extend by receipt and the queue's management RPCs are served from JetStream consumers of the delivery stream, but not this call (docs/CLUSTER.md)")
}

// byReceipt refuses, in cluster mode, an Ack or Nack that names an id
// rather than a receipt: a JetStream consumer settles a delivery by its
// ack subject, which the receipt holds and the id does not.
func (s *Server) byReceipt(receipt string) error {
	if s.q != nil || receipt != "" {
		return nil
	}
	return status.Error(codes.FailedPrecondition,
		"this server runs in cluster mode (serve --cluster): Ack and Nack take the receipt Receive handed out, not the id")
}

// queueTopic checks a request's topic on the built-in queue: a valid name
// (checkTopic), on a server that has the queue (noQueue).
func (s *Server) queueTopic(topic string) error {
	if err := checkTopic("", topic); err != nil {
		return err
	}
	return s.noQueue()
}

// receiveStream serves ReceiveStream: send delivers one response, and
// send(nil) the response headers alone.
func (s *Server) receiveStream(ctx context.Context, m *hourglassv1.ReceiveStreamRequest, send func(*hourglassv1.ReceiveStreamResponse) error) error {
	n, lease, cerr := receiveArgs(m.Topic, m.MaxMessages, DefaultStreamBatch, m.LeaseMs)
	if cerr == nil {
		cerr = s.receivable(m.Topic)
	}
	if cerr != nil {
		return cerr
	}
	release, err := s.limits.acquire(infoOf(ctx).conn, "long polls and streams")
	if err != nil {
		return err
	}
	defer release()
	// The stream is open: say so now, not with the first message, which
	// may be far off (a Connect client waits in the call for the headers,
	// and so does a proxy with a timeout on them).
	if err := send(nil); err != nil {
		return err
	}
	pctx, cancel := s.pollContext(ctx)
	defer cancel()
	for {
		msgs, err := s.recv.Receive(pctx, m.Topic, n, streamPoll, lease)
		if err != nil {
			if ctx.Err() == nil && s.life.polls.Err() != nil {
				return nil // shutting down: end the stream cleanly
			}
			return serverError(err)
		}
		if len(msgs) == 0 {
			continue
		}
		// A message leased here that fails to reach the caller is handed
		// out again when its lease ends.
		s.traceDeliveries(ctx, m.Topic, msgs)
		if err := send(&hourglassv1.ReceiveStreamResponse{Messages: toMessages(msgs)}); err != nil {
			return err
		}
	}
}

func toMessages(msgs []queue.Message) []*hourglassv1.Message {
	// One allocation each for the messages, their times, their headers
	// and the text of their IDs and headers, instead of six per message
	// and five per header.
	nh, hlen := 0, 0
	for i := range msgs {
		for _, h := range msgs[i].Headers {
			nh++
			hlen += len(h.Key) + len(h.Value)
		}
	}
	out := make([]*hourglassv1.Message, len(msgs))
	pms := make([]hourglassv1.Message, len(msgs))
	times := make([]timestamppb.Timestamp, 3*len(msgs))
	hdrs := make([]hourglassv1.Header, nh)
	hptrs := make([]*hourglassv1.Header, nh)
	text := make([]byte, 0, 2*message.IDTextLen*len(msgs)+hlen)
	idText := func(id message.ID) string {
		start := len(text)
		text = id.AppendText(text) // within capacity: text never moves
		return unsafe.String(&text[start], len(text)-start)
	}
	// Headers came in as UTF-8 through this API; a message an embedding
	// program scheduled may hold other bytes, which are replaced (in a
	// string of their own: the replacement can be longer).
	hdrText := func(b []byte) string {
		if len(b) == 0 {
			return ""
		}
		if !utf8.Valid(b) {
			return strings.ToValidUTF8(string(b), "\uFFFD")
		}
		start := len(text)
		text = append(text, b...) // within capacity: hlen counted it
		return unsafe.String(&text[start], len(b))
	}
	stamp := func(ts *timestamppb.Timestamp, t time.Time) *timestamppb.Timestamp {
		ts.Seconds, ts.Nanos = t.Unix(), int32(t.Nanosecond())
		return ts
	}
	for i := range msgs {
		q := &msgs[i]
		id := idText(q.ID)
		origin := id
		if !q.Origin.IsZero() && q.Origin != q.ID {
			origin = idText(q.Origin)
		}
		pm := &pms[i]
		pm.Id, pm.Topic, pm.Body, pm.Attempt, pm.OriginId, pm.Receipt = id, q.Topic, q.Body, q.Attempt, origin, q.Receipt
		pm.DeliverAt = stamp(&times[3*i], time.UnixMilli(q.DeliverAt))
		pm.ReceivedAt = stamp(&times[3*i+1], q.ReceivedAt)
		pm.LeaseExpiresAt = stamp(&times[3*i+2], q.LeaseUntil)
		pm.DeadLetter = deadLetterInfo(q.Headers, q.Attempt)
		if n := len(q.Headers); n > 0 {
			pm.Headers, hptrs = hptrs[:n:n], hptrs[n:]
			for j, h := range q.Headers {
				ph := &hdrs[0]
				hdrs = hdrs[1:]
				ph.Key, ph.Value = hdrText(h.Key), hdrText(h.Value)
				pm.Headers[j] = ph
			}
		}
		out[i] = pm
	}
	return out
}

// settleTarget checks the topic and the id or receipt of Ack and Nack.
func settleTarget(topic, id, receipt string) (message.ID, error) {
	if err := checkTopic("", topic); err != nil {
		return message.ID{}, err
	}
	switch {
	case id != "" && receipt != "":
		return message.ID{}, invalid("both id and receipt are set: send one (receipt acts only on your own lease)")
	case receipt != "":
		return message.ID{}, nil
	}
	return parseID("id", id)
}

// Ack serves the Ack RPC.
func (s api) Ack(ctx context.Context, m *hourglassv1.AckRequest) (*hourglassv1.AckResponse, error) {
	id, cerr := settleTarget(m.Topic, m.Id, m.Receipt)
	if cerr == nil {
		cerr = s.byReceipt(m.Receipt)
	}
	if cerr != nil {
		return nil, cerr
	}
	var err error
	if m.Receipt != "" {
		err = s.recv.AckReceipt(ctx, m.Topic, m.Receipt)
	} else {
		err = s.q.Ack(ctx, m.Topic, id)
	}
	if err != nil {
		return nil, serverError(err)
	}
	return &hourglassv1.AckResponse{}, nil
}

// AckBatch serves the AckBatch RPC.
func (s api) AckBatch(ctx context.Context, m *hourglassv1.AckBatchRequest) (*hourglassv1.AckBatchResponse, error) {
	if err := checkTopic("", m.Topic); err != nil {
		return nil, err
	}
	if len(m.Receipts) == 0 || len(m.Receipts) > MaxAckBatch {
		return nil, invalid("%d receipts: send 1 to %d per AckBatch", len(m.Receipts), MaxAckBatch)
	}
	res, err := s.recv.AckBatch(ctx, m.Topic, m.Receipts)
	if err != nil {
		return nil, serverError(err)
	}
	return &hourglassv1.AckBatchResponse{Results: s.ackResults(res)}, nil
}

// ackResults turns the queue's per-receipt errors into results.
func (s *Server) ackResults(res []error) []*hourglassv1.AckResult {
	out := make([]*hourglassv1.AckResult, len(res))
	for i, e := range res {
		r := &hourglassv1.AckResult{Acked: e == nil}
		if e != nil {
			r.Error = s.paths.text(trimPkg(e.Error()))
		}
		out[i] = r
	}
	return out
}

// Nack serves the Nack RPC.
func (s api) Nack(ctx context.Context, m *hourglassv1.NackRequest) (*hourglassv1.NackResponse, error) {
	id, cerr := settleTarget(m.Topic, m.Id, m.Receipt)
	if cerr == nil {
		cerr = s.byReceipt(m.Receipt)
	}
	if cerr != nil {
		return nil, cerr
	}
	o, err := s.nackOptions(m.DelayMs, m.Reason, m.DeadLetter, m.Release)
	if err != nil {
		return nil, err
	}
	if m.Receipt != "" {
		err = s.recv.NackReceipt(ctx, m.Topic, m.Receipt, o)
	} else {
		err = s.q.Nack(ctx, m.Topic, id, o)
	}
	if err != nil {
		return nil, serverError(err)
	}
	return &hourglassv1.NackResponse{}, nil
}

// nackOptions checks a Nack's delay_ms and reason.
func (s *Server) nackOptions(ms int64, reason string, dead, release bool) (queue.NackOptions, error) {
	if release && (ms != 0 || reason != "" || dead) {
		return queue.NackOptions{}, invalid("release gives a message back unhandled: delay_ms, reason and dead_letter must be unset with it")
	}
	if ms < 0 || ms > s.opts.MaxDelay.Milliseconds() {
		return queue.NackOptions{}, invalid("delay_ms %d: from 0 to %d (%s, the server's --max-delay)", ms, s.opts.MaxDelay.Milliseconds(), units.FormatDuration(s.opts.MaxDelay))
	}
	if len(reason) > queue.MaxReason {
		return queue.NackOptions{}, invalid("reason is %d bytes: at most %d", len(reason), queue.MaxReason)
	}
	if !utf8.ValidString(reason) {
		return queue.NackOptions{}, invalid("reason is not valid UTF-8")
	}
	return queue.NackOptions{Delay: time.Duration(ms) * time.Millisecond, Reason: reason, DeadLetter: dead, Release: release}, nil
}

// Time serves the Time RPC.
func (s api) Time(context.Context, *hourglassv1.TimeRequest) (*hourglassv1.TimeResponse, error) {
	return &hourglassv1.TimeResponse{Now: timestamppb.New(s.eng.Now())}, nil
}

// Stats serves the Stats RPC.
func (s api) Stats(ctx context.Context, _ *hourglassv1.StatsRequest) (*hourglassv1.StatsResponse, error) {
	now := s.eng.Now()
	es := s.eng.Stats()
	out := &hourglassv1.StatsResponse{
		ServerTime: timestamppb.New(now),
		Engine: &hourglassv1.EngineStats{
			Scheduled: es.Scheduled, Cancelled: es.Cancelled, Fired: es.Fired, Delivered: es.Delivered,
			Retries: es.Retries, PendingLoaded: es.Pending, Inflight: es.Inflight,
			LoadedBuckets: int32(es.Loaded), Segments: int32(es.Segments), ReputLagBytes: es.ReputLag,
			Corrupt: es.Corrupt, Unconfirmed: es.Unconfirmed,
		},
		Lateness: s.metrics.recent.summary(),
		Health:   s.health(),
	}
	if s.q == nil {
		return out, nil
	}
	for _, t := range s.metrics.topics(s.q.Stats()) {
		out.Topics = append(out.Topics, &hourglassv1.TopicStats{
			Topic: t.name, Delivered: int64(t.q.Delivered), Acked: int64(t.q.Acked), Nacked: int64(t.q.Nacked),
			Redelivered: int64(t.q.Redelivered), DeadLettered: int64(t.q.DeadLettered), Ready: t.q.Backlog,
			Leased: int64(t.q.Leased), Scheduled: t.scheduled, Expired: int64(t.q.Expired),
			FlowHeld: t.q.FlowHeld, FlowKeysHeld: int64(t.q.FlowKeysHeld),
		})
	}
	buckets, err := s.metrics.src.Load().pending(now)
	if err != nil && !errors.Is(err, errNoDataDir) {
		s.log.Warn("server: stats: listing schedule segments", "err", err)
	}
	for _, b := range buckets {
		out.Pending = append(out.Pending, &hourglassv1.PendingBucket{
			Start: timestamppb.New(time.UnixMilli(b.start)), End: timestamppb.New(time.UnixMilli(b.end)),
			Pending: b.count, Approximate: b.approx,
		})
	}
	return out, nil
}
