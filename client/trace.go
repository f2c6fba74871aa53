package client

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// TraceParentHeader and TraceStateHeader are the headers in which the
// server hands a consumer the W3C trace context of the Schedule call that
// made the message.
const (
	TraceParentHeader = "hourglass-traceparent"
	TraceStateHeader  = "hourglass-tracestate"
)

const tracerName = "github.com/hourglassmq/hourglass/client"

// TraceContext returns ctx with the trace context d carries (the
// producer's, from its Schedule call) as its remote parent, or ctx when d
// carries none.
func TraceContext(ctx context.Context, d Delivery) context.Context {
	tp := d.Headers[TraceParentHeader]
	if tp == "" {
		return ctx
	}
	c := propagation.MapCarrier{"traceparent": tp}
	if ts := d.Headers[TraceStateHeader]; ts != "" {
		c["tracestate"] = ts
	}
	return propagation.TraceContext{}.Extract(ctx, c)
}

// injectTrace sends the W3C trace context of a call's context (the
// producer's span around a Schedule) as its traceparent and tracestate
// metadata; the server stores it with the messages.
func injectTrace(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if trace.SpanContextFromContext(ctx).IsValid() {
		c := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, c)
		for k, v := range c {
			ctx = metadata.AppendToOutgoingContext(ctx, k, v)
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// startHandlerSpan starts the span of a handler call, a child of the
// producer's span when d carries its context, on the global
// TracerProvider (otel.SetTracerProvider; until one is set it records
// nothing, and the handler's context still carries the producer's span).
func startHandlerSpan(ctx context.Context, d Delivery) (context.Context, trace.Span) {
	return otel.GetTracerProvider().Tracer(tracerName).Start(TraceContext(ctx, d), "process "+d.Topic, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("messaging.system", "hourglass"), attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", d.Topic), attribute.String("messaging.message.id", d.ID.String()),
			attribute.Int("hourglass.attempt", d.Attempt)))
}

// endHandlerSpan ends span with the handler's result.
func endHandlerSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
