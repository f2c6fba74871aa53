package natsjs

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/sink"
)

// TestTracing: with a tracer provider each published message is a span
// "deliver <topic>", a child of the producer's span ended once JetStream
// acknowledged it, and the message carries that span's context as
// traceparent beside the producer's own hourglass-traceparent.
func TestTracing(t *testing.T) {
	const producerTrace, producerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	producer := "00-" + producerTrace + "-" + producerSpan + "-01"
	ns := startNATS(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	s, err := Open(context.Background(), Options{URL: ns.ClientURL(), Logger: quiet, Tracing: sink.NewTracing(tp, "nats")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d := engine.Delivery{ID: message.ID{DeliverAt: time.Now().UnixMilli(), Seq: 1}, Message: &message.Message{Topic: []byte("t"), Body: []byte("x"),
		Headers: []message.Header{{Key: []byte(message.TraceParentHeader), Value: []byte(producer)}}}}
	if err := s.Deliver(context.Background(), "t", []engine.Delivery{d}); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != "deliver t" || spans[0].Parent.SpanID().String() != producerSpan ||
		spans[0].Parent.TraceID().String() != producerTrace {
		t.Fatalf("spans %v; want one, deliver t, a child of %s", spans, producer)
	}
	m := fetchAll(t, ns.ClientURL(), 1)[0]
	if got, want := m.Headers().Get("traceparent"), "00-"+producerTrace+"-"+spans[0].SpanContext.SpanID().String()+"-01"; got != want {
		t.Errorf("published traceparent %q; want the delivery span's %q", got, want)
	}
	if got := m.Headers().Get(message.TraceParentHeader); got != producer {
		t.Errorf("published %s %q; want the producer's %q", message.TraceParentHeader, got, producer)
	}
}
