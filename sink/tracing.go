package sink

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/internal/msgtrace"
)

// tracerName names the sinks' tracer; the attribute names are msgtrace's,
// as on the server's deliver spans.
const tracerName = "github.com/hourglassmq/hourglass/sink"

// Tracing carries a message's trace across an external sink: each
// delivery attempt is a span "deliver <topic>", a child of the producer's
// span whose W3C context the message carries (message.TraceParentHeader,
// stored by the server from the Schedule call), and the delivery carries
// that span's context in the standard traceparent and tracestate headers,
// so that a receiver instrumented with OpenTelemetry continues the
// producer's trace. A nil *Tracing does nothing. Safe for concurrent use.
type Tracing struct {
	tracer trace.Tracer
	system string
}

// NewTracing returns the Tracing of a sink whose messaging.system is
// system ("webhook", "nats"). With a nil tp no span is recorded, and a
// delivery carries the producer's context as it is.
func NewTracing(tp trace.TracerProvider, system string) *Tracing {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return &Tracing{tracer: tp.Tracer(tracerName), system: system}
}

// Start starts the span of delivering d on topic, calls set with the
// traceparent (and tracestate) the delivery carries, if d's message has a
// trace context or the span is recorded, and returns the function that
// ends the span with the attempt's outcome (nil: delivered); calls after
// the first do nothing.
func (t *Tracing) Start(ctx context.Context, topic string, d engine.Delivery, set func(key, value string)) (end func(error)) {
	if t == nil {
		return func(error) {}
	}
	parent := msgtrace.Producer(ctx, d.Message.Headers)
	now := time.Now()
	_, span := t.tracer.Start(parent, "deliver "+topic, trace.WithSpanKind(trace.SpanKindProducer), trace.WithTimestamp(now),
		trace.WithAttributes(msgtrace.System.String(t.system), msgtrace.Operation.String("send"), msgtrace.Destination.String(topic),
			msgtrace.MessageID.String(d.ID.String()), msgtrace.Lateness.Int64(now.UnixMilli()-d.ID.DeliverAt),
			msgtrace.Attempt.Int64(int64(d.Message.Attempt))))
	msgtrace.W3C.Inject(trace.ContextWithSpan(ctx, span), setCarrier(set))
	ended := false
	return func(err error) {
		if ended {
			return
		}
		ended = true
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// setCarrier writes a trace context with a sink's header setter.
type setCarrier func(key, value string)

func (setCarrier) Get(string) string       { return "" }
func (c setCarrier) Set(key, value string) { c(key, value) }
func (setCarrier) Keys() []string          { return nil }
