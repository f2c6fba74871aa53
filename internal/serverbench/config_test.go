package serverbench

import (
	"strings"
	"testing"
)

func TestNormalizeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"unknown_protocol", Config{Protocol: "h1"}, `--protocol "h1" is unknown; use grpc (unary gRPC calls over HTTP/2), connect (Connect over HTTP/1.1) or stream`},
		{"max_calls_batch", Config{MaxCalls: 2}, "--max-calls applies to --scenario single only"},
		{"max_calls_connect", Config{Scenario: Single, Protocol: ProtocolConnect, MaxCalls: 2}, "--max-calls applies to --protocol grpc only"},
		{"max_calls_stream", Config{Scenario: Single, Protocol: ProtocolStream, MaxCalls: 2}, "--max-calls applies to --protocol grpc only"},
		{"negative_max_calls", Config{Scenario: Single, MaxCalls: -1}, "--max-calls -1 is out of range"},
		{"lateness_two_addrs_connect", Config{Scenario: Lateness, Protocol: ProtocolConnect, Addr: "http://127.0.0.1:1,http://127.0.0.1:2"}, "the lateness scenario over connect receives from one server"},
		{"addr_without_scheme", Config{Addr: "127.0.0.1:7420"}, `--addr "127.0.0.1:7420": want a URL`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.BodySize, cfg.Batch, cfg.Timeout = DefaultBodySize, DefaultBatch, DefaultTimeout
			err := cfg.normalize()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestNormalizeDefaults(t *testing.T) {
	for _, tc := range []struct {
		name              string
		cfg               Config
		protocol          string
		messages, clients int
	}{
		{"batch", Config{}, ProtocolGRPC, 1_000_000, 8},
		{"single", Config{Scenario: Single}, ProtocolGRPC, 100_000, 64},
		{"single_stream", Config{Scenario: Single, Protocol: ProtocolStream}, ProtocolStream, 100_000, 64},
		{"lateness_connect", Config{Scenario: Lateness, Protocol: ProtocolConnect}, ProtocolConnect, 20_000, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.BodySize, cfg.Batch, cfg.Timeout = DefaultBodySize, DefaultBatch, DefaultTimeout
			if err := cfg.normalize(); err != nil {
				t.Fatal(err)
			}
			if cfg.Protocol != tc.protocol || cfg.Messages != tc.messages || cfg.Clients != tc.clients || cfg.MaxCalls != 0 {
				t.Errorf("protocol %q, messages %d, clients %d, max calls %d; want %q, %d, %d, 0",
					cfg.Protocol, cfg.Messages, cfg.Clients, cfg.MaxCalls, tc.protocol, tc.messages, tc.clients)
			}
		})
	}
}

func TestGRPCTarget(t *testing.T) {
	for _, tc := range []struct {
		addr, target string
		secure       bool
	}{
		{"http://127.0.0.1:7420", "127.0.0.1:7420", false},
		{"http://127.0.0.1:7420/", "127.0.0.1:7420", false},
		{"https://hourglass.example", "hourglass.example:443", true},
		{"https://hourglass.example:8443", "hourglass.example:8443", true},
	} {
		target, secure, err := grpcTarget(tc.addr)
		if err != nil || target != tc.target || secure != tc.secure {
			t.Errorf("grpcTarget(%q) = %q, %v, %v; want %q, %v", tc.addr, target, secure, err, tc.target, tc.secure)
		}
	}
	if _, _, err := grpcTarget("http://127.0.0.1:7420/api"); err == nil {
		t.Error("an address with a path: no error")
	}
}
