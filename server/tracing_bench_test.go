package server

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/hourglassmq/hourglass/engine"
	"github.com/hourglassmq/hourglass/message"
)

// BenchmarkTraceSchedule measures what tracing adds to one ScheduleBatch call
// of 100 messages beside the rest of the call: off (the default: no tracer,
// no caller context), off with the caller's trace context (stored with each
// message), and on (a span per call through a batching processor whose
// exporter keeps nothing).
//
//	go test ./server -run '^$' -bench TraceSchedule -benchmem -count 5
func BenchmarkTraceSchedule(b *testing.B) {
	const batch = 100
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	reqs := make([]engine.Request, batch)
	for i := range reqs {
		reqs[i] = engine.Request{Topic: "orders", Body: make([]byte, 64)}
	}
	ids := make([]message.ID, batch)
	run := func(b *testing.B, s *Server, ci callInfo) {
		ctx := withInfo(context.Background(), ci)
		b.ReportAllocs()
		for b.Loop() {
			for i := range reqs {
				reqs[i].Headers = nil
			}
			end := s.traceSchedule(ctx, reqs)
			end(ids, nil)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/msg")
	}
	b.Run("off", func(b *testing.B) { run(b, &Server{}, callInfo{}) })
	b.Run("off-caller-context", func(b *testing.B) { run(b, &Server{}, callInfo{traceparent: parent}) })
	b.Run("on", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		defer tp.Shutdown(context.Background())
		run(b, &Server{tracer: tp.Tracer(tracerName)}, callInfo{traceparent: parent})
	})
}
