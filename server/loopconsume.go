package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
	"github.com/hourglassmq/hourglass/internal/h1srv"
	"github.com/hourglassmq/hourglass/internal/wirecodec"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
)

// The consumers' hot calls on the connection loop. In a hot second the
// server answers a Receive and an AckBatch (or an Ack, when one waits)
// for every hundred messages or so, and connect-go's handler (its header maps, contexts, interceptors,
// the request and answer structs) cost as much CPU as the queue's work
// (docs/BENCHMARKS.md). The loop takes a Receive, AckBatch, Ack or Nack in
// Connect's protocol with binary protobuf, uncompressed, when the request
// decodes in place (wirecodec.DecodeReceiveRequest, DecodeAckBatchRequest,
// DecodeAckRequest, DecodeNackRequest)
// and passes the same checks as the handlers'; everything else, and every
// request that fails a check, goes to connect-go, which words the error.
// The answers are byte for byte connect-go's, gzip above compressMinBytes
// included (TestLoopConsumeMatchesConnect). A Receive is a long poll: it
// is an h1srv.Waiter, so the loop runs it on a worker and ends its ctx
// when the client leaves, as net/http does. Taking Ack and Nack too keeps
// a consumer's pooled connections on the loop: a call the loop declines
// hands its connection to net/http for good, and the Receives that reuse
// it with it.

// The calls consumeCall serves.
const (
	callReceive = iota
	callAckBatch
	callAck
	callNack
)

// consumeCall is a Receive, AckBatch, Ack or Nack call the loop took,
// pooled.
type consumeCall struct {
	s       *Server
	kind    int // callReceive, ...
	timeout time.Duration
	gzip    bool // the client accepts a gzip answer
	peer    string
	body    []byte // the request's body, copied: the receipts alias it

	// Receive's arguments, checked.
	topic       string
	n           int
	wait, lease time.Duration
	recv        wirecodec.ReceiveArgs
	// AckBatch's receipts.
	acks wirecodec.AckBatchArgs
	// Ack's and Nack's target: id, or receipt if set.
	settle  wirecodec.SettleArgs
	id      message.ID
	receipt string
	delay   time.Duration

	out []byte // the answer's body
	zip bytes.Buffer
}

var consumeCalls = sync.Pool{New: func() any { return new(consumeCall) }}

func putConsumeCall(c *consumeCall) {
	if cap(c.body) > maxPooledCall || cap(c.out) > maxPooledCall || c.zip.Cap() > maxPooledCall {
		return
	}
	c.s, c.peer, c.topic, c.receipt = nil, "", "", ""
	c.settle = wirecodec.SettleArgs{}
	clear(c.acks.Receipts) // they alias body
	c.recv.Topic, c.acks.Topic = nil, nil
	consumeCalls.Put(c)
}

// takeConsume takes a call of kind (callReceive, ...) for the loop, or
// declines it (nothing done) where Handler's connect-go would answer
// otherwise than the call's own handler would, or with an error.
func (s *Server) takeConsume(req *h1srv.Request, kind int) (h1srv.Call, bool) {
	if s.q == nil {
		return nil, false // cluster mode: connect-go refuses it
	}
	head := loopHead(req)
	timeout, ok := s.fastTakes(&head, int64(len(req.Body)))
	if !ok {
		return nil, false
	}
	c := consumeCalls.Get().(*consumeCall)
	c.body = append(c.body[:0], req.Body...)
	switch kind {
	case callReceive:
		ok = s.takeReceive(c)
	case callAckBatch:
		ok = s.takeAckBatch(c)
	default:
		ok = s.takeSettle(c, kind == callNack)
	}
	if !ok {
		putConsumeCall(c)
		return nil, false
	}
	accept, _ := req.Header(headerAcceptEncoding)
	c.s, c.kind, c.timeout, c.peer = s, kind, timeout, req.RemoteAddr
	c.gzip = acceptsGzip(bytesString(accept))
	return c, true
}

