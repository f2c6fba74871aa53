package webhook

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
	"github.com/hourglassmq/hourglass/sink"
)

const (
	producerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpan  = "00f067aa0ba902b7"
)

// traced is a delivery of a message whose Schedule call carried the
// producer's trace context.
func traced(attempt uint32) engine.Delivery {
	return engine.Delivery{ID: message.ID{DeliverAt: time.Now().UnixMilli(), Seq: 7},
		Message: &message.Message{Topic: []byte("t"), Body: []byte("x"), Attempt: attempt, Headers: []message.Header{
			{Key: []byte(message.TraceParentHeader), Value: []byte("00-" + producerTrace + "-" + producerSpan + "-01")}}}}
}

// TestTracing: with a tracer provider each POST is a span "deliver
// <topic>", a child of the producer's span, and the request carries that
// span's context as traceparent; a failed POST's span says so. Without
// one, the request carries the producer's context as it is.
func TestTracing(t *testing.T) {
	var status atomic.Int32
	status.Store(http.StatusOK)
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.WriteHeader(int(status.Load()))
		got <- req.Header.Get("traceparent")
	}))
	defer srv.Close()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	newSink := func(tr *sink.Tracing) *Sink {
		s, err := New(Options{Routes: []Route{{Pattern: "*", URL: srv.URL}}, Logger: quiet, Tracing: tr, MaxAttempts: 5,
			Reschedule: func(context.Context, engine.Request) (message.ID, error) { return message.ID{}, nil }})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	s := newSink(sink.NewTracing(tp, "webhook"))
	if err := s.Deliver(context.Background(), "t", []engine.Delivery{traced(2)}); err != nil {
		t.Fatal(err)
	}
	header := <-got
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans; want one", len(spans))
	}
	sp := spans[0]
	if sp.Name != "deliver t" || sp.SpanKind != trace.SpanKindProducer || sp.Parent.TraceID().String() != producerTrace ||
		sp.Parent.SpanID().String() != producerSpan || sp.Status.Code == codes.Error {
		t.Errorf("span %q kind %v parent %v status %v; want deliver t, a producer span, the producer's child, not an error",
			sp.Name, sp.SpanKind, sp.Parent, sp.Status)
	}
	if want := "00-" + producerTrace + "-" + sp.SpanContext.SpanID().String() + "-01"; header != want {
		t.Errorf("the POST carried traceparent %q; want the delivery span's %q", header, want)
	}
	attrs := map[string]string{}
	for _, a := range sp.Attributes {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	if attrs["messaging.system"] != "webhook" || attrs["hourglass.attempt"] != "2" || attrs["messaging.destination.name"] != "t" {
		t.Errorf("span attributes %v; want messaging.system webhook, hourglass.attempt 2, destination t", attrs)
	}

	exp.Reset()
	status.Store(http.StatusInternalServerError)
	if err := s.Deliver(context.Background(), "t", []engine.Delivery{traced(0)}); err != nil {
		t.Fatal(err)
	}
	<-got
	if spans := exp.GetSpans(); len(spans) != 1 || spans[0].Status.Code != codes.Error {
		t.Errorf("a POST answered 500: spans %v; want one with an error status", spans)
	}

	status.Store(http.StatusOK)
	if err := newSink(sink.NewTracing(nil, "webhook")).Deliver(context.Background(), "t", []engine.Delivery{traced(0)}); err != nil {
		t.Fatal(err)
	}
	if header, want := <-got, "00-"+producerTrace+"-"+producerSpan+"-01"; header != want {
		t.Errorf("tracing off: the POST carried traceparent %q; want the producer's %q", header, want)
	}
}
