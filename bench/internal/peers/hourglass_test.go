package peers

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// hourglassBin builds ../cmd/hourglass once for the test binary, so that
// the protocol tests run without bash peers.sh start.
var hourglassBin = sync.OnceValues(func() (string, error) { return goBuild("../../..", "./cmd/hourglass", "hourglass") })

// TestHourglassProtocols runs 100 messages through a fresh Hourglass
// server (--fsync always) with the driver over each protocol: every one
// arrives once, none early.
func TestHourglassProtocols(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts the hourglass binary")
	}
	bin, err := hourglassBin()
	if err != nil {
		t.Fatalf("building hourglass: %v", err)
	}
	for _, p := range Protocols {
		t.Run(p.SystemName(), func(t *testing.T) {
			sys := hourglassSystem(Config{HourglassBin: bin, Redeliver: 10 * time.Second}, "always", p)
			srv := startServer(t, sys)
			d, err := sys.NewDriver(srv)
			if err != nil {
				t.Fatal(err)
			}
			if got := d.(*Hourglass).proto; got != p {
				t.Fatalf("driver over %q, want %q", got, p)
			}
			roundTripN(t, d, 100, time.Second)
		})
	}
}

// TestHourglassSystemNames checks that each protocol is its own pair of
// rows, named by --systems, and that its notes say the protocol.
func TestHourglassSystemNames(t *testing.T) {
	want := map[string]string{
		"hourglass":         "gRPC ScheduleBatch",
		"hourglass-unary":   "protocol: unary gRPC",
		"hourglass-stream":  "protocol: gRPC streams",
		"hourglass-connect": "protocol: Connect",
	}
	seen := map[string][]string{}
	for _, s := range Systems(Config{}) {
		if !strings.HasPrefix(s.Name, "hourglass") {
			continue
		}
		seen[s.Name] = append(seen[s.Name], s.Variant)
		if !strings.Contains(s.Notes, want[s.Name]) {
			t.Errorf("%s: notes %q lack %q", s.Label(), s.Notes, want[s.Name])
		}
	}
	for name := range want {
		if v := strings.Join(seen[name], ", "); v != "--fsync always, --fsync interval" {
			t.Errorf("%s: settings %q, want --fsync always, --fsync interval", name, v)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("hourglass systems %v, want %d", seen, len(want))
	}
}
