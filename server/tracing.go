package server

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/hourglassmq/hourglass/engine"
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

// Span and attribute names; the messaging.* ones are OpenTelemetry's
// semantic conventions.
const (
	tracerName      = "github.com/hourglassmq/hourglass/server"
	attrSystem      = attribute.Key("messaging.system")
	attrDestination = attribute.Key("messaging.destination.name")
	attrOperation   = attribute.Key("messaging.operation.type")
	attrBatch       = attribute.Key("messaging.batch.message_count")
	attrMessageID   = attribute.Key("messaging.message.id")
	attrDelay       = attribute.Key("hourglass.delay_ms")    // deliverAt − the Schedule call
	attrLateness    = attribute.Key("hourglass.lateness_ms") // handed over − deliverAt
	attrAttempt     = attribute.Key("hourglass.attempt")
)

var w3c = propagation.TraceContext{}

// traceCarrier is a call's trace context headers as a propagation carrier.
type traceCarrier struct{ parent, state string }

func (c *traceCarrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.parent
	case "tracestate":
		return c.state
	}
	return ""
}

func (c *traceCarrier) Set(key, value string) {
	switch key {
	case "traceparent":
		c.parent = value
	case "tracestate":
		c.state = value
	}
}

func (c *traceCarrier) Keys() []string { return []string{"traceparent", "tracestate"} }

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
		parent = w3c.Extract(ctx, &traceCarrier{ci.traceparent, ci.tracestate})
	}
	var span trace.Span
	if s.tracer != nil && len(reqs) > 0 {
		_, span = s.tracer.Start(parent, "schedule "+reqs[0].Topic, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attrSystem.String("hourglass"), attrOperation.String("send"),
				attrDestination.String(reqs[0].Topic), attrBatch.Int(len(reqs))))
	}
	// What the messages carry: the caller's context, or the span's when
	// the caller sent none.
	sc := trace.SpanContextFromContext(parent)
	if !sc.IsValid() && span != nil {
		sc = span.SpanContext()
	}
	if sc.IsValid() && !traced(reqs) {
		var c traceCarrier
		w3c.Inject(trace.ContextWithSpanContext(ctx, sc), &c)
		hs := []message.Header{{Key: []byte(message.TraceParentHeader), Value: []byte(c.parent)}}
		if c.state != "" {
			hs = append(hs, message.Header{Key: []byte(message.TraceStateHeader), Value: []byte(c.state)})
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
			span.SetAttributes(attrDelay.Int64(ids[0].DeliverAt - start.UnixMilli()))
			if len(ids) == 1 {
				span.SetAttributes(attrMessageID.String(ids[0].String()))
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
			trace.WithAttributes(attrSystem.String("hourglass"), attrOperation.String("receive"),
				attrDestination.String(topic), attrMessageID.String(m.ID.String()),
				attrLateness.Int64(now.UnixMilli()-m.DeliverAt), attrAttempt.Int64(int64(m.Attempt)))}
		if tp := message.HeaderValue(m.Headers, message.TraceParentHeader); tp != "" {
			pc := w3c.Extract(context.Background(), &traceCarrier{tp, message.HeaderValue(m.Headers, message.TraceStateHeader)})
			if sc := trace.SpanContextFromContext(pc); sc.IsValid() {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
			}
		}
		_, span := s.tracer.Start(ctx, "deliver "+topic, opts...)
		span.End(trace.WithTimestamp(now))
	}
}
