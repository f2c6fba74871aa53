package server

import (
	"context"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/internal/msgtrace"
	"github.com/hourglassmq/hourglass/message"
)

// injectConnect and injectGRPC send the W3C trace context of the call's
// context, as an instrumented client does.
var injectConnect = connect.WithInterceptors(connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header()))
		return next(ctx, req)
	}
}))

var injectGRPC = grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	for k, v := range c {
		ctx = metadata.AppendToOutgoingContext(ctx, k, v)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
})

func spanNamed(spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	for _, s := range spans {
		if s.Name() == name {
			return s
		}
	}
	return nil
}

func attr(s sdktrace.ReadOnlySpan, key string) (string, bool) {
	for _, a := range s.Attributes() {
		if string(a.Key) == key {
			return a.Value.Emit(), true
		}
	}
	return "", false
}

// TestTraces: on every protocol, a Schedule call's trace context is stored
// with its message and handed to the consumer; the server records a
// schedule span, a child of the producer's, with the delay, and a deliver
// span linked to the producer's.
func TestTraces(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	s := serveTest(t, Options{TracerProvider: tp}, nil)
	producer := sdktrace.NewTracerProvider().Tracer("producer")
	clients := []struct {
		name string
		api  unaryAPI
	}{
		{"grpc", grpcUnary(s.grpcClient(t, injectGRPC))},
		{"connect", connectUnary(s.connectClient(t, injectConnect))},
		{"connect-json", connectUnary(s.connectClient(t, injectConnect, connect.WithProtoJSON()))},
		{"grpc-web", connectUnary(s.connectClient(t, injectConnect, connect.WithGRPCWeb()))},
	}
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			topic := "traced_" + map[string]string{"grpc": "g", "connect": "c", "connect-json": "j", "grpc-web": "w"}[c.name]
			ctx, span := producer.Start(testCtx(t), "produce")
			res, err := c.api.schedule(ctx, &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("x"),
				When: &hourglassv1.ScheduleRequest_DelayMs{DelayMs: 50}})
			span.End()
			if err != nil {
				t.Fatal(err)
			}
			psc := span.SpanContext()
			got := receiveTopic(t, c.api, topic)
			want := fmt.Sprintf("00-%s-%s-01", psc.TraceID(), psc.SpanID())
			if v := headerOf(got, message.TraceParentHeader); v != want {
				t.Errorf("the consumer got %s %q, want the producer's %q", message.TraceParentHeader, v, want)
			}
			spans := rec.Ended()
			sched := spanNamed(spans, "schedule "+topic)
			if sched == nil {
				t.Fatalf("no schedule span among %d", len(spans))
			}
			if sched.Parent().SpanID() != psc.SpanID() || sched.SpanContext().TraceID() != psc.TraceID() || sched.SpanKind() != trace.SpanKindServer {
				t.Errorf("schedule span: parent %v, trace %v, kind %v; want a server span, a child of the producer's %v", sched.Parent().SpanID(), sched.SpanContext().TraceID(), sched.SpanKind(), psc.SpanID())
			}
			if d, ok := attr(sched, string(msgtrace.Delay)); !ok || (d != "49" && d != "50" && d != "51") {
				t.Errorf("schedule span: %s = %q, want about 50", msgtrace.Delay, d)
			}
			if id, _ := attr(sched, string(msgtrace.MessageID)); id != res.Id {
				t.Errorf("schedule span: message id %q, want %q", id, res.Id)
			}
			del := spanNamed(spans, "deliver "+topic)
			if del == nil {
				t.Fatalf("no deliver span among %d", len(spans))
			}
			if l := del.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != psc.SpanID() || l[0].SpanContext.TraceID() != psc.TraceID() {
				t.Errorf("deliver span links %v, want the producer's span %v", l, psc)
			}
			if _, ok := attr(del, string(msgtrace.Lateness)); !ok {
				t.Errorf("deliver span has no %s", msgtrace.Lateness)
			}
		})
	}

	// A call without a trace context: the schedule span is a root, and
	// the message carries it.
	topic := "traced_root"
	if _, err := clients[1].api.schedule(testCtx(t), &hourglassv1.ScheduleRequest{Topic: topic, Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	got := receiveTopic(t, clients[1].api, topic)
	sched := spanNamed(rec.Ended(), "schedule "+topic)
	if sched == nil || sched.Parent().IsValid() {
		t.Fatalf("schedule span %v: want a root span", sched)
	}
	if v, want := headerOf(got, message.TraceParentHeader), fmt.Sprintf("00-%s-%s-01", sched.SpanContext().TraceID(), sched.SpanContext().SpanID()); v != want {
		t.Errorf("without a caller's context the message carries %q, want the schedule span's %q", v, want)
	}
}

// TestTraceContextWithoutTracing: with tracing off the server still
// stores the caller's trace context, outside the producer's header limit.
func TestTraceContextWithoutTracing(t *testing.T) {
	ts := newTestServer(t, Options{}, injectConnect)
	api := connectUnary(ts.client)
	ctx, span := sdktrace.NewTracerProvider().Tracer("producer").Start(testCtx(t), "produce")
	span.End()
	hs := make([]*hourglassv1.Header, message.MaxHeaders-2)
	for i := range hs {
		hs[i] = &hourglassv1.Header{Key: fmt.Sprintf("h%d", i), Value: "v"}
	}
	if _, err := api.schedule(ctx, &hourglassv1.ScheduleRequest{Topic: "full", Body: []byte("x"), Headers: hs, IdempotencyKey: "k"}); err != nil {
		t.Fatalf("%d headers, a key and a trace context: %v", len(hs), err)
	}
	got := receiveTopic(t, api, "full")
	if v, sc := headerOf(got, message.TraceParentHeader), span.SpanContext(); v != fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID()) {
		t.Errorf("%s = %q, want the producer's span %v", message.TraceParentHeader, v, sc)
	}
	if n := len(got.Headers); n != message.MaxHeaders+1 {
		t.Errorf("%d headers delivered, want %d (the producer's, the key's 2, the trace context's 1)", n, message.MaxHeaders+1)
	}
}

func receiveTopic(t *testing.T, a unaryAPI, topic string) *hourglassv1.Message {
	t.Helper()
	res, err := a.receive(testCtx(t), &hourglassv1.ReceiveRequest{Topic: topic, MaxMessages: 1, WaitMs: 5000})
	if err != nil || len(res.Messages) != 1 {
		t.Fatalf("Receive(%s): %v, %d messages", topic, err, len(res.GetMessages()))
	}
	return res.Messages[0]
}

func headerOf(m *hourglassv1.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return h.Value
		}
	}
	return ""
}
