package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/hourglassmq/hourglass/internal/buildinfo"
)

// tracerProvider is the OpenTelemetry tracer provider the standard OTEL_*
// environment variables ask for, or nil: tracing is off unless
// OTEL_TRACES_EXPORTER=otlp or an OTLP endpoint is set
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and
// OTEL_SDK_DISABLED=true turns it off. The exporter speaks OTLP over the
// protocol otlpExporter chooses and reads the OTEL_EXPORTER_OTLP_*
// variables (endpoint, headers, insecure, certificates, timeout); the SDK
// reads OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER(_ARG) and OTEL_BSP_*.
func tracerProvider(ctx context.Context) (*sdktrace.TracerProvider, error) {
	exporter := strings.ToLower(os.Getenv("OTEL_TRACES_EXPORTER"))
	endpoint := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") + os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	switch {
	case strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true"), exporter == "none":
		return nil, nil
	case exporter == "" && endpoint == "":
		return nil, nil // off by default
	case exporter != "" && exporter != "otlp":
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: this server exports otlp (or none)", exporter)
	}
	exp, err := otlpExporter(ctx)
	if err != nil {
		return nil, err
	}
	b := buildinfo.Get()
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "hourglass"), attribute.String("service.version", b.Version)),
		resource.WithFromEnv(), resource.WithHost(), resource.WithProcessPID())
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// otlpExporter is the OTLP span exporter of the protocol the standard
// variables name: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
// OTEL_EXPORTER_OTLP_PROTOCOL; "grpc" (the default) or "http/protobuf".
// Each exporter reads the other OTEL_EXPORTER_OTLP_* variables itself.
func otlpExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	name, proto := "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := os.Getenv(v); p != "" {
			name, proto = v, p
			break
		}
	}
	var exp sdktrace.SpanExporter
	var err error
	switch proto {
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	case "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	default:
		return nil, fmt.Errorf("%s=%s: this server exports OTLP over grpc or http/protobuf", name, proto)
	}
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter (%s): %w", proto, err)
	}
	return exp, nil
}
