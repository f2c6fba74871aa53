package client

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/hourglassmq/hourglass/server"
)

// TestWorkerTraces: a Schedule made inside a span sends its trace context;
// the worker's handler runs in a span that is a child of it, on the
// global TracerProvider.
func TestWorkerTraces(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	// The global one cannot be put back once replaced: a no-op one
	// records nothing, as the default does.
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })

	rs := startServer(t, server.Options{})
	c := newClient(t, rs.addr)
	ctx, span := sdktrace.NewTracerProvider().Tracer("producer").Start(context.Background(), "produce")
	id, err := c.Schedule(ctx, Message{Topic: "traced", Body: []byte("x")})
	span.End()
	if err != nil {
		t.Fatal(err)
	}
	psc := span.SpanContext()
	handled := make(chan trace.SpanContext, 1)
	w := NewWorker(c, WorkerOptions{OnError: func(err error) { t.Errorf("OnError: %v", err) }})
	w.HandleFunc("traced", func(ctx context.Context, d Delivery) error {
		if d.ID == id {
			handled <- trace.SpanContextFromContext(ctx)
		}
		return nil
	})
	stop := runWorker(t, w)
	var hsc trace.SpanContext
	select {
	case hsc = <-handled:
	case <-time.After(testTimeout):
		t.Error("the handler did not run")
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if hsc.TraceID() != psc.TraceID() {
		t.Fatalf("the handler's span is of trace %v, want the producer's %v", hsc.TraceID(), psc.TraceID())
	}
	var process sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "process traced" {
			process = s
		}
	}
	if process == nil || process.Parent().SpanID() != psc.SpanID() || process.SpanKind() != trace.SpanKindConsumer || process.SpanContext().SpanID() != hsc.SpanID() {
		t.Fatalf("process span %v: want a consumer span, the handler's, a child of the producer's %v", process, psc.SpanID())
	}
}
