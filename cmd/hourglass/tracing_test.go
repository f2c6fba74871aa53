package main

import (
	"context"
	"strings"
	"testing"
)

// TestOTLPProtocol: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL wins over
// OTEL_EXPORTER_OTLP_PROTOCOL; grpc and http/protobuf make an exporter,
// anything else is refused naming the variable and what is allowed.
func TestOTLPProtocol(t *testing.T) {
	for _, tc := range []struct {
		name, traces, all, wantErr string
	}{
		{"default_grpc", "", "", ""},
		{"http", "", "http/protobuf", ""},
		{"traces_wins", "grpc", "http/json", ""},
		{"json_refused", "", "http/json", "OTEL_EXPORTER_OTLP_PROTOCOL=http/json: this server exports OTLP over grpc or http/protobuf"},
		{"traces_refused", "thrift", "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=thrift"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", tc.traces)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", tc.all)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
			exp, err := otlpExporter(context.Background())
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("err %v; want an exporter", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("err %v; want one containing %q", err, tc.wantErr)
			}
			if exp != nil {
				exp.Shutdown(context.Background())
			}
		})
	}
}