// acceptsGzip reports whether connect-go would gzip a large answer to a
// request with this (first) Accept-Encoding value: gzip is its only
// compressor, and it takes the first name it knows.
func acceptsGzip(accept string) bool {
	for _, name := range strings.FieldsFunc(accept, func(r rune) bool { return r == ',' || r == ' ' }) {
		if name == "gzip" {
			return true
		}
	}
	return false
}

// takeReceive decodes and checks a Receive's body as Server.Receive does.
func (s *Server) takeReceive(c *consumeCall) bool {
	if !wirecodec.DecodeReceiveRequest(c.body, &c.recv) {
		return false
	}
	m := &c.recv
	c.topic = s.topicString(m.Topic)
	n, lease, cerr := receiveArgs(c.topic, m.MaxMessages, 1, m.LeaseMs)
	if cerr != nil || s.receivable(c.topic) != nil || m.WaitMs < 0 || m.WaitMs > MaxWait.Milliseconds() {
		return false
	}
	c.n, c.lease, c.wait = n, lease, time.Duration(m.WaitMs)*time.Millisecond
	return true
}

// takeAckBatch decodes and checks an AckBatch's body as Server.AckBatch
// does.
func (s *Server) takeAckBatch(c *consumeCall) bool {
	if !wirecodec.DecodeAckBatchRequest(c.body, &c.acks) {
		return false
	}
	c.topic = s.topicString(c.acks.Topic)
	return checkTopic("", c.topic) == nil && len(c.acks.Receipts) > 0 && len(c.acks.Receipts) <= queue.MaxAckBatch
}

// takeSettle decodes and checks an Ack's (nack false) or a Nack's body as
// Server.Ack and Server.Nack do.
func (s *Server) takeSettle(c *consumeCall, nack bool) bool {
	m := &c.settle
	if nack && !wirecodec.DecodeNackRequest(c.body, m) || !nack && !wirecodec.DecodeAckRequest(c.body, m) {
		return false
	}
	c.topic = s.topicString(m.Topic)
	var cerr *connect.Error
	if c.id, cerr = settleTarget(c.topic, string(m.ID), string(m.Receipt)); cerr != nil {
		return false
	}
	if nack && (m.DelayMs < 0 || m.DelayMs > s.opts.MaxDelay.Milliseconds()) {
		return false
	}
	c.receipt, c.delay = string(m.Receipt), time.Duration(m.DelayMs)*time.Millisecond
	return true
}

// Waits reports whether the call may wait long: a Receive with a wait
// (h1srv.Waiter).
func (c *consumeCall) Waits() bool { return c.kind == callReceive && c.wait > 0 }

// Serve runs the call and writes its answer (h1srv.Call).
func (c *consumeCall) Serve(ctx context.Context, w *h1srv.ResponseWriter) {
	start := time.Now()
	if c.timeout >= 0 {
		d := newLazyDeadline(ctx, start.Add(c.timeout))
		defer d.cancel()
		ctx = d
	}
	procedure := consumeProcedures[c.kind]
	err := c.run(ctx, procedure)
	switch {
	case err != nil:
		newLogInterceptor(c.s.log).report(ctx, procedure, c.peer, start, err)
		var cw captureWriter
		cw.h = http.Header{}
		writeConnectError(&cw, err)
		w.Write(cw.status, cw.fields(), cw.body)
	case len(c.out) >= compressMinBytes && c.gzip:
		// As connect-go compresses a large answer.
		c.zip.Reset()
		gzipTo(&c.zip, c.out)
		w.Write(http.StatusOK, loopGzipFields, c.zip.Bytes())
	default:
		w.Write(http.StatusOK, loopAnswerFields, c.out)
	}
	putConsumeCall(c)
}

var consumeProcedures = [...]string{
	callReceive:  hourglassv1connect.HourglassServiceReceiveProcedure,
	callAckBatch: hourglassv1connect.HourglassServiceAckBatchProcedure,
	callAck:      hourglassv1connect.HourglassServiceAckProcedure,
	callNack:     hourglassv1connect.HourglassServiceNackProcedure,
}

// loopGzipFields are the header fields of a compressed answer.
var loopGzipFields = []string{headerContentType, protoContentType, headerAcceptEncoding, "gzip", headerContentEncoding, "gzip"}

