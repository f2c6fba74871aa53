package e2e

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	hourglassv1 "github.com/hourglassmq/hourglass/gen/hourglass/v1"
	"github.com/hourglassmq/hourglass/gen/hourglass/v1/hourglassv1connect"
)

// otlpReceiver is an OTLP trace collector: it hands each span it is sent,
// with its resource's service.name, to spans.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	spans chan receivedSpan
}

type receivedSpan struct {
	service string
	span    *tracepb.Span
}

func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	for _, rs := range req.ResourceSpans {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.Key == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans <- receivedSpan{service, s}
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// ServeHTTP is the OTLP/HTTP trace endpoint (POST /v1/traces, binary
// protobuf).
func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	var in collectortrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &in)
	}
	if req.URL.Path != "/v1/traces" || err != nil {
		http.Error(w, fmt.Sprintf("%s %s: %v", req.Method, req.URL.Path, err), http.StatusBadRequest)
		return
	}
	out, _ := r.Export(req.Context(), &in)
	b, _ := proto.Marshal(out)
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(b)
}

// TestTracesOTLP runs the binary with the standard OTEL_* variables
// pointing at an OTLP receiver in the test, over each protocol
// OTEL_EXPORTER_OTLP_PROTOCOL may choose, schedules a message with a
// producer's W3C trace context and receives it: the consumer gets the
// context, and the server exports a schedule span (the producer's child)
// and a deliver span (linked to it).
func TestTracesOTLP(t *testing.T) {
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(strings.ReplaceAll(protocol, "/", "_"), func(t *testing.T) { testTracesOTLP(t, protocol) })
	}
}

func testTracesOTLP(t *testing.T, protocol string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	recv := &otlpReceiver{spans: make(chan receivedSpan, 100)}
	if protocol == "grpc" {
		gs := grpc.NewServer()
		collectortrace.RegisterTraceServiceServer(gs, recv)
		go gs.Serve(ln)
		t.Cleanup(gs.Stop)
	} else {
		hs := &http.Server{Handler: recv}
		go hs.Serve(ln)
		t.Cleanup(func() { hs.Close() })
	}

	p := start(t, t.TempDir(), []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + ln.Addr().String(), "OTEL_EXPORTER_OTLP_PROTOCOL=" + protocol,
		"OTEL_EXPORTER_OTLP_INSECURE=true", "OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_SERVICE_NAME=hourglass-e2e"})
	const traceID, spanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	traceparent := "00-" + traceID + "-" + spanID + "-01"
	c := hourglassv1connect.NewHourglassServiceClient(http.DefaultClient, p.url)
	req := connect.NewRequest(&hourglassv1.ScheduleRequest{Topic: "otlp", Body: []byte("x"), When: delayMs(20)})
	req.Header().Set("traceparent", traceparent)
	if _, err := c.Schedule(ctxT(t), req); err != nil {
		t.Fatal(err)
	}
	got := receive(t, p.client, "otlp", 1, 10*time.Second)
	var carried string
	for _, h := range got[0].m.Headers {
		if h.Key == "hourglass-traceparent" {
			carried = h.Value
		}
	}
	if carried != traceparent {
		t.Errorf("the consumer got hourglass-traceparent %q, want the producer's %q", carried, traceparent)
	}

	wantTrace, _ := hex.DecodeString(traceID)
	wantSpan, _ := hex.DecodeString(spanID)
	var sched, deliver *tracepb.Span
	deadline := time.After(30 * time.Second)
	for sched == nil || deliver == nil {
		select {
		case s := <-recv.spans:
			if s.service != "hourglass-e2e" {
				t.Errorf("span %q from service %q, want OTEL_SERVICE_NAME's hourglass-e2e", s.span.Name, s.service)
			}
			switch s.span.Name {
			case "schedule otlp":
				sched = s.span
			case "deliver otlp":
				deliver = s.span
			}
		case <-deadline:
			t.Fatalf("spans received: schedule %v, deliver %v; want both within 30s", sched != nil, deliver != nil)
		}
	}
	if !bytes.Equal(sched.TraceId, wantTrace) || !bytes.Equal(sched.ParentSpanId, wantSpan) || sched.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("schedule span: trace %x, parent %x, kind %v; want a server span, a child of %s", sched.TraceId, sched.ParentSpanId, sched.Kind, traceparent)
	}
	if len(deliver.Links) != 1 || !bytes.Equal(deliver.Links[0].TraceId, wantTrace) || !bytes.Equal(deliver.Links[0].SpanId, wantSpan) {
		t.Errorf("deliver span links %v, want one to the producer's span", deliver.Links)
	}
	p.stop(syscall.SIGTERM)
}
