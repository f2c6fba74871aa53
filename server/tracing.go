package server

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/internal/msgtrace"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/queue"
)

// Traces across the delay (docs/OPERATIONS.md, "Traces"). A Schedule
// call's W3C trace context (the traceparent and tracestate request
// headers, on every protocol) is stored with each of its messages as
// message.TraceParentHeader and TraceStateHeader, and so handed to the
// consumer with it. With Options.TracerProvider set the server also
// records a span per Schedule call (a child of the caller's) and one per
// message handed to a consumer (linked to the Schedule call's span);
// without one it stores what callers send and records nothing.

// tracerName names the server's tracer; the attribute names are
// msgtrace's.
const tracerName = "github.com/hourglassmq/hourglass/server"

// traceSchedule starts the span of a Schedule or ScheduleBatch call (when
// tracing is on) and stores the call's trace context in each request's
// headers. end records the answer and ends the span.
func (s *Server) traceSchedule(ctx context.Context, reqs []engine.Request) (end func([]message.ID, error)) {
	ci := infoOf(ctx)
	if s.tracer == nil && ci.traceparent == "" {
		return func([]message.ID, error) {} // the common case: nothing to do
	}
	parent := ctx
	if ci.traceparent != "" {
		parent = msgtrace.W3C.Extract(ctx, &msgtrace.Carrier{Parent: ci.traceparent, State: ci.tracestate})
	}
	var span trace.Span
	if s.tracer != nil && len(reqs) > 0 {
		_, span = s.tracer.Start(parent, "schedule "+reqs[0].Topic, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(msgtrace.System.String("hourglass"), msgtrace.Operation.String("send"),
				msgtrace.Destination.String(reqs[0].Topic), msgtrace.Batch.Int(len(reqs))))
	}
	// What the messages carry: the caller's context, or the span's when
	// the caller sent none.
	sc := trace.SpanContextFromContext(parent)
	if !sc.IsValid() && span != nil {
		sc = span.SpanContext()
	}
	if sc.IsValid() && !traced(reqs) {
		var c msgtrace.Carrier
		msgtrace.W3C.Inject(trace.ContextWithSpanContext(ctx, sc), &c)
		hs := []message.Header{{Key: []byte(message.TraceParentHeader), Value: []byte(c.Parent)}}
		if c.State != "" {
			hs = append(hs, message.Header{Key: []byte(message.TraceStateHeader), Value: []byte(c.State)})
		}
		for i := range reqs {
			r := &reqs[i]
			r.Headers = append(r.Headers[:len(r.Headers):len(r.Headers)], hs...)
		}
	}
	if span == nil {
		return func([]message.ID, error) {}
	}
	start := time.Now()
	return func(ids []message.ID, err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		} else if len(ids) > 0 {
			span.SetAttributes(msgtrace.Delay.Int64(ids[0].DeliverAt - start.UnixMilli()))
			if len(ids) == 1 {
				span.SetAttributes(msgtrace.MessageID.String(ids[0].String()))
			}
		}
		span.End()
	}
}

// traced reports whether reqs carry a trace context already (a stream's
// batch refused whole is scheduled again request by request).
func traced(reqs []engine.Request) bool {
	if len(reqs) == 0 {
		return true // nothing to store it in
	}
	hs := reqs[0].Headers
	return len(hs) > 0 && message.IsTraceHeader(hs[len(hs)-1].Key)
}

// traceDeliveries records a span for each message handed to a consumer,
// linked to the span of the Schedule call that made it (when tracing is
// on).
func (s *Server) traceDeliveries(ctx context.Context, topic string, msgs []queue.Message) {
	if s.tracer == nil {
		return
	}
	now := time.Now()
	for i := range msgs {
		m := &msgs[i]
		opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(now),
			trace.WithAttributes(msgtrace.System.String("hourglass"), msgtrace.Operation.String("receive"),
				msgtrace.Destination.String(topic), msgtrace.MessageID.String(m.ID.String()),
				msgtrace.Lateness.Int64(now.UnixMilli()-m.DeliverAt), msgtrace.Attempt.Int64(int64(m.Attempt)))}
		if sc := trace.SpanContextFromContext(msgtrace.Producer(context.Background(), m.Headers)); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
		_, span := s.tracer.Start(ctx, "deliver "+topic, opts...)
		span.End(trace.WithTimestamp(now))
	}
}