// run serves the call and leaves the answer's body in c.out, or returns
// the call's error.
func (c *consumeCall) run(ctx context.Context, procedure string) (err error) {
	ok := true
	defer c.s.recoverCall(procedure, &ok, &err)
	if err := ctx.Err(); err != nil {
		// Connect-go checks the deadline before it calls a handler.
		return serverError(err)
	}
	switch c.kind {
	case callReceive:
		return c.s.loopReceive(ctx, c)
	case callAckBatch:
		return c.s.loopAckBatch(ctx, c)
	}
	return c.s.loopSettle(ctx, c)
}

// loopSettle is Server.Ack and Server.Nack after their checks: their
// answers are empty messages.
func (s *Server) loopSettle(ctx context.Context, c *consumeCall) error {
	var err error
	switch {
	case c.kind == callAck && c.receipt != "":
		err = s.q.AckReceipt(ctx, c.topic, c.receipt)
	case c.kind == callAck:
		err = s.q.Ack(ctx, c.topic, c.id)
	case c.receipt != "":
		err = s.q.NackReceipt(ctx, c.topic, c.receipt, c.delay)
	default:
		err = s.q.Nack(ctx, c.topic, c.id, c.delay)
	}
	c.out = c.out[:0]
	if err != nil {
		return serverError(err)
	}
	return nil
}

// loopReceive is Server.Receive after its checks.
func (s *Server) loopReceive(ctx context.Context, c *consumeCall) error {
	pctx, cancel := s.pollContext(ctx)
	defer cancel()
	msgs, err := s.q.Receive(pctx, c.topic, c.n, c.wait, c.lease)
	if err != nil {
		if ctx.Err() == nil && s.polls.Err() != nil && len(msgs) == 0 {
			// Shutting down: the poll ends empty, as if its wait had passed.
			c.out = c.out[:0]
			return nil
		}
		return serverError(err)
	}
	var ok bool
	if c.out, ok = appendReceived(c.out[:0], msgs); ok {
		return nil
	}
	c.out, err = marshalAnswer(c.out[:0], &hourglassv1.ReceiveResponse{Messages: toMessages(msgs)})
	return err
}

// loopAckBatch is Server.AckBatch after its checks.
func (s *Server) loopAckBatch(ctx context.Context, c *consumeCall) error {
	res, err := s.q.AckBatch(ctx, c.topic, c.acks.Receipts)
	if err != nil {
		return serverError(err)
	}
	var ok bool
	if c.out, ok = wirecodec.AppendAckResults(c.out[:0], res); ok {
		return nil
	}
	// An error text that is not UTF-8: as connect-go marshals it.
	out := &hourglassv1.AckBatchResponse{Results: make([]*hourglassv1.AckResult, len(res))}
	for i, e := range res {
		out.Results[i] = &hourglassv1.AckResult{Acked: e == nil}
		if e != nil {
			out.Results[i].Error = e.Error()
		}
	}
	c.out, err = marshalAnswer(c.out[:0], out)
	return err
}

// marshalAnswer appends msg's encoding to b as connect-go's handler
// marshals an answer, with its error.
func marshalAnswer(b []byte, msg any) ([]byte, error) {
	b, err := wirecodec.Codec{}.MarshalAppend(b, msg)
	if err != nil {
		return b, connect.NewError(connect.CodeInternal, fmt.Errorf("marshal message: %w", err))
	}
	return b, nil
}

// gzipWriters are connect-go's default compressor: gzip.NewWriter's level.
var gzipWriters = sync.Pool{New: func() any { return gzip.NewWriter(io.Discard) }}

// gzipTo writes data to dst compressed as connect-go's gzip compressor
// does (one write, then Close): the same bytes.
func gzipTo(dst *bytes.Buffer, data []byte) {
	zw := gzipWriters.Get().(*gzip.Writer)
	zw.Reset(dst)
	zw.Write(data) // a bytes.Buffer does not fail
	zw.Close()
	gzipWriters.Put(zw)
}
